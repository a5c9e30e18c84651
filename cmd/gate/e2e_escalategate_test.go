package main

import (
	"strings"
	"testing"
)

// TestE2EEscalationToTheGateIsRefused: the gate's own principal
// ("asyncgate", any case) is no one to escalate to. PUT refuses an escalate
// policy whose supervisor (for all types or for one) names it, 400
// invalid_task_type like a malformed supervisor; and a policy that still
// returns escalate_to "asyncgate" (here the real escalate plugin, with the
// supervisor written into the store by hand, as a type stored before PUT
// refused it would be) is a policy fault: the built-in policy decides, the
// task escalates to its recipient, a policy_fault receipt names the cause,
// and no receipt goes to the gate. Both stores.
func TestE2EEscalationToTheGateIsRefused(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			extra := sc.args(t)
			g := startGate(t, t.TempDir(), extra...)
			for _, cfg := range []map[string]any{
				{"supervisor": "asyncgate"},
				{"supervisor": "AsyncGate"},
				{"task_types": map[string]any{"esc": "ASYNCGATE"}},
			} {
				r := call(t, "PUT", g.URL+"/v1/admin/task-types/esc", g.Admin, map[string]any{
					"policy": map[string]any{"name": "escalate", "config": cfg},
				})
				want(t, r, 400, "invalid_task_type")
				if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(strings.ToLower(d), "asyncgate") {
					t.Fatalf("%v: the detail does not say why: %s", cfg, r.Body)
				}
			}
			g.putType(t, "esc", map[string]any{
				"default_max_retries": 0,
				"policy":              map[string]any{"name": "escalate", "config": map[string]any{"supervisor": "agent.sup"}},
			}, "")
			sc.exec(t, g.dir, extra, `UPDATE task_types SET body = replace(body, '"agent.sup"', '"asyncgate"') WHERE name = 'esc'`)
			if b := call(t, "GET", g.URL+"/v1/admin/task-types/esc", g.Admin, nil).Body; !strings.Contains(string(b), `"asyncgate"`) {
				t.Fatalf("the stored supervisor was not rewritten: %s", b)
			}
			agent := g.newKey(t, "agent", "agent.kee", "")
			worker := g.newKey(t, "worker", "esc.1", "")
			id := g.enqueue(t, agent, "esc", map[string]any{})
			o := g.lease(t, worker, "esc.1", nil)
			if len(o) != 1 || o[0].Task.ID != id {
				t.Fatalf("lease: %+v", o)
			}
			fr := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", worker, map[string]any{"error_message": "boom", "retryable": true})
			want(t, fr, 200, "")
			if st := fr.JSON(t)["status"]; st != "dead_letter" {
				t.Fatalf("fail: %s", fr.Body)
			}
			rs := call(t, "GET", g.URL+"/v1/receipts?task_id="+id, g.Admin, nil)
			want(t, rs, 200, "")
			var out struct {
				Receipts []struct {
					Type string         `json:"receipt_type"`
					To   string         `json:"to"`
					Body map[string]any `json:"body"`
				} `json:"receipts"`
			}
			rs.Into(t, &out)
			var fault, escalated bool
			for _, r := range out.Receipts {
				if strings.EqualFold(r.To, "asyncgate") {
					t.Fatalf("a receipt went to the gate itself: %s", rs.Body)
				}
				if r.Type != "task.escalated" {
					continue
				}
				switch r.Body["escalation_reason"] {
				case "policy_fault":
					d, _ := r.Body["detail"].(string)
					if !strings.Contains(d, "escalate_to") || !strings.Contains(d, "asyncgate") {
						t.Fatalf("policy_fault detail does not name the cause: %q", d)
					}
					fault = true
				case "max_retries_exceeded":
					if r.To != "agent.kee" {
						t.Fatalf("fallback escalation went to %q, want the recipient agent.kee", r.To)
					}
					escalated = true
				}
			}
			if !fault || !escalated {
				t.Fatalf("want a policy_fault receipt and the built-in escalation to the recipient: %s", rs.Body)
			}
		})
	}
}
