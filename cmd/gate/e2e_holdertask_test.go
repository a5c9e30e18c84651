package main

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// TestE2EResourceHoldersNameOnlyYourTasks: a resource lease held for a
// task names the task to its holder, an admin and the agent that queued
// it. Another agent of the tenant sees who holds the resource (the holders
// list, a refused acquire's conflict, a verify of the lease's id, MCP's
// list_resource_holders and acquire) but not the task: everywhere else
// another principal's task answers like an unknown one, and a task id in a
// holders list told it that the task existed, which worker ran it and
// since when. On SQLite and PostgreSQL.
func TestE2EResourceHoldersNameOnlyYourTasks(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			const res = "FILE:/repo/secret-plan.md"
			want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/edit", g.Admin, map[string]any{"lease_seconds": 300,
				"resource_intents": []any{map[string]any{"resource": res, "predicate": "MUTATES"}}}), 200, "")
			a, b := g.newKey(t, "agent", "agent.a", ""), g.newKey(t, "agent", "agent.b", "")
			w := g.newKey(t, "worker", "edit.w1", "")
			r := call(t, "POST", g.URL+"/v1/tasks", a, map[string]any{"task_type": "edit", "params": map[string]any{}})
			want(t, r, 201, "")
			task, _ := r.JSON(t)["task_id"].(string)
			offers := g.lease(t, w, "edit.w1", map[string]any{"task_types": []string{"edit"}, "max_tasks": 1})
			if len(offers) != 1 || offers[0].Task.ID != task {
				t.Fatalf("offers: %+v", offers)
			}
			want(t, call(t, "GET", g.URL+"/v1/tasks/"+task, b, nil), 404, "not_found")

			holders := func(key string) []rlLease {
				t.Helper()
				r := call(t, "GET", g.URL+"/v1/resource-leases?resource="+url.QueryEscape(res), key, nil)
				want(t, r, 200, "")
				var out struct {
					Leases []rlLease `json:"leases"`
				}
				r.Into(t, &out)
				if len(out.Leases) != 1 || out.Leases[0].Holder != "edit.w1" {
					t.Fatalf("holders: %s", r.Body)
				}
				return out.Leases
			}
			if got := holders(b)[0].TaskID; got != "" {
				t.Fatalf("agent.b sees the task %q of agent.a in the holders list", got)
			}
			for _, key := range []string{w, g.Admin, a} {
				if got := holders(key)[0].TaskID; got != task {
					t.Fatalf("the holder, an admin or the task's creator sees task %q, want %s", got, task)
				}
			}
			r = call(t, "POST", g.URL+"/v1/resource-leases", b, map[string]any{"intents": []any{map[string]any{"resource": res, "predicate": "MUTATES"}}})
			want(t, r, 409, "resource_conflict")
			var refused struct {
				Conflict *rlLease `json:"conflict"`
			}
			r.Into(t, &refused)
			if refused.Conflict == nil || refused.Conflict.Holder != "edit.w1" || refused.Conflict.TaskID != "" {
				t.Fatalf("agent.b's refused acquire: %s", r.Body)
			}
			// The lease id the conflict named, verified by agent.b: the lease
			// still without the task.
			r = call(t, "POST", g.URL+"/v1/resource-leases/verify", b, map[string]any{"lease_ids": []string{refused.Conflict.ID}})
			want(t, r, 200, "")
			var verified struct {
				Leases []rlLease `json:"leases"`
			}
			r.Into(t, &verified)
			if len(verified.Leases) != 1 || verified.Leases[0].ID != refused.Conflict.ID || verified.Leases[0].TaskID != "" {
				t.Fatalf("agent.b's verify of the lease: %s", r.Body)
			}

			c := stdioClient(t, "mcp", "--url", g.URL, "--key", b)
			for _, tc := range []struct {
				tool string
				args map[string]any
			}{
				{"list_resource_holders", map[string]any{"resources": []string{res}}},
				{"acquire_resource_leases", map[string]any{"intents": []any{map[string]any{"resource": res, "predicate": "MUTATES"}}}},
			} {
				out, _ := callTool(t, c, tc.tool, tc.args)
				raw, _ := json.Marshal(out)
				if !strings.Contains(string(raw), `"edit.w1"`) {
					t.Fatalf("MCP %s: %s, want the holder named", tc.tool, raw)
				}
				if strings.Contains(string(raw), task) {
					t.Fatalf("MCP %s names agent.a's task to agent.b: %s", tc.tool, raw)
				}
			}
		})
	}
}
