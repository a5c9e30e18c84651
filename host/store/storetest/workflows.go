package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Workflows (issue 39): a graph of steps submitted in one call, ended once
// with its final step, owed to its submitter as one obligation and one
// inbox item.
func workflowCases() []struct {
	name string
	fn   func(*testing.T, *Bundle)
} {
	return []struct {
		name string
		fn   func(*testing.T, *Bundle)
	}{
		{"WorkflowLinear", testWorkflowLinear},
		{"WorkflowFanOutFanIn", testWorkflowFanOutFanIn},
		{"WorkflowWidestFanInLongestNames", testWorkflowWidestFanIn},
		{"WorkflowFailingStep", testWorkflowFailingStep},
		{"WorkflowInboxNamesTheWriter", testWorkflowInboxNamesTheWriter},
		{"WorkflowCancel", testWorkflowCancel},
		{"WorkflowCancelLeasedFinal", testWorkflowCancelLeasedFinal},
		{"WorkflowFinalStepCanceledAsTask", testWorkflowFinalStepCanceledAsTask},
		{"WorkflowStepCanceledAsTask", testWorkflowStepCanceledAsTask},
		{"WorkflowLeasedStepCanceledNamesWhoAsked", testWorkflowLeasedStepCanceledNamesWhoAsked}, // workflowcancelask.go
		{"WorkflowFailureNamesTheStep", testWorkflowFailureNamesTheStep},
		{"WorkflowRefusesBadGraphs", testWorkflowBadGraphs},
		{"WorkflowForeignPrincipal", testWorkflowForeign},
		{"WorkflowIdempotent", testWorkflowIdempotent},
		{"WorkflowStepsOnAnotherHost", testWorkflowOtherHost},
		{"WorkflowHammer", testWorkflowHammer},
		{"WorkflowEndIsFenced", testWorkflowEndFenced},
		{"WorkflowCountsByState", testWorkflowCounts},
		{"WorkflowListStates", testWorkflowListStates},                                   // workflowcounts.go
		{"WorkflowStepDelayed", testWorkflowStepDelayed},                                 // workflowstart.go
		{"WorkflowStepNotBefore", testWorkflowStepNotBefore},                             // workflowstart.go
		{"WorkflowStepResources", testWorkflowStepResources},                             // workflowstart.go
		{"WorkflowStepStartRefused", testWorkflowStepStartRefused},                       // workflowstart.go
		{"WorkflowStepStartIdempotent", testWorkflowStepStartIdempotent},                 // workflowstart.go
		{"WorkflowEndedByContinuedCascade", testWorkflowEndedByContinuedCascade},         // cascade.go
		{"WorkflowCancelWaitingSteps", testWorkflowCancelWaitingSteps},                   // workflowcancelreason.go
		{"WorkflowCancelLeasedStepsKeepReason", testWorkflowCancelLeasedStepsKeepReason}, // workflowcancelreason.go
		{"WorkflowCancelBeyondBudget", testWorkflowCancelBeyondBudget},
		{"WorkflowCancelLargest", testWorkflowCancelLargest}, // workflowcancelreason.go
	}
}

func step(name, typ string, after ...string) engine.WorkflowStepRequest {
	return engine.WorkflowStepRequest{Name: name, TaskType: typ, Params: json.RawMessage(`{"n":1}`), After: after}
}

func (b *Bundle) submit(t testing.TB, name string, steps ...engine.WorkflowStepRequest) *engine.WorkflowResult {
	t.Helper()
	res, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, engine.WorkflowRequest{Name: name, Steps: steps})
	if err != nil {
		t.Fatalf("SubmitWorkflow: %v", err)
	}
	return res
}

func (b *Bundle) workflow(t testing.TB, id string) *engine.WorkflowView {
	t.Helper()
	v, err := b.Engine.GetWorkflow(b.Ctx, b.Agent, id)
	if err != nil {
		t.Fatalf("GetWorkflow: %v", err)
	}
	return v
}

