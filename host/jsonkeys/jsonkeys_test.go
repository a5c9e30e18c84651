package jsonkeys_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/jsonkeys"
)

func TestCheckFoldedRefusesKeysEqualButForCase(t *testing.T) {
	many := func(then string) string {
		var sb strings.Builder
		for i := range 20 {
			sb.WriteString(`"k` + string(rune('a'+i)) + `":0,`)
		}
		return sb.String() + then
	}
	for _, c := range []struct{ body, want string }{
		{`{"params":{"arguments":{"task_type":"a","task_type":"b"}}}`, `duplicate key "task_type" in params.arguments`},
		{`{"params":{"arguments":{"task_type":"a","TASK_TYPE":"b"}}}`, `duplicate key "TASK_TYPE" in params.arguments: it differs from "task_type" only in case`},
		{`{"id":1,"ID":2}`, `duplicate key "ID" in the message: it differs from "id" only in case`},
		{`[{"a":1},{"b":{"x":1,"X":2}}]`, `duplicate key "X" in [1].b: it differs from "x" only in case`},
		{`{"a":{"k":1,"\u212a":2}}`, `duplicate key "` + "\u212a" + `" in a: it differs from "k" only in case`}, // Kelvin sign: folds to K, as encoding/json reads it
		{`{"a":{"s":1,"\u017f":2}}`, `duplicate key "` + "\u017f" + `" in a: it differs from "s" only in case`}, // long s
		{`{"a":{"N\u0061me":1,"name":2}}`, `duplicate key "name" in a: it differs from "Name" only in case`},    // an escape
		{`{"a":{` + many(`"KB":1`) + `}}`, `duplicate key "KB" in a: it differs from "kb" only in case`},
	} {
		err := jsonkeys.CheckFolded([]byte(c.body), "the message")
		var ke *jsonkeys.Error
		if !errors.As(err, &ke) || err.Error() != c.want {
			t.Errorf("%s: %v, want %s", c.body, err, c.want)
		}
	}
	for _, body := range []string{
		`{"a":{"name":1},"b":{"NAME":2}}`, // siblings
		`{"a":{"ab":1,"a":2,"abc":3,"\u00e9":4,"\u00c9x":5}}`,
		`{"a":{` + many(`"kz":1`) + `}}`,
		`[1,"x",null,{"k":[{"k":1}]}]`,
	} {
		if err := jsonkeys.CheckFolded([]byte(body), "the message"); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
	// Check (the HTTP door's) does not fold.
	if err := jsonkeys.Check([]byte(`{"params":{"Name":1,"name":2}}`), nil); err != nil {
		t.Errorf("Check folded: %v", err)
	}
}

// toolsCall is a typical MCP tools/call message.
const toolsCall = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"queue_task","arguments":{"task_type":"summarize","params":{"url":"https://example.com/report.pdf","max_words":300,"language":"en","tags":["q3","finance"]},"priority":7,"idempotency_key":"report-q3-2026","task_summary":"Summarize the Q3 report"},"_meta":{"progressToken":7}}}`

func BenchmarkCheckFoldedToolsCall(b *testing.B) {
	body := []byte(toolsCall)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := jsonkeys.CheckFolded(body, "the message"); err != nil {
			b.Fatal(err)
		}
	}
}
