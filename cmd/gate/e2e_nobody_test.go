package main

import "testing"

// TestE2ENoFieldRoutesDecodeBodiesStrictly: the /v1 routes that take no
// fields (schedule pause, resume and delete, the retention sweep, archive,
// email archive, redrive, task type and key delete, resource lease
// revoke) decode their body strictly as every /v1 route does: malformed
// JSON or an unknown field is a 400 bad_request and changes nothing; an
// empty body and {} are still accepted. On SQLite and PostgreSQL.
func TestE2ENoFieldRoutesDecodeBodiesStrictly(t *testing.T) {
	t.Parallel()
	badBodies := []string{"not json{", `{"x":1}`, "[]", "null"}
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "")
			g.putType(t, "spare", map[string]any{}, "")
			agent := g.newKey(t, "agent", "agent.a", "")
			doomed := g.newKey(t, "agent", "agent.doomed", "")
			r := call(t, "POST", g.URL+"/v1/schedules", agent, map[string]any{"name": "hourly", "interval_seconds": 3600,
				"template": map[string]any{"task_type": "job"}})
			want(t, r, 201, "")
			sched := g.URL + "/v1/schedules/" + r.JSON(t)["schedule_id"].(string)
			task := g.enqueue(t, agent, "job", nil)
			var keyID string
			var keys struct {
				Keys []struct {
					ID        string `json:"key_id"`
					Principal string `json:"principal"`
				} `json:"keys"`
			}
			call(t, "GET", g.URL+"/v1/admin/keys", g.Admin, nil).Into(t, &keys)
			for _, k := range keys.Keys {
				if k.Principal == "agent.doomed" {
					keyID = k.ID
				}
			}

			refused := func(method, url, key string) {
				t.Helper()
				for _, b := range badBodies {
					r := call(t, method, url, key, b)
					want(t, r, 400, "bad_request")
				}
			}
			paused := func() bool {
				t.Helper()
				r := call(t, "GET", sched, agent, nil)
				want(t, r, 200, "")
				return r.JSON(t)["paused"] == true
			}

			refused("POST", sched+"/pause", agent)
			if paused() {
				t.Fatal("a refused pause paused the schedule")
			}
			want(t, call(t, "POST", sched+"/pause", agent, nil), 200, "")
			refused("POST", sched+"/resume", agent)
			if !paused() {
				t.Fatal("a refused resume resumed the schedule")
			}
			want(t, call(t, "POST", sched+"/resume", agent, "{}"), 200, "")
			if paused() {
				t.Fatal("resume with {} left the schedule paused")
			}

			refused("POST", g.URL+"/v1/admin/retention/sweep", g.Admin)
			want(t, call(t, "POST", g.URL+"/v1/admin/retention/sweep", g.Admin, nil), 200, "")
			want(t, call(t, "POST", g.URL+"/v1/admin/retention/sweep", g.Admin, " {} "), 200, "")

			// Refused before the call is looked at (its outcome with a
			// good body is another error: the task is not finished, is no
			// dead letter, has no email, the lease is unknown).
			refused("POST", g.URL+"/v1/tasks/"+task+"/archive", agent)
			refused("POST", g.URL+"/v1/tasks/"+task+"/email/archive", agent)
			refused("POST", g.URL+"/v1/admin/dead-letters/"+task+"/redrive", g.Admin)
			refused("POST", g.URL+"/v1/admin/resource-leases/rlease-nosuch/revoke", g.Admin)

			refused("DELETE", g.URL+"/v1/admin/task-types/spare", g.Admin)
			want(t, call(t, "GET", g.URL+"/v1/admin/task-types/spare", g.Admin, nil), 200, "")
			want(t, call(t, "DELETE", g.URL+"/v1/admin/task-types/spare", g.Admin, nil), 200, "")

			refused("DELETE", g.URL+"/v1/admin/keys/"+keyID, g.Admin)
			want(t, call(t, "GET", g.URL+"/v1/tasks", doomed, nil), 200, "")
			want(t, call(t, "DELETE", g.URL+"/v1/admin/keys/"+keyID, g.Admin, nil), 200, "")

			refused("DELETE", sched, agent)
			want(t, call(t, "GET", sched, agent, nil), 200, "")
			want(t, call(t, "DELETE", sched, agent, nil), 200, "")
		})
	}
}
