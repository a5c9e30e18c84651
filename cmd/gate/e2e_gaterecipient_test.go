package main

import (
	"strings"
	"testing"
)

// TestE2ENoTaskIsAddressedToTheGate: recipient_ai naming the gate itself
// ("asyncgate", in any case) is refused with bad_request on every way a
// task is made — a single enqueue, a batch entry, a workflow step, a
// schedule's template, and MCP's queue_task — on SQLite and PostgreSQL.
// The gate's name is the issuer of its own receipts and no key may hold
// it: a task owed to it would be a promise to no one, and its receipts
// would read as if the gate had asked for the work. A task's recipient
// (another principal) may cancel it; an agent neither its creator nor its
// recipient gets not_found.
func TestE2ENoTaskIsAddressedToTheGate(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "ta")
			agent := g.newKey(t, "agent", "agent.a", "ta")
			names := []string{"asyncgate", "AsyncGate", " asyncgate "}
			for _, name := range names {
				r := call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "job", "recipient_ai": name})
				want(t, r, 400, "bad_request")
				if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(d, "recipient_ai") {
					t.Fatalf("refusal %q does not name recipient_ai", d)
				}
				b := batchCall(t, g.URL+"/v1/tasks/batch", agent, map[string]any{"tasks": []map[string]any{
					{"task_type": "job"}, {"task_type": "job", "recipient_ai": name}}})
				if len(b.Results) != 2 || !b.Results[0].OK || b.Results[1].OK || b.Results[1].Error != "bad_request" {
					t.Fatalf("batch with an entry addressed to %q: %+v", name, b)
				}
				r = call(t, "POST", g.URL+"/v1/workflows", agent, map[string]any{"name": "wf",
					"steps": []map[string]any{{"name": "only", "task_type": "job", "recipient_ai": name}}})
				want(t, r, 400, "bad_request")
				r = call(t, "POST", g.URL+"/v1/schedules", agent, map[string]any{"name": "s", "interval_seconds": 3600,
					"template": map[string]any{"task_type": "job", "recipient_ai": name}})
				want(t, r, 400, "bad_request")
			}
			c := stdioClient(t, "mcp", "--url", g.URL, "--key", agent)
			if out, isErr := callTool(t, c, "queue_task", map[string]any{"task_type": "job", "recipient_ai": "asyncgate"}); !isErr || out["error"] != "bad_request" {
				t.Fatalf("MCP queue_task addressed to the gate: %v (error %v), want bad_request", out, isErr)
			}
			// Another principal is still a recipient, and may cancel what is
			// owed to it (docs/http.md); an agent neither made nor owed it
			// hears of no such task.
			r := call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "job", "recipient_ai": "agent.b"})
			want(t, r, 201, "")
			id, _ := r.JSON(t)["task_id"].(string)
			stranger, recipient := g.newKey(t, "agent", "agent.c", "ta"), g.newKey(t, "agent", "agent.b", "ta")
			want(t, call(t, "POST", g.URL+"/v1/tasks/"+id+"/cancel", stranger, nil), 404, "not_found")
			r = call(t, "POST", g.URL+"/v1/tasks/"+id+"/cancel", recipient, map[string]any{"reason": "not needed"})
			want(t, r, 200, "")
			if st, _ := r.JSON(t)["status"].(string); st != "canceled" {
				t.Fatalf("the recipient's cancel: %v", r.JSON(t))
			}
		})
	}
}

// TestE2ENoTaskIsOwedToAWorker: recipient_ai naming a principal whose live
// keys in the tenant are all worker keys is refused with bad_request on a
// single enqueue, a batch entry, a schedule's template (created or changed)
// and MCP's queue_task, on SQLite and PostgreSQL. Such a task put a
// task.assigned obligation and inbox items on a principal that may read
// neither its tasks nor an inbox. A principal whose worker key is revoked
// and one with no key yet are still recipients.
func TestE2ENoTaskIsOwedToAWorker(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "ta")
			agent := g.newKey(t, "agent", "agent.a", "ta")
			g.newKey(t, "worker", "job.w1", "ta")
			refused := func(r resp) {
				t.Helper()
				want(t, r, 400, "bad_request")
				if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(d, "job.w1") || !strings.Contains(d, "worker") {
					t.Fatalf("refusal %q does not name the worker", d)
				}
			}
			refused(call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "job", "recipient_ai": "job.w1"}))
			b := batchCall(t, g.URL+"/v1/tasks/batch", agent, map[string]any{"tasks": []map[string]any{
				{"task_type": "job"}, {"task_type": "job", "recipient_ai": "job.w1"}}})
			if len(b.Results) != 2 || !b.Results[0].OK || b.Results[1].OK || b.Results[1].Error != "bad_request" {
				t.Fatalf("batch with an entry owed to a worker: %+v", b)
			}
			refused(call(t, "POST", g.URL+"/v1/schedules", agent, map[string]any{"name": "s", "interval_seconds": 3600,
				"template": map[string]any{"task_type": "job", "recipient_ai": "job.w1"}}))
			r := call(t, "POST", g.URL+"/v1/schedules", agent, map[string]any{"name": "s", "interval_seconds": 3600,
				"template": map[string]any{"task_type": "job"}})
			want(t, r, 201, "")
			sid, _ := r.JSON(t)["schedule_id"].(string)
			refused(call(t, "PATCH", g.URL+"/v1/schedules/"+sid, agent, map[string]any{
				"template": map[string]any{"task_type": "job", "recipient_ai": "job.w1"}}))
			c := stdioClient(t, "mcp", "--url", g.URL, "--key", agent)
			if out, isErr := callTool(t, c, "queue_task", map[string]any{"task_type": "job", "recipient_ai": "job.w1"}); !isErr || out["error"] != "bad_request" {
				t.Fatalf("MCP queue_task owed to a worker: %v (error %v), want bad_request", out, isErr)
			}
			// Nothing was written for the refused calls: the worker is owed nothing.
			var open struct {
				Open []any `json:"open_obligations"`
			}
			r = call(t, "GET", g.URL+"/v1/obligations/open?principal=job.w1", g.newKey(t, "admin", "ops.ta", "ta"), nil)
			want(t, r, 200, "")
			if r.Into(t, &open); len(open.Open) != 0 {
				t.Fatalf("obligations owed to the worker after refused calls: %+v", open.Open)
			}

			// Still recipients: a principal whose worker key is revoked, one
			// with no key yet, an agent.
			kid, _ := g.newKeyID(t, "worker", "job.w2", "ta")
			want(t, call(t, "DELETE", g.URL+"/v1/admin/keys/"+kid+"?tenant=ta", g.Admin, nil), 200, "")
			for _, p := range []string{"job.w2", "agent.later", "ops.ta"} {
				want(t, call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "job", "recipient_ai": p}), 201, "")
			}
		})
	}
}
