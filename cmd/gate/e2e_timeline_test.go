package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2ETaskStory (issue 42 item 1): a task's attempts and timeline over
// HTTP and in gate tasks show, on SQLite and PostgreSQL. An offer given
// back, then a lease accepted with progress (the running attempt shows its
// lease's expiry and when its worker was last heard), then a failure with
// metadata that dead-letters the task: each lease is an attempt with its
// worker, times and error, and the timeline tells it in order. Another
// principal of the tenant, another tenant's agent and worker, and a caller
// without a key are refused as for the task itself.
func TestE2ETaskStory(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{"default_max_retries": 0, "lease_seconds": 600}, "ta")
			g.putType(t, "job", map[string]any{}, "tb")
			agent, worker := g.newKey(t, "agent", "agent.a", "ta"), g.newKey(t, "worker", "job.w1", "ta")
			worker2 := g.newKey(t, "worker", "job.w2", "ta")
			other := g.newKey(t, "agent", "agent.other", "ta")
			agentB, workerB := g.newKey(t, "agent", "agent.a", "tb"), g.newKey(t, "worker", "job.w1", "tb")
			id := g.enqueue(t, agent, "job", map[string]any{"n": 1})

			o := g.lease(t, worker, "job.w1", nil)
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/release", worker, map[string]any{"reason": "busy"}), 200, "")
			o = g.lease(t, worker2, "job.w2", nil)
			if len(o) != 1 || o[0].Task.ID != id {
				t.Fatalf("second lease: %+v", o)
			}
			lease := o[0].LeaseID
			want(t, call(t, "POST", g.URL+"/v1/leases/"+lease+"/accept", worker2, nil), 200, "")
			want(t, call(t, "POST", g.URL+"/v1/leases/"+lease+"/heartbeat", worker2, map[string]any{"progress_percent": 30, "progress_message": "a third"}), 200, "")

			var at struct {
				TaskID     string    `json:"task_id"`
				Status     string    `json:"status"`
				ServerTime time.Time `json:"server_time"`
				Attempts   []struct {
					Attempt        int        `json:"attempt"`
					Lease          int        `json:"lease"`
					LeaseID        string     `json:"lease_id"`
					WorkerID       string     `json:"worker_id"`
					AcceptedAt     *time.Time `json:"accepted_at"`
					LeaseExpiresAt *time.Time `json:"lease_expires_at"`
					LastHeardAt    *time.Time `json:"last_heard_at"`
					EndedAt        *time.Time `json:"ended_at"`
					Outcome        string     `json:"outcome"`
					Error          string     `json:"error_message"`
					Metadata       any        `json:"error_metadata"`
					DeadReason     string     `json:"dead_reason"`
				} `json:"attempts"`
			}
			r := call(t, "GET", g.URL+"/v1/tasks/"+id+"/attempts", agent, nil)
			want(t, r, 200, "")
			r.Into(t, &at)
			if at.TaskID != id || at.Status != "leased" || len(at.Attempts) != 2 {
				t.Fatalf("attempts of the leased task: %s", r.Body)
			}
			a0, a1 := at.Attempts[0], at.Attempts[1]
			if a0.WorkerID != "job.w1" || a0.Outcome != "released" || a0.AcceptedAt != nil || a0.EndedAt == nil || a0.Lease != 1 {
				t.Fatalf("the released offer: %s", r.Body)
			}
			if a1.WorkerID != "job.w2" || a1.Outcome != "running" || a1.AcceptedAt == nil || a1.LeaseID != lease || a1.Lease != 2 || a1.Attempt != 1 ||
				a1.LeaseExpiresAt == nil || a1.LeaseExpiresAt.Sub(at.ServerTime) < 590*time.Second || a1.LastHeardAt == nil || a1.LastHeardAt.After(at.ServerTime) {
				t.Fatalf("the running attempt: %s", r.Body)
			}
			keyFile := filepath.Join(t.TempDir(), "agent.key")
			if err := os.WriteFile(keyFile, []byte(agent+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			mustContain(t, "tasks show of the leased task", cliOK(t, g.URL, keyFile, "tasks", "show", id),
				"current attempt:", "1 (lease 2 of the task) by job.w2", "lease left:", "last heard:", "attempts (oldest first):", "released", "running",
				"timeline (oldest first):", "lease.granted", "lease.released", "task.accepted", "30% a third")

			want(t, call(t, "POST", g.URL+"/v1/leases/"+lease+"/fail", worker2, map[string]any{"error_message": "upstream said no",
				"retryable": true, "metadata": map[string]any{"http_status": 502}}), 200, "")
			r = call(t, "GET", g.URL+"/v1/tasks/"+id+"/attempts", agent, nil)
			want(t, r, 200, "")
			r.Into(t, &at)
			if len(at.Attempts) != 2 || at.Status != "dead_letter" {
				t.Fatalf("attempts of the dead letter: %s", r.Body)
			}
			if a := at.Attempts[1]; a.Outcome != "dead_letter" || a.Error != "upstream said no" || a.DeadReason != "max_retries_exceeded" || a.EndedAt == nil ||
				!strings.Contains(string(r.Body), `"error_metadata":{"http_status":502}`) {
				t.Fatalf("the failed attempt: %s", r.Body)
			}
			var tl struct {
				Events []struct {
					EventID int    `json:"event_id"`
					Type    string `json:"event_type"`
				} `json:"events"`
			}
			r = call(t, "GET", g.URL+"/v1/tasks/"+id+"/timeline", agent, nil)
			want(t, r, 200, "")
			r.Into(t, &tl)
			var types []string
			for i, ev := range tl.Events {
				if ev.EventID != i+1 {
					t.Fatalf("event ids: %s", r.Body)
				}
				types = append(types, ev.Type)
			}
			if got, wantTypes := strings.Join(types, " "), "task.assigned lease.granted lease.released lease.granted task.accepted progress task.failed task.escalated"; got != wantTypes {
				t.Fatalf("timeline:\n got %s\nwant %s", got, wantTypes)
			}
			mustContain(t, "tasks show of the dead letter", cliOK(t, g.URL, keyFile, "tasks", "show", id),
				"dead_letter", "upstream said no", `{"http_status":502}`, "dead letter: max_retries_exceeded", "task.failed")

			// Read as the task itself is: anyone else is told there is no such task.
			for _, path := range []string{"/attempts", "/timeline"} {
				for _, k := range []string{other, agentB, workerB, worker} {
					want(t, call(t, "GET", g.URL+"/v1/tasks/"+id+path, k, nil), 404, "not_found")
				}
				want(t, call(t, "GET", g.URL+"/v1/tasks/"+id+path, "", nil), 401, "unauthorized")
				want(t, call(t, "GET", g.URL+"/v1/tasks/T-01M8GME6G9P78S4Y21S82KRJ2A"+path, agent, nil), 404, "not_found")
				want(t, call(t, "GET", g.URL+"/v1/tasks/"+id+path, g.Admin, nil), 404, "not_found") // the admin of the default tenant
			}
		})
	}
}