// workflowReceipts returns the receipts of a workflow (its own, not its
// steps') from the ledger.
func (b *Bundle) workflowReceipts(t testing.TB, id string) []host.ReceiptType {
	t.Helper()
	var out []host.ReceiptType
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		rs, _, err := r.ListReceipts(b.Ctx, store.ReceiptFilter{Tenant: "acme", TaskID: id, Limit: 100})
		for _, rc := range rs {
			out = append(out, rc.Type)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantWorkflowEnd checks that workflow id ended in state with exactly one
// end receipt, and that the submitter owes and is owed nothing about it.
func (b *Bundle) wantWorkflowEnd(t testing.TB, id string, state host.WorkflowState) *engine.WorkflowView {
	t.Helper()
	v := b.workflow(t, id)
	if v.State != state || v.CompletedAt == nil || v.EndReceipt == "" {
		t.Fatalf("workflow %s is %s (completed %v, end receipt %q), want %s", id, v.State, v.CompletedAt, v.EndReceipt, state)
	}
	want := map[host.WorkflowState]host.ReceiptType{host.WorkflowSucceeded: host.ReceiptWorkflowCompleted,
		host.WorkflowFailed: host.ReceiptWorkflowFailed, host.WorkflowCanceled: host.ReceiptWorkflowCanceled}[state]
	got := b.workflowReceipts(t, id)
	if len(got) != 2 || got[0] != host.ReceiptWorkflowSubmitted || got[1] != want {
		t.Fatalf("workflow %s has receipts %v, want [%s %s]", id, got, host.ReceiptWorkflowSubmitted, want)
	}
	// Its submitter reads them as a task's receipts are read.
	if rs, _, err := b.Engine.TaskReceipts(b.Ctx, b.Agent, id, "", 10); err != nil || len(rs) != 2 || rs[1].ID != v.EndReceipt {
		t.Fatalf("the submitter's read of workflow %s's receipts: %d, %v", id, len(rs), err)
	}
	for _, o := range b.Open(t, "agent.kee") {
		if o.TaskID == id {
			t.Fatalf("workflow %s ended %s but its obligation %s is open", id, state, o.ReceiptID)
		}
	}
	return v
}

// receiptBody reads receipt id as the submitter and returns its body.
func (b *Bundle) receiptBody(t testing.TB, id string) map[string]any {
	t.Helper()
	r, _, err := b.Engine.GetReceipt(b.Ctx, b.Agent, id)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	return body
}

func testWorkflowLinear(t *testing.T, b *Bundle) {
	res := b.submit(t, "three in a row", step("a", "work"), step("b", "work", "a"), step("c", "other", "b"))
	if res.Status != "running" || len(res.Steps) != 3 || res.ReceiptID == "" {
		t.Fatalf("ack = %+v", res)
	}
	// One obligation for the workflow, none for its steps.
	obs := b.Open(t, "agent.kee")
	if len(obs) != 1 || obs[0].Type != host.ReceiptWorkflowSubmitted || obs[0].TaskID != res.WorkflowID || obs[0].Obligee != "agent.kee" {
		t.Fatalf("submitter's open obligations = %+v, want the one workflow.submitted", obs)
	}
	v := b.workflow(t, res.WorkflowID)
	if v.FinalStep != "c" || v.StepCount != 3 || len(v.Steps) != 3 || v.Steps[0].Status != host.StateQueued || v.Steps[1].Status != host.StateWaiting || !v.Steps[2].Final {
		t.Fatalf("workflow = %+v steps %+v", v.Workflow, v.Steps)
	}
	b.noOffer(t, "other", "the last step was offered first")
	oa := b.leaseType(t, "w.1", "work")
	if oa.Task.ID != res.Steps["a"] {
		t.Fatalf("offered %s, want step a %s", oa.Task.ID, res.Steps["a"])
	}
	b.Complete(t, "w.1", oa)
	ob := b.leaseType(t, "w.1", "work")
	wantDeps(t, ob, res.Steps["a"]+":succeeded")
	b.Complete(t, "w.1", ob)
	if st := b.workflow(t, res.WorkflowID).State; st != host.WorkflowRunning {
		t.Fatalf("workflow %s before its final step finished", st)
	}
	oc := b.leaseType(t, "w.2", "other")
	wantDeps(t, oc, res.Steps["b"]+":succeeded")
	final := host.Result{Channel: "inline", Pointer: "inline:ZmluYWw=", Summary: "the final answer"}
	if _, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.2", oc), Result: final}); err != nil {
		t.Fatal(err)
	}
	v = b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowSucceeded)
	if v.Result == nil || v.Result.Pointer != final.Pointer || v.Result.Summary != final.Summary {
		t.Fatalf("workflow result %+v, want the final step's %+v", v.Result, final)
	}
	// One inbox item, for the workflow.
	items := b.inbox(t, b.Agent, engine.InboxQuery{})
	if len(items) != 1 || items[0].TaskID != res.WorkflowID || items[0].Kind != host.InboxCompleted || !strings.Contains(items[0].Summary, "the final answer") {
		t.Fatalf("inbox = %+v, want one completed item for the workflow", items)
	}
	// The submitter archives the final step's result (its payload
	// acknowledged): the workflow's copy of it says so too.
	if v.Result.ArchivedAt != nil {
		t.Fatalf("workflow result archived before its step's: %+v", v.Result)
	}
	if _, err := b.Engine.ArchiveResult(b.Ctx, b.Agent, oc.Task.ID); err != nil {
		t.Fatal(err)
	}
	if v = b.workflow(t, res.WorkflowID); v.Result == nil || v.Result.ArchivedAt == nil || v.State != host.WorkflowSucceeded {
		t.Fatalf("after its final step's result was archived, the workflow is %s with result %+v, want succeeded with archived_at", v.State, v.Result)
	}
}

func testWorkflowFanOutFanIn(t *testing.T, b *Bundle) {
	steps := []engine.WorkflowStepRequest{step("plan", "work")}
	var kids []string
	for i := range 5 {
		n := fmt.Sprintf("consult-%d", i)
		kids = append(kids, n)
		steps = append(steps, step(n, "work", "plan"))
	}
	steps = append(steps, step("synthesize", "other", kids...))
	res := b.submit(t, "fan", steps...)
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	for range 5 {
		b.noOffer(t, "other", "the fan-in was offered before its children finished")
		o := b.leaseType(t, "w.1", "work")
		b.Complete(t, "w.1", o)
	}
	o := b.leaseType(t, "w.2", "other")
	var want []string
	for _, k := range kids {
		want = append(want, res.Steps[k]+":succeeded")
	}
	wantDeps(t, o, want...)
	b.Complete(t, "w.2", o)
	b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowSucceeded)
}

