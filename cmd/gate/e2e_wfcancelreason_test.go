package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestE2EWorkflowCancelNamesWhoAndWhy: through the real binary, on SQLite
// and PostgreSQL, a workflow with a step waiting on two others is canceled
// with a reason by each door — HTTP (POST /v1/workflows/{id}/cancel), MCP
// (cancel_workflow) and the CLI (gate workflows cancel --reason). Every
// step, the waiting one included, is canceled by a task.canceled from the
// agent who asked, with the reason, workflow_id and step (docs/http.md,
// "Cancels"); the workflow's error_message and workflow.canceled receipt
// carry who asked and why, and gate workflows get prints them.
func TestE2EWorkflowCancelNamesWhoAndWhy(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			g := startGateOnStore(t, driver)
			g.putType(t, "wf1", map[string]any{}, "")
			agent := g.newKey(t, "agent", "agent.a", "")
			submit := func(rule string) (string, map[string]any) {
				t.Helper()
				d := map[string]any{"name": "d", "task_type": "wf1", "params": map[string]any{}, "after": []string{"a", "b"}}
				if rule != "" {
					d["after_rule"] = rule
				}
				r := call(t, "POST", g.URL+"/v1/workflows", agent, map[string]any{"name": "r2", "steps": []map[string]any{
					{"name": "a", "task_type": "wf1", "params": map[string]any{}},
					{"name": "b", "task_type": "wf1", "params": map[string]any{}}, d}})
				want(t, r, 201, "")
				sub := r.JSON(t)
				return sub["workflow_id"].(string), sub["steps"].(map[string]any)
			}
			// check reads the workflow and its steps as the agent does.
			check := func(door, id string, steps map[string]any, reason string) {
				t.Helper()
				wantErr := "canceled by agent.a: " + reason
				r := call(t, "GET", g.URL+"/v1/workflows/"+id, agent, nil)
				want(t, r, 200, "")
				if wf := r.JSON(t); wf["status"] != "canceled" || wf["error_message"] != wantErr {
					t.Fatalf("%s: workflow %s", door, r.Body)
				}
				for _, name := range []string{"a", "b", "d"} {
					tid := steps[name].(string)
					r := call(t, "GET", g.URL+"/v1/tasks/"+tid, agent, nil)
					want(t, r, 200, "")
					if tk := r.JSON(t); tk["status"] != "canceled" || tk["cancel_requested_by"] != "agent.a" || tk["cancel_reason"] != reason ||
						tk["error_message"] != reason {
						t.Fatalf("%s: step %s: %s", door, name, r.Body)
					}
					var rs struct {
						Receipts []struct {
							Type string         `json:"receipt_type"`
							From string         `json:"from"`
							Body map[string]any `json:"body"`
						} `json:"receipts"`
					}
					call(t, "GET", g.URL+"/v1/receipts?task_id="+tid, agent, nil).Into(t, &rs)
					last := rs.Receipts[len(rs.Receipts)-1]
					if last.Type != "task.canceled" || last.From != "agent.a" || last.Body["canceled_by"] != "agent.a" || last.Body["reason"] != reason ||
						last.Body["workflow_id"] != id || last.Body["step"] != name {
						t.Fatalf("%s: step %s's last receipt %+v", door, name, last)
					}
				}
				var rs struct {
					Receipts []struct {
						Type string         `json:"receipt_type"`
						Body map[string]any `json:"body"`
					} `json:"receipts"`
				}
				call(t, "GET", g.URL+"/v1/receipts?task_id="+id, agent, nil).Into(t, &rs)
				if n := len(rs.Receipts); n != 2 || rs.Receipts[1].Type != "workflow.canceled" || rs.Receipts[1].Body["canceled_by"] != "agent.a" ||
					rs.Receipts[1].Body["reason"] != reason || rs.Receipts[1].Body["error_message"] != wantErr {
					t.Fatalf("%s: workflow receipts %+v", door, rs.Receipts)
				}
			}

			// HTTP: the answer is the canceled workflow.
			id, steps := submit("")
			r := call(t, "POST", g.URL+"/v1/workflows/"+id+"/cancel", agent, map[string]any{"reason": "not needed anymore"})
			want(t, r, 200, "")
			if wf := r.JSON(t); wf["status"] != "canceled" || wf["error_message"] != "canceled by agent.a: not needed anymore" {
				t.Fatalf("HTTP cancel answered %s", r.Body)
			}
			check("HTTP", id, steps, "not needed anymore")

			// MCP: cancel_workflow passes the reason through.
			id, steps = submit("any_succeeded")
			c := httpMCPClient(t, g.URL+"/mcp", agent, "wfcancel")
			out, isErr := callTool(t, c, "cancel_workflow", map[string]any{"workflow_id": id, "reason": "superseded"})
			if isErr || out["status"] != "canceled" || out["error_message"] != "canceled by agent.a: superseded" {
				t.Fatalf("MCP cancel_workflow answered %v (error %v)", out, isErr)
			}
			check("MCP", id, steps, "superseded")

			// CLI: gate workflows cancel --reason, then gate workflows get.
			id, steps = submit("all_finished")
			keyFile := filepath.Join(t.TempDir(), "agent.key")
			if err := os.WriteFile(keyFile, []byte(agent+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			mustContain(t, "gate workflows cancel", cliOK(t, g.URL, keyFile, "workflows", "cancel", id, "--reason", "wrong plan"), id+" canceled")
			check("CLI", id, steps, "wrong plan")
			mustContain(t, "gate workflows get", cliOK(t, g.URL, keyFile, "workflows", "get", id), "error: canceled by agent.a: wrong plan")
		})
	}
}
