package ai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Config is the AI worker's configuration (gate ai-worker --config, a JSON
// file). Keys come from the environment, never from this file.
type Config struct {
	// Provider is the chat-completions endpoint.
	Provider ProviderConfig `json:"provider"`
	// ProfilesDir is the folder of instruction profiles (*.json). A
	// relative path is relative to the config file.
	ProfilesDir string `json:"profiles_dir,omitempty"`
	// MCPServers are the MCP servers whose tools profiles may allow.
	MCPServers []MCPServer `json:"mcp_servers,omitempty"`
	// TaskTypes maps each task type the worker handles to its defaults.
	TaskTypes map[string]TaskTypeConfig `json:"task_types"`
	// MaxToolResultBytes caps a tool result appended to the conversation
	// (default 32768; longer ones are cut with a note).
	MaxToolResultBytes int `json:"max_tool_result_bytes,omitempty"`
	// MaxModels caps a fan-out (default 8).
	MaxModels int `json:"max_models,omitempty"`
}

// TaskTypeConfig are a task type's defaults. A task's params may name a
// model (or models, for a fan-out) of their own.
type TaskTypeConfig struct {
	// Profile names the instruction profile (required).
	Profile string `json:"profile"`
	// Model overrides the profile's and the provider's model.
	Model string `json:"model,omitempty"`
	// Models, when two or more, make every task of this type a fan-out.
	Models []string `json:"models,omitempty"`
	// MaxIterations and MaxToolCalls override the profile's limits.
	MaxIterations int  `json:"max_iterations,omitempty"`
	MaxToolCalls  *int `json:"max_tool_calls,omitempty"`
	// LeaseSeconds is used when gate ai-worker registers the task type
	// (default 120); heartbeats keep a long conversation's lease.
	LeaseSeconds int `json:"lease_seconds,omitempty"`
}

var taskTypeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// LoadConfig reads a config file; unknown fields are errors.
func LoadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return c, fmt.Errorf("config %s: trailing data", path)
	}
	if c.ProfilesDir != "" && !filepath.IsAbs(c.ProfilesDir) {
		c.ProfilesDir = filepath.Join(filepath.Dir(path), c.ProfilesDir)
	}
	return c, nil
}

// validate checks the config against the loaded profiles.
func (c *Config) validate(profiles map[string]*Profile) error {
	if len(c.TaskTypes) == 0 {
		return errors.New("config: no task_types")
	}
	for name, tt := range c.TaskTypes {
		if !taskTypeName.MatchString(name) {
			return fmt.Errorf("config: task type name %q is not valid", name)
		}
		if tt.Profile == "" {
			return fmt.Errorf("config: task type %s names no profile", name)
		}
		if profiles[tt.Profile] == nil {
			return fmt.Errorf("config: task type %s names profile %q, which is not in the profiles folder", name, tt.Profile)
		}
		if tt.MaxIterations < 0 || (tt.MaxToolCalls != nil && *tt.MaxToolCalls < 0) {
			return fmt.Errorf("config: task type %s: limits must not be negative", name)
		}
	}
	if c.Provider.MaxAttempts < 0 || c.Provider.TimeoutSeconds < 0 || c.Provider.BackoffInitialSeconds < 0 || c.Provider.BackoffMaxSeconds < 0 {
		return errors.New("config: provider limits must not be negative")
	}
	if c.Provider.BaseURL != "" && !httpURL(c.Provider.BaseURL) {
		return fmt.Errorf("config: provider.base_url %q is not an http(s) URL", c.Provider.BaseURL)
	}
	for _, s := range c.MCPServers {
		if s.URL != "" && !httpURL(s.URL) {
			return fmt.Errorf("config: mcp server %s: url %q is not an http(s) URL", s.Name, s.URL)
		}
	}
	return nil
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func getenv(name string) string { return os.Getenv(name) }

// expandEnv replaces each ${NAME} with the environment variable NAME. Any
// other "$" is kept as it is: a header or a value may hold one (pa$$word),
// and only a variable the configuration names in braces is read.
func expandEnv(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := strings.IndexByte(s[i+2:], '}')
		if j < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteString(os.Getenv(s[i+2 : i+2+j]))
		s = s[i+3+j:]
	}
}
