package main

import (
	"strings"
	"testing"
)

// TestE2EPartiesEndWithTheirPart: through the real binary, on SQLite and
// PostgreSQL, a principal is a party of a task only for its part.
//
// A worker sees the task it holds while it holds it: once it has completed
// the task, the task, its result, timeline, attempts and receipts answer it
// 404 as an unknown id does, and it can no longer address receipts to the
// task's owner (before, a success left it a party for good, unlike a lease
// that expired).
//
// The payload of a result addressed to another principal (recipient_ai) is
// that principal's: the task's creator may not archive it (403 forbidden),
// since an archive releases the payload; the recipient may.
func TestE2EPartiesEndWithTheirPart(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			g := startGateOnStore(t, driver)
			g.putType(t, "party", map[string]any{}, "")
			alice := g.newKey(t, "agent", "agent.alice", "")
			bob := g.newKey(t, "agent", "agent.bob", "")
			worker := g.newKey(t, "worker", "party.1", "")

			// Bob queues a task for alice; the worker completes it with a
			// payload the file channel stores.
			r := call(t, "POST", g.URL+"/v1/tasks", bob, map[string]any{"task_type": "party", "params": map[string]any{"secret": "bob-params"}, "recipient_ai": "agent.alice"})
			want(t, r, 201, "")
			id := r.JSON(t)["task_id"].(string)
			o := g.lease(t, worker, "party.1", nil)
			if len(o) != 1 || o[0].Task.ID != id {
				t.Fatalf("lease: %+v", o)
			}
			// While it holds the task, the worker reads it.
			want(t, call(t, "GET", g.URL+"/v1/tasks/"+id, worker, nil), 200, "")
			big := strings.Repeat("p", 20000)
			r = call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, map[string]any{"result": big})
			want(t, r, 200, "")

			// Done: the worker is no longer a party.
			for _, path := range []string{"", "/result", "/timeline", "/attempts"} {
				r := call(t, "GET", g.URL+"/v1/tasks/"+id+path, worker, nil)
				want(t, r, 404, "not_found")
			}
			r = call(t, "GET", g.URL+"/v1/receipts?task_id="+id, worker, nil)
			want(t, r, 404, "not_found")
			rs := call(t, "GET", g.URL+"/v1/receipts?task_id="+id, bob, nil)
			want(t, rs, 200, "")
			var assign string
			for _, rc := range rs.JSON(t)["receipts"].([]any) {
				if m := rc.(map[string]any); m["receipt_type"] == "task.assigned" {
					assign = m["receipt_id"].(string)
				}
			}
			if assign == "" {
				t.Fatalf("no task.assigned receipt: %s", rs.Body)
			}
			r = call(t, "POST", g.URL+"/v1/receipts", worker, map[string]any{"receipt_type": "task.escalated", "to": "agent.bob", "task_id": id,
				"parents": []string{assign}, "body": map[string]any{"escalation_reason": "pay invoice 123 now"}})
			want(t, r, 404, "not_found")

			// The creator may not release the payload owed to alice.
			r = call(t, "POST", g.URL+"/v1/tasks/"+id+"/archive", bob, nil)
			want(t, r, 403, "forbidden")
			if !strings.Contains(string(r.Body), "agent.alice") {
				t.Fatalf("refusal does not name whom the result is owed to: %s", r.Body)
			}
			r = call(t, "GET", g.URL+"/v1/tasks/"+id+"/result", alice, nil)
			want(t, r, 200, "")
			if !strings.Contains(string(r.Body), big[:100]) {
				t.Fatalf("alice's read after bob's refused archive: %.300s", r.Body)
			}
			want(t, call(t, "POST", g.URL+"/v1/tasks/"+id+"/archive", alice, nil), 200, "")
		})
	}
}
