package main

import (
	"strings"
	"testing"
)

// TestE2EWorkflowStepCanceledBySubmitter: through the real binary over
// HTTP, on SQLite and PostgreSQL, the submitter cancels a step that the
// final step needs (POST /v1/tasks/{id}/cancel). The gate cancels the final
// step, whose rule can no longer be met, and the workflow ends canceled by
// the submitter (its receipts end with workflow.canceled naming the step
// and who canceled it), not failed by the gate, and makes no inbox item.
func TestE2EWorkflowStepCanceledBySubmitter(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			g := startGateOnStore(t, driver)
			g.putType(t, "k", map[string]any{}, "")
			agent := g.newKey(t, "agent", "agent.alice", "")
			r := call(t, "POST", g.URL+"/v1/workflows", agent, map[string]any{"name": "k", "steps": []map[string]any{
				{"name": "a", "task_type": "k"}, {"name": "b", "task_type": "k", "after": []string{"a"}}}})
			want(t, r, 201, "")
			sub := r.JSON(t)
			id := sub["workflow_id"].(string)
			a := sub["steps"].(map[string]any)["a"].(string)
			want(t, call(t, "POST", g.URL+"/v1/tasks/"+a+"/cancel", agent, map[string]any{}), 200, "")

			r = call(t, "GET", g.URL+"/v1/workflows/"+id, agent, nil)
			want(t, r, 200, "")
			wf := r.JSON(t)
			msg, _ := wf["error_message"].(string)
			if wf["status"] != "canceled" || !strings.Contains(msg, "step a was canceled by agent.alice") || strings.Contains(msg, "T-") {
				t.Fatalf("workflow after its step a was canceled: status %v, error %q; want canceled, naming step a and who", wf["status"], msg)
			}
			var rs struct {
				Receipts []struct {
					Type string         `json:"receipt_type"`
					From string         `json:"from"`
					Body map[string]any `json:"body"`
				} `json:"receipts"`
			}
			call(t, "GET", g.URL+"/v1/receipts?task_id="+id, agent, nil).Into(t, &rs)
			if n := len(rs.Receipts); n != 2 || rs.Receipts[1].Type != "workflow.canceled" ||
				rs.Receipts[1].Body["canceled_step"] != "a" || rs.Receipts[1].Body["canceled_by"] != "agent.alice" || rs.Receipts[1].Body["error_by"] != nil {
				t.Fatalf("workflow receipts %+v, want submitted then canceled naming step a and agent.alice", rs.Receipts)
			}
			var inbox struct {
				Items []map[string]any `json:"items"`
			}
			call(t, "GET", g.URL+"/v1/inbox", agent, nil).Into(t, &inbox)
			if len(inbox.Items) != 0 {
				t.Fatalf("the submitter's own cancel made inbox items %v", inbox.Items)
			}
		})
	}
}