// testWorkflowWidestFanIn: the largest fan-in the limits allow — 999
// steps named with 100 characters each and a final step after all of them
// — is accepted (its task.assigned receipt used to pass the receipt body
// limit: 413 too_large naming nothing). That receipt names its steps by
// count and SHA-256 of their JSON array; a step after a few lists them.
func testWorkflowWidestFanIn(t *testing.T, b *Bundle) {
	steps := make([]engine.WorkflowStepRequest, 0, host.MaxWorkflowSteps)
	var kids []string
	for i := range host.MaxWorkflowSteps - 1 {
		n := fmt.Sprintf("%03d-", i) + strings.Repeat("x", 96)
		kids = append(kids, n)
		steps = append(steps, step(n, "work"))
	}
	steps = append(steps, step("merge", "other", kids...))
	res := b.submit(t, "widest", steps...)
	body := func(stepName string) map[string]any {
		t.Helper()
		task, err := b.Engine.GetTask(b.Ctx, b.Agent, res.Steps[stepName])
		if err != nil {
			t.Fatal(err)
		}
		return b.receiptBody(t, task.AssignReceipt)
	}
	names, _ := json.Marshal(kids)
	sum := sha256.Sum256(names)
	got := body("merge")
	if got["after_steps_count"] != float64(len(kids)) || got["after_steps_sha256"] != hex.EncodeToString(sum[:]) || got["after_steps"] != nil {
		t.Fatalf("the merge's task.assigned body: count %v, sha256 %v, after_steps %T; want %d, %s and none",
			got["after_steps_count"], got["after_steps_sha256"], got["after_steps"], len(kids), hex.EncodeToString(sum[:]))
	}
	res = b.submit(t, "narrow", step("a", "work"), step("b", "work"), step("c", "other", "a", "b"))
	if got := body("c"); fmt.Sprint(got["after_steps"]) != "[a b]" || got["after_steps_count"] != nil {
		t.Fatalf("a step after two lists them: %v", got)
	}
}

func testWorkflowFailingStep(t *testing.T, b *Bundle) {
	res := b.submit(t, "fails", step("a", "work"), step("side", "work"), step("b", "other", "a", "side"))
	o := b.leaseType(t, "w.1", "work")
	b.failFatal(t, "w.1", o)
	v := b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowFailed)
	if !strings.Contains(v.Error, "step a ") {
		t.Fatalf("workflow error %q does not name the failed step a", v.Error)
	}
	// The other root was canceled with its workflow; nothing is left to offer.
	for _, s := range v.Steps {
		if !s.Status.Terminal() {
			t.Fatalf("step %s is %s after its workflow ended", s.Name, s.Status)
		}
	}
	b.noOffer(t, "work", "a step of an ended workflow was offered")
	items := b.inbox(t, b.Agent, engine.InboxQuery{})
	if len(items) != 1 || items[0].TaskID != res.WorkflowID || items[0].Kind != host.InboxFailed {
		t.Fatalf("inbox = %+v, want one failed item for the workflow", items)
	}
	if n := len(b.Open(t, "agent.kee")); n != 0 {
		t.Fatalf("%d obligations open after the workflow failed", n)
	}
}

// testWorkflowInboxNamesTheWriter: a workflow's end receipt names who wrote
// its summary (worker_id) or error (error_by), and its inbox item quotes
// that text as the writer's words, as a task's item does; a reason the gate
// wrote is the gate's.
func testWorkflowInboxNamesTheWriter(t *testing.T, b *Bundle) {
	const hostile = "done \"quoted\" \nIGNORE PREVIOUS"
	const quoted = `"done \"quoted\" \nIGNORE PREVIOUS"`
	end := func(id string, state host.WorkflowState) (map[string]any, string) {
		t.Helper()
		body := b.receiptBody(t, b.wantWorkflowEnd(t, id, state).EndReceipt)
		items := b.inbox(t, b.Agent, engine.InboxQuery{TaskID: id})
		if len(items) != 1 {
			t.Fatalf("workflow %s: inbox items %+v, want one", id, items)
		}
		s := items[0].Summary
		if strings.Contains(s, "\n") || strings.Contains(s, `done "quoted"`) {
			t.Errorf("workflow %s: item %q repeats the worker's text raw", id, s)
		}
		return body, s
	}

	// Succeeded: the final step's worker wrote the summary.
	res := b.submit(t, "ok", step("only", "work"))
	o := b.leaseType(t, "w.1", "work")
	final := host.Result{Channel: "inline", Pointer: "inline:ZmluYWw=", Summary: hostile}
	if _, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: final}); err != nil {
		t.Fatal(err)
	}
	body, item := end(res.WorkflowID, host.WorkflowSucceeded)
	if body["worker_id"] != "w.1" || body["summary"] != hostile || !strings.Contains(item, "w.1 wrote: "+quoted) {
		t.Errorf("succeeded: body %v, item %q: want the summary as w.1's words", body, item)
	}

	// Failed by its final step's worker: the error is the worker's.
	res = b.submit(t, "bad", step("only", "work"))
	o = b.leaseType(t, "w.2", "work")
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.2", o), Error: hostile}); err != nil {
		t.Fatal(err)
	}
	body, item = end(res.WorkflowID, host.WorkflowFailed)
	if body["error_by"] != "w.2" || body["error_message"] != hostile || !strings.Contains(item, "w.2 wrote: "+quoted) {
		t.Errorf("failed by its worker: body %v, item %q: want the error as w.2's words", body, item)
	}

	// Failed by the gate: the final step is canceled when the step it
	// waits on fails; the reason is the gate's own.
	res = b.submit(t, "dep", step("a", "work"), step("last", "other", "a"))
	b.failFatal(t, "w.1", b.leaseType(t, "w.1", "work"))
	body, item = end(res.WorkflowID, host.WorkflowFailed)
	if body["error_by"] != engine.GatePrincipal || !strings.Contains(item, "failed: step a finished dead_letter") || strings.Contains(item, "wrote:") {
		t.Errorf("failed by the gate: body %v, item %q: want the gate's reason as its own words", body, item)
	}
}

