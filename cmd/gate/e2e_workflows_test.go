package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/worker/ai/aitest"
)

// TestE2EWorkflowConsultFiveThenSynthesize is the seeds' first workflow,
// "consult five models, then synthesize", through the real gate binary and
// `gate ai-worker` with a scripted provider: submitted with `gate workflows
// submit`, five consult steps (each on its own model) run, and the
// synthesize step waits for all of them and is asked with their five
// answers in its prompt. The workflow's result is the synthesis; the
// submitter is owed one obligation (none once it ended) and gets one inbox
// item; another agent cannot read it.
func TestE2EWorkflowConsultFiveThenSynthesize(t *testing.T) {
	models := []string{"model-a", "model-b", "model-c", "model-d", "model-e"}
	b := newAIBundle(t, 30, func(r aitest.Request) aitest.Reply {
		prompt := r.Messages[1].Text()
		if strings.HasPrefix(prompt, "Synthesize") {
			n := 0
			for _, m := range models {
				if strings.Contains(prompt, "view of "+m+" on the question") {
					n++
				}
			}
			return aitest.Answer(fmt.Sprintf("synthesis of %d views", n))
		}
		return aitest.Answer("view of " + r.Model + " on the question")
	})
	b.startAIWorker(t, "worker.ai-wf")

	steps := []map[string]any{}
	var consults []string
	for i, m := range models {
		name := fmt.Sprintf("consult-%d", i+1)
		consults = append(consults, name)
		steps = append(steps, map[string]any{"name": name, "task_type": "ai.chat",
			"params": map[string]any{"prompt": "What should we do about the question?", "model": m}})
	}
	steps = append(steps, map[string]any{"name": "synthesize", "task_type": "ai.chat", "after": consults,
		"params": map[string]any{"prompt": "Synthesize one recommendation from the answers below."}})
	file := filepath.Join(t.TempDir(), "wf.json")
	data, _ := json.Marshal(map[string]any{"name": "consult five, then synthesize", "steps": steps})
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := gateCLI(t, "workflows", "submit", "@"+file, "--url", b.g.URL, "--key", b.agent, "--idempotency-key", "five-1")
	if code != 0 {
		t.Fatalf("gate workflows submit: exit %d, %q %q", code, out, errs)
	}
	id := strings.Fields(out)[0]
	if !strings.HasPrefix(id, "WF-") || !strings.Contains(out, "synthesize") {
		t.Fatalf("gate workflows submit printed %q", out)
	}

	var wf struct {
		Status string `json:"status"`
		Result *struct {
			Pointer string `json:"result_pointer"`
			Summary string `json:"summary"`
		} `json:"result"`
		FinalTaskID string `json:"final_task_id"`
		Steps       []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
		} `json:"steps"`
	}
	waitFor(t, 120*time.Second, "the workflow to end", func() bool {
		call(t, "GET", b.g.URL+"/v1/workflows/"+id, b.agent, nil).Into(t, &wf)
		return wf.Status != "running"
	})
	if wf.Status != "succeeded" || wf.Result == nil || wf.Result.Summary != "synthesis of 5 views" {
		t.Fatalf("workflow ended %+v", wf)
	}
	for _, s := range wf.Steps {
		if s.Status != "succeeded" {
			t.Fatalf("step %s is %s", s.Name, s.Status)
		}
	}
	// The synthesize step was asked once, after the five consults, with
	// their five answers; each consult went to its own model.
	var synth, consulted int
	seen := map[string]bool{}
	for _, r := range b.prov.Requests() {
		if strings.HasPrefix(r.Messages[1].Text(), "Synthesize") {
			synth++
			continue
		}
		consulted++
		seen[r.Model] = true
	}
	if synth != 1 || consulted != 5 || len(seen) != 5 {
		t.Fatalf("the provider was asked %d syntheses and %d consults (models %v)", synth, consulted, seen)
	}
	var res struct {
		Content struct {
			Answer string `json:"answer"`
		} `json:"content"`
	}
	call(t, "GET", b.g.URL+"/v1/tasks/"+wf.FinalTaskID+"/result", b.agent, nil).Into(t, &res)
	if res.Content.Answer != "synthesis of 5 views" {
		t.Fatalf("the final step's result: %+v", res)
	}
	// One item in the submitter's inbox, for the workflow; no obligation left.
	var inbox struct {
		Items []struct {
			TaskID string `json:"task_id"`
			Kind   string `json:"kind"`
		} `json:"items"`
	}
	call(t, "GET", b.g.URL+"/v1/inbox", b.agent, nil).Into(t, &inbox)
	if len(inbox.Items) != 1 || inbox.Items[0].TaskID != id || inbox.Items[0].Kind != "completed" {
		t.Fatalf("inbox: %+v", inbox)
	}
	var obs struct {
		Open []any `json:"open_obligations"`
	}
	call(t, "GET", b.g.URL+"/v1/obligations/open", b.agent, nil).Into(t, &obs)
	if len(obs.Open) != 0 {
		t.Fatalf("open obligations after the workflow ended: %v", obs.Open)
	}
	// The CLI shows it; another agent is told it does not exist.
	out, errs, code = gateCLI(t, "workflows", "get", id, "--url", b.g.URL, "--key", b.agent)
	if code != 0 || !strings.Contains(out, "succeeded") || !strings.Contains(out, "synthesize (final)") {
		t.Fatalf("gate workflows get: exit %d, %q %q", code, out, errs)
	}
	out, _, code = gateCLI(t, "workflows", "list", "--url", b.g.URL, "--key", b.agent)
	if code != 0 || !strings.Contains(out, id) {
		t.Fatalf("gate workflows list: exit %d, %q", code, out)
	}
	eve := b.g.newKey(t, "agent", "agent.eve", "")
	want(t, call(t, "GET", b.g.URL+"/v1/workflows/"+id, eve, nil), 404, "not_found")
	if _, errs, code := gateCLI(t, "workflows", "cancel", id, "--url", b.g.URL, "--key", eve); code != 1 || !strings.Contains(errs, "not_found") {
		t.Fatalf("gate workflows cancel by another agent: exit %d, %q", code, errs)
	}
}

