package mcpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/asyncgate/asyncgate/host"
)

// argSchema is a built-in tool's declared input schema, compiled, with
// what checkArgs needs to word a refusal: the schema as JSON values (to read
// a violated keyword's bound) and the codes of arguments whose refusal the
// gate words with a code of its own.
//
// The gate checks every call of a built-in tool against the input schema
// tools/list declares for it before the tool runs, so that a client that
// validates arguments against the declared schema and one that does not get
// the same answer: whatever the schema refuses, the gate refuses too (a tool
// error, bad_request unless argCodes names another), and the schema refuses
// nothing the tool would accept. A task type's tool is not checked here:
// its schema is the type's params_schema, which the engine checks the
// params against (invalid_params).
type argSchema struct {
	compiled *jsonschema.Schema
	doc      any               // the schema as JSON values
	codes    map[string]string // instance path ("/steps", "/tasks/*/after") -> code
}

// argCodes are the codes a refusal of these arguments carries (tool name,
// then the argument's instance path with "*" for any index, alone or
// followed by the broken keyword): the code the engine answers the same
// bound with, so that the answer does not depend on which check saw it
// first. Every other refusal is bad_request.
var argCodes = map[string]map[string]string{
	"queue_task": {"/params": host.CodeInvalidParams, "/resource_intents maxItems": host.CodeTooLarge,
		"/after maxItems": host.CodeTooLarge},
	"queue_tasks": {"/tasks/*/params": host.CodeInvalidParams, "/tasks/*/resource_intents maxItems": host.CodeTooLarge,
		"/tasks/*/after maxItems": host.CodeTooLarge},
	"submit_workflow": {"/steps maxItems": host.CodeTooManySteps, "/steps/*/params": host.CodeInvalidParams,
		"/steps/*/resource_intents maxItems": host.CodeTooLarge},
	"create_schedule": {"/interval_seconds": host.CodeInvalidInterval, "/missed_policy": host.CodeInvalidMissedPolicy,
		"/missed_cap": host.CodeInvalidMissedPolicy, "/grace_seconds": host.CodeInvalidMissedPolicy},
	"update_schedule": {"/interval_seconds": host.CodeInvalidInterval, "/missed_policy": host.CodeInvalidMissedPolicy,
		"/missed_cap": host.CodeInvalidMissedPolicy, "/grace_seconds": host.CodeInvalidMissedPolicy},
	"mark_read":                 {"/inbox_ids maxItems": host.CodeTooLarge},
	"heartbeat_resource_leases": {"/lease_ids maxItems": host.CodeTooLarge},
	"release_resource_leases":   {"/lease_ids maxItems": host.CodeTooLarge},
	"verify_resource_leases":    {"/lease_ids maxItems": host.CodeTooLarge},
	"worker_heartbeat_task":     {"/progress_message maxLength": host.CodeTooLarge},
	"worker_complete_task":      {"/summary maxLength": host.CodeTooLarge},
	"send_email":                {"/subject maxLength": host.CodeTooLarge},
}

