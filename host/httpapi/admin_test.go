package httpapi

import (
	"encoding/json"
	"testing"
)

// TestSameJSON: the read-only field check compares values, not spellings:
// key order, number spelling and a timestamp's zone do not matter; a value
// of another type, another instant or a missing stored value does.
func TestSameJSON(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{`{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1.0}`, true},
		{`"2026-12-01T15:00:00Z"`, `"2026-12-01T16:00:00+01:00"`, true},
		{`"2026-12-01T15:00:00.5Z"`, `"2026-12-01T15:00:00.500000Z"`, true},
		{`"2026-12-01T15:00:00Z"`, `"2026-12-01T15:00:01Z"`, false},
		{`"nope"`, `{"plugin":"builtin"}`, false},
		{`{"plugin":"escalate"}`, `{"plugin":"builtin"}`, false},
		{`"x"`, ``, false},
		{`{`, `{}`, false},
	} {
		if got := sameJSON(json.RawMessage(tc.a), json.RawMessage(tc.b)); got != tc.same {
			t.Errorf("sameJSON(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}
