package engine

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

func FuzzValidateParams(f *testing.F) {
	f.Add(`{"type":"object","properties":{"path":{"type":"string","maxLength":10}},"required":["path"]}`, `{"path":"a"}`)
	f.Add(`{"type":"object"}`, `[]`)
	f.Add(``, `{"x":1}`)
	f.Add(`{"$ref":"http://example.com/x"}`, `{}`)
	f.Add(`{"type":"integer"}`, `{"a":`)
	f.Fuzz(func(t *testing.T, schema, params string) {
		s, err := compileSchema(json.RawMessage(schema))
		if err != nil {
			if host.ErrorCode(err) != host.CodeBadRequest {
				t.Fatalf("schema error without bad_request: %v", err)
			}
			return
		}
		err = validateParams(s, json.RawMessage(params))
		if err != nil && host.ErrorCode(err) != host.CodeInvalidParams {
			t.Fatalf("params error without invalid_params: %v", err)
		}
		if err == nil {
			var m map[string]any
			if json.Unmarshal([]byte(params), &m) != nil {
				t.Fatalf("accepted params that are not a JSON object: %q", params)
			}
		}
	})
}

func TestRemoteSchemaRefsRefused(t *testing.T) {
	_, err := compileSchema(json.RawMessage(`{"$ref":"https://example.com/schema.json"}`))
	if host.ErrorCode(err) != host.CodeBadRequest {
		t.Fatalf("remote $ref: %v", err)
	}
}

// TestSchemaErrorsNameNoPathOfTheGate: a params schema that does not
// compile, or names a relative reference, is refused without the gate's
// working directory (or any file URL) in the detail.
func TestSchemaErrorsNameNoPathOfTheGate(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{
		`{"type":"object","properties":{"a":{"type":"nope"}}}`,
		`{"$ref":"other.json"}`,
		`{"$ref":"#/nowhere"}`,
		`{"type":"object","pattern":"("}`,
	} {
		_, err := compileSchema(json.RawMessage(schema))
		if err == nil {
			t.Errorf("%s compiled", schema)
			continue
		}
		if host.ErrorCode(err) != host.CodeBadRequest || strings.Contains(err.Error(), wd) || strings.Contains(err.Error(), "file:") {
			t.Errorf("%s: %v", schema, err)
		}
	}
}