// compileArgs compiles t's input schema. A schema that does not compile is
// a bug of the tool's declaration: New fails.
func compileArgs(t mcp.Tool) (*argSchema, error) {
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("mcpapi: input schema of %s: %w", t.Name, err)
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	// Formats are asserted, as the MCP TypeScript SDK's validator (Ajv with
	// ajv-formats) asserts them: a not_before that is no date-time is
	// refused here as there.
	c.AssertFormat = true
	url := "mem://asyncgate/tools/" + t.Name + ".json"
	if err := c.AddResource(url, bytes.NewReader(raw)); err != nil {
		return nil, fmt.Errorf("mcpapi: input schema of %s: %w", t.Name, err)
	}
	compiled, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("mcpapi: input schema of %s: %w", t.Name, err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	return &argSchema{compiled: compiled, doc: doc, codes: argCodes[t.Name]}, nil
}

// check refuses args, a tool call's raw arguments, when they break the
// declared schema: the error names each argument and the bound it breaks
// ("limit must be 1..500, got 501"). Arguments that are not a JSON object
// are left to bind, which refuses them.
func (a *argSchema) check(args any) error {
	raw, err := rawArgs(args)
	if err != nil {
		return host.Errorf(host.CodeBadRequest, "arguments: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil // not JSON: bind words it
	}
	if _, ok := v.(map[string]any); !ok {
		return host.Errorf(host.CodeBadRequest, "arguments must be a JSON object, not %s", jsonKind(v))
	}
	err = a.compiled.Validate(v)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return host.Errorf(host.CodeBadRequest, "arguments: %v", err)
	}
	var leaves []*jsonschema.ValidationError
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	leaves, merged := a.formsOf(leaves, v)
	// Unknown arguments first: a misspelt name explains what follows
	// ("TASK_TYPE" for task_type: task_type is also missing).
	slices.SortStableFunc(leaves, func(x, y *jsonschema.ValidationError) int {
		return boolInt(keyword(y) == "additionalProperties") - boolInt(keyword(x) == "additionalProperties")
	})
	msgs := merged
	code := ""
	for _, l := range leaves {
		m := a.word(l, v)
		if m == "" || slices.Contains(msgs, m) {
			continue
		}
		msgs = append(msgs, m)
		if code == "" {
			code = a.codeOf(l.InstanceLocation, keyword(l))
		}
	}
	if len(msgs) == 0 {
		msgs = append(msgs, "arguments do not match the tool's input schema: "+ve.Error())
	}
	if len(msgs) > 5 {
		msgs = append(msgs[:5], fmt.Sprintf("and %d more", len(msgs)-5))
	}
	if code == "" {
		code = host.CodeBadRequest
	}
	return host.Errorf(code, "%s", strings.Join(msgs, "; "))
}

// formsOf words the refusal of an argument that takes one of several forms
// (anyOf: a state or a list of states) by the form its value has. Every
// form refuses it, each in leaves of its own. A form whose type is not the
// value's says only that; those are left out when a form of the value's
// type refused it for another reason (a state that is no state is not also
// "not a list"), and named together when every form refused the value's
// type: "status must be a string or an array, got an integer". It returns
// the leaves left to word and the messages of the merged ones.
func (a *argSchema) formsOf(leaves []*jsonschema.ValidationError, inst any) ([]*jsonschema.ValidationError, []string) {
	// anyOfType is the anyOf a leaf's form is of when the leaf is that
	// form's own type refused ("/properties/status/anyOf/1/type"), else "".
	anyOfType := func(e *jsonschema.ValidationError) string {
		segs := pointer(e.KeywordLocation)
		if n := len(segs); n >= 3 && segs[n-1] == "type" && segs[n-3] == "anyOf" {
			return strings.Join(segs[:n-2], "/")
		}
		return ""
	}
	// within says whether a leaf is under the anyOf at prefix.
	within := func(e *jsonschema.ValidationError, prefix string) bool {
		return strings.HasPrefix(strings.Join(pointer(e.KeywordLocation), "/"), prefix+"/")
	}
	var out []*jsonschema.ValidationError
	var msgs []string
	done := map[string]bool{}
	for _, l := range leaves {
		g := anyOfType(l)
		if g == "" {
			out = append(out, l)
			continue
		}
		if done[g] {
			continue
		}
		own := false // a form of the value's type refused it otherwise
		var types []any
		for _, m := range leaves {
			if !within(m, g) {
				continue
			}
			if anyOfType(m) != g {
				own = true
				continue
			}
			sch, _ := at(a.doc, pointer(m.KeywordLocation)[:len(pointer(m.KeywordLocation))-1])
			if s, ok := sch.(map[string]any); ok {
				types = append(types, asList(s["type"])...)
			}
		}
		done[g] = true
		if own {
			continue
		}
		path := pointer(l.InstanceLocation)
		val, _ := at(inst, path)
		m := fmt.Sprintf("%s must be %s, got %s", argPath(path), typeWords(types), jsonKind(val))
		if val == nil {
			m += " (leave an argument out rather than send null)"
		}
		msgs = append(msgs, m)
	}
	return out, msgs
}

// codeOf is the code of a refusal of the argument at the instance path
// loc (not of what it holds) for breaking keyword kw: argCodes', else "".
func (a *argSchema) codeOf(loc, kw string) string {
	segs := pointer(loc)
	for i, s := range segs {
		if _, err := strconv.Atoi(s); err == nil {
			segs[i] = "*"
		}
	}
	path := "/" + strings.Join(segs, "/")
	if c, ok := a.codes[path+" "+kw]; ok {
		return c
	}
	return a.codes[path]
}

// word is the refusal of one broken keyword, in the gate's words, or "".
func (a *argSchema) word(e *jsonschema.ValidationError, inst any) string {
	kw := keyword(e)
	path := pointer(e.InstanceLocation)
	name := argPath(path)
	val, _ := at(inst, path)
	sch, _ := at(a.doc, pointer(e.KeywordLocation)[:max(0, len(pointer(e.KeywordLocation))-1)])
	s, _ := sch.(map[string]any)
	switch kw {
	case "additionalProperties":
		obj, _ := val.(map[string]any)
		props, _ := s["properties"].(map[string]any)
		where := "arguments"
		if name != "" {
			where = name
		}
		var out []string
		for _, k := range sortedKeys(obj) {
			if _, ok := props[k]; ok {
				continue
			}
			m := "unknown field " + strconv.Quote(k) + " in " + where
			for _, p := range sortedKeys(props) {
				if strings.EqualFold(p, k) {
					m += "; field names are case-sensitive: did you mean " + strconv.Quote(p) + "?"
					break
				}
			}
			out = append(out, m)
		}
		return strings.Join(out, "; ")
	case "required":
		obj, _ := val.(map[string]any)
		req, _ := s["required"].([]any)
		var out []string
		for _, r := range req {
			k, _ := r.(string)
			if _, ok := obj[k]; !ok {
				out = append(out, argPath(append(slices.Clone(path), k))+" is required")
			}
		}
		return strings.Join(out, "; ")
	case "type":
		m := fmt.Sprintf("%s must be %s, got %s", name, typeWords(s["type"]), jsonKind(val))
		if val == nil {
			m += " (leave an argument out rather than send null)"
		}
		return m
	case "enum":
		var opts []string
		hint := ""
		for _, o := range asList(s["enum"]) {
			opts = append(opts, jsonText(o))
			if os, ok := o.(string); ok {
				if vs, ok := val.(string); ok && vs != os && strings.EqualFold(strings.TrimSpace(vs), os) {
					hint = " (values are case-sensitive: did you mean " + strconv.Quote(os) + "?)"
				}
			}
		}
		return fmt.Sprintf("%s must be one of %s, got %s%s", name, strings.Join(opts, ", "), jsonText(val), hint)
	case "minimum", "maximum":
		lo, hasLo := s["minimum"]
		hi, hasHi := s["maximum"]
		switch {
		case hasLo && hasHi:
			return fmt.Sprintf("%s must be %s..%s, got %s", name, jsonText(lo), jsonText(hi), jsonText(val))
		case hasLo:
			return fmt.Sprintf("%s must be at least %s, got %s", name, jsonText(lo), jsonText(val))
		default:
			return fmt.Sprintf("%s must be at most %s, got %s", name, jsonText(hi), jsonText(val))
		}
	case "minLength", "maxLength":
		str, _ := val.(string)
		n := utf8.RuneCountInString(str)
		if kw == "maxLength" {
			return fmt.Sprintf("%s must be at most %s characters, got %d", name, jsonText(s["maxLength"]), n)
		}
		return fmt.Sprintf("%s must be at least %s characters, got %d", name, jsonText(s["minLength"]), n)
	case "minItems", "maxItems":
		list, _ := val.([]any)
		if kw == "maxItems" {
			return fmt.Sprintf("%s must hold at most %s items, got %d", name, jsonText(s["maxItems"]), len(list))
		}
		return fmt.Sprintf("%s must hold at least %s, got %d", name, plural(int(num(s["minItems"])), "item", "items"), len(list))
	case "pattern":
		return fmt.Sprintf("%s must match %s, got %s", name, s["pattern"], jsonText(val))
	case "format":
		if s["format"] == "date-time" {
			return fmt.Sprintf("%s must be an RFC 3339 date-time (e.g. 2026-12-01T09:00:00Z), got %s", name, jsonText(val))
		}
	}
	if name == "" {
		name = "arguments"
	}
	return name + ": " + e.Message
}

// keyword is the schema keyword e broke: the last segment of its keyword
// location.
func keyword(e *jsonschema.ValidationError) string {
	segs := pointer(e.KeywordLocation)
	if len(segs) == 0 {
		return ""
	}
	return segs[len(segs)-1]
}

// pointer splits a JSON pointer ("/tasks/0/priority") into its unescaped
// segments.
func pointer(p string) []string {
	if p == "" || p == "/" {
		return nil
	}
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range segs {
		segs[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return segs
}

// argPath names an instance path as an agent writes it: tasks[0].priority.
func argPath(segs []string) string {
	var b strings.Builder
	for _, s := range segs {
		if _, err := strconv.Atoi(s); err == nil {
			b.WriteString("[" + s + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// at is the value at segs in v (a decoded JSON value).
func at(v any, segs []string) (any, bool) {
	for _, s := range segs {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[s]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func typeWords(t any) string {
	var out []string
	for _, n := range asList(t) {
		switch n {
		case "integer", "object", "array":
			out = append(out, "an "+n.(string))
		case "null":
			out = append(out, "null")
		default:
			out = append(out, fmt.Sprintf("a %v", n))
		}
	}
	return strings.Join(out, " or ")
}

func jsonKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "an integer"
		}
		return "a number"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// jsonText is v as JSON, cut short when long.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 80 {
		return string(b[:77]) + "…"
	}
	return string(b)
}

func asList(v any) []any {
	switch x := v.(type) {
	case []any:
		return x
	case nil:
		return nil
	}
	return []any{v}
}

func num(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return 0
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rawArgs is a call's arguments as JSON ({} when there are none).
func rawArgs(args any) ([]byte, error) {
	var raw []byte
	switch v := args.(type) {
	case json.RawMessage:
		raw = v
	case nil:
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	return raw, nil
}
