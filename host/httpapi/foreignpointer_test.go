package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestForeignPointerWhateverItsCaseOrSpace: a worker's result_pointer into
// a channel the gate manages is refused (422 foreign_pointer) whatever the
// case of its channel's name, and a pointer with leading or trailing
// whitespace or a control or format character is a 400 bad_request naming
// result_pointer, on a completion and on a batch's; the task stays leased.
func TestForeignPointerWhateverItsCaseOrSpace(t *testing.T) {
	b := setup(t)
	if code, m := b.do(t, "PUT", "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	code, ack := b.do(t, "POST", "/v1/tasks", b.agent, `{"task_type":"echo","params":{}}`)
	if code != 201 {
		t.Fatalf("enqueue = %d %v", code, ack)
	}
	taskID := ack["task_id"].(string)
	code, raw := b.raw(t, "POST", "/v1/leases", b.worker, `{"max_tasks":1}`)
	var lr struct {
		Leases []struct {
			LeaseID string `json:"lease_id"`
		} `json:"leases"`
	}
	if code != 200 || json.Unmarshal(raw, &lr) != nil || len(lr.Leases) != 1 {
		t.Fatalf("lease = %d %s", code, raw)
	}
	lease := lr.Leases[0].LeaseID
	sha := strings.Repeat("a", 64)
	cases := []struct{ pointer, channel, code string }{
		{"file:T-other/" + sha, "", "foreign_pointer"},
		{"FILE:T-other/" + sha, "", "foreign_pointer"},
		{"File:T-other/" + sha, "", "foreign_pointer"},
		{"s3://b/x", "FILE", "foreign_pointer"},
		{"HTTP:results/T-other", "", "foreign_pointer"},
		{" file:T-other/" + sha, "", "bad_request"},
		{"file:T-other/" + sha + " ", "", "bad_request"},
		{"\tFILE:T-other/" + sha, "", "bad_request"},
		{"file:T-other/" + sha + "\n", "", "bad_request"},
		{"s3://b/x\u0007y", "", "bad_request"},
		{"\u200bfile:T-other/" + sha, "", "bad_request"},
	}
	for _, c := range cases {
		body, _ := json.Marshal(map[string]any{"result_pointer": c.pointer, "result_channel": c.channel})
		code, m := b.do(t, "POST", "/v1/leases/"+lease+"/complete", b.worker, string(body))
		d, _ := m["detail"].(string)
		if m["error"] != c.code || (c.code == "bad_request" && (code != 400 || !strings.Contains(d, "result_pointer"))) ||
			(c.code == "foreign_pointer" && code != 422) {
			t.Errorf("complete with %q (channel %q) = %d %v, want %s", c.pointer, c.channel, code, m, c.code)
		}
		entry, _ := json.Marshal(map[string]any{"entries": []map[string]any{{"id": "e", "lease_id": lease,
			"complete": map[string]any{"result_pointer": c.pointer, "result_channel": c.channel}}}})
		code, raw := b.raw(t, "POST", "/v1/leases/batch", b.worker, string(entry))
		var out struct {
			Results []struct {
				OK    bool   `json:"ok"`
				Error string `json:"error"`
			} `json:"results"`
		}
		if code != 200 || json.Unmarshal(raw, &out) != nil || len(out.Results) != 1 || out.Results[0].OK || out.Results[0].Error != c.code {
			t.Errorf("batch complete with %q (channel %q) = %d %s, want %s", c.pointer, c.channel, code, raw, c.code)
		}
	}
	if code, m := b.do(t, "GET", "/v1/tasks/"+taskID, b.agent, ""); code != 200 || m["status"] != "leased" {
		t.Fatalf("the task after refused completions = %d %v", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/leases/"+lease+"/complete", b.worker, `{"result_pointer":"s3://b/x"}`); code != 200 {
		t.Fatalf("complete with the worker's own pointer = %d %v", code, m)
	}
}
