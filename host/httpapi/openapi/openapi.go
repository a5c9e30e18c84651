// Package openapi assembles the gate's OpenAPI 3.1 document (served at
// /openapi.json) from operations that each area of the HTTP API registers in
// an init function, next to its routes: host/httpapi/openapi_*.go for the
// core routes, other packages for the routes they mount. Request and response
// schemas are derived from the Go types the handlers decode and encode, so the
// document follows the code; JSON Schema written by hand (S) covers answers
// built from maps.
//
// A test compares the document with the routes registered on the echo server
// (Diff): a route without an operation, or an operation without a route,
// fails it. Routes that are not part of the JSON API are listed in Excluded.
package openapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Excluded are the path prefixes that are not part of the JSON API and stay
// out of the document: the dashboard's pages, the MCP endpoint, which
// speaks JSON-RPC (docs/mcp.md), and the well-known metadata documents
// other specifications define (RFC 9728's protected resource metadata).
var Excluded = []string{"/ui", "/mcp", "/.well-known"}

// IsExcluded reports whether a route path (echo or OpenAPI syntax) is left
// out of the document on purpose.
func IsExcluded(path string) bool {
	for _, p := range Excluded {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// Op is one operation: a method on a path.
type Op struct {
	Method string // GET, POST, …
	// Path in echo syntax ("/v1/tasks/:id") or OpenAPI syntax ("/v1/tasks/{id}").
	Path    string
	Tag     string // the area, e.g. "tasks"
	Summary string
	// Public operations need no key; the others take a bearer key.
	Public bool
	// Roles lists the key roles allowed (documentation only).
	Roles []string
	// Query parameters, all optional unless Required.
	Query []Param
	// Body is the request body: a Go value whose type is the decoded body
	// (its schema is derived), a Schema, or nil for none. Strict bodies refuse
	// unknown fields (the /v1 routes), so their schema does too.
	Body   any
	Strict bool
	// BodyRequired makes a body mandatory (most bodies are optional: an empty
	// body reads as {}).
	BodyRequired bool
	// Responses by status code: a Go value (schema derived from its type), a
	// Schema, NoContent, or Text for a text/plain answer. Every operation
	// also answers errors in the Error shape (the "default" response).
	Responses map[int]any
}

// Param is a query parameter. The HTTP door refuses a query parameter its
// operation does not declare, and a declared one given more than once
// unless it is a List: the operations' Query is what the gate takes, not
// only what the document says.
type Param struct {
	Name        string
	Type        string // string (default), integer, number, boolean
	Description string
	Required    bool
	Enum        []string
	// List parameters hold comma-separated values and may be repeated
	// (status=a,b&status=c); the others take one value.
	List bool
	// Max, when not 0, bounds an integer parameter to 1..Max (a count such
	// as a page's limit): the document declares the bounds and the door
	// refuses a value outside them (400 bad_request "limit must be 1..500,
	// got 501"); left out, the route's default applies.
	Max int
}

// Schema is a JSON Schema written by hand (may $ref "#/components/schemas/X"
// of a type named with Ref).
type Schema map[string]any

// noContent marks a response without a body.
type noContent struct{}

// NoContent is a response without a body (204).
var NoContent = noContent{}

// Text is a text/plain response.
type Text string

var (
	mu    sync.Mutex
	ops   []Op
	enums = map[reflect.Type][]string{}
	// fieldEnums are the values of single fields (FieldEnum): by the
	// struct type that declares the field, then the field's JSON name.
	fieldEnums = map[reflect.Type]map[string][]string{}
)

// Enum declares the values of a named string type (e.g. the task states):
// wherever the type appears, its schema lists them.
func Enum[T ~string](values ...T) {
	mu.Lock()
	defer mu.Unlock()
	var zero T
	vs := make([]string, len(values))
	for i, v := range values {
		vs[i] = string(v)
	}
	enums[reflect.TypeOf(zero)] = vs
}

// FieldEnum declares the values one field of a struct type can hold, where
// they are fewer than its type's Enum (a workflow's outcome is a
// WorkflowState, but only an end state): of is a value of the struct type
// that declares the field (a struct embedding it gets the same schema), field
// the field's JSON name. It panics when of has no such field of a string
// type, so a renamed field fails at start rather than going unlisted.
func FieldEnum[T ~string](of any, field string, values ...T) {
	t := reflect.TypeOf(of)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !hasStringField(t, field) {
		panic(fmt.Sprintf("openapi.FieldEnum: %s has no string field %q", t, field))
	}
	vs := make([]string, len(values))
	for i, v := range values {
		vs[i] = string(v)
	}
	mu.Lock()
	defer mu.Unlock()
	if fieldEnums[t] == nil {
		fieldEnums[t] = map[string][]string{}
	}
	fieldEnums[t][field] = vs
}

// hasStringField reports whether struct type t declares a field of a string
// kind whose JSON name is name.
func hasStringField(t reflect.Type, name string) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if n == "" {
			n = f.Name
		}
		if f.IsExported() && n == name && f.Type.Kind() == reflect.String {
			return true
		}
	}
	return false
}

