package main

import (
	"strings"
	"testing"
)

// TestE2ELeaseRefusesNamesNoTypeCanHave: a lease call naming a task type
// no registered type can have ("" or a name outside the type names'
// pattern) is refused with bad_request on the HTTP and MCP doors, on
// SQLite and PostgreSQL, before it claims anything: the queued task is
// still there for a lease naming its type. (A lease naming "" used to
// wait for work that never comes, and told the enqueue budget the whole
// tenant had no backlog.)
func TestE2ELeaseRefusesNamesNoTypeCanHave(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "ta")
			agent, worker := g.newKey(t, "agent", "agent.a", "ta"), g.newKey(t, "worker", "job.a", "ta")
			id := g.enqueue(t, agent, "job", nil)
			for _, types := range [][]string{{""}, {"job", ""}, {"Job"}, {"job one"}, {strings.Repeat("j", 65)}} {
				r := call(t, "POST", g.URL+"/v1/leases", worker, map[string]any{"worker_id": "job.a", "task_types": types})
				want(t, r, 400, "bad_request")
			}
			// A refusal names the field the bad name came in.
			for field, body := range map[string]map[string]any{
				`task_types[1] "Job"`:      {"worker_id": "job.a", "task_types": []string{"job", "Job"}},
				`preferred_kinds[0] "Job"`: {"worker_id": "job.a", "task_types": []string{"job"}, "preferred_kinds": []string{"Job"}},
			} {
				r := call(t, "POST", g.URL+"/v1/leases", worker, body)
				want(t, r, 400, "bad_request")
				if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(d, field) {
					t.Fatalf("refusal %q does not name %s", d, field)
				}
			}
			c := stdioClient(t, "mcp", "--url", g.URL, "--key", worker)
			if out, isErr := callTool(t, c, "worker_lease_task", map[string]any{"task_types": []string{"job", ""}}); !isErr || out["error"] != "bad_request" {
				t.Fatalf("MCP lease naming \"\": %v (error %v), want bad_request", out, isErr)
			}
			if o := g.lease(t, worker, "job.a", map[string]any{"task_types": []string{"job"}}); len(o) != 1 || o[0].Task.ID != id {
				t.Fatalf("lease naming job after the refusals: %+v, want %s", o, id)
			}
		})
	}
}
