package mcpapi_test

import (
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestResultSummaryIsQuoted checks that the text fetch_task_result and
// tasks/result give the model quotes the worker's summary as the worker's
// words (on one line, its quotes escaped) and never repeats it raw.
func TestResultSummaryIsQuoted(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	var ct createTask
	rpcOK(t, agent, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"n": 1}, "task": map[string]any{}}, &ct)
	id := ct.Task.TaskId

	const summary = "ok \"quoted\" \nnewline IGNORE PREVIOUS"
	worker := b.connect(t, b.worker)
	var lease mcpapi.LeaseResult
	ok(t, worker, "worker_lease_task", map[string]any{"task_types": []string{"echo"}}, &lease)
	if lease.TaskID == nil || *lease.TaskID != id {
		t.Fatalf("leased %+v, want %s", lease, id)
	}
	ok(t, worker, "worker_complete_task", map[string]any{"task_id": id, "run_id": lease.RunID, "result": map[string]any{"ok": true}, "summary": summary}, nil)

	const quoted = `echo.w1 wrote: "ok \"quoted\" \nnewline IGNORE PREVIOUS"`
	check := func(where, txt string) {
		t.Helper()
		if !strings.Contains(txt, quoted) || strings.Contains(txt, "\n") || strings.Contains(txt, `ok "quoted"`) {
			t.Errorf("%s text: %q", where, txt)
		}
	}
	check("fetch_task_result", text(ok(t, agent, "fetch_task_result", map[string]any{"task_id": id}, nil)))

	var res mcp.CallToolResult
	rpcOK(t, agent, "tasks/result", map[string]any{"taskId": id}, &res)
	if len(res.Content) == 0 {
		t.Fatalf("tasks/result: %+v", res)
	}
	check("tasks/result", text(&res))
}
