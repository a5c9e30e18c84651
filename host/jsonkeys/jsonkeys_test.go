package jsonkeys_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

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

// TestCheckRefusesNULAndLoneSurrogates: a \u0000 escape or a UTF-16
// surrogate that is not half of a pair, in a value or a key, at any depth,
// is refused with where it is; escaped backslashes, pairs and every other
// escape are not.
func TestCheckRefusesNULAndLoneSurrogates(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"task_type":"ec\u0000ho"}`, `a string holds a NUL character (\u0000), which no field accepts at task_type`},
		{`{"params":{"a":["x","\u0000"]}}`, `a string holds a NUL character (\u0000), which no field accepts at params.a[1]`},
		{`{"params":{"k\u0000":1}}`, `a string holds a NUL character (\u0000), which no field accepts at params`},
		{`{"params":{"a":"\ud800"}}`, `a string holds a lone UTF-16 surrogate (\ud800), which is not a character at params.a`},
		{`{"a":"x\uDBFFy"}`, `a string holds a lone UTF-16 surrogate (\uDBFF), which is not a character at a`},
		{`{"a":"\udc00"}`, `a string holds a lone UTF-16 surrogate (\udc00), which is not a character at a`},
		{`{"a":"\ud800\u0041"}`, `a string holds a lone UTF-16 surrogate (\ud800), which is not a character at a`},
		{`{"a":"\ud83d\ude00\ude00"}`, `a string holds a lone UTF-16 surrogate (\ude00), which is not a character at a`},
		{`{"a":"\ud800"`, `a string holds a lone UTF-16 surrogate (\ud800), which is not a character at a`},
	} {
		err := jsonkeys.Check([]byte(c.body), nil)
		var ke *jsonkeys.Error
		if !errors.As(err, &ke) || err.Error() != c.want {
			t.Errorf("%s: %v, want %s", c.body, err, c.want)
		}
	}
	for _, body := range []string{
		`{"a":"\\u0000"}`,      // an escaped backslash, then text
		`{"a":"\\\\u0000"}`,    // two of them
		`{"a":"\ud83d\ude00"}`, // a pair
		`{"a":"\uD83D\uDE00 \u00e9\u0001\n\"\/"}`,
		`{"a":"\u0100\uE000\uFFFF"}`,
		`{"a":"\\ud800"}`,
	} {
		if err := jsonkeys.Check([]byte(body), nil); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}
