package mcpapi

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// returns declares a tool's output schema from the Go type its handler
// returns as structured content, so a client can check the payload and an
// agent can see its fields before calling:
//
//	tool("get_x", "Get an x", desc, readOnly(), returns[XResult](), props(...))
//
// Every tool must have one (TestEveryToolHasAnOutputSchema). The schema
// follows encoding/json: json tags name the properties, a field without
// omitempty is required, embedded structs are flattened, pointers, slices and
// maps may be null, time.Time is a date-time string, json.RawMessage and
// interfaces are any JSON. Objects allow properties the type does not name,
// so a field added later never breaks a client that checks an older schema.
func returns[T any]() []mcp.ToolOption {
	return []mcp.ToolOption{mcp.WithRawOutputSchema(OutputSchema[T]())}
}

// OutputSchema returns the JSON Schema (an object schema) of T's JSON
// encoding, as returns declares it for a tool.
func OutputSchema[T any]() json.RawMessage {
	t := reflect.TypeFor[T]()
	if v, ok := schemaCache.Load(t); ok {
		return v.(json.RawMessage)
	}
	s := schemaOf(t, map[reflect.Type]bool{})
	if s["type"] != "object" {
		// An MCP output schema is an object schema; a pointer to a struct
		// is documented as the struct (the result is never null).
		if st, ok := s["type"].([]string); ok && len(st) == 2 && st[0] == "object" {
			s["type"] = "object"
		} else {
			s = map[string]any{"type": "object"}
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic("mcpapi: output schema of " + t.String() + ": " + err.Error())
	}
	schemaCache.Store(t, json.RawMessage(b))
	return b
}

var schemaCache sync.Map // reflect.Type -> json.RawMessage

var (
	timeType      = reflect.TypeFor[time.Time]()
	rawType       = reflect.TypeFor[json.RawMessage]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	textType      = reflect.TypeFor[encoding.TextMarshaler]()
)

// schemaOf is the schema of t's JSON encoding; seen breaks cycles.
func schemaOf(t reflect.Type, seen map[reflect.Type]bool) map[string]any {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		return map[string]any{}
	case t.Kind() == reflect.Pointer:
		return nullable(schemaOf(t.Elem(), seen))
	case t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType):
		return map[string]any{} // its own encoding: any JSON
	case t.Implements(textType) || reflect.PointerTo(t).Implements(textType):
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "contentEncoding": "base64"}
		}
		return map[string]any{"type": []string{"array", "null"}, "items": schemaOf(t.Elem(), seen)}
	case reflect.Array:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), seen)}
	case reflect.Map:
		return map[string]any{"type": []string{"object", "null"}, "additionalProperties": schemaOf(t.Elem(), seen)}
	case reflect.Struct:
		if seen[t] {
			return map[string]any{"type": "object"}
		}
		seen[t] = true
		defer delete(seen, t)
		props := map[string]any{}
		var req []string
		structFields(t, seen, props, &req, true)
		s := map[string]any{"type": "object", "properties": props}
		if len(req) > 0 {
			s["required"] = req
		}
		return s
	}
	return map[string]any{} // interfaces and anything else: any JSON
}

// structFields adds t's JSON fields to props (and the required ones to req,
// when the struct is always present), flattening embedded structs.
func structFields(t reflect.Type, seen map[reflect.Type]bool, props map[string]any, req *[]string, present bool) {
	// Direct fields first: a field of t hides one of the same name in an
	// embedded struct, as in encoding/json.
	var embedded []reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, f)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := props[name]; dup {
			continue // the shallower field wins
		}
		props[name] = schemaOf(f.Type, seen)
		if present && !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			*req = append(*req, name)
		}
	}
	for _, f := range embedded {
		et, ptr := f.Type, f.Type.Kind() == reflect.Pointer
		if ptr {
			et = et.Elem()
		}
		structFields(et, seen, props, req, present && !ptr)
	}
}

// nullable lets s also be null.
func nullable(s map[string]any) map[string]any {
	switch v := s["type"].(type) {
	case string:
		s["type"] = []string{v, "null"}
	case []string:
		if !contains(v, "null") {
			s["type"] = append(v, "null")
		}
	}
	return s
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
