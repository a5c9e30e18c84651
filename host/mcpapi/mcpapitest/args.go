// Package mcpapitest derives tool calls from the input schemas the MCP door
// declares, for tests on both sides of the door: for each tool, arguments
// its declared schema accepts (the baseline) and, for every bound the
// schema states (required, type, enum, minimum, maximum, minLength,
// maxLength, minItems, maxItems, pattern, format, additionalProperties), the
// baseline broken in that one place. A client that checks arguments against
// the declared schema refuses each broken call; the gate must refuse it too.
package mcpapitest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Case is one call of a tool with arguments its input schema refuses.
type Case struct {
	Tool string `json:"tool"`
	// What says what is broken: "limit maximum", "tasks[0].priority enum".
	What string `json:"what"`
	// Arg is the argument as the gate names it in a refusal ("limit",
	// "tasks[0].priority"); Path is its instance path with "*" for any
	// index ("/tasks/*/priority"); Keyword is the schema keyword broken.
	Arg     string `json:"arg"`
	Path    string `json:"path"`
	Keyword string `json:"keyword"`
	// Want is text the refusal's detail holds.
	Want string         `json:"want"`
	Args map[string]any `json:"arguments"`
}

// Baseline returns arguments schema (a tool's input schema, as JSON)
// accepts: every required argument with a value in bounds, and one item in
// an array that has an item schema, so that its items' bounds can be broken.
func Baseline(schema map[string]any) map[string]any {
	v, _ := valid(schema, true).(map[string]any)
	if v == nil {
		v = map[string]any{}
	}
	return v
}