// Add registers operations. Call it from an init function.
func Add(o ...Op) {
	mu.Lock()
	defer mu.Unlock()
	ops = append(ops, o...)
	index.Store(nil)
}

// index finds a registered operation by "METHOD path", the path in echo and
// in OpenAPI syntax alike; built on the first Lookup after an Add, then read
// without a lock.
var index atomic.Pointer[map[string]*Op]

// Lookup is the registered operation method path (echo or OpenAPI syntax),
// and whether there is one. The HTTP door calls it on every request: a map
// read and no lock (the key is built per call: an allocation when the
// method and path pass 32 bytes).
func Lookup(method, path string) (Op, bool) {
	m := index.Load()
	if m == nil {
		m = buildIndex()
	}
	o, ok := (*m)[method+" "+path]
	if !ok {
		if o, ok = (*m)[strings.ToUpper(method)+" "+OpenAPIPath(path)]; !ok {
			return Op{}, false
		}
	}
	return *o, true
}

func buildIndex() *map[string]*Op {
	mu.Lock()
	defer mu.Unlock()
	if m := index.Load(); m != nil {
		return m
	}
	m := make(map[string]*Op, 2*len(ops))
	for i := range ops {
		o := &ops[i]
		method := strings.ToUpper(o.Method)
		m[method+" "+OpenAPIPath(o.Path)] = o
		m[method+" "+o.Path] = o
	}
	index.Store(&m)
	return &m
}

// QueryOf is the query parameters the registered operation method path
// (echo or OpenAPI syntax) declares, and whether there is one.
func QueryOf(method, path string) ([]Param, bool) {
	o, ok := Lookup(method, path)
	return o.Query, ok
}

// OpenAPIPath turns an echo path ("/v1/tasks/:id") into OpenAPI syntax.
func OpenAPIPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") {
			segs[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(segs, "/")
}

// Document builds the OpenAPI 3.1 document of every registered operation.
// version is the gate's version (info.version).
func Document(version string) ([]byte, error) {
	mu.Lock()
	list := append([]Op(nil), ops...)
	mu.Unlock()
	g := newGen()
	paths := map[string]map[string]any{}
	seen := map[string]bool{}
	for _, o := range list {
		p := OpenAPIPath(o.Path)
		m := strings.ToLower(o.Method)
		if seen[m+" "+p] {
			return nil, fmt.Errorf("openapi: %s %s is registered twice", o.Method, p)
		}
		seen[m+" "+p] = true
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		op, err := g.operation(o, p)
		if err != nil {
			return nil, fmt.Errorf("openapi: %s %s: %w", o.Method, p, err)
		}
		paths[p][m] = op
	}
	g.schemas["Error"] = g.structSchema(reflect.TypeOf(errorBody{}), false, false)
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":       "AsyncGate",
			"version":     version,
			"description": "The gate's worker, agent and operator HTTP API (docs/http.md). Every error is {\"error\": code, \"detail\": text}.",
		},
		"paths": paths,
		"components": map[string]any{
			"schemas": g.schemas,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{"type": "http", "scheme": "bearer", "description": "An API key, agw_…"},
			},
			"responses": map[string]any{
				"Error": map[string]any{
					"description": "An error: a machine code and a human detail (see docs/http.md for the statuses).",
					"content":     map[string]any{"application/json": map[string]any{"schema": Schema{"$ref": "#/components/schemas/Error"}}},
				},
			},
		},
		"security": []any{map[string]any{"bearer": []any{}}},
	}
	return json.MarshalIndent(doc, "", "  ")
}