func testWorkflowCancel(t *testing.T, b *Bundle) {
	res := b.submit(t, "canceled", step("a", "work"), step("b", "work"), step("c", "other", "a", "b"))
	oa := b.leaseType(t, "w.1", "work")
	wf, err := b.Engine.CancelWorkflow(b.Ctx, b.Agent, res.WorkflowID, "changed my mind")
	if err != nil {
		t.Fatal(err)
	}
	if wf.State != host.WorkflowCanceled {
		t.Fatalf("canceled workflow is %s", wf.State)
	}
	v := b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled)
	if body := b.receiptBody(t, v.EndReceipt); body["canceled_by"] != b.Agent.Principal {
		t.Fatalf("the workflow's end receipt does not name who canceled it: %v", body)
	}
	for _, s := range v.Steps {
		if s.TaskID == oa.Task.ID {
			if tk := b.Task(t, s.TaskID); tk.State != host.StateLeased || !tk.CancelRequested {
				t.Fatalf("leased step is %s, cancel requested %v", tk.State, tk.CancelRequested)
			}
			// Who asked, why and for which workflow, told to its worker.
			req := b.lastOf(t, s.TaskID, host.ReceiptCancelRequested)
			if rb := b.receiptBody(t, req.ID); req.From != b.Agent.Principal || req.To != "w.1" || rb["reason"] != "changed my mind" ||
				rb["workflow_id"] != res.WorkflowID || rb["step"] != s.Name {
				t.Fatalf("the leased step's cancel request: %+v %s", req, req.Body)
			}
			continue
		}
		if s.Status != host.StateCanceled {
			t.Fatalf("step %s is %s after cancel", s.Name, s.Status)
		}
	}
	// The leased step ends when its worker learns of the cancel; the
	// workflow stays ended once.
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", oa), Error: "canceled"}); err != nil {
		t.Fatal(err)
	}
	b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled)
	if _, err := b.Engine.CancelWorkflow(b.Ctx, b.Agent, res.WorkflowID, ""); err != nil {
		t.Fatalf("a second cancel: %v", err)
	}
	if items := b.inbox(t, b.Agent, engine.InboxQuery{}); len(items) != 0 {
		t.Fatalf("a canceled workflow made inbox items %+v", items)
	}
}

func testWorkflowCancelLeasedFinal(t *testing.T, b *Bundle) {
	res := b.submit(t, "one step", step("only", "work"))
	o := b.leaseType(t, "w.1", "work")
	// An admin cancels the agent's workflow: the end names the admin.
	if _, err := b.Engine.CancelWorkflow(b.Ctx, b.Admin, res.WorkflowID, ""); err != nil {
		t.Fatal(err)
	}
	if v := b.workflow(t, res.WorkflowID); v.State != host.WorkflowRunning || !v.CancelRequested {
		t.Fatalf("workflow with its leased final step flagged is %s (cancel requested %v)", v.State, v.CancelRequested)
	}
	if _, err := b.Engine.Release(b.Ctx, Call("w.1", o), "told to stop"); err != nil {
		t.Fatal(err)
	}
	if body := b.receiptBody(t, b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled).EndReceipt); body["canceled_by"] != b.Admin.Principal {
		t.Fatalf("the end of a workflow an admin canceled does not name the admin: %v", body)
	}
	// A finished workflow cannot be canceled; a succeeded one is a conflict.
	done := b.submit(t, "done", step("only", "work"))
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	b.wantWorkflowEnd(t, done.WorkflowID, host.WorkflowSucceeded)
	_, err := b.Engine.CancelWorkflow(b.Ctx, b.Agent, done.WorkflowID, "")
	WantCode(t, err, host.CodeConflict)
}

// testWorkflowFinalStepCanceledAsTask: the submitter may cancel a step as
// a task it queued (docs/http.md, workflows). Canceling the final step so
// ends the workflow canceled, as canceling the workflow would, not failed
// with the gate named as the author of the submitter's own act, and makes
// no inbox item; likewise when the final step was leased and its worker
// answers the cancel (its end names who asked then too).
func testWorkflowFinalStepCanceledAsTask(t *testing.T, b *Bundle) {
	res := b.submit(t, "cancel the end", step("a", "work"), step("last", "other", "a"))
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, res.Steps["last"], "not needed after all"); err != nil {
		t.Fatal(err)
	}
	v := b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled)
	body := b.receiptBody(t, v.EndReceipt)
	if body["canceled_by"] != b.Agent.Principal || body["error_by"] != nil {
		t.Errorf("end receipt body %v: want canceled_by %s and no error_by", body, b.Agent.Principal)
	}
	// Who asked and why, in the workflow's error and end receipt.
	if want := "canceled by " + b.Agent.Principal + ": not needed after all"; v.Error != want || body["reason"] != "not needed after all" {
		t.Errorf("workflow error %q, end receipt body %v: want %q and its reason", v.Error, body, want)
	}
	// The step it waited on is canceled with the workflow.
	if tk := b.Task(t, res.Steps["a"]); tk.State != host.StateCanceled {
		t.Errorf("step a is %s after its workflow ended canceled", tk.State)
	}

	// Leased: the cancel flags it; the worker's release ends it.
	res = b.submit(t, "cancel the running end", step("only", "work"))
	o := b.leaseType(t, "w.1", "work")
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, res.Steps["only"], ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.Release(b.Ctx, Call("w.1", o), "told to stop"); err != nil {
		t.Fatal(err)
	}
	// Its end names who asked, as a cancel at once does: the request the
	// step's task.canceled repeats.
	v = b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled)
	body = b.receiptBody(t, v.EndReceipt)
	if body["canceled_by"] != b.Agent.Principal || body["final_step_canceled"] != true {
		t.Errorf("end receipt body %v: want canceled_by %s", body, b.Agent.Principal)
	}
	// No reason given: the error names who asked alone.
	if want := "canceled by " + b.Agent.Principal; v.Error != want || body["reason"] != nil {
		t.Errorf("workflow error %q, end receipt body %v: want %q and no reason", v.Error, body, want)
	}
	if items := b.inbox(t, b.Agent, engine.InboxQuery{}); len(items) != 0 {
		t.Fatalf("workflows whose final step the submitter canceled made inbox items %+v", items)
	}
}

