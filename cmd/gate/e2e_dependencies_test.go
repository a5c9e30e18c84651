package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestE2EDependencies (issue 39): through the real binary over HTTP, on
// SQLite and PostgreSQL, a fan-out of three parts and a merge queued after
// them. The merge waits (status waiting, counted in the stats, never
// offered) until the last part completes, is then offered once to a
// long-polling worker with the parts' result pointers, and ids the caller
// may not read (another agent's, another tenant's, made up) are refused
// with unknown_dependency, writing nothing.
func TestE2EDependencies(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			g := startGateOnStore(t, driver)
			g.putType(t, "deps.part", map[string]any{}, "")
			g.putType(t, "deps.merge", map[string]any{}, "")
			alice := g.newKey(t, "agent", "agent.alice", "")
			bob := g.newKey(t, "agent", "agent.bob", "")
			worker := g.newKey(t, "worker", "parts.1", "")

			var parts []string
			for i := range 3 {
				parts = append(parts, g.enqueue(t, alice, "deps.part", map[string]any{"i": i}))
			}
			r := call(t, "POST", g.URL+"/v1/tasks", alice, map[string]any{"task_type": "deps.merge", "after": parts, "after_rule": "all_succeeded"})
			want(t, r, 201, "")
			merge := r.JSON(t)["task_id"].(string)
			if st := r.JSON(t)["status"]; st != "waiting" {
				t.Fatalf("merge enqueued %v, want waiting", st)
			}
			// Its reader sees what it waits on, in after order; a task
			// queued without after shows none.
			got := call(t, "GET", g.URL+"/v1/tasks/"+merge, alice, nil)
			want(t, got, 200, "")
			if body := got.JSON(t); fmt.Sprint(body["after"]) != fmt.Sprint(parts) || body["after_rule"] != "all_succeeded" {
				t.Fatalf("GET of the waiting merge: after %v, after_rule %v; want %v, all_succeeded", body["after"], body["after_rule"], parts)
			}
			got = call(t, "GET", g.URL+"/v1/tasks/"+parts[0], alice, nil)
			if body := got.JSON(t); body["after"] != nil || body["after_rule"] != nil {
				t.Fatalf("a part shows after %v, after_rule %v", body["after"], body["after_rule"])
			}

			// Hostile: bob may not wait on alice's task; nobody may name
			// another tenant's or a made-up id. Each is the same refusal.
			r = call(t, "POST", g.URL+"/v1/tasks", bob, map[string]any{"task_type": "deps.merge", "after": []string{parts[0]}})
			want(t, r, 400, "unknown_dependency")
			if strings.Contains(string(r.Body), "alice") {
				t.Fatalf("refusal names the owner: %s", r.Body)
			}
			g.putType(t, "deps.part", map[string]any{}, "globex")
			other := g.newKey(t, "agent", "agent.alice", "globex")
			foreign := g.enqueue(t, other, "deps.part", map[string]any{})
			want(t, call(t, "POST", g.URL+"/v1/tasks", alice, map[string]any{"task_type": "deps.merge", "after": []string{foreign}}), 400, "unknown_dependency")
			want(t, call(t, "POST", g.URL+"/v1/tasks", alice, map[string]any{"task_type": "deps.merge", "after": []string{"T-nosuchtask"}}), 400, "unknown_dependency")
			want(t, call(t, "POST", g.URL+"/v1/tasks", alice, map[string]any{"task_type": "deps.merge", "after": parts, "after_rule": "some"}), 400, "bad_request")

			stats := call(t, "GET", g.URL+"/v1/admin/stats", g.Admin, nil)
			want(t, stats, 200, "")
			if byState := stats.JSON(t)["by_state"].(map[string]any); byState["waiting"] != float64(1) || byState["queued"] != float64(3) {
				t.Fatalf("stats by_state %v, want 1 waiting and 3 queued", byState)
			}
			if got := g.lease(t, worker, "parts.1", map[string]any{"task_types": []string{"deps.merge"}}); len(got) != 0 {
				t.Fatalf("the merge was offered before its parts ran: %v", got)
			}
			for i := range 3 {
				os := g.lease(t, worker, "parts.1", map[string]any{"task_types": []string{"deps.part"}})
				if len(os) != 1 {
					t.Fatalf("part %d: %d offers", i, len(os))
				}
				ptr := fmt.Sprintf("s3://bucket/part-%s.json", os[0].Task.ID)
				want(t, call(t, "POST", g.URL+"/v1/leases/"+os[0].LeaseID+"/complete", worker,
					map[string]any{"result_pointer": ptr, "summary": "part " + os[0].Task.ID}), 200, "")
				if i < 2 {
					if got := g.lease(t, worker, "parts.1", map[string]any{"task_types": []string{"deps.merge"}}); len(got) != 0 {
						t.Fatalf("the merge was offered after %d of 3 parts", i+1)
					}
				}
			}
			r = call(t, "POST", g.URL+"/v1/leases", worker, map[string]any{"worker_id": "parts.1", "task_types": []string{"deps.merge"}, "wait_seconds": 5})
			want(t, r, 200, "")
			var out struct {
				Leases []struct {
					Task struct {
						ID string `json:"task_id"`
					} `json:"task"`
					Dependencies []struct {
						TaskID string `json:"task_id"`
						Status string `json:"status"`
						Result struct {
							Pointer string `json:"result_pointer"`
							Summary string `json:"summary"`
						} `json:"result"`
					} `json:"dependencies"`
				} `json:"leases"`
			}
			if err := json.Unmarshal(r.Body, &out); err != nil || len(out.Leases) != 1 || out.Leases[0].Task.ID != merge {
				t.Fatalf("lease of the merge: %s (%v)", r.Body, err)
			}
			deps := out.Leases[0].Dependencies
			if len(deps) != 3 {
				t.Fatalf("the merge's offer carries %d dependencies: %s", len(deps), r.Body)
			}
			for i, d := range deps {
				if d.TaskID != parts[i] || d.Status != "succeeded" || d.Result.Pointer != "s3://bucket/part-"+parts[i]+".json" {
					t.Fatalf("dependency %d: %+v, want %s succeeded with its pointer", i, d, parts[i])
				}
			}
			if got := g.lease(t, worker, "parts.1", map[string]any{"task_types": []string{"deps.merge"}}); len(got) != 0 {
				t.Fatal("the merge was offered twice")
			}
			// The CLI: gate tasks create --after (its dependencies have all
			// succeeded, so it is queued at once), and a refusal.
			cliOut, errs, code := gateCLI(t, "tasks", "create", "deps.merge", "--url", g.URL, "--key", alice,
				"--after", strings.Join(parts, ","), "--after-rule", "all_finished")
			if code != 0 || !strings.HasSuffix(strings.TrimSpace(cliOut), " queued") {
				t.Fatalf("gate tasks create --after: exit %d, %q %q", code, cliOut, errs)
			}
			if _, errs, code := gateCLI(t, "tasks", "create", "deps.merge", "--url", g.URL, "--key", bob, "--after", parts[0]); code != 1 || !strings.Contains(errs, "unknown_dependency") {
				t.Fatalf("gate tasks create --after another agent's task: exit %d, %q", code, errs)
			}
			// Nothing is left waiting.
			r = call(t, "GET", g.URL+"/v1/tasks?status=waiting", alice, nil)
			want(t, r, 200, "")
			if n := len(r.JSON(t)["tasks"].([]any)); n != 0 {
				t.Fatalf("%d tasks still listed waiting", n)
			}
		})
	}
}