// errorBody mirrors httpapi.ErrorBody (this package cannot import httpapi).
type errorBody struct {
	Error   string `json:"error"`
	Detail  string `json:"detail,omitempty"`
	Message string `json:"message,omitempty"`
	// TaskStatus: on a lease_expired answer to the worker that held the
	// lease, the state its task is in (it already ended: "succeeded").
	TaskStatus string `json:"task_status,omitempty"`
}

// Operations returns "METHOD /openapi/path" for every registered operation.
func Operations() []string {
	mu.Lock()
	defer mu.Unlock()
	var out []string
	for _, o := range ops {
		out = append(out, strings.ToUpper(o.Method)+" "+OpenAPIPath(o.Path))
	}
	sort.Strings(out)
	return out
}

// Route is a registered route (echo.Route's method and path).
type Route struct{ Method, Path string }

// Diff compares the routes an echo server registered with the document's
// operations. missing: routes without an operation; extra: operations
// without a route. Excluded paths, echo's internal routes and the catch-all
// not-found route are ignored.
func Diff(routes []Route) (missing, extra []string) {
	have := map[string]bool{}
	for _, r := range routes {
		if r.Method == "" || strings.HasPrefix(r.Method, "echo_") || r.Path == "/*" || IsExcluded(r.Path) {
			continue
		}
		have[strings.ToUpper(r.Method)+" "+OpenAPIPath(r.Path)] = true
	}
	documented := map[string]bool{}
	for _, o := range Operations() {
		documented[o] = true
		if !have[o] {
			extra = append(extra, o)
		}
	}
	for k := range have {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return missing, extra
}

type gen struct {
	schemas map[string]any
	names   map[reflect.Type]string
}

func newGen() *gen { return &gen{schemas: map[string]any{}, names: map[reflect.Type]string{}} }

func (g *gen) operation(o Op, path string) (map[string]any, error) {
	op := map[string]any{"operationId": operationID(o.Method, path)}
	if o.Summary != "" {
		op["summary"] = o.Summary
	}
	if o.Tag != "" {
		op["tags"] = []string{o.Tag}
	}
	if len(o.Roles) > 0 {
		op["description"] = "Key roles: " + strings.Join(o.Roles, ", ") + "."
	}
	if o.Public {
		op["security"] = []any{}
	}
	var params []any
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") {
			params = append(params, map[string]any{"name": strings.Trim(seg, "{}"), "in": "path", "required": true, "schema": Schema{"type": "string"}})
		}
	}
	for _, q := range o.Query {
		typ := q.Type
		if typ == "" {
			typ = "string"
		}
		s := Schema{"type": typ}
		if typ == "integer" {
			s["minimum"] = 0
			if q.Max > 0 {
				s["minimum"], s["maximum"] = 1, q.Max
			}
		}
		if len(q.Enum) > 0 {
			s["enum"] = q.Enum
		}
		p := map[string]any{"name": q.Name, "in": "query", "schema": s}
		if q.List {
			// Repeated (form, exploded); each value may also be a comma list.
			p["schema"] = Schema{"type": "array", "items": s}
			p["style"], p["explode"] = "form", true
		}
		if q.Required {
			p["required"] = true
		}
		if q.Description != "" {
			p["description"] = q.Description
		}
		params = append(params, p)
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	if o.Body != nil {
		op["requestBody"] = map[string]any{
			"required": o.BodyRequired,
			"content":  map[string]any{"application/json": map[string]any{"schema": g.valueSchema(o.Body, true, o.Strict)}},
		}
	}
	resps := map[string]any{"default": map[string]any{"$ref": "#/components/responses/Error"}}
	for code, v := range o.Responses {
		r := map[string]any{"description": http.StatusText(code)}
		switch v := v.(type) {
		case noContent:
		case Text:
			r["content"] = map[string]any{string(v): map[string]any{"schema": Schema{"type": "string"}}}
		default:
			r["content"] = map[string]any{"application/json": map[string]any{"schema": g.valueSchema(v, false, false)}}
		}
		resps[fmt.Sprint(code)] = r
	}
	op["responses"] = resps
	return op, nil
}