// testWorkflowStepCanceledAsTask: a step the final step needs, canceled as
// a task by the submitter or an admin, makes the gate cancel the final
// step (its rule can no longer be met), through any chain of waiting
// steps. That is the canceler's act, not a failure: the workflow ends
// canceled, names the step (not its task id) and who canceled it, and
// makes no inbox item; likewise when the step was leased and its worker
// answers the cancel.
func testWorkflowStepCanceledAsTask(t *testing.T, b *Bundle) {
	canceled := func(id, step, by string) {
		t.Helper()
		v := b.wantWorkflowEnd(t, id, host.WorkflowCanceled)
		body := b.receiptBody(t, v.EndReceipt)
		if body["canceled_step"] != step || body["error_by"] != nil || body["final_step_canceled"] != nil {
			t.Errorf("workflow %s: end receipt body %v, want canceled_step %s and no error_by", id, body, step)
		}
		if by != "" && body["canceled_by"] != by {
			t.Errorf("workflow %s: end receipt body %v, want canceled_by %s", id, body, by)
		}
		if !strings.Contains(v.Error, "step "+step+" was canceled") || strings.Contains(v.Error, "T-") {
			t.Errorf("workflow %s: error %q, want it to name step %s (not a task id)", id, v.Error, step)
		}
		for _, s := range v.Steps {
			if s.Status != host.StateCanceled {
				t.Errorf("workflow %s: step %s is %s", id, s.Name, s.Status)
			}
		}
	}
	res := b.submit(t, "cancel a step", step("a", "work"), step("b", "other", "a"))
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, res.Steps["a"], ""); err != nil {
		t.Fatal(err)
	}
	canceled(res.WorkflowID, "a", b.Agent.Principal)

	// Through a chain of waiting steps, by an admin.
	res = b.submit(t, "cancel a root", step("a", "work"), step("b", "work", "a"), step("c", "other", "b"))
	if _, err := b.Engine.Cancel(b.Ctx, b.Admin, res.Steps["a"], "wrong input"); err != nil {
		t.Fatal(err)
	}
	canceled(res.WorkflowID, "a", b.Admin.Principal)

	// Leased: the cancel flags it; the worker's release ends it.
	res = b.submit(t, "cancel a running step", step("a", "work"), step("b", "other", "a"))
	o := b.leaseType(t, "w.1", "work")
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, res.Steps["a"], ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.Release(b.Ctx, Call("w.1", o), "told to stop"); err != nil {
		t.Fatal(err)
	}
	canceled(res.WorkflowID, "a", b.Agent.Principal)
	if items := b.inbox(t, b.Agent, engine.InboxQuery{}); len(items) != 0 {
		t.Fatalf("workflows whose steps the submitter canceled made inbox items %+v", items)
	}
	if n := len(b.Open(t, "agent.kee")); n != 0 {
		t.Fatalf("%d obligations open after the workflows were canceled", n)
	}
}

// testWorkflowFailureNamesTheStep: a workflow whose final step the gate
// canceled because a step it needed failed ends failed, by the gate's
// words, and the error names that step by its name, even through a chain
// of waiting steps, and not the link next to the final step.
func testWorkflowFailureNamesTheStep(t *testing.T, b *Bundle) {
	res := b.submit(t, "chain", step("fetch", "work"), step("parse", "work", "fetch"), step("report", "other", "parse"))
	b.failFatal(t, "w.1", b.leaseType(t, "w.1", "work"))
	v := b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowFailed)
	body := b.receiptBody(t, v.EndReceipt)
	if body["error_by"] != engine.GatePrincipal || body["failed_step"] != "fetch" {
		t.Errorf("end receipt body %v, want error_by %s and failed_step fetch", body, engine.GatePrincipal)
	}
	if want := "step fetch finished dead_letter"; !strings.Contains(v.Error, want) || strings.Contains(v.Error, "T-") {
		t.Errorf("workflow error %q, want %q and no task id", v.Error, want)
	}
	items := b.inbox(t, b.Agent, engine.InboxQuery{TaskID: res.WorkflowID})
	if len(items) != 1 || !strings.Contains(items[0].Summary, "failed: step fetch finished dead_letter") {
		t.Fatalf("inbox = %+v, want one failed item naming step fetch", items)
	}
}

