package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/asyncgate/asyncgate/schemas"
)

const schemaBase = "https://asyncgate.dev/schemas/"

// opSchemas names the input and output schema of each operation.
var opSchemas = map[string][2]string{
	"decide":       {"plugin-policy-decide.input.schema.json", "plugin-policy-decide.output.schema.json"},
	"validate":     {"plugin-validator-validate.input.schema.json", "plugin-validator-validate.output.schema.json"},
	"put":          {"plugin-channel-put.input.schema.json", "plugin-channel-put.output.schema.json"},
	"get":          {"plugin-channel-pointer.input.schema.json", "plugin-channel-get.output.schema.json"},
	"ack":          {"plugin-channel-pointer.input.schema.json", "plugin-channel-ack.output.schema.json"},
	"capabilities": {"plugin-channel-capabilities.input.schema.json", "plugin-channel-capabilities.output.schema.json"},
}

// kindOps lists the exports each kind of plugin must have.
var kindOps = map[string][]string{
	KindPolicy:    {"decide"},
	KindValidator: {"validate"},
	KindChannel:   {"put", "get", "ack", "capabilities"},
}

type compiledSchemas struct {
	manifest *jsonschema.Schema
	in, out  map[string]*jsonschema.Schema
	byName   map[string]*jsonschema.Schema
}

var (
	schemasOnce sync.Once
	schemaSet   *compiledSchemas
	schemaErr   error
)

// noRemote refuses to fetch schemas over the network or from disk: every
// schema the host uses is embedded, and a plugin's config schema must be
// self-contained.
func noRemote(url string) (io.ReadCloser, error) {
	return nil, fmt.Errorf("schema %s: remote references are not allowed", url)
}

func newCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.LoadURL = noRemote
	return c
}

// loadSchemas compiles the embedded plugin schemas once per process.
func loadSchemas() (*compiledSchemas, error) {
	schemasOnce.Do(func() {
		c := newCompiler()
		files, err := fs.Glob(schemas.PluginFS, "plugin-*.schema.json")
		if err != nil {
			schemaErr = err
			return
		}
		for _, f := range files {
			b, err := fs.ReadFile(schemas.PluginFS, f)
			if err != nil {
				schemaErr = err
				return
			}
			if err := c.AddResource(schemaBase+f, bytes.NewReader(b)); err != nil {
				schemaErr = fmt.Errorf("schema %s: %w", f, err)
				return
			}
		}
		s := &compiledSchemas{in: map[string]*jsonschema.Schema{}, out: map[string]*jsonschema.Schema{}, byName: map[string]*jsonschema.Schema{}}
		for _, f := range files {
			if s.byName[strings.TrimSuffix(f, ".schema.json")], err = c.Compile(schemaBase + f); err != nil {
				schemaErr = fmt.Errorf("schema %s: %w", f, err)
				return
			}
		}
		if s.manifest, err = c.Compile(schemaBase + "plugin-manifest.schema.json"); err != nil {
			schemaErr = err
			return
		}
		for op, names := range opSchemas {
			if s.in[op], err = c.Compile(schemaBase + names[0]); err != nil {
				schemaErr = err
				return
			}
			if s.out[op], err = c.Compile(schemaBase + names[1]); err != nil {
				schemaErr = err
				return
			}
		}
		schemaSet = s
	})
	return schemaSet, schemaErr
}

// SchemaNames lists the embedded schemas by short name ("plugin-manifest",
// "plugin-policy-decide.input", ...), for tools and golden tests.
func SchemaNames() []string {
	files, _ := fs.Glob(schemas.PluginFS, "plugin-*.schema.json")
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = strings.TrimSuffix(f, ".schema.json")
	}
	return out
}

// ValidateAgainst validates doc against the embedded schema with the given
// short name (see SchemaNames). It returns nil when doc is valid.
func ValidateAgainst(name string, doc []byte) error {
	set, err := loadSchemas()
	if err != nil {
		return err
	}
	sch, ok := set.byName[name]
	if !ok {
		return fmt.Errorf("no schema %q", name)
	}
	return validateJSON(sch, doc)
}

// validateJSON decodes doc and validates it against s; the error describes
// the first few failing locations in one line.
func validateJSON(s *jsonschema.Schema, doc []byte) error {
	v, err := decodeAny(doc)
	if err != nil {
		return err
	}
	return schemas.FlattenError(s.Validate(v))
}

func decodeAny(doc []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if d.More() {
		return nil, errors.New("invalid JSON: trailing data")
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("invalid JSON: trailing data")
	}
	return v, nil
}