// TestE2EWorkflowHostKilledPostgres: two `gate serve` hosts on one
// PostgreSQL database. A workflow submitted through the first has two
// parallel steps and a final one after both; the second host completes one
// step and holds the other's lease when it is SIGKILLed. The abandoned lease
// expires, the step is leased again and completed through the first host,
// and the final step runs there: the workflow ends succeeded once, with the
// final step's result, one inbox item and no open obligation.
func TestE2EWorkflowHostKilledPostgres(t *testing.T) {
	t.Parallel()
	db := postgresSchema(t)
	results := t.TempDir()
	a := startGate(t, t.TempDir(), "--db", db, "--results-dir", results)
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/admin.key", []byte(a.Admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startGate(t, dir, "--db", db, "--results-dir", results)
	a.putType(t, "wfk", map[string]any{"lease_seconds": 2, "requeue_delay_seconds": 0}, "")
	agent := a.newKey(t, "agent", "agent.wfk", "")
	worker := a.newKey(t, "worker", "wfk.1", "")

	r := call(t, "POST", a.URL+"/v1/workflows", agent, map[string]any{"name": "two hosts", "steps": []map[string]any{
		{"name": "left", "task_type": "wfk"}, {"name": "right", "task_type": "wfk"},
		{"name": "join", "task_type": "wfk", "after": []string{"left", "right"}}}})
	want(t, r, 201, "")
	id := r.JSON(t)["workflow_id"].(string)

	complete := func(g *gateProc, o offer, summary string) {
		t.Helper()
		want(t, call(t, "POST", g.URL+"/v1/leases/"+o.LeaseID+"/complete", worker, map[string]any{"result": map[string]string{"s": summary}, "summary": summary}), 200, "")
	}
	first := b.lease(t, worker, "wfk.1", map[string]any{"max_tasks": 1})
	if len(first) != 1 {
		t.Fatalf("host b offered %d tasks", len(first))
	}
	complete(b, first[0], "one side")
	held := b.lease(t, worker, "wfk.1", map[string]any{"max_tasks": 1})
	if len(held) != 1 {
		t.Fatalf("host b offered %d tasks for the second step", len(held))
	}
	_ = b.Stop(syscall.SIGKILL)

	// The lease host b held expires; host a offers the step again.
	var again []offer
	waitFor(t, 60*time.Second, "the abandoned step to be offered again", func() bool {
		again = a.lease(t, worker, "wfk.1", map[string]any{"max_tasks": 1, "task_types": []string{"wfk"}})
		return len(again) == 1
	})
	if again[0].Task.ID != held[0].Task.ID {
		t.Fatalf("offered %s, want the abandoned step %s", again[0].Task.ID, held[0].Task.ID)
	}
	complete(a, again[0], "other side")
	var final []offer
	waitFor(t, 30*time.Second, "the final step to be offered", func() bool {
		final = a.lease(t, worker, "wfk.1", map[string]any{"max_tasks": 1})
		return len(final) == 1
	})
	complete(a, final[0], "joined")

	var wf struct {
		Status      string `json:"status"`
		EndReceipt  string `json:"end_receipt_id"`
		FinalTaskID string `json:"final_task_id"`
		Result      *struct {
			Summary string `json:"summary"`
		} `json:"result"`
	}
	call(t, "GET", a.URL+"/v1/workflows/"+id, agent, nil).Into(t, &wf)
	if wf.Status != "succeeded" || wf.Result == nil || wf.Result.Summary != "joined" || wf.FinalTaskID != final[0].Task.ID {
		t.Fatalf("workflow: %+v", wf)
	}
	rc := call(t, "GET", a.URL+"/v1/receipts/"+wf.EndReceipt, agent, nil)
	want(t, rc, 200, "")
	if rcpt := rc.JSON(t); !strings.Contains(string(rc.Body), `"workflow.completed"`) {
		t.Fatalf("end receipt: %v", rcpt)
	}
	var inbox struct {
		Items []struct {
			TaskID string `json:"task_id"`
		} `json:"items"`
	}
	call(t, "GET", a.URL+"/v1/inbox", agent, nil).Into(t, &inbox)
	if len(inbox.Items) != 1 || inbox.Items[0].TaskID != id {
		t.Fatalf("inbox: %+v", inbox)
	}
	var obs struct {
		Open []any `json:"open_obligations"`
	}
	call(t, "GET", a.URL+"/v1/obligations/open", agent, nil).Into(t, &obs)
	if len(obs.Open) != 0 {
		t.Fatalf("open obligations: %v", obs.Open)
	}
}