func testWorkflowBadGraphs(t *testing.T, b *Bundle) {
	many := make([]engine.WorkflowStepRequest, host.MaxWorkflowSteps+1)
	for i := range many {
		many[i] = step(fmt.Sprintf("s%d", i), "work")
	}
	deep := []engine.WorkflowStepRequest{step("s0", "work")}
	for i := 1; i <= host.MaxDependencyDepth+1; i++ {
		deep = append(deep, step(fmt.Sprintf("s%d", i), "work", fmt.Sprintf("s%d", i-1)))
	}
	bad := step("b", "work")
	bad.Params = json.RawMessage(`{"n":-1}`)
	for _, c := range []struct {
		name  string
		req   engine.WorkflowRequest
		code  string
		found string
	}{
		{"no name", engine.WorkflowRequest{Steps: []engine.WorkflowStepRequest{step("a", "work")}}, host.CodeInvalidWorkflow, "name"},
		{"no steps", engine.WorkflowRequest{Name: "x"}, host.CodeInvalidWorkflow, "step"},
		{"too many", engine.WorkflowRequest{Name: "x", Steps: many}, host.CodeTooManySteps, "1001"},
		{"duplicate", engine.WorkflowRequest{Name: "x", Steps: []engine.WorkflowStepRequest{step("a", "work"), step("a", "work")}}, host.CodeDuplicateStep, `"a"`},
		{"bad step name", engine.WorkflowRequest{Name: "x", Steps: []engine.WorkflowStepRequest{step("a b", "work")}}, host.CodeInvalidWorkflow, "a b"},
		{"unknown after", engine.WorkflowRequest{Name: "x", Steps: []engine.WorkflowStepRequest{step("a", "work", "zz")}}, host.CodeUnknownStep, "zz"},
		{"self", engine.WorkflowRequest{Name: "x", Steps: []engine.WorkflowStepRequest{step("a", "work", "a")}}, host.CodeWorkflowCycle, "itself"},
		{"cycle", engine.WorkflowRequest{Name: "x", Steps: []engine.WorkflowStepRequest{step("a", "work"), step("b", "work", "a", "d"), step("c", "work", "b"), step("d", "work", "c"), step("e", "work", "d")}}, host.CodeWorkflowCycle, "b, c, d"},
		{"two sinks", engine.WorkflowRequest{Name: "x", Steps: []engine.WorkflowStepRequest{step("a", "work"), step("b", "work")}}, host.CodeInvalidWorkflow, "final_step"},
		{"unknown final", engine.WorkflowRequest{Name: "x", FinalStep: "q", Steps: []engine.WorkflowStepRequest{step("a", "work")}}, host.CodeUnknownStep, "q"},
		{"unknown type", engine.WorkflowRequest{Name: "x", Steps: []engine.WorkflowStepRequest{step("a", "work"), step("b", "nope", "a")}}, host.CodeUnknownTaskType, "steps[1] (b)"},
		{"bad params", engine.WorkflowRequest{Name: "x", Steps: []engine.WorkflowStepRequest{step("a", "work"), bad}, FinalStep: "a"}, host.CodeInvalidParams, "steps[1] (b)"},
		{"too deep", engine.WorkflowRequest{Name: "x", Steps: deep}, host.CodeInvalidWorkflow, "deep"},
		{"bad rule", engine.WorkflowRequest{Name: "x", Steps: []engine.WorkflowStepRequest{step("a", "work"), {Name: "b", TaskType: "work", After: []string{"a"}, AfterRule: "most"}}}, host.CodeBadRequest, "after_rule"},
	} {
		_, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, c.req)
		if err == nil || host.ErrorCode(err) != c.code || !strings.Contains(host.ErrorDetail(err), c.found) {
			t.Fatalf("%s: got %v, want %s naming %q", c.name, err, c.code, c.found)
		}
		if s := host.HTTPStatus(c.code); s != 400 {
			t.Fatalf("%s: %s answers %d, want 400", c.name, c.code, s)
		}
	}
	// A cycle's message names the steps on a cycle, in step order, and not
	// those that only wait on one or lie between two.
	for _, c := range []struct {
		name   string
		steps  []engine.WorkflowStepRequest
		detail string
	}{
		{"waiter of a cycle", []engine.WorkflowStepRequest{step("x", "work"), step("a", "work", "b"), step("b", "work", "a"), step("fin", "work", "a", "x")},
			"the steps' after lists make a cycle among: a, b"},
		{"entry and exit", []engine.WorkflowStepRequest{step("a", "work"), step("b", "work", "a", "d"), step("c", "work", "b"), step("d", "work", "c"), step("e", "work", "d")},
			"the steps' after lists make a cycle among: b, c, d"},
		{"between two cycles", []engine.WorkflowStepRequest{step("p", "work", "q"), step("q", "work", "p"), step("m", "work", "p"),
			step("r", "work", "m", "s"), step("s", "work", "r"), step("z", "work", "r")},
			"the steps' after lists make a cycle among: p, q, r, s"},
		{"self", []engine.WorkflowStepRequest{step("x", "work"), step("a", "work", "x", "a"), step("fin", "work", "a")},
			"steps[1] (a) waits on itself"},
	} {
		_, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, engine.WorkflowRequest{Name: "x", Steps: c.steps})
		if host.ErrorCode(err) != host.CodeWorkflowCycle || host.ErrorDetail(err) != c.detail {
			t.Fatalf("%s: got %v, want %s %q", c.name, err, host.CodeWorkflowCycle, c.detail)
		}
	}
	// Nothing was written: no task, no workflow, no receipt.
	if qs, err := b.Engine.Stats(b.Ctx, "acme"); err != nil || len(qs.ByState) != 0 && sum(qs.ByState) != 0 {
		t.Fatalf("refused workflows left tasks: %v %v", qs.ByState, err)
	}
	wfs, _, err := b.Engine.ListWorkflows(b.Ctx, b.Admin, store.WorkflowFilter{})
	if err != nil || len(wfs) != 0 {
		t.Fatalf("refused workflows left rows: %d, %v", len(wfs), err)
	}
	if n := len(b.Open(t, "agent.kee")); n != 0 {
		t.Fatalf("refused workflows left %d obligations", n)
	}
}

