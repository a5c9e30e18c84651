package storetest

import (
	"fmt"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// A workflow's cancel is its canceler's act on every step not finished
// (docs/http.md, "Cancels"): a waiting step too, whatever its rule, is
// canceled by a task.canceled from the principal who asked, with the
// reason, the workflow and the step — not by the gate because a step it
// waits on was canceled first. The workflow keeps who asked and why: its
// error_message and its workflow.canceled receipt.

// wantStepCanceledBy checks that step name (task id) of workflow wf ended
// canceled by a task.canceled receipt from by with reason, workflow_id
// and step, and that the task reads so (cancel_requested_by,
// cancel_reason, error_message).
func (b *Bundle) wantStepCanceledBy(t testing.TB, wf, name, id, by, reason string) {
	t.Helper()
	tk := b.Task(t, id)
	if tk.State != host.StateCanceled || tk.CancelRequestedBy != by || tk.CancelReason != reason || tk.LastError != reason {
		t.Errorf("step %s is %s, cancel asked by %q for %q, error %q; want canceled by %s for %q",
			name, tk.State, tk.CancelRequestedBy, tk.CancelReason, tk.LastError, by, reason)
		return
	}
	r := b.lastOf(t, id, host.ReceiptCanceled)
	body := b.receiptBody(t, r.ID)
	if r.From != by || body["canceled_by"] != by || body["reason"] != reason || body["workflow_id"] != wf || body["step"] != name ||
		body["dependency"] != nil {
		t.Errorf("step %s's task.canceled is from %s with body %v; want from %s with reason %q, workflow_id %s, step %s",
			name, r.From, body, by, reason, wf, name)
	}
}

// testWorkflowCancelWaitingSteps: for each rule of a waiting step, a
// workflow of two queued steps, a step waiting on both and a step waiting
// on that one, canceled with a reason: all four steps are canceled by the
// principal who asked, with the reason, and the workflow's error and end
// receipt carry it. Canceled by an admin, the admin is named; canceled
// without a reason, the workflow's error names who asked alone.
func testWorkflowCancelWaitingSteps(t *testing.T, b *Bundle) {
	const reason = "not needed anymore"
	for _, rule := range []host.DependencyRule{host.RuleAllSucceeded, host.RuleAnySucceeded, host.RuleAllFinished} {
		for _, who := range []engine.Actor{b.Agent, b.Admin} {
			t.Run(string(rule)+"/"+who.Principal, func(t *testing.T) {
				d := step("d", "other", "a", "b")
				d.AfterRule = rule
				e := step("e", "other", "d")
				e.AfterRule = rule
				res := b.submit(t, "r2", step("a", "work"), step("b", "work"), d, e)
				wf, err := b.Engine.CancelWorkflow(b.Ctx, who, res.WorkflowID, reason)
				if err != nil {
					t.Fatal(err)
				}
				wantErr := "canceled by " + who.Principal + ": " + reason
				if wf.State != host.WorkflowCanceled || wf.Error != wantErr {
					t.Errorf("the cancel answered %s, error %q; want canceled, %q", wf.State, wf.Error, wantErr)
				}
				for _, name := range []string{"a", "b", "d", "e"} {
					b.wantStepCanceledBy(t, res.WorkflowID, name, res.Steps[name], who.Principal, reason)
				}
				v := b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled)
				body := b.receiptBody(t, v.EndReceipt)
				if v.Error != wantErr || body["error_message"] != wantErr || body["reason"] != reason || body["canceled_by"] != who.Principal ||
					body["error_by"] != nil || body["canceled_step"] != nil {
					t.Errorf("workflow error %q, end receipt body %v; want %q, reason %q, canceled_by %s", v.Error, body, wantErr, reason, who.Principal)
				}
			})
		}
	}
	t.Run("no reason", func(t *testing.T) {
		res := b.submit(t, "r0", step("a", "work"), step("b", "work"), step("d", "other", "a", "b"))
		if _, err := b.Engine.CancelWorkflow(b.Ctx, b.Agent, res.WorkflowID, ""); err != nil {
			t.Fatal(err)
		}
		stepReason := "workflow " + res.WorkflowID + " canceled"
		for _, name := range []string{"a", "b", "d"} {
			b.wantStepCanceledBy(t, res.WorkflowID, name, res.Steps[name], b.Agent.Principal, stepReason)
		}
		v := b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled)
		body := b.receiptBody(t, v.EndReceipt)
		if wantErr := "canceled by " + b.Agent.Principal; v.Error != wantErr || body["reason"] != nil || body["canceled_by"] != b.Agent.Principal {
			t.Errorf("workflow canceled without a reason: error %q, end receipt body %v; want %q and no reason", v.Error, body, wantErr)
		}
	})
}

