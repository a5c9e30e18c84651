package httpapi

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// enqueueBody is a typical POST /v1/tasks body.
const enqueueBody = `{"task_type": "model_consultation", "params": {"prompt": "Compare the three answers and name the best", ` +
	`"models": ["a", "b", "c"], "max_tokens": 2048, "temperature": 0.2, "options": {"stream": false, "seed": 42}}, ` +
	`"priority": 8, "idempotency_key": "consult-42", "task_summary": "Consult three models", "recipient_ai": "agent.b"}`

func BenchmarkDecodeEnqueueBody(b *testing.B) {
	body := []byte(enqueueBody)
	b.ReportAllocs()
	for b.Loop() {
		var req engine.EnqueueRequest
		if err := decodeBody(body, &req, strict); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDecodeRefusesDuplicateKeysAnywhereInTheBody(t *testing.T) {
	for _, tc := range []struct{ body, detail string }{
		{`{"task_type":"echo","params":{"prompt":1,"prompt":"x"}}`, `duplicate key "prompt" in params`},
		{`{"priority":7,"task_type":"echo","priority":3}`, `duplicate key "priority" in the body`},
		{`{"task_type":"echo","params":{"a":[{"b":1},{"c":{"d":1,"d":2}}]}}`, `duplicate key "d" in params.a[1].c`},
		{`{"task_type":"echo","params":{"a":1,"\u0061":2}}`, `duplicate key "a" in params`},
		{`{"task_type":"echo","params":{` + manyKeysThen(`"k7":0`) + `}}`, `duplicate key "k7" in params`},
	} {
		for _, mode := range []decodeMode{strict, lenient} {
			var req engine.EnqueueRequest
			err := decodeBody([]byte(tc.body), &req, mode)
			if !host.IsCode(err, host.CodeBadRequest) || !strings.Contains(err.Error(), tc.detail) {
				t.Errorf("mode %d: %s: got %v, want bad_request %q", mode, tc.body, err, tc.detail)
			}
		}
	}
	// The same key in sibling objects is not a duplicate.
	var req engine.EnqueueRequest
	if err := decodeBody([]byte(`{"task_type":"echo","params":{"a":{"k":1},"b":{"k":2},"c":[{"k":1},{"k":2}]}}`), &req, strict); err != nil {
		t.Fatal(err)
	}
}

// manyKeysThen is 40 distinct keys, then last.
func manyKeysThen(last string) string {
	var sb strings.Builder
	for i := range 40 {
		fmt.Fprintf(&sb, `"k%d":[1,{"x":"}"}],`, i)
	}
	return sb.String() + last
}

func TestStrictDecodeRefusesFieldNamesThatMatchOnlyByCase(t *testing.T) {
	for _, tc := range []struct {
		body   string
		target func() any
		detail string
	}{
		{`{"TASK_TYPE":"echo","Params":{}}`, func() any { return &engine.EnqueueRequest{} }, `did you mean "task_type"`},
		{`{"task_type":"echo","resource_intents":[{"RESOURCE":"r"}]}`, func() any { return &engine.EnqueueRequest{} }, `in resource_intents[0]`},
		{`{"result_pointer":"s3://x","artifacts":[{"URL":"s3://x"}]}`, func() any { return &CompleteBody{} }, `did you mean "url"`},
		{`{"task_type":"x","Lease_Seconds":5}`, func() any { t := host.NewTaskType("x"); return &t }, `did you mean "lease_seconds"`},
	} {
		err := decodeBody([]byte(tc.body), tc.target(), strict)
		if !host.IsCode(err, host.CodeBadRequest) || !strings.Contains(err.Error(), tc.detail) {
			t.Errorf("%s: got %v, want bad_request %q", tc.body, err, tc.detail)
		}
	}
	// Params are free-form: case is the task type's business, not the body's.
	var req engine.EnqueueRequest
	if err := decodeBody([]byte(`{"task_type":"echo","params":{"Prompt":1,"prompt":2}}`), &req, strict); err != nil {
		t.Fatal(err)
	}
	// The seed-compatible routes stay lenient.
	if err := decodeBody([]byte(`{"Task_ID":"T-1","run_id":"r"}`), &HeartbeatBody{}, lenient); err != nil {
		t.Fatal(err)
	}
}

func TestEnqueueRefusesDuplicateAndCaseFoldedKeys(t *testing.T) {
	b := setup(t)
	if code, m := b.do(t, "PUT", "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	for _, body := range []string{
		`{"task_type":"echo","params":{"prompt":1,"prompt":"x"}}`,
		`{"TASK_TYPE":"echo","Params":{"prompt":"x"}}`,
		`{"task_type":"echo","params":{},"priority":7,"PRIORITY":3}`,
	} {
		code, m := b.do(t, "POST", "/v1/tasks", b.agent, body)
		if code != 400 || m["error"] != "bad_request" || m["detail"] == "" {
			t.Errorf("%s: %d %v, want 400 bad_request", body, code, m)
		}
	}
}

func BenchmarkCheckKeysEnqueueBody(b *testing.B) {
	body := []byte(enqueueBody)
	typ := reflect.TypeFor[*engine.EnqueueRequest]()
	b.ReportAllocs()
	for b.Loop() {
		if err := checkKeys(body, typ); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeErrorsNameTheEntry: a type error or an unknown field in a
// batch names the entry it is in, index included, and the whole call is
// refused with 400 bad_request.
func TestDecodeErrorsNameTheEntry(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		path, key, body, detail string
	}{
		{"/v1/leases/batch", b.worker, `{"entries":[{"lease_id":5,"heartbeat":{}},{"lease_id":"L","heartbeat":{}}]}`, "field entries[0].lease_id must be a string, not a JSON number"},
		{"/v1/leases/batch", b.worker, `{"entries":[{"lease_id":"L","heartbeat":{}},{"lease_id":"L","heartbeat":{"progress_percent":"5"}}]}`, "field entries[1].heartbeat.progress_percent must be a number, not a JSON string"},
		{"/v1/leases/batch", b.worker, `{"entries":[{"lease_id":"L","heartbeat":{}},{"lease_id":"L","bogus":1,"heartbeat":{}}]}`, `unknown field "bogus" in entries[1]`},
		{"/v1/leases/batch", b.worker, `{"entries":[{"lease_id":"L","fail":{"error_message":"x","bogus":1}}]}`, `unknown field "bogus" in entries[0].fail`},
		{"/v1/leases/batch", b.worker, `{"entries":[{"lease_id":"L","heartbeat":{}}, 7]}`, "field entries[1] must be an object, not a JSON number"},
		{"/v1/tasks/batch", b.agent, `{"tasks":[{"task_type":"echo"},{"task_type":"echo"},{"task_type":"echo"},{"task_type":"echo","priority":"high"}]}`, "field tasks[3].priority must be an integer, not a JSON string"},
		{"/v1/tasks/batch", b.agent, `{"tasks":[{"task_type":"echo"},{"task_type":"echo","after":{"a":1}}]}`, "field tasks[1].after must be an array, not a JSON object"},
		{"/v1/tasks/batch", b.agent, `{"tasks":[{"task_type":"echo"},{"task_type":"echo","bogus":true}]}`, `unknown field "bogus" in tasks[1]`},
		{"/v1/tasks", b.agent, `{"task_type":"echo","priority":"high"}`, "field priority must be an integer, not a JSON string"},
		{"/v1/tasks", b.agent, `{"task_type":"echo","bogus":1}`, `unknown field "bogus" in the body`},
		{"/v1/tasks/batch", b.agent, `{"tasks":[{"task_type":"echo"},{"task_type":"echo"},{"task_type":"echo","not_before":"tomorrow"}]}`, `field tasks[2].not_before must be an RFC 3339 time such as "2026-12-01T09:30:00Z", not "tomorrow"`},
		{"/v1/tasks", b.agent, `{"task_type":"echo","not_before":5}`, `field not_before must be an RFC 3339 time such as "2026-12-01T09:30:00Z", not a JSON number`},
		{"/v1/tasks", b.agent, `{"task_type":"echo","not_before":"2026-12-01T09:30:00Z","bogus":1}`, `unknown field "bogus" in the body`},
		{"/v1/resource-leases", b.agent, `{"intents":[{"resource":"r","mode":"MUTATES"}],"priority_at":12345}`, `field priority_at must be an RFC 3339 time such as "2026-12-01T09:30:00Z", not a JSON number`},
		{"/v1/resource-leases", b.agent, `{"intents":[{"resource":"r","mode":"MUTATES"}],"priority_at":"2026-13-01T00:00:00Z"}`, `field priority_at must be an RFC 3339 time such as "2026-12-01T09:30:00Z", not "2026-13-01T00:00:00Z"`},
	} {
		code, m := b.do(t, "POST", tc.path, tc.key, tc.body)
		if code != 400 || m["error"] != "bad_request" || m["detail"] != tc.detail {
			t.Errorf("%s %s: %d %v, want 400 bad_request %q", tc.path, tc.body, code, m, tc.detail)
		}
	}
}
