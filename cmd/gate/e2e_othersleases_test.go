package main

import (
	"fmt"
	"maps"
	"strings"
	"testing"
)

// TestE2EReleaseAndSnoozeTellNothingOfOthersLeases: release and snooze of
// a lease the caller cannot hold — another worker's of its own tenant,
// live or ended (released, snoozed, succeeded), or another tenant's —
// answer exactly as a lease id that never existed does (404 not_found, the
// same words), with or without the lease's task_id, and change nothing.
// Only the lease's own worker gets the idempotent 200 for a lease that is
// gone. Accept, heartbeat, complete and fail of another worker's live lease
// answer as an unknown lease does too. Over HTTP and MCP, on SQLite and
// PostgreSQL.
func TestE2EReleaseAndSnoozeTellNothingOfOthersLeases(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g, agentA, workerA, workerA2, workerB := othersLeasesGate(t, sc)
			others := map[string]string{"another worker": workerA2, "another tenant's worker": workerB}
			g.enqueue(t, agentA, "job", nil)
			const unknownID = "lease-01M8GME6G9P78S4Y21S82KRJ2A"
			bodies := map[string]map[string]any{
				"release":   {"reason": "not mine"},
				"snooze":    {"snooze_seconds": 60},
				"accept":    {},
				"heartbeat": {},
				"complete":  {"result": "x"},
				"fail":      {"error_message": "x", "retryable": false},
			}
			// answer is a call's status, error code and words, with the
			// lease id it named written X.
			answer := func(key, verb, lease, taskID string) string {
				t.Helper()
				body := maps.Clone(bodies[verb])
				if taskID != "" {
					body["task_id"] = taskID
				}
				r := call(t, "POST", g.URL+"/v1/leases/"+lease+"/"+verb, key, body)
				if r.Status >= 500 {
					t.Fatalf("%s of %s: %d %s", verb, lease, r.Status, r.Body)
				}
				if r.Status < 400 {
					return fmt.Sprintf("%d", r.Status)
				}
				m := r.JSON(t)
				return fmt.Sprintf("%d %v %q", r.Status, m["error"], strings.ReplaceAll(fmt.Sprint(m["detail"]), lease, "X"))
			}
			// notMine checks that the verbs, by each other caller, on
			// lease (of task) answer as on an unknown lease id.
			notMine := func(what, lease, task string, verbs ...string) {
				t.Helper()
				for who, key := range others {
					for _, verb := range verbs {
						for _, taskID := range []string{"", task} {
							got, unknown := answer(key, verb, lease, taskID), answer(key, verb, unknownID, taskID)
							if got != unknown {
								t.Errorf("%s by %s (task_id %q) of %s answers %s; an unknown lease %s", verb, who, taskID, what, got, unknown)
							}
						}
					}
				}
			}
			status := func(task string) string {
				t.Helper()
				s, _ := call(t, "GET", g.URL+"/v1/tasks/"+task, agentA, nil).JSON(t)["status"].(string)
				return s
			}
			if u := answer(workerA2, "release", unknownID, ""); !strings.HasPrefix(u, "404 not_found") {
				t.Fatalf("release of an unknown lease: %s, want 404 not_found", u)
			}
			if u := answer(workerA2, "snooze", unknownID, ""); !strings.HasPrefix(u, "404 not_found") {
				t.Fatalf("snooze of an unknown lease: %s, want 404 not_found", u)
			}

			// A live lease: every verb of the others is refused as an
			// unknown lease is, and the lease stays with its holder.
			o := g.lease(t, workerA, "job.a", nil)
			if len(o) != 1 {
				t.Fatalf("lease: %+v", o)
			}
			live, task := o[0].LeaseID, o[0].Task.ID
			notMine("a live lease", live, task, "release", "snooze", "accept", "heartbeat", "complete", "fail")
			if s := status(task); s != "leased" {
				t.Fatalf("the others' calls left the task %s", s)
			}
			want(t, call(t, "POST", g.URL+"/v1/leases/"+live+"/heartbeat", workerA, map[string]any{}), 200, "")

			// Released by its worker: gone, for the others as if it never was.
			r := call(t, "POST", g.URL+"/v1/leases/"+live+"/release", workerA, map[string]any{"reason": "later"})
			want(t, r, 200, "")
			if m := r.JSON(t); m["status"] != "released" || m["task_id"] != task {
				t.Fatalf("release by its worker: %s", r.Body)
			}
			notMine("a released lease", live, task, "release", "snooze", "heartbeat")
			for _, verb := range []string{"release", "snooze"} {
				if got := answer(workerA, verb, live, task); got != "200" {
					t.Fatalf("%s of its own released lease: %s, want the idempotent 200", verb, got)
				}
			}
			if s := status(task); s != "queued" {
				t.Fatalf("after a release and the calls on the gone lease the task is %s, want queued", s)
			}

			// Snoozed by its worker.
			o = g.lease(t, workerA, "job.a", nil)
			if len(o) != 1 {
				t.Fatalf("lease after the release: %+v", o)
			}
			snoozed, task := o[0].LeaseID, o[0].Task.ID
			want(t, call(t, "POST", g.URL+"/v1/leases/"+snoozed+"/snooze", workerA, map[string]any{"snooze_seconds": 3600}), 200, "")
			notMine("a snoozed lease", snoozed, task, "release", "snooze")
			if got := answer(workerA, "snooze", snoozed, task); got != "200" {
				t.Fatalf("snooze of its own snoozed lease: %s, want the idempotent 200", got)
			}

			// Succeeded (the task keeps its holder).
			g.enqueue(t, agentA, "job", nil)
			o = g.lease(t, workerA, "job.a", nil)
			if len(o) != 1 {
				t.Fatalf("lease of a second task: %+v", o)
			}
			done, doneTask := o[0].LeaseID, o[0].Task.ID
			want(t, call(t, "POST", g.URL+"/v1/leases/"+done+"/complete", workerA, map[string]any{"result": "done"}), 200, "")
			notMine("a succeeded lease", done, doneTask, "release", "snooze")
			if got := answer(workerA, "release", done, doneTask); got != "200" {
				t.Fatalf("release of its own succeeded lease: %s, want the idempotent 200", got)
			}
			if s := status(doneTask); s != "succeeded" {
				t.Fatalf("a succeeded task is %s after the calls on its lease", s)
			}

			// The MCP door's snooze answers the same way.
			mcpSnooze := func(key, lease, task string) (string, bool) {
				t.Helper()
				c := stdioClient(t, "mcp", "--url", g.URL, "--key", key)
				out, isErr := callTool(t, c, "worker_snooze_task", map[string]any{"task_id": task, "run_id": lease, "snooze_seconds": 60})
				return fmt.Sprintf("%v %q", out["error"], strings.ReplaceAll(fmt.Sprint(out["detail"]), lease, "X")), isErr
			}
			got, isErr := mcpSnooze(workerA2, snoozed, task)
			unknown, _ := mcpSnooze(workerA2, unknownID, task)
			if !isErr || got != unknown {
				t.Errorf("MCP snooze of another worker's snoozed lease: %s (error %v); an unknown lease %s", got, isErr, unknown)
			}
			if got, isErr := mcpSnooze(workerA, snoozed, task); isErr {
				t.Errorf("MCP snooze of its own snoozed lease: %s, want the idempotent answer", got)
			}
		})
	}
}

// othersLeasesGate starts a gate on sc's store with the task type "job" in
// tenants ta and tb, and returns it with the keys the lease tests use: an
// agent and two workers (job.a, job.a2) of ta, and a worker (job.b) of tb.
func othersLeasesGate(t *testing.T, sc storeCase) (g *gateProc, agentA, workerA, workerA2, workerB string) {
	t.Helper()
	g = startGate(t, t.TempDir(), sc.args(t)...)
	g.putType(t, "job", map[string]any{}, "ta")
	g.putType(t, "job", map[string]any{}, "tb")
	agentA = g.newKey(t, "agent", "agent.a", "ta")
	workerA, workerA2 = g.newKey(t, "worker", "job.a", "ta"), g.newKey(t, "worker", "job.a2", "ta")
	workerB = g.newKey(t, "worker", "job.b", "tb")
	return g, agentA, workerA, workerA2, workerB
}