// testWorkflowCancelLeasedStepsKeepReason: a workflow whose first step is
// leased when it is canceled: the waiting steps are canceled at once by
// the canceler (not by the gate once the leased step ends); and a
// workflow whose leased final step ends by its lease's expiry after the
// cancel ends with the reason in its error and end receipt.
func testWorkflowCancelLeasedStepsKeepReason(t *testing.T, b *Bundle) {
	const reason = "budget cut"
	res := b.submit(t, "leased first", step("a", "work"), step("b", "other", "a"), step("c", "other", "b"))
	oa := b.leaseType(t, "w.1", "work")
	if _, err := b.Engine.CancelWorkflow(b.Ctx, b.Agent, res.WorkflowID, reason); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b", "c"} {
		b.wantStepCanceledBy(t, res.WorkflowID, name, res.Steps[name], b.Agent.Principal, reason)
	}
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", oa), Error: "stopped"}); err != nil {
		t.Fatal(err)
	}
	v := b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled)
	if want := "canceled by " + b.Agent.Principal + ": " + reason; v.Error != want {
		t.Errorf("workflow error %q, want %q", v.Error, want)
	}
	for _, name := range []string{"b", "c"} {
		b.wantStepCanceledBy(t, res.WorkflowID, name, res.Steps[name], b.Agent.Principal, reason)
	}

	// The final step leased, ended by its lease's expiry.
	one := b.submit(t, "leased final", step("only", "work"))
	o := b.leaseType(t, "w.1", "work")
	wf, err := b.Engine.CancelWorkflow(b.Ctx, b.Agent, one.WorkflowID, reason)
	if err != nil {
		t.Fatal(err)
	}
	if wf.State != host.WorkflowRunning || !wf.CancelRequested || wf.Error != "" {
		t.Fatalf("workflow with its final step leased is %s (cancel requested %v, error %q) after the cancel", wf.State, wf.CancelRequested, wf.Error)
	}
	b.Clock.Set(o.LeaseExpiresAt)
	if _, err := b.Engine.Sweep(b.Ctx); err != nil {
		t.Fatal(err)
	}
	v = b.wantWorkflowEnd(t, one.WorkflowID, host.WorkflowCanceled)
	body := b.receiptBody(t, v.EndReceipt)
	want := "canceled by " + b.Agent.Principal + ": " + reason
	if v.Error != want || body["reason"] != reason || body["canceled_by"] != b.Agent.Principal || body["error_message"] != want {
		t.Errorf("workflow whose leased final step expired after the cancel: error %q, end receipt body %v; want %q with reason %q",
			v.Error, body, want, reason)
	}
}

