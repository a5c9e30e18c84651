package main

import (
	"slices"
	"testing"
)

// TestE2EMCPQueueTasks: the MCP door's queue_tasks through the real binary
// (`gate mcp --url --key`, the stdio bridge, to `gate serve`), on SQLite and
// PostgreSQL: three entries, one refused for naming another tenant's task in
// after; the two queued are what a worker of the tenant then leases, and the
// other tenant's task is still its own worker's to lease.
func TestE2EMCPQueueTasks(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "ta")
			g.putType(t, "job", map[string]any{}, "tb")
			agentA, agentB := g.newKey(t, "agent", "agent.a", "ta"), g.newKey(t, "agent", "agent.b", "tb")
			workerA, workerB := g.newKey(t, "worker", "job.a", "ta"), g.newKey(t, "worker", "job.b", "tb")
			theirs := g.enqueue(t, agentB, "job", nil)

			c := stdioClient(t, "mcp", "--url", g.URL, "--key", agentA)
			out, isErr := callTool(t, c, "queue_tasks", map[string]any{"tasks": []any{
				map[string]any{"task_type": "job", "task_summary": "one"},
				map[string]any{"task_type": "job", "after": []string{theirs}},
				map[string]any{"task_type": "job", "task_summary": "three"},
			}})
			if isErr {
				t.Fatalf("queue_tasks: %v", out)
			}
			results, _ := out["results"].([]any)
			if len(results) != 3 || out["succeeded"] != float64(2) || out["failed"] != float64(1) {
				t.Fatalf("queue_tasks answer: %v", out)
			}
			var queued []string
			for i, r := range results {
				e := r.(map[string]any)
				if i == 1 {
					if e["ok"] != false || e["error"] != "unknown_dependency" {
						t.Fatalf("entry 1 names another tenant's task: %v", e)
					}
					continue
				}
				task, _ := e["task"].(map[string]any)
				if e["ok"] != true || task["task_id"] == nil {
					t.Fatalf("entry %d: %v", i, e)
				}
				queued = append(queued, task["task_id"].(string))
			}
			var leased []string
			for _, o := range g.lease(t, workerA, "job.a", map[string]any{"max_tasks": 10}) {
				leased = append(leased, o.Task.ID)
			}
			slices.Sort(queued)
			slices.Sort(leased)
			if !slices.Equal(queued, leased) {
				t.Fatalf("tenant ta's worker leased %v, want the queued %v", leased, queued)
			}
			if os := g.lease(t, workerB, "job.b", nil); len(os) != 1 || os[0].Task.ID != theirs {
				t.Fatalf("tenant tb's worker leased %+v, want its own %s", os, theirs)
			}
		})
	}
}
