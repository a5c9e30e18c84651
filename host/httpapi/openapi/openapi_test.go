package openapi

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

type state string

type inner struct {
	A string `json:"a"`
	B int    `json:"b,omitempty"`
}

type outer struct {
	*inner
	When    time.Time       `json:"when"`
	Maybe   *time.Time      `json:"maybe,omitempty"`
	Raw     json.RawMessage `json:"raw"`
	List    []inner         `json:"list"`
	Tags    map[string]int  `json:"tags,omitempty"`
	State   state           `json:"state"`
	Hidden  string          `json:"-"`
	private string          //lint:ignore U1000 an unexported field, to check it stays out
}

// TestSchemaOfFollowsEncodingJSON checks the derived schemas against how
// encoding/json writes and reads the type: embedded fields flattened,
// omitempty fields optional, pointers and slices nullable in answers, raw
// JSON any value, enums, and strict request bodies closed.
func TestSchemaOfFollowsEncodingJSON(t *testing.T) {
	Enum[state]("on", "off")
	g := newGen()
	ref := g.schemaOf(reflect.TypeOf(outer{}), false, false).(Schema)
	if ref["$ref"] != "#/components/schemas/outer" {
		t.Fatalf("answer schema %v", ref)
	}
	s := g.schemas["outer"].(Schema)
	props := s["properties"].(map[string]any)
	for _, f := range []string{"a", "b", "when", "maybe", "raw", "list", "tags", "state"} {
		if props[f] == nil {
			t.Errorf("field %s missing: %v", f, props)
		}
	}
	if props["Hidden"] != nil || props["private"] != nil || props["-"] != nil {
		t.Errorf("hidden fields shown: %v", props)
	}
	if !reflect.DeepEqual(s["required"], []string{"a", "list", "raw", "state", "when"}) {
		t.Errorf("required %v", s["required"])
	}
	if !reflect.DeepEqual(props["when"], Schema{"type": "string", "format": "date-time"}) {
		t.Errorf("when %v", props["when"])
	}
	if !reflect.DeepEqual(props["maybe"], Schema{"type": []string{"string", "null"}, "format": "date-time"}) {
		t.Errorf("maybe %v", props["maybe"])
	}
	if !reflect.DeepEqual(props["raw"], Schema{}) {
		t.Errorf("raw %v", props["raw"])
	}
	if !reflect.DeepEqual(props["state"], Schema{"type": "string", "enum": []string{"on", "off"}}) {
		t.Errorf("state %v", props["state"])
	}
	if l := props["list"].(Schema); !reflect.DeepEqual(l["type"], []string{"array", "null"}) || l["items"].(Schema)["$ref"] != "#/components/schemas/inner" {
		t.Errorf("list %v", l)
	}
	if s["additionalProperties"] != nil {
		t.Errorf("an answer's schema is closed: %v", s)
	}

	req := g.schemaOf(reflect.TypeOf(outer{}), true, true).(Schema)
	if req["additionalProperties"] != false || req["required"] != nil || req["$ref"] != nil {
		t.Errorf("strict request schema %v", req)
	}
	if lenient := g.schemaOf(reflect.TypeOf(outer{}), true, false).(Schema); lenient["additionalProperties"] != nil {
		t.Errorf("lenient request schema %v", lenient)
	}
}

func TestOpenAPIPathAndOperationID(t *testing.T) {
	if p := OpenAPIPath("/v1/leases/:lease_id/accept"); p != "/v1/leases/{lease_id}/accept" {
		t.Errorf("path %s", p)
	}
	if id := operationID("POST", "/v1/receipts/check-terminator"); id != "postV1ReceiptsCheckTerminator" {
		t.Errorf("operation id %s", id)
	}
	if !IsExcluded("/ui/tasks") || !IsExcluded("/mcp") || IsExcluded("/uix") {
		t.Errorf("exclusions")
	}
}

type ending struct {
	State state `json:"state"`
	Ended state `json:"ended,omitempty"`
}

type endingView struct {
	*ending
	Extra string `json:"extra"`
}

// TestFieldEnumNarrowsOneField: a field declared with FieldEnum lists its own
// values, in the declaring struct and in one embedding it, while another
// field of the same type keeps the type's; a field that is not there panics.
func TestFieldEnumNarrowsOneField(t *testing.T) {
	Enum[state]("on", "off", "gone")
	FieldEnum(ending{}, "ended", state("on"), state("off"))
	g := newGen()
	g.schemaOf(reflect.TypeOf(ending{}), false, false)
	g.schemaOf(reflect.TypeOf(endingView{}), false, false)
	for _, name := range []string{"ending", "endingView"} {
		props := g.schemas[name].(Schema)["properties"].(map[string]any)
		if !reflect.DeepEqual(props["ended"], Schema{"type": "string", "enum": []string{"on", "off"}}) {
			t.Errorf("%s.ended %v, want the field's values", name, props["ended"])
		}
		if !reflect.DeepEqual(props["state"], Schema{"type": "string", "enum": []string{"on", "off", "gone"}}) {
			t.Errorf("%s.state %v, want the type's values", name, props["state"])
		}
	}
	for _, field := range []string{"nope", "Ended"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("FieldEnum of a field %q ending lacks did not panic", field)
				}
			}()
			FieldEnum(&ending{}, field, state("on"))
		}()
	}
}

// TestLookupAndListParams: Lookup finds an operation by method and either
// path syntax, again after a later Add; a List parameter is documented as
// a repeated (form, exploded) array of its type, the others as one value.
func TestLookupAndListParams(t *testing.T) {
	Add(Op{Method: "GET", Path: "/zz-lookup/:id", Query: []Param{{Name: "status", List: true}, {Name: "limit", Type: "integer"}}})
	for _, p := range []string{"/zz-lookup/:id", "/zz-lookup/{id}"} {
		if o, ok := Lookup("get", p); !ok || len(o.Query) != 2 || !o.Query[0].List {
			t.Errorf("Lookup(get, %s) = %+v, %v", p, o, ok)
		}
	}
	if _, ok := Lookup("POST", "/zz-lookup/:id"); ok {
		t.Error("Lookup found POST of a GET-only path")
	}
	Add(Op{Method: "POST", Path: "/zz-lookup/:id"})
	if _, ok := Lookup("POST", "/zz-lookup/{id}"); !ok {
		t.Error("Lookup missed an operation added after the first lookup")
	}
	g := newGen()
	op, err := g.operation(Op{Method: "GET", Path: "/zz", Query: []Param{{Name: "status", List: true}, {Name: "limit", Type: "integer"}}}, "/zz")
	if err != nil {
		t.Fatal(err)
	}
	ps := op["parameters"].([]any)
	list, one := ps[0].(map[string]any), ps[1].(map[string]any)
	if !reflect.DeepEqual(list["schema"], Schema{"type": "array", "items": Schema{"type": "string"}}) || list["explode"] != true || list["style"] != "form" {
		t.Errorf("list parameter %v", list)
	}
	if !reflect.DeepEqual(one["schema"], Schema{"type": "integer", "minimum": 0}) || one["explode"] != nil {
		t.Errorf("single parameter %v", one)
	}
}