func operationID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, seg := range strings.Split(path, "/") {
		seg = strings.Trim(seg, "{}")
		for _, part := range strings.FieldsFunc(seg, func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// valueSchema is the schema of a response or body value: a Schema as is, a
// Ref'd or derived type otherwise.
func (g *gen) valueSchema(v any, request, strict bool) any {
	switch v := v.(type) {
	case Schema:
		return g.resolve(v)
	case refTo:
		return g.refSchema(v.t, request, strict)
	}
	return g.schemaOf(reflect.TypeOf(v), request, strict)
}

// resolve replaces Ref markers inside a hand-written schema.
func (g *gen) resolve(v any) any {
	switch v := v.(type) {
	case Schema:
		out := Schema{}
		for k, x := range v {
			out[k] = g.resolve(x)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			out[k] = g.resolve(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = g.resolve(x)
		}
		return out
	case refTo:
		return g.refSchema(v.t, false, false)
	}
	return v
}

// refTo marks "the schema of this Go type" inside a hand-written Schema.
type refTo struct{ t reflect.Type }

// Ref is the response schema of v's Go type, for use inside a Schema.
func Ref(v any) any { return refTo{reflect.TypeOf(v)} }

// refSchema names struct types in components/schemas (responses only:
// request schemas differ by strictness and stay inline).
func (g *gen) refSchema(t reflect.Type, request, strict bool) any {
	return g.schemaOf(t, request, strict)
}

var (
	timeType      = reflect.TypeOf(time.Time{})
	rawType       = reflect.TypeOf(json.RawMessage(nil))
	marshalerType = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	unmarshalType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
)

// schemaOf derives the JSON Schema of how encoding/json writes (response)
// or reads (request) a value of type t. Responses name non-omitempty fields
// required and allow fields the type does not list (answers may grow);
// strict requests refuse unknown fields and require only the fields tagged
// openapi:"required" (the handlers check what they need, with clearer
// errors). Fields' openapi and doc tags add to their schema (fieldTags).
func (g *gen) schemaOf(t reflect.Type, request, strict bool) any {
	nullable := false
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
		nullable = true
	}
	s := g.baseSchema(t, request, strict)
	if nullable && !request {
		return orNull(s)
	}
	return s
}

func orNull(s any) any {
	if m, ok := s.(Schema); ok {
		if typ, ok := m["type"].(string); ok && m["enum"] == nil && m["$ref"] == nil {
			c := Schema{}
			for k, v := range m {
				c[k] = v
			}
			c["type"] = []string{typ, "null"}
			return c
		}
		if len(m) == 0 {
			return m
		}
	}
	return Schema{"anyOf": []any{s, Schema{"type": "null"}}}
}

func (g *gen) baseSchema(t reflect.Type, request, strict bool) any {
	switch {
	case t == timeType:
		return Schema{"type": "string", "format": "date-time"}
	case t == rawType || t.Kind() == reflect.Interface:
		return Schema{}
	case t.Implements(marshalerType) || reflect.PointerTo(t).Implements(unmarshalType):
		return Schema{} // custom encoding: any JSON value
	}
	switch t.Kind() {
	case reflect.String:
		mu.Lock()
		vs := enums[t]
		mu.Unlock()
		if len(vs) > 0 {
			return Schema{"type": "string", "enum": vs}
		}
		return Schema{"type": "string"}
	case reflect.Bool:
		return Schema{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return Schema{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return Schema{"type": "number"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return Schema{"type": "string", "contentEncoding": "base64"}
		}
		s := Schema{"type": "array", "items": g.schemaOf(t.Elem(), request, strict)}
		if !request && t.Kind() == reflect.Slice {
			s["type"] = []string{"array", "null"}
		}
		return s
	case reflect.Map:
		s := Schema{"type": "object", "additionalProperties": g.schemaOf(t.Elem(), request, strict)}
		if !request {
			s["type"] = []string{"object", "null"}
		}
		return s
	case reflect.Struct:
		if request || t.Name() == "" {
			return g.structSchema(t, request, strict)
		}
		name := g.nameOf(t)
		if _, ok := g.schemas[name]; !ok {
			g.schemas[name] = Schema{} // placeholder against recursion
			g.schemas[name] = g.structSchema(t, false, false)
		}
		return Schema{"$ref": "#/components/schemas/" + name}
	}
	return Schema{}
}

// nameOf is the component name of a named type: its Go name, qualified by
// its package when two packages use the same name.
func (g *gen) nameOf(t reflect.Type) string {
	if n, ok := g.names[t]; ok {
		return n
	}
	n := t.Name()
	for other, on := range g.names {
		if on == n && other != t {
			pkg := t.PkgPath()
			n = pkg[strings.LastIndex(pkg, "/")+1:] + "." + n
			break
		}
	}
	g.names[t] = n
	return n
}

func (g *gen) structSchema(t reflect.Type, request, strict bool) Schema {
	props := map[string]any{}
	var required []string
	g.fields(t, request, strict, props, &required)
	s := Schema{"type": "object", "properties": props}
	if len(required) > 0 {
		sort.Strings(required)
		s["required"] = required
	}
	if request && strict {
		s["additionalProperties"] = false
	}
	return s
}

// fields adds t's JSON fields, flattening embedded structs as encoding/json does.
func (g *gen) fields(t reflect.Type, request, strict bool, props map[string]any, required *[]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				g.fields(et, request, strict, props, required)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		mu.Lock()
		vs := fieldEnums[t][name]
		mu.Unlock()
		switch {
		case vs != nil && ft.Kind() == reflect.String:
			props[name] = Schema{"type": "string", "enum": vs}
		case request:
			props[name] = g.schemaOf(ft, true, strict)
		default:
			props[name] = g.schemaOf(ft, false, false)
		}
		req := fieldTags(f, props, name)
		if request {
			if req {
				*required = append(*required, name)
			}
			continue
		}
		if !omit || req {
			*required = append(*required, name)
		}
	}
}

// fieldTags applies a field's schema tags to its schema, props[name], and
// reports whether the field is required:
//
//   - openapi:"required,minItems=1,maxItems=100": a field a body must hold
//     (request schemas otherwise require none), and an array's bounds;
//   - doc:"…": the field's description.
//
// It panics on a key it does not know, so a misspelt tag fails at start.
func fieldTags(f reflect.StructField, props map[string]any, name string) bool {
	s, _ := props[name].(Schema)
	if d := f.Tag.Get("doc"); d != "" && s != nil {
		s["description"] = d
	}
	tag := f.Tag.Get("openapi")
	if tag == "" {
		return false
	}
	req := false
	for _, kv := range strings.Split(tag, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "required":
			req = true
		case "minItems", "maxItems":
			n, err := strconv.Atoi(v)
			if err != nil || s == nil {
				panic(fmt.Sprintf("openapi: field %s: bad tag %q", f.Name, kv))
			}
			s[k] = n
		default:
			panic(fmt.Sprintf("openapi: field %s: unknown tag %q", f.Name, kv))
		}
	}
	return req
}