// testWorkflowCancelBeyondBudget: a workflow cancel on an engine whose
// settle budget (engine.Config.SettleBudget) is smaller than the
// workflow: every step is still canceled by the canceler in the cancel's
// transaction, the workflow ends in it, and what the budget left pending
// is settled by the drainer without touching a step again.
func testWorkflowCancelBeyondBudget(t *testing.T, b *Bundle) {
	const reason = "too big"
	steps := []engine.WorkflowStepRequest{step("a", "work")}
	var mids []string
	for _, m := range []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"} {
		steps = append(steps, step(m, "other", "a"))
		mids = append(mids, m)
	}
	steps = append(steps, step("fin", "other", mids...))
	res, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, engine.WorkflowRequest{Name: "wide", Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	eng := cascadeEngine(t, b, cascadeBudget)
	wf, err := eng.CancelWorkflow(b.Ctx, b.Agent, res.WorkflowID, reason)
	if err != nil {
		t.Fatal(err)
	}
	if wf.State != host.WorkflowCanceled {
		t.Fatalf("workflow is %s after its cancel", wf.State)
	}
	check := func() {
		t.Helper()
		for name, id := range res.Steps {
			b.wantStepCanceledBy(t, res.WorkflowID, name, id, b.Agent.Principal, reason)
		}
	}
	check()
	eng.Start()
	waitFor(t, "no pending settlements", func() bool { return !b.pendingSettlements(t) })
	check()
	for name, id := range res.Steps {
		if n := countType(b.ReceiptTypes(t, id), host.ReceiptCanceled); n != 1 {
			t.Errorf("step %s has %d task.canceled receipts, want 1", name, n)
		}
	}
	b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled)
}

// testWorkflowCancelLargest: the largest workflow (host.MaxWorkflowSteps
// steps: a root, a chain as deep as a chain of waiting steps may be, the
// rest waiting on the root, and a final step waiting on them all),
// canceled on an engine of the default settle budget: one call cancels
// every step in the canceler's name and ends the workflow, and what the
// budget left pending is settled without touching a step again.
func testWorkflowCancelLargest(t *testing.T, b *Bundle) {
	const reason = "the whole plan changed"
	steps := []engine.WorkflowStepRequest{step("a", "work")}
	prev := "a"
	for i := 1; i < host.MaxDependencyDepth-1; i++ {
		name := fmt.Sprintf("c%d", i)
		steps = append(steps, step(name, "other", prev))
		prev = name
	}
	finAfter := []string{prev}
	for i := 1; len(steps) < host.MaxWorkflowSteps-1; i++ {
		name := fmt.Sprintf("w%d", i)
		steps = append(steps, step(name, "other", "a"))
		finAfter = append(finAfter, name)
	}
	steps = append(steps, step("fin", "other", finAfter...))
	res, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, engine.WorkflowRequest{Name: "largest", Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	wf, err := b.Engine.CancelWorkflow(b.Ctx, b.Agent, res.WorkflowID, reason)
	if err != nil {
		t.Fatal(err)
	}
	if want := "canceled by " + b.Agent.Principal + ": " + reason; wf.State != host.WorkflowCanceled || wf.Error != want {
		t.Fatalf("the cancel answered %s, error %q; want canceled, %q", wf.State, wf.Error, want)
	}
	for n := 0; ; n++ { // the drainer's part, as it runs it
		done, more, err := b.Engine.DrainSettlements(b.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !more && done == 0 {
			break
		}
		if n > host.MaxWorkflowSteps {
			t.Fatal("the pending settlements do not drain")
		}
	}
	if b.pendingSettlements(t) {
		t.Fatal("pending settlements left after draining")
	}
	v := b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled)
	if len(v.Steps) != host.MaxWorkflowSteps {
		t.Fatalf("the workflow has %d steps, want %d", len(v.Steps), host.MaxWorkflowSteps)
	}
	for _, s := range v.Steps {
		if s.Status != host.StateCanceled || s.Error != reason {
			t.Fatalf("step %s is %s with error %q; want canceled for %q", s.Name, s.Status, s.Error, reason)
		}
	}
	for _, name := range []string{"a", "c1", prev, "w1", finAfter[len(finAfter)-1], "fin"} {
		b.wantStepCanceledBy(t, res.WorkflowID, name, res.Steps[name], b.Agent.Principal, reason)
	}
}
