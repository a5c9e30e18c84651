package main

import (
	"strings"
	"testing"
)

// TestE2EPolicyEscalateToIsValidated: a policy whose escalate_to is not a
// valid principal (here the real escalate plugin, configured with a
// supervisor holding a NUL and a newline) is a policy fault: the gate falls
// back to the built-in decision, escalates to the task's recipient and says
// why in a policy_fault receipt; the bad principal never becomes a receipt's
// "to".
func TestE2EPolicyEscalateToIsValidated(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	g.putType(t, "sneaky", map[string]any{
		"default_max_retries": 0,
		"policy":              map[string]any{"name": "escalate", "config": map[string]any{"supervisor": "agent.sup\u0000\nforged"}},
	}, "")
	agent := g.newKey(t, "agent", "agent.kee", "")
	worker := g.newKey(t, "worker", "sneaky.1", "")
	id := g.enqueue(t, agent, "sneaky", map[string]any{})
	o := g.lease(t, worker, "sneaky.1", nil)
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
		if strings.ContainsAny(r.To, "\x00\n") || strings.Contains(r.To, "forged") {
			t.Fatalf("the policy's bad escalate_to reached the ledger: %q in %s", r.To, rs.Body)
		}
		if r.Type != "task.escalated" {
			continue
		}
		switch r.Body["escalation_reason"] {
		case "policy_fault":
			d, _ := r.Body["detail"].(string)
			if !strings.Contains(d, "escalate_to") || !strings.Contains(d, "not a valid principal") || strings.ContainsAny(d, "\x00\n") {
				t.Fatalf("policy_fault detail does not name the bad escalate_to cleanly: %q", d)
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
	if v := call(t, "GET", g.URL+"/v1/admin/task-types/sneaky", g.Admin, nil); v.Status != 200 {
		t.Fatalf("task type: %s", v.Body)
	}
}