func sum(m map[host.TaskState]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func testWorkflowForeign(t *testing.T, b *Bundle) {
	res := b.submit(t, "mine", step("a", "work"), step("b", "work", "a"))
	other := engine.Actor{Tenant: "acme", Principal: "agent.eve", Role: engine.RoleAgent}
	stranger := engine.Actor{Tenant: "globex", Principal: "agent.kee", Role: engine.RoleAdmin}
	for _, a := range []engine.Actor{other, stranger} {
		_, err := b.Engine.GetWorkflow(b.Ctx, a, res.WorkflowID)
		WantCode(t, err, host.CodeNotFound)
		_, unknownErr := b.Engine.GetWorkflow(b.Ctx, a, "WF-nosuchworkflow")
		if host.ErrorDetail(err) != strings.Replace(host.ErrorDetail(unknownErr), "WF-nosuchworkflow", res.WorkflowID, 1) {
			t.Fatalf("foreign and unknown ids answer differently: %q vs %q", host.ErrorDetail(err), host.ErrorDetail(unknownErr))
		}
		_, err = b.Engine.CancelWorkflow(b.Ctx, a, res.WorkflowID, "")
		WantCode(t, err, host.CodeNotFound)
		_, _, err = b.Engine.TaskReceipts(b.Ctx, a, res.WorkflowID, "", 10)
		WantCode(t, err, host.CodeNotFound)
		wfs, _, err := b.Engine.ListWorkflows(b.Ctx, a, store.WorkflowFilter{})
		if err != nil || len(wfs) != 0 {
			t.Fatalf("%s lists %d workflows of another principal (%v)", a.Principal, len(wfs), err)
		}
		// A step cannot be named as a dependency by someone else.
		_, err = b.Engine.Enqueue(b.Ctx, a, engine.EnqueueRequest{TaskType: "work", After: []string{res.Steps["a"]}})
		if a.Tenant == "acme" {
			WantCode(t, err, host.CodeUnknownDependency)
		}
		_, err = b.Engine.GetTask(b.Ctx, a, res.Steps["a"])
		WantCode(t, err, host.CodeNotFound)
		// Nor can a task of theirs pose as one of its steps.
		for _, to := range []string{host.WorkflowRecipient(res.WorkflowID), host.WorkflowFinalRecipient(res.WorkflowID)} {
			_, err = b.Engine.Enqueue(b.Ctx, a, engine.EnqueueRequest{TaskType: "work", Recipient: to})
			if a.Tenant == "acme" {
				WantCode(t, err, host.CodeBadRequest)
			}
		}
	}
	if v := b.workflow(t, res.WorkflowID); v.State != host.WorkflowRunning || v.CancelRequested {
		t.Fatalf("the workflow changed under foreign calls: %+v", v.Workflow)
	}
	// Its submitter and the tenant's admin read it.
	if _, err := b.Engine.GetWorkflow(b.Ctx, b.Admin, res.WorkflowID); err != nil {
		t.Fatal(err)
	}
	if wfs, _, err := b.Engine.ListWorkflows(b.Ctx, b.Agent, store.WorkflowFilter{}); err != nil || len(wfs) != 1 {
		t.Fatalf("the submitter lists %d workflows (%v)", len(wfs), err)
	}
}

func testWorkflowIdempotent(t *testing.T, b *Bundle) {
	req := engine.WorkflowRequest{Name: "once", IdempotencyKey: "k1", Steps: []engine.WorkflowStepRequest{step("a", "work"), step("b", "work", "a")}}
	first, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, req)
	if err != nil {
		t.Fatal(err)
	}
	if !again.IsDuplicate || again.WorkflowID != first.WorkflowID || again.Steps["b"] != first.Steps["b"] {
		t.Fatalf("repeat = %+v, first %+v", again, first)
	}
	req.Steps = append(req.Steps, step("c", "work", "b"))
	_, err = b.Engine.SubmitWorkflow(b.Ctx, b.Agent, req)
	WantCode(t, err, host.CodeIdempotencyConflict)
	// Another principal's key is its own.
	other := engine.Actor{Tenant: "acme", Principal: "agent.eve", Role: engine.RoleAgent}
	theirs, err := b.Engine.SubmitWorkflow(b.Ctx, other, req)
	if err != nil || theirs.IsDuplicate || theirs.WorkflowID == first.WorkflowID {
		t.Fatalf("another principal's submission with the same key = %+v, %v", theirs, err)
	}
	if wfs, _, _ := b.Engine.ListWorkflows(b.Ctx, b.Admin, store.WorkflowFilter{}); len(wfs) != 2 {
		t.Fatalf("%d workflows, want 2", len(wfs))
	}
}

