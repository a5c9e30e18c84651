package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestE2ECancelNamesWhoAsked: the creator cancels, with a reason, a task a
// worker holds on its second lease (the first failed). The ledger records
// who asked and why when they ask — a task.cancel_requested receipt from
// the creator to the worker, which the worker may read — the heartbeat
// says cancel_requested, and the worker's fail ends the task canceled with
// a task.canceled that names the request among its parents and repeats who
// asked and why. The task then names them too (cancel_requested_by,
// cancel_reason), its error_message is the reason, not the first attempt's
// failure (which its attempts keep), and the timeline, the receipt's chain
// and gate tasks show tell the same. On SQLite and PostgreSQL, through the
// real binary.
func TestE2ECancelNamesWhoAsked(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{"default_max_retries": 3, "lease_seconds": 600,
				"policy": map[string]any{"name": "backoff", "config": map[string]any{"base_seconds": 0.05, "max_seconds": 0.1, "jitter": 0}}}, "")
			agent, worker := g.newKey(t, "agent", "agent.a", ""), g.newKey(t, "worker", "job.w1", "")
			id := g.enqueue(t, agent, "job", map[string]any{"n": 1})
			o := g.lease(t, worker, "job.w1", nil)
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/accept", worker, nil), 200, "")
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", worker, map[string]any{"error_message": "boom", "retryable": true}), 200, "")
			var lid string
			for deadline := time.Now().Add(10 * time.Second); lid == "" && time.Now().Before(deadline); {
				if o := g.lease(t, worker, "job.w1", nil); len(o) == 1 {
					lid = o[0].LeaseID
				} else {
					time.Sleep(50 * time.Millisecond)
				}
			}
			if lid == "" {
				t.Fatal("the retried task was not offered again")
			}
			want(t, call(t, "POST", g.URL+"/v1/leases/"+lid+"/accept", worker, nil), 200, "")

			const reason = "not needed any more"
			r := call(t, "POST", g.URL+"/v1/tasks/"+id+"/cancel", agent, map[string]any{"reason": reason})
			want(t, r, 200, "")
			if m := r.JSON(t); m["status"] != "leased" || m["cancel_requested"] != true {
				t.Fatalf("cancel of the leased task: %s", r.Body)
			}
			type receipt struct {
				ID      string   `json:"receipt_id"`
				Type    string   `json:"receipt_type"`
				From    string   `json:"from"`
				To      string   `json:"to"`
				LeaseID string   `json:"lease_id"`
				Parents []string `json:"parents"`
				Body    struct {
					Reason        string `json:"reason"`
					RequestedBy   string `json:"requested_by"`
					CanceledBy    string `json:"canceled_by"`
					CancelRequest string `json:"cancel_request"`
					Error         string `json:"error_message"`
				} `json:"body"`
			}
			receipts := func() []receipt {
				var rs struct {
					Receipts []receipt `json:"receipts"`
				}
				r := call(t, "GET", g.URL+"/v1/receipts?task_id="+id, agent, nil)
				want(t, r, 200, "")
				r.Into(t, &rs)
				return rs.Receipts
			}
			rs := receipts()
			req := rs[len(rs)-1]
			if req.Type != "task.cancel_requested" || req.From != "agent.a" || req.To != "job.w1" || req.LeaseID != lid ||
				req.Body.Reason != reason || req.Body.RequestedBy != "agent.a" {
				t.Fatalf("the cancel request in the ledger: %+v", req)
			}
			// The worker it is addressed to may read it.
			want(t, call(t, "GET", g.URL+"/v1/receipts/"+req.ID, worker, nil), 200, "")
			var tk map[string]any
			r = call(t, "GET", g.URL+"/v1/tasks/"+id, agent, nil)
			r.Into(t, &tk)
			if tk["cancel_requested_by"] != "agent.a" || tk["cancel_reason"] != reason {
				t.Fatalf("the flagged task does not name who asked: %s", r.Body)
			}

			r = call(t, "POST", g.URL+"/v1/leases/"+lid+"/heartbeat", worker, nil)
			want(t, r, 200, "")
			if r.JSON(t)["cancel_requested"] != true {
				t.Fatalf("heartbeat after the cancel: %s", r.Body)
			}
			r = call(t, "POST", g.URL+"/v1/leases/"+lid+"/fail", worker, map[string]any{"error_message": "stopped as asked"})
			want(t, r, 200, "")
			if m := r.JSON(t); m["status"] != "canceled" {
				t.Fatalf("the worker's stop: %s", r.Body)
			}

			r = call(t, "GET", g.URL+"/v1/tasks/"+id, agent, nil)
			tk = nil
			r.Into(t, &tk)
			if tk["status"] != "canceled" || tk["error_message"] != reason || tk["cancel_requested_by"] != "agent.a" || tk["cancel_reason"] != reason {
				t.Fatalf("the canceled task: %s", r.Body)
			}
			rs = receipts()
			end := rs[len(rs)-1]
			if end.Type != "task.canceled" || end.From != "job.w1" || !slices.Contains(end.Parents, req.ID) || end.Body.CanceledBy != "agent.a" ||
				end.Body.Reason != reason || end.Body.CancelRequest != req.ID || end.Body.Error != "stopped as asked" {
				t.Fatalf("the task.canceled: %+v", end)
			}
			var chain struct {
				Chain []receipt `json:"chain"`
			}
			r = call(t, "GET", g.URL+"/v1/receipts/"+end.ID+"/chain", agent, nil)
			want(t, r, 200, "")
			r.Into(t, &chain)
			if !slices.ContainsFunc(chain.Chain, func(c receipt) bool { return c.ID == req.ID }) {
				t.Fatalf("the chain of the task.canceled leaves out the request: %s", r.Body)
			}

			var at struct {
				Attempts []struct {
					Outcome string `json:"outcome"`
					Error   string `json:"error_message"`
				} `json:"attempts"`
			}
			r = call(t, "GET", g.URL+"/v1/tasks/"+id+"/attempts", agent, nil)
			r.Into(t, &at)
			if len(at.Attempts) != 2 || at.Attempts[0].Error != "boom" || at.Attempts[1].Outcome != "canceled" || at.Attempts[1].Error != "stopped as asked" {
				t.Fatalf("attempts: %s", r.Body)
			}
			var tl struct {
				Events []struct {
					Type    string          `json:"event_type"`
					From    string          `json:"from"`
					To      string          `json:"to"`
					Lease   int             `json:"lease"`
					Details json.RawMessage `json:"details"`
				} `json:"events"`
			}
			r = call(t, "GET", g.URL+"/v1/tasks/"+id+"/timeline", agent, nil)
			r.Into(t, &tl)
			var types []string
			for _, ev := range tl.Events {
				types = append(types, ev.Type)
				if ev.Type == "task.cancel_requested" && (ev.From != "agent.a" || ev.To != "job.w1" || ev.Lease != 2) {
					t.Fatalf("the timeline's cancel request: %s", r.Body)
				}
			}
			if i := slices.Index(types, "task.cancel_requested"); i < 0 || types[len(types)-1] != "task.canceled" || i > len(types)-2 {
				t.Fatalf("timeline events %v", types)
			}

			keyFile := filepath.Join(t.TempDir(), "agent.key")
			if err := os.WriteFile(keyFile, []byte(agent+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			mustContain(t, "tasks show of the canceled task", cliOK(t, g.URL, keyFile, "tasks", "show", id),
				"cancel asked by:", "agent.a", "cancel reason:", reason, "task.cancel_requested", "canceled by agent.a")
		})
	}
}
