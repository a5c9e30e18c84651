package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/asyncgate/asyncgate/schemas"
)

// envPrefix starts the environment variables that configure `gate serve`:
// ASYNCGATE_<FIELD> for every field of schemas/config.schema.json, e.g.
// ASYNCGATE_LISTEN, ASYNCGATE_MAX_LEASE_SECONDS, ASYNCGATE_HTTP_CHANNEL (JSON).
const envPrefix = "ASYNCGATE_"

// envNotConfig are ASYNCGATE_* variables that are not config fields: the
// config file's path (ASYNCGATE_CONFIG, the --config default), the CLI's gate
// address and key (ASYNCGATE_URL, ASYNCGATE_KEY, ASYNCGATE_KEY_FILE), the
// worker's admin key (ASYNCGATE_ADMIN_KEY), and the
// tests' settings.
var envNotConfig = []string{"ASYNCGATE_CONFIG", "ASYNCGATE_URL", "ASYNCGATE_KEY", "ASYNCGATE_KEY_FILE", "ASYNCGATE_ADMIN_KEY", "ASYNCGATE_TEST_", "ASYNCGATE_E2E_"}

// envVarName is the environment variable of a config field.
func envVarName(field string) string { return envPrefix + strings.ToUpper(field) }

// compileConfigSchema compiles the embedded config schema.
func compileConfigSchema() (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("config.schema.json", bytes.NewReader(schemas.ConfigSchema)); err != nil {
		return nil, fmt.Errorf("config schema: %w", err)
	}
	sch, err := c.Compile("config.schema.json")
	if err != nil {
		return nil, fmt.Errorf("config schema: %w", err)
	}
	return sch, nil
}

// loadConfigEnv applies ASYNCGATE_* variables of environ over cfg. Values
// are read by the field's type in the schema (integers, booleans, JSON for
// objects, text otherwise), then the whole set is checked against the same
// schema as the config file; an error names the variable. An empty variable
// counts as unset. Variables that name no field are reported to warn (a
// typo would otherwise be silently ignored).
func loadConfigEnv(environ []string, cfg *serveConfig, warn io.Writer) error {
	var props struct {
		Properties map[string]struct {
			Type any   `json:"type"`
			Enum []any `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(schemas.ConfigSchema, &props); err != nil {
		return fmt.Errorf("config schema: %w", err)
	}
	byVar := map[string]string{}
	for f := range props.Properties {
		byVar[envVarName(f)] = f
	}
	obj := map[string]any{}
	varOf := map[string]string{} // field → variable
	var unknown []string
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, envPrefix) {
			continue
		}
		field, known := byVar[name]
		if !known {
			if !isNotConfig(name) {
				unknown = append(unknown, name)
			}
			continue
		}
		if val == "" {
			continue
		}
		typ, _ := props.Properties[field].Type.(string)
		var v any
		switch typ {
		case "integer":
			n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
			if err != nil {
				return fmt.Errorf("%s=%q: not an integer", name, val)
			}
			v = json.Number(strconv.FormatInt(n, 10))
		case "boolean":
			b, err := strconv.ParseBool(strings.TrimSpace(val))
			if err != nil {
				return fmt.Errorf("%s=%q: not a boolean (true or false)", name, val)
			}
			v = b
		case "object", "array":
			dec := json.NewDecoder(strings.NewReader(val))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				return fmt.Errorf("%s: not valid JSON: %v", name, err)
			}
		default:
			v = val
		}
		obj[field] = v
		varOf[field] = name
	}
	if len(unknown) > 0 && warn != nil {
		sort.Strings(unknown)
		fmt.Fprintf(warn, "gate serve: ignoring %s: no such config field (schemas/config.schema.json)\n", strings.Join(unknown, ", "))
	}
	if len(obj) == 0 {
		return nil
	}
	sch, err := compileConfigSchema()
	if err != nil {
		return err
	}
	if err := sch.Validate(obj); err != nil {
		return envSchemaError(err, varOf)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, cfg); err != nil {
		return fmt.Errorf("config from the environment: %w", err)
	}
	return nil
}

func isNotConfig(name string) bool {
	for _, p := range envNotConfig {
		if name == p || (strings.HasSuffix(p, "_") && strings.HasPrefix(name, p)) {
			return true
		}
	}
	return false
}

// envSchemaError turns a schema violation into an error naming the
// variable: "ASYNCGATE_MAX_LEASE_SECONDS: must be >= 1 but found 0".
func envSchemaError(err error, varOf map[string]string) error {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("config from the environment: %v", err)
	}
	var msgs []string
	seen := map[string]bool{}
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := strings.TrimPrefix(e.InstanceLocation, "/")
			field, rest, _ := strings.Cut(loc, "/")
			name := varOf[field]
			if name == "" {
				name = "the environment"
			} else if rest != "" {
				name += " (" + rest + ")"
			}
			m := name + ": " + e.Message
			if !seen[m] {
				seen[m] = true
				msgs = append(msgs, m)
			}
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.Strings(msgs)
	return errors.New(strings.Join(msgs, "; "))
}