// TestE2EWorkflowStepStartCLI: `gate workflows submit` passes a step's
// delay_seconds, not_before and resource_intents to the gate, and
// `gate workflows get` shows when each delayed step may start. On SQLite
// and PostgreSQL.
func TestE2EWorkflowStepStartCLI(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			g := startGateOnStore(t, driver)
			g.putType(t, "wf.timed", map[string]any{}, "")
			agent := g.newKey(t, "agent", "agent.timed", "")
			nb := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
			file := filepath.Join(t.TempDir(), "wf.json")
			data, _ := json.Marshal(map[string]any{"name": "timed", "final_step": "b", "steps": []map[string]any{
				{"name": "a", "task_type": "wf.timed"},
				{"name": "b", "task_type": "wf.timed", "after": []string{"a"}, "delay_seconds": 3600,
					"resource_intents": []map[string]any{{"resource": "repo:r", "predicate": "MUTATES"}}},
				{"name": "c", "task_type": "wf.timed", "not_before": nb.Format(time.RFC3339)},
			}})
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			out, errs, code := gateCLI(t, "workflows", "submit", "@"+file, "--url", g.URL, "--key", agent)
			if code != 0 {
				t.Fatalf("gate workflows submit: exit %d, %q %q", code, out, errs)
			}
			id := strings.Fields(out)[0]
			out, errs, code = gateCLI(t, "workflows", "get", id, "--url", g.URL, "--key", agent)
			if code != 0 || !strings.Contains(out, "NOT BEFORE") {
				t.Fatalf("gate workflows get: exit %d, %q %q", code, out, errs)
			}
			var rowB, rowC string
			for _, l := range strings.Split(out, "\n") {
				switch f := strings.Fields(l); {
				case len(f) > 0 && f[0] == "b":
					rowB = l
				case len(f) > 0 && f[0] == "c":
					rowC = l
				}
			}
			if !strings.Contains(rowB, "waiting") || !strings.Contains(rowB, time.Now().Add(time.Hour).UTC().Format("2006-01-02T")) {
				t.Fatalf("step b's row %q: want waiting with its time an hour ahead\n%s", rowB, out)
			}
			if !strings.Contains(rowC, "scheduled") || !strings.Contains(rowC, nb.Format(time.RFC3339)) {
				t.Fatalf("step c's row %q: want scheduled until %s\n%s", rowC, nb.Format(time.RFC3339), out)
			}
			var wf struct {
				Steps []struct {
					TaskID string `json:"task_id"`
				} `json:"steps"`
			}
			call(t, "GET", g.URL+"/v1/workflows/"+id, agent, nil).Into(t, &wf)
			var task struct {
				ResourceIntents []struct {
					Resource  string `json:"resource"`
					Predicate string `json:"predicate"`
				} `json:"resource_intents"`
			}
			call(t, "GET", g.URL+"/v1/tasks/"+wf.Steps[1].TaskID, agent, nil).Into(t, &task)
			if len(task.ResourceIntents) != 1 || task.ResourceIntents[0].Resource != "REPO:r" || task.ResourceIntents[0].Predicate != "MUTATES" {
				t.Fatalf("step b's task intents: %+v", task.ResourceIntents)
			}
		})
	}
}