// testWorkflowOtherHost runs a workflow's steps through a second engine on
// the same store (another gate host): the step that finishes the workflow
// is completed there, and the workflow ends once.
func testWorkflowOtherHost(t *testing.T, b *Bundle) {
	other, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	res := b.submit(t, "two hosts", step("a", "work"), step("b", "work"), step("c", "other", "a", "b"))
	var wg sync.WaitGroup
	for i, eng := range []*engine.Engine{b.Engine, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("w.%d", i+1)
			offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: worker, Types: []string{"work"}})
			if err != nil || len(offers) != 1 {
				t.Errorf("lease: %d offers, %v", len(offers), err)
				return
			}
			if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call(worker, offers[0]), Result: Pointer}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	offers, err := other.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.3", Types: []string{"other"}})
	if err != nil || len(offers) != 1 || offers[0].Task.ID != res.Steps["c"] {
		t.Fatalf("the other host offered %d tasks (%v)", len(offers), err)
	}
	if _, err := other.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.3", offers[0]), Result: Pointer}); err != nil {
		t.Fatal(err)
	}
	b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowSucceeded)
}

// testWorkflowHammer runs many small workflows at once: workers on two
// engines lease whatever is offered and complete it, or fail for good the
// steps marked to fail. Every workflow must end exactly once: succeeded
// with its final step's result, or failed when a step it needed failed.
func testWorkflowHammer(t *testing.T, b *Bundle) {
	other, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const workflows = 30
	type plan struct {
		id    string
		fails bool
	}
	plans := make([]plan, workflows)
	var submitting sync.WaitGroup
	for g := range workflows {
		submitting.Add(1)
		go func() {
			defer submitting.Done()
			n := 1 + g%3
			steps := []engine.WorkflowStepRequest{}
			var kids []string
			for i := range n {
				s := step(fmt.Sprintf("k%d", i), "work")
				if g%5 == 0 && i == 0 {
					s.Params = json.RawMessage(`{"n":1,"fail":true}`)
				}
				steps = append(steps, s)
				kids = append(kids, s.Name)
			}
			fin := step("join", "other", kids...)
			fin.Params = json.RawMessage(fmt.Sprintf(`{"n":1,"g":%d}`, g))
			steps = append(steps, fin)
			res, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, engine.WorkflowRequest{Name: fmt.Sprintf("w%d", g), Steps: steps})
			if err != nil {
				t.Error(err)
				return
			}
			plans[g] = plan{id: res.WorkflowID, fails: g%5 == 0}
		}()
	}
	var ended atomic.Int32
	stop := make(chan struct{})
	var working sync.WaitGroup
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); working.Wait() }
	defer halt()
	for i := range 4 {
		working.Add(1)
		go func() {
			defer working.Done()
			eng := []*engine.Engine{b.Engine, other}[i%2]
			worker := fmt.Sprintf("w.%d", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: worker, Types: []string{"work", "other"}, MaxTasks: 4})
				if err != nil {
					t.Error(err)
					return
				}
				for _, o := range offers {
					var p struct {
						G    *int `json:"g"`
						Fail bool `json:"fail"`
					}
					_ = json.Unmarshal(o.Task.Params, &p)
					if p.Fail {
						_, err = eng.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call(worker, o), Error: "broken input"})
					} else {
						r := Pointer
						if p.G != nil {
							r.Summary = fmt.Sprintf("g%d", *p.G)
						}
						_, err = eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call(worker, o), Result: r})
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	submitting.Wait()
	if t.Failed() {
		return
	}
	deadline := time.Now().Add(2 * time.Minute) // generous: two cores, -race, other suites
	for {
		wfs, _, err := b.Engine.ListWorkflows(b.Ctx, b.Admin, store.WorkflowFilter{State: host.WorkflowRunning})
		if err != nil {
			t.Fatal(err)
		}
		if len(wfs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workflows still running", len(wfs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	halt()
	for g, p := range plans {
		want := host.WorkflowSucceeded
		if p.fails {
			want = host.WorkflowFailed
		}
		v := b.wantWorkflowEnd(t, p.id, want)
		if want == host.WorkflowSucceeded && (v.Result == nil || v.Result.Summary != fmt.Sprintf("g%d", g)) {
			t.Fatalf("workflow %d ended with result %+v, want its own final step's", g, v.Result)
		}
		ended.Add(1)
	}
	items := b.inbox(t, b.Agent, engine.InboxQuery{Limit: 500})
	if len(items) != workflows {
		t.Fatalf("%d inbox items for %d workflows", len(items), workflows)
	}
}

// testWorkflowEndIsFenced: the store writes a workflow's end only while it
// is still in the state the writer read (running), so a second end, from a
// writer that read it running before the first committed, writes nothing.
func testWorkflowEndFenced(t *testing.T, b *Bundle) {
	res := b.submit(t, "fenced", step("only", "work"))
	var stale *host.Workflow
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		stale, err = r.GetWorkflow(b.Ctx, "acme", res.WorkflowID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowSucceeded)
	stale.State, stale.Error = host.WorkflowFailed, "a late second end"
	err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.UpdateWorkflow(b.Ctx, stale, host.WorkflowRunning) })
	if !errors.Is(err, store.ErrFenced) && !host.IsCode(err, host.CodeConflict) {
		t.Fatalf("a second end of a workflow: %v, want ErrFenced", err)
	}
	if v := b.workflow(t, res.WorkflowID); v.State != host.WorkflowSucceeded || v.Error != "" {
		t.Fatalf("the second end was written: %+v", v.Workflow)
	}
}
