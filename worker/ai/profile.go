package ai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/asyncgate/asyncgate/schemas"
)

// Profile is an instruction profile: a named system prompt, the MCP tools the
// model may call, and the loop's limits. Profiles are JSON files validated
// against schemas/ai-profile.schema.json.
type Profile struct {
	Name         string   `json:"name"`
	Description  string   `json:"description,omitempty"`
	SystemPrompt string   `json:"system_prompt"`
	Tools        []string `json:"tools,omitempty"`
	Model        string   `json:"model,omitempty"`
	// AllowedModels are the models a task's params.model or params.models
	// may name: exact names or path.Match globs ("openai/*"). The models
	// the worker's config names (task type, profile, provider) need no
	// entry; without the list a task may name no model of its own.
	AllowedModels       []string `json:"allowed_models,omitempty"`
	Temperature         *float64 `json:"temperature,omitempty"`
	MaxCompletionTokens int64    `json:"max_completion_tokens,omitempty"`
	MaxIterations       int      `json:"max_iterations,omitempty"`
	MaxToolCalls        *int     `json:"max_tool_calls,omitempty"`
}

// AllowsModel reports whether a task may ask for model: the profile's
// allowed_models names it (exactly or by glob).
func (p *Profile) AllowsModel(model string) bool {
	for _, e := range p.AllowedModels {
		if m, err := path.Match(e, model); e == model || (err == nil && m) {
			return true
		}
	}
	return false
}

// Allows reports whether the profile's allowlist offers tool of server.
// Entries are "server/tool", where tool may be a path.Match glob.
func (p *Profile) Allows(server, tool string) bool {
	for _, e := range p.Tools {
		s, pat, ok := strings.Cut(e, "/")
		if !ok || s != server {
			continue
		}
		if m, err := path.Match(pat, tool); err == nil && m {
			return true
		}
	}
	return false
}

var (
	profileSchemaOnce sync.Once
	profileSchema     *jsonschema.Schema
	profileSchemaErr  error
)

func compiledProfileSchema() (*jsonschema.Schema, error) {
	profileSchemaOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.Draft = jsonschema.Draft2020
		c.LoadURL = func(u string) (io.ReadCloser, error) {
			return nil, fmt.Errorf("remote schema %s refused", u)
		}
		const id = "https://asyncgate.dev/schemas/ai-profile.schema.json"
		if err := c.AddResource(id, bytes.NewReader(schemas.AIProfileSchema)); err != nil {
			profileSchemaErr = err
			return
		}
		profileSchema, profileSchemaErr = c.Compile(id)
	})
	return profileSchema, profileSchemaErr
}

// ParseProfile validates doc against the profile schema and decodes it.
func ParseProfile(doc []byte) (*Profile, error) {
	s, err := compiledProfileSchema()
	if err != nil {
		return nil, fmt.Errorf("the profile schema: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("invalid JSON: trailing data")
	}
	if err := s.Validate(v); err != nil {
		return nil, schemas.FlattenError(err)
	}
	var p Profile
	if err := json.Unmarshal(doc, &p); err != nil {
		return nil, err
	}
	for _, e := range p.Tools {
		if _, err := path.Match(strings.SplitN(e, "/", 2)[1], ""); err != nil {
			return nil, fmt.Errorf("/tools: %q is not a valid glob: %w", e, err)
		}
	}
	return &p, nil
}

// LoadProfiles reads every *.json file of dir as a profile. Every file must
// validate and names must be unique; the error names the file at fault.
func LoadProfiles(dir string) (map[string]*Profile, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("profiles folder: %w", err)
	}
	out := map[string]*Profile{}
	from := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		p, err := ParseProfile(b)
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", f, err)
		}
		if prev, dup := from[p.Name]; dup {
			return nil, fmt.Errorf("profile %s: name %q is already used by %s", f, p.Name, prev)
		}
		out[p.Name], from[p.Name] = p, f
	}
	return out, nil
}
