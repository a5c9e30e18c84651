package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// TestReceiptValidateBodies checks what Validate makes of a body: compacted
// when it holds whitespace, kept as given when it holds none, and refused
// with the same message either way when it is not a JSON object.
func TestReceiptValidateBodies(t *testing.T) {
	cases := []struct{ body, want, err string }{
		{``, `{}`, ""},
		{`{"a":1}`, `{"a":1}`, ""},
		{` { "a" : [1, 2] }` + "\n", `{"a":[1,2]}`, ""},
		{`{"s":"a b"}`, `{"s":"a b"}`, ""},
		{`{"a":`, "", `receipt body is not valid JSON: unexpected end of JSON input`},
		{`{"a": `, "", `receipt body is not valid JSON: unexpected end of JSON input`},
		{`{nope}`, "", `receipt body is not valid JSON: invalid character 'n' looking for beginning of object key string`},
		{`{ nope}`, "", `receipt body is not valid JSON: invalid character 'n' looking for beginning of object key string`},
		{`[1]`, "", `receipt body must be a JSON object`},
		{` [1]`, "", `receipt body must be a JSON object`},
		{`null`, "", `receipt body must be a JSON object`},
		{`"x"`, "", `receipt body must be a JSON object`},
		{`{"artifacts":1}`, "", `receipt body: json: cannot unmarshal number into Go struct field .artifacts of type []json.RawMessage`},
		{`{"artifacts": 1}`, "", `receipt body: json: cannot unmarshal number into Go struct field .artifacts of type []json.RawMessage`},
	}
	for _, c := range cases {
		r := &Receipt{Type: ReceiptProgress, From: "a", To: "b", Body: json.RawMessage(c.body)}
		err := r.Validate()
		var e *Error
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.body, err)
		case c.err == "" && !bytes.Equal(r.Body, []byte(c.want)):
			t.Errorf("%q became %s, want %s", c.body, r.Body, c.want)
		case c.err != "" && !errors.As(err, &e):
			t.Errorf("%q: got error %v, want %s", c.body, err, c.err)
		case c.err != "" && (e.Code != CodeInvalidReceipt || e.Detail != c.err):
			t.Errorf("%q: got %s %q, want %s %q", c.body, e.Code, e.Detail, CodeInvalidReceipt, c.err)
		}
	}
}