// TestE2EWorkflowOutcomeContract: workflows that succeeded, failed and
// were canceled show how they ended in outcome, and every answer about them
// (submit, cancel, read, list) matches the OpenAPI document the gate serves
// (the contract check), whose outcome lists exactly those three. On SQLite
// and PostgreSQL.
func TestE2EWorkflowOutcomeContract(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			contract(t)
			g := startGateOnStore(t, driver)
			g.putType(t, "wf.end", map[string]any{}, "")
			agent := g.newKey(t, "agent", "agent.ends", "")
			wkey := g.newKey(t, "worker", "wf.w1", "")
			ids, steps := map[string]string{}, map[string]string{}
			for _, end := range []string{"succeeded", "failed", "canceled"} {
				r := call(t, "POST", g.URL+"/v1/workflows", agent, map[string]any{"name": end,
					"steps": []map[string]any{{"name": "only", "task_type": "wf.end"}}})
				want(t, r, 201, "")
				var sub struct {
					WorkflowID string            `json:"workflow_id"`
					Steps      map[string]string `json:"steps"`
				}
				r.Into(t, &sub)
				ids[end], steps[sub.Steps["only"]] = sub.WorkflowID, end
			}
			want(t, call(t, "POST", g.URL+"/v1/workflows/"+ids["canceled"]+"/cancel", agent, nil), 200, "")
			var leases struct {
				Leases []struct {
					LeaseID string `json:"lease_id"`
					Task    struct {
						TaskID string `json:"task_id"`
					} `json:"task"`
				} `json:"leases"`
			}
			r := call(t, "POST", g.URL+"/v1/leases", wkey, map[string]any{"worker_id": "wf.w1", "task_types": []string{"wf.end"}, "max_tasks": 5})
			want(t, r, 200, "")
			if r.Into(t, &leases); len(leases.Leases) != 2 {
				t.Fatalf("leased %d steps, want the two of the running workflows: %s", len(leases.Leases), r.Body)
			}
			for _, l := range leases.Leases {
				switch steps[l.Task.TaskID] {
				case "succeeded":
					want(t, call(t, "POST", g.URL+"/v1/leases/"+l.LeaseID+"/complete", wkey, map[string]any{"result": map[string]any{}, "summary": "ok"}), 200, "")
				case "failed":
					want(t, call(t, "POST", g.URL+"/v1/leases/"+l.LeaseID+"/fail", wkey, map[string]any{"error_message": "no", "retryable": false}), 200, "")
				default:
					t.Fatalf("leased %s, the step of no running workflow", l.Task.TaskID)
				}
			}
			for end, id := range ids {
				var w struct{ Status, Outcome string }
				call(t, "GET", g.URL+"/v1/workflows/"+id, agent, nil).Into(t, &w)
				if w.Status != end || w.Outcome != end {
					t.Errorf("the %s workflow: status %q, outcome %q", end, w.Status, w.Outcome)
				}
			}
			want(t, call(t, "GET", g.URL+"/v1/workflows", agent, nil), 200, "")
			d := contractFor(t, g.URL)
			for _, name := range []string{"Workflow", "WorkflowView"} {
				if got := fmt.Sprint(d.doc.Components.Schemas[name].Value.Properties["outcome"].Value.Enum); got != "[succeeded failed canceled]" {
					t.Errorf("the document's %s.outcome enum %s, want [succeeded failed canceled]", name, got)
				}
			}
		})
	}
}
