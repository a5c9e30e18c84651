package jsonkeys_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/jsonkeys"
)

func TestCheckNamedRefusesDuplicateKeys(t *testing.T) {
	many := func(then string) string {
		var sb strings.Builder
		for i := range 20 {
			sb.WriteString(`"k` + string(rune('a'+i)) + `":0,`)
		}
		return sb.String() + then
	}
	for _, c := range []struct{ body, want string }{
		{`{"params":{"arguments":{"task_type":"a","task_type":"b"}}}`, `duplicate key "task_type" in params.arguments`},
		{`{"id":1,"id":2}`, `duplicate key "id" in the message`},
		{`[{"a":1},{"b":{"x":1,"x":2}}]`, `duplicate key "x" in [1].b`},
		{`{"a":{"N\u0061me":1,"Name":2}}`, `duplicate key "Name" in a`}, // an escape
		{`{"a":{` + many(`"kb":1`) + `}}`, `duplicate key "kb" in a`},
	} {
		err := jsonkeys.CheckNamed([]byte(c.body), nil, "the message")
		var ke *jsonkeys.Error
		if !errors.As(err, &ke) || err.Error() != c.want {
			t.Errorf("%s: %v, want %s", c.body, err, c.want)
		}
	}
	// Keys equal but for case are two keys of free-form data: a task's
	// params may hold both, as the HTTP door accepts them.
	for _, body := range []string{
		`{"params":{"Name":1,"name":2}}`,
		`{"a":{"name":1},"b":{"name":2}}`, // siblings
		`{"a":{"k":1,"\u212a":2}}`,
		`{"a":{` + many(`"KB":1`) + `}}`,
		`[1,"x",null,{"k":[{"k":1}]}]`,
	} {
		if err := jsonkeys.CheckNamed([]byte(body), nil, "the message"); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
	// With a type, a key of a struct must name a field exactly.
	type args struct {
		TaskType string `json:"task_type"`
		Params   any    `json:"params"`
	}
	err := jsonkeys.CheckNamed([]byte(`{"TASK_TYPE":"a","params":{"Name":1,"name":2}}`), reflect.TypeOf(args{}), "arguments")
	if err == nil || !strings.HasPrefix(err.Error(), `unknown field "TASK_TYPE" in arguments`) {
		t.Errorf("a case variant of a field: %v", err)
	}
}

// toolsCall is a typical MCP tools/call message.
const toolsCall = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"queue_task","arguments":{"task_type":"summarize","params":{"url":"https://example.com/report.pdf","max_words":300,"language":"en","tags":["q3","finance"]},"priority":7,"idempotency_key":"report-q3-2026","task_summary":"Summarize the Q3 report"},"_meta":{"progressToken":7}}}`

func BenchmarkCheckToolsCall(b *testing.B) {
	body := []byte(toolsCall)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := jsonkeys.CheckNamed(body, nil, "the message"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCheckRefusesNUL: a \u0000 escape, in a value or a key, at any
// depth, is refused with where it is; escaped backslashes, surrogates and
// every other escape are not.
func TestCheckRefusesNUL(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"task_type":"ec\u0000ho"}`, `a string holds a NUL character (\u0000), which no field accepts at task_type`},
		{`{"params":{"a":["x","\u0000"]}}`, `a string holds a NUL character (\u0000), which no field accepts at params.a[1]`},
		{`{"params":{"k\u0000":1}}`, `a string holds a NUL character (\u0000), which no field accepts at params`},
		{`{"a":"\ud800\u0000"}`, `a string holds a NUL character (\u0000), which no field accepts at a`},
	} {
		err := jsonkeys.Check([]byte(c.body), nil)
		var ke *jsonkeys.Error
		if !errors.As(err, &ke) || err.Error() != c.want {
			t.Errorf("%s: %v, want %s", c.body, err, c.want)
		}
	}
	for _, body := range []string{
		`{"a":"\\u0000"}`,   // an escaped backslash, then text
		`{"a":"\\\\u0000"}`, // two of them
		`{"a":"\ud83d\ude00"}`,
		`{"a":"\ud800"}`,
		`{"a":"\uD83D\uDE00 \u00e9\u0001\n\"\/"}`,
	} {
		if err := jsonkeys.Check([]byte(body), nil); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// TestFixLoneSurrogates: an escaped surrogate that is not half of a pair
// becomes \ufffd, in place of its digits; pairs, other escapes, escaped
// backslashes and text outside strings are left, and b itself comes back
// when nothing changes.
func TestFixLoneSurrogates(t *testing.T) {
	for _, c := range [][2]string{
		{`{"a":"\ud800"}`, `{"a":"\ufffd"}`},
		{`{"a":"x\uDBFFy","\udc00":1}`, `{"a":"x\ufffdy","\ufffd":1}`},
		{`{"a":"\ud800\u0041"}`, `{"a":"\ufffd\u0041"}`},
		{`{"a":"\ud83d\ude00\ude00"}`, `{"a":"\ud83d\ude00\ufffd"}`},
		{`{"a":"\ud800\ud800\udc00"}`, `{"a":"\ufffd\ud800\udc00"}`},
		{`{"a":"\ud800`, `{"a":"\ufffd`},
	} {
		in := []byte(c[0])
		if got := string(jsonkeys.FixLoneSurrogates(in)); got != c[1] {
			t.Errorf("%s became %s, want %s", c[0], got, c[1])
		}
		if string(in) != c[0] {
			t.Errorf("%s was changed in place", c[0])
		}
	}
	for _, body := range []string{
		`{"a":"\ud83d\ude00"}`,
		`{"a":"\\ud800"}`,
		`{"a":"\uE000\uFFFF\u0000"}`,
		`{"a":1,"ud800":"x"}`,
		`not json \ud800`,
	} {
		in := []byte(body)
		if got := jsonkeys.FixLoneSurrogates(in); &got[0] != &in[0] || string(got) != body {
			t.Errorf("%s became %s, want it left as it is", body, got)
		}
	}
}

func TestPathAt(t *testing.T) {
	b := []byte(` {"entries": [ {"lease_id":5,"m":{"a":"x"}} , {"lease_id":{"a":1}, "n":[1, [2,3]]} ], "k":"v"}`)
	for _, tc := range []struct {
		at   string // the first occurrence of at names the offset
		want string
	}{
		{`5`, "entries[0].lease_id"},
		{`"x"`, "entries[0].m.a"},
		{`{"a":1}`, "entries[1].lease_id"},
		{`1}`, "entries[1].lease_id.a"},
		{`[2`, "entries[1].n[1]"},
		{`3]`, "entries[1].n[1][1]"},
		{`, "n"`, "entries[1]"},
		{`"v"`, "k"},
		{`{"entries"`, "root"},
	} {
		off := bytes.Index(b, []byte(tc.at))
		if got := jsonkeys.PathAt(b, int64(off), "root"); got != tc.want {
			t.Errorf("PathAt(%q at %d) = %q, want %q", tc.at, off, got, tc.want)
		}
	}
	if got := jsonkeys.PathAt(b, int64(len(b)+5), "root"); got != "root" {
		t.Errorf("past the end: %q", got)
	}
}

// TestBadValueNamesTheTime: BadValue finds the value of a type that decodes
// itself that refuses its bytes, through pointers, slices and maps, and
// ignores what Check would refuse (it names a value, not keys).
func TestBadValueNamesTheTime(t *testing.T) {
	type entry struct {
		At *time.Time `json:"at"`
	}
	type body struct {
		Tasks []entry          `json:"tasks"`
		By    map[string]entry `json:"by"`
		When  time.Time        `json:"when"`
		Raw   json.RawMessage  `json:"raw"`
	}
	typ := reflect.TypeFor[*body]()
	for _, tc := range []struct{ in, path, raw string }{
		{`{"tasks":[{"at":null},{"at":"2026-12-01T00:00:00Z"},{"at":"tomorrow"}]}`, "tasks[2].at", `"tomorrow"`},
		{`{"by":{"x":{"at":5}}}`, "by.x.at", `5`},
		{`{"when":{"y":1}}`, "when", `{"y":1}`},
		{`{"bogus":1,"bogus":2,"when":"x"}`, "when", `"x"`},
		{`{"tasks":[{"at":"2026-12-01T00:00:00Z"}],"raw":[1,2]}`, "", ""},
	} {
		path, raw, err := jsonkeys.BadValue([]byte(tc.in), typ, "the body")
		if path != tc.path || string(raw) != tc.raw || (err == nil) != (tc.path == "") {
			t.Errorf("%s: %q %s %v, want %q %s", tc.in, path, raw, err, tc.path, tc.raw)
		}
	}
}
