package main

import (
	"testing"
)

// TestE2EIdempotentRetryOutlivesRecipientChange: a retry of an accepted
// enqueue under its idempotency key is answered with its original task,
// though the recipient it names, a principal without keys when the task was
// accepted, has since been given a worker key, which a new enqueue is
// refused for (bad_request): by POST /v1/tasks
// (200, the same task_id), by each entry of POST /v1/tasks/batch and by MCP
// queue_task. The key reused for other params is still
// idempotency_conflict, and a new key still bad_request. So is a workflow
// submitted by POST /v1/workflows, after its steps' type was disabled.
func TestE2EIdempotentRetryOutlivesRecipientChange(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "ta")
			agent := g.newKey(t, "agent", "agent.a", "ta")
			task := func(key string, n int) map[string]any {
				return map[string]any{"task_type": "job", "recipient_ai": "job.w1", "idempotency_key": key, "params": map[string]any{"n": n}}
			}
			taskID := func(m map[string]any) string {
				t.Helper()
				id, _ := m["task_id"].(string)
				if id == "" {
					t.Fatalf("no task_id in %v", m)
				}
				return id
			}

			// Accepted while job.w1 has no key: it may be owed a task.
			r := call(t, "POST", g.URL+"/v1/tasks", agent, task("k-single", 1))
			want(t, r, 201, "")
			single := taskID(r.JSON(t))
			b := batchCall(t, g.URL+"/v1/tasks/batch", agent, map[string]any{"tasks": []map[string]any{task("k-batch", 2)}})
			if len(b.Results) != 1 || !b.Results[0].OK || b.Results[0].HTTPStatus != 201 {
				t.Fatalf("batch enqueue: %+v", b)
			}
			batched := taskID(b.Results[0].Task)
			c := stdioClient(t, "mcp", "--url", g.URL, "--key", agent)
			out, isErr := callTool(t, c, "queue_task", task("k-mcp", 3))
			if isErr {
				t.Fatalf("MCP queue_task: %v", out)
			}
			viaMCP := taskID(out)
			wfReq := map[string]any{"name": "wf", "idempotency_key": "k-wf", "steps": []map[string]any{
				{"name": "a", "task_type": "job"}, {"name": "b", "task_type": "job", "after": []string{"a"}}}}
			r = call(t, "POST", g.URL+"/v1/workflows", agent, wfReq)
			want(t, r, 201, "")
			wf := r.JSON(t)["workflow_id"].(string)

			// job.w1 is now a worker: a task may no longer be owed to it.
			g.newKey(t, "worker", "job.w1", "ta")
			want(t, call(t, "POST", g.URL+"/v1/tasks", agent, task("k-new", 1)), 400, "bad_request")

			// The retries get their tasks.
			r = call(t, "POST", g.URL+"/v1/tasks", agent, task("k-single", 1))
			want(t, r, 200, "")
			if m := r.JSON(t); taskID(m) != single || m["is_duplicate"] != true {
				t.Fatalf("retry of POST /v1/tasks: %s; want the duplicate %s", r.Body, single)
			}
			b = batchCall(t, g.URL+"/v1/tasks/batch", agent, map[string]any{"tasks": []map[string]any{
				task("k-batch", 2), task("k-single", 1), task("k-new", 1)}})
			if len(b.Results) != 3 {
				t.Fatalf("batch retry: %+v", b)
			}
			for i, id := range []string{batched, single} {
				e := b.Results[i]
				if !e.OK || e.HTTPStatus != 200 || taskID(e.Task) != id || e.Task["is_duplicate"] != true {
					t.Fatalf("batch retry entry %d: %+v; want the duplicate %s", i, e, id)
				}
			}
			if e := b.Results[2]; e.OK || e.Error != "bad_request" {
				t.Fatalf("batch entry with a new key: %+v; want bad_request", e)
			}
			out, isErr = callTool(t, c, "queue_task", task("k-mcp", 3))
			if isErr || taskID(out) != viaMCP || out["is_duplicate"] != true {
				t.Fatalf("retry of MCP queue_task: %v (error %v); want the duplicate %s", out, isErr, viaMCP)
			}

			// Other params under a used key are still refused as such.
			want(t, call(t, "POST", g.URL+"/v1/tasks", agent, task("k-single", 9)), 409, "idempotency_conflict")
			if out, isErr := callTool(t, c, "queue_task", task("k-mcp", 9)); !isErr || out["error"] != "idempotency_conflict" {
				t.Fatalf("MCP queue_task with other params under a used key: %v (error %v); want idempotency_conflict", out, isErr)
			}

			// The steps' type is disabled: a new workflow is refused, the
			// retry gets its workflow.
			want(t, call(t, "PATCH", g.URL+"/v1/admin/task-types/job?tenant=ta", g.Admin, map[string]any{"enabled": false}), 200, "")
			wfReq["idempotency_key"] = "k-wf2"
			want(t, call(t, "POST", g.URL+"/v1/workflows", agent, wfReq), 400, "task_type_disabled")
			wfReq["idempotency_key"] = "k-wf"
			r = call(t, "POST", g.URL+"/v1/workflows", agent, wfReq)
			want(t, r, 200, "")
			if m := r.JSON(t); m["workflow_id"] != wf || m["is_duplicate"] != true {
				t.Fatalf("retry of POST /v1/workflows: %s; want the duplicate %s", r.Body, wf)
			}
		})
	}
}