// OutOfSchema returns, for tool (its name and input schema as JSON), one
// call per bound the schema states, each breaking the baseline in that one
// place.
func OutOfSchema(tool string, schema map[string]any) []Case {
	base := Baseline(schema)
	var out []Case
	var walk func(s map[string]any, path []string)
	walk = func(s map[string]any, path []string) {
		for _, c := range breaks(s) {
			args := cloneJSON(base).(map[string]any)
			if !put(args, path, c.value, c.omit) {
				continue
			}
			arg, what := argName(path), c.keyword
			if arg != "" {
				what = arg + " " + what
			}
			cs := Case{Tool: tool, What: what, Arg: arg, Path: "/" + strings.Join(starred(path), "/"), Keyword: c.keyword, Want: c.want(arg), Args: args}
			out = append(out, cs)
		}
		props, _ := s["properties"].(map[string]any)
		req := strList(s["required"])
		for _, name := range sortedKeys(props) {
			p, _ := props[name].(map[string]any)
			if p == nil {
				continue
			}
			child := append(slices.Clone(path), name)
			walk(p, child)
			if slices.Contains(req, name) {
				args := cloneJSON(base).(map[string]any)
				if put(args, child, nil, true) {
					out = append(out, Case{Tool: tool, What: argName(child) + " required", Arg: argName(child),
						Path: "/" + strings.Join(starred(child), "/"), Keyword: "required", Want: argName(child) + " is required", Args: args})
				}
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(items, append(slices.Clone(path), "0"))
		}
	}
	walk(schema, nil)
	return out
}

// aBreak is one value (or the absence of one, omit) that breaks keyword.
type aBreak struct {
	keyword string
	value   any
	omit    bool
	want    func(arg string) string
}

// breaks are the values that break each bound s states, one per bound.
func breaks(s map[string]any) []aBreak {
	var out []aBreak
	named := func(format string) func(string) string {
		return func(arg string) string { return fmt.Sprintf(format, arg) }
	}
	types := strList(s["type"])
	if len(types) > 0 {
		if v := wrongType(types); v != nil {
			out = append(out, aBreak{keyword: "type", value: v, want: named("%s must be")})
		}
		if !slices.Contains(types, "null") {
			out = append(out, aBreak{keyword: "type null", value: json.RawMessage("null"), want: named("%s must be")})
		}
	}
	if enum, ok := s["enum"].([]any); ok && len(enum) > 0 {
		out = append(out, aBreak{keyword: "enum", value: "no_such_value", want: named("%s must be one of")})
		if first, ok := enum[0].(string); ok {
			other := strings.ToLower(first)
			if other == first {
				other = strings.ToUpper(first)
			}
			if !slices.Contains(enum, any(other)) {
				out = append(out, aBreak{keyword: "enum case", value: other, want: named("%s must be one of")})
			}
		}
	}
	integer := slices.Contains(types, "integer")
	step := 1.0
	if !integer {
		step = 0.5
	}
	if lo, ok := number(s["minimum"]); ok {
		out = append(out, aBreak{keyword: "minimum", value: numberValue(lo-step, integer), want: named("%s must be")})
	}
	if hi, ok := number(s["maximum"]); ok {
		out = append(out, aBreak{keyword: "maximum", value: numberValue(hi+step, integer), want: named("%s must be")})
	}
	if n, ok := number(s["maxLength"]); ok {
		out = append(out, aBreak{keyword: "maxLength", value: strings.Repeat("x", int(n)+1), want: named("%s must be at most")})
	}
	if n, ok := number(s["minLength"]); ok && n > 0 {
		out = append(out, aBreak{keyword: "minLength", value: strings.Repeat("x", int(n)-1), want: named("%s must be at least")})
	}
	items, _ := s["items"].(map[string]any)
	if n, ok := number(s["maxItems"]); ok {
		list := make([]any, int(n)+1)
		for i := range list {
			list[i] = valid(items, true)
		}
		out = append(out, aBreak{keyword: "maxItems", value: list, want: named("%s must hold at most")})
	}
	if n, ok := number(s["minItems"]); ok && n > 0 {
		list := make([]any, int(n)-1)
		for i := range list {
			list[i] = valid(items, true)
		}
		out = append(out, aBreak{keyword: "minItems", value: list, want: named("%s must hold at least")})
	}
	if p, ok := s["pattern"].(string); ok {
		if re, err := regexp.Compile(p); err == nil {
			for _, v := range []string{"", "x\ny", "x\ry", "x\x00y", " ", "!"} {
				if !re.MatchString(v) {
					out = append(out, aBreak{keyword: "pattern", value: v, want: named("%s must match")})
					break
				}
			}
		}
	}
	if f, _ := s["format"].(string); f == "date-time" {
		out = append(out, aBreak{keyword: "format", value: "tomorrow at nine", want: named("%s")})
	}
	if ap, ok := s["additionalProperties"].(bool); ok && !ap {
		out = append(out, aBreak{keyword: "additionalProperties", value: nil, want: func(arg string) string {
			return `unknown field "zz_unknown"`
		}})
	}
	return out
}

// put sets v at path in args (or deletes it, omit; the additionalProperties
// break, a nil value, adds an unknown field to the object at path). It
// reports false when the baseline has nothing at path to break.
func put(args map[string]any, path []string, v any, omit bool) bool {
	if v == nil && !omit {
		obj, ok := lookup(args, path).(map[string]any)
		if !ok {
			return false
		}
		obj["zz_unknown"] = 1
		return true
	}
	if len(path) == 0 {
		return false
	}
	parent := lookup(args, path[:len(path)-1])
	last := path[len(path)-1]
	switch p := parent.(type) {
	case map[string]any:
		if omit {
			if _, ok := p[last]; !ok {
				return false
			}
			delete(p, last)
			return true
		}
		if raw, ok := v.(json.RawMessage); ok && string(raw) == "null" {
			v = nil
		}
		p[last] = v
		return true
	case []any:
		i, err := strconv.Atoi(last)
		if err != nil || i >= len(p) || omit {
			return false
		}
		if raw, ok := v.(json.RawMessage); ok && string(raw) == "null" {
			v = nil
		}
		p[i] = v
		return true
	}
	return false
}

// lookup is the value at path in v, or nil.
func lookup(v any, path []string) any {
	for _, s := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[s]
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// valid is a value s accepts; full fills optional arguments of objects
// too (so that their bounds can be broken), with the first item of arrays.
func valid(s map[string]any, full bool) any {
	if s == nil {
		return "x"
	}
	if enum, ok := s["enum"].([]any); ok && len(enum) > 0 {
		return enum[0]
	}
	types := strList(s["type"])
	t := ""
	if len(types) > 0 {
		t = types[0]
	}
	switch t {
	case "object":
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		for _, name := range sortedKeys(props) {
			p, _ := props[name].(map[string]any)
			if !slices.Contains(strList(s["required"]), name) && !(full && hasBounds(p)) {
				continue
			}
			out[name] = valid(p, full)
		}
		return out
	case "array":
		items, _ := s["items"].(map[string]any)
		n := 0
		if m, ok := number(s["minItems"]); ok {
			n = int(m)
		}
		if n == 0 && full && items != nil && hasBounds(items) {
			n = 1
		}
		out := make([]any, n)
		for i := range out {
			out[i] = valid(items, full)
		}
		return out
	case "integer", "number":
		lo, hasLo := number(s["minimum"])
		if hasLo {
			return numberValue(lo, t == "integer")
		}
		if hi, ok := number(s["maximum"]); ok && hi < 1 {
			return numberValue(hi, t == "integer")
		}
		return 1
	case "boolean":
		return false
	case "string":
		if f, _ := s["format"].(string); f == "date-time" {
			return "2026-01-01T00:00:00Z"
		}
		if n, ok := number(s["minLength"]); ok && n > 0 {
			return strings.Repeat("x", int(n))
		}
		return "x"
	}
	return "x"
}

// hasBounds says whether s (or what it holds) states a bound worth breaking.
func hasBounds(s map[string]any) bool {
	if s == nil {
		return false
	}
	for _, k := range []string{"enum", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "pattern", "format", "required", "additionalProperties"} {
		if _, ok := s[k]; ok {
			return true
		}
	}
	if len(strList(s["type"])) > 0 {
		return true
	}
	if items, ok := s["items"].(map[string]any); ok && hasBounds(items) {
		return true
	}
	return false
}

func wrongType(types []string) any {
	switch {
	case slices.Contains(types, "string"):
		return 7
	default:
		return "x"
	}
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

func numberValue(f float64, integer bool) any {
	if integer {
		return int64(f)
	}
	return f
}

func strList(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	case []string:
		return x
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// argName names an argument path as the gate does: tasks[0].priority.
func argName(path []string) string {
	var b strings.Builder
	for _, s := range path {
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

func starred(path []string) []string {
	out := slices.Clone(path)
	for i, s := range out {
		if _, err := strconv.Atoi(s); err == nil {
			out[i] = "*"
		}
	}
	return out
}

func cloneJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = cloneJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = cloneJSON(e)
		}
		return out
	}
	return v
}

// codes are the codes the gate's refusal of a case carries where it is not
// bad_request (tool, then the argument's path, alone or with the keyword):
// the engine's code for the same bound, so that the answer does not depend
// on which check saw it first.
var codes = map[string]map[string]string{
	"queue_task": {"/params": "invalid_params", "/resource_intents maxItems": "too_large", "/after maxItems": "too_large"},
	"queue_tasks": {"/tasks/*/params": "invalid_params", "/tasks/*/resource_intents maxItems": "too_large",
		"/tasks/*/after maxItems": "too_large"},
	"submit_workflow": {"/steps maxItems": "too_many_steps", "/steps/*/params": "invalid_params",
		"/steps/*/resource_intents maxItems": "too_large"},
	"create_schedule": {"/interval_seconds": "invalid_interval", "/missed_policy": "invalid_missed_policy",
		"/missed_cap": "invalid_missed_policy", "/grace_seconds": "invalid_missed_policy"},
	"update_schedule": {"/interval_seconds": "invalid_interval", "/missed_policy": "invalid_missed_policy",
		"/missed_cap": "invalid_missed_policy", "/grace_seconds": "invalid_missed_policy"},
	"mark_read":                 {"/inbox_ids maxItems": "too_large"},
	"heartbeat_resource_leases": {"/lease_ids maxItems": "too_large"},
	"release_resource_leases":   {"/lease_ids maxItems": "too_large"},
	"verify_resource_leases":    {"/lease_ids maxItems": "too_large"},
	"worker_heartbeat_task":     {"/progress_message maxLength": "too_large"},
	"worker_complete_task":      {"/summary maxLength": "too_large"},
	"send_email":                {"/subject maxLength": "too_large"},
}

// WantCode is the error code the gate refuses a case of a built-in tool
// with.
func WantCode(c Case) string {
	kw := strings.Fields(c.Keyword)[0]
	byPath := codes[c.Tool]
	if code, ok := byPath[c.Path+" "+kw]; ok {
		return code
	}
	if code, ok := byPath[c.Path]; ok && kw != "required" && kw != "additionalProperties" {
		return code
	}
	return "bad_request"
}
