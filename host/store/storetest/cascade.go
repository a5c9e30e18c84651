package storetest

import (
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// A cascade larger than one transaction's budget (engine.Config.SettleBudget):
// the end that starts it commits with at most the budget's worth of
// settling (plus one task's waiters), the rest is recorded as pending
// settlements in the same transaction, and the drainer of a started engine
// settles them in later transactions, each waiter exactly once.

// cascadeBudget is the settle budget of the cascade cases: small, so a
// modest tree outgrows it.
const cascadeBudget = 5

// cascadeTree is a root, its waiters (mids), each mid's waiters (leaves),
// and a chain hanging from the last mid's first leaf.
type cascadeTree struct {
	root    string
	waiters []string // every task that waits, mids first
	fanOut  int      // the most waiters of one task
}

const (
	treeMids   = 4
	treeLeaves = 6
	treeChain  = 3
)

// buildCascadeTree enqueues the tree through b's engine.
func buildCascadeTree(t testing.TB, b *Bundle) cascadeTree {
	t.Helper()
	tr := cascadeTree{root: b.Enqueue(t, "work").TaskID, fanOut: max(treeMids, treeLeaves)}
	var mids []string
	for range treeMids {
		id := b.Enqueue(t, "other", after("", tr.root)).TaskID
		mids = append(mids, id)
		tr.waiters = append(tr.waiters, id)
	}
	var chainFrom string
	for _, m := range mids {
		for range treeLeaves {
			id := b.Enqueue(t, "other", after("", m)).TaskID
			tr.waiters = append(tr.waiters, id)
			if chainFrom == "" && m == mids[len(mids)-1] {
				chainFrom = id
			}
		}
	}
	for range treeChain {
		chainFrom = b.Enqueue(t, "other", after("", chainFrom)).TaskID
		tr.waiters = append(tr.waiters, chainFrom)
	}
	return tr
}

// cascadeEngine is an engine on b's store with the cases' budget; it is
// not started (its drainer does not run) until the case starts it.
func cascadeEngine(t testing.TB, b *Bundle, budget int) *engine.Engine {
	t.Helper()
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, ScheduleTick: -1, SettleBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	return eng
}

// pendingSettlements says whether the store holds pending settlements;
// its count (the operator's gauge) must agree.
func (b *Bundle) pendingSettlements(t testing.TB) bool {
	t.Helper()
	var found bool
	var n int64
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		if found, err = r.HasPendingSettlements(b.Ctx); err != nil {
			return err
		}
		n, err = r.CountPendingSettlements(b.Ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if found != (n > 0) {
		t.Fatalf("HasPendingSettlements says %v, CountPendingSettlements %d", found, n)
	}
	return found
}

// countCanceled counts the tasks among ids that are canceled.
func (b *Bundle) countCanceled(t testing.TB, ids []string) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		if b.Task(t, id).State == host.StateCanceled {
			n++
		}
	}
	return n
}

// wantCutCascade cancels tr's root through eng (not started) and checks
// that its transaction settled at most the budget (plus one task's
// waiters) and left the rest pending.
func wantCutCascade(t testing.TB, b *Bundle, eng *engine.Engine, tr cascadeTree) {
	t.Helper()
	if _, err := eng.Cancel(b.Ctx, b.Agent, tr.root, "stop the tree"); err != nil {
		t.Fatal(err)
	}
	wantCut(t, b, tr)
}

// wantCut checks that the transaction that ended tr's root settled at
// most the budget (plus one task's waiters) and left the rest pending.
func wantCut(t testing.TB, b *Bundle, tr cascadeTree) {
	t.Helper()
	bound := cascadeBudget - 1 + tr.fanOut
	if n := b.countCanceled(t, tr.waiters); n > bound || n == len(tr.waiters) {
		t.Fatalf("the transaction that ended the root canceled %d of %d waiters, want at most %d (budget %d, fan-out %d) and some left",
			n, len(tr.waiters), bound, cascadeBudget, tr.fanOut)
	}
	if !b.pendingSettlements(t) {
		t.Fatal("a cut cascade left no pending settlements")
	}
}

// wantCascadeDone waits until every waiter of tr is canceled and nothing
// is pending, then checks each waiter has exactly one task.canceled
// receipt.
func wantCascadeDone(t *testing.T, b *Bundle, tr cascadeTree) {
	t.Helper()
	waitFor(t, "every waiter of the cascade canceled, none pending", func() bool {
		return b.countCanceled(t, tr.waiters) == len(tr.waiters) && !b.pendingSettlements(t)
	})
	for _, id := range tr.waiters {
		if n := countType(b.ReceiptTypes(t, id), host.ReceiptCanceled); n != 1 {
			t.Fatalf("waiter %s has %d task.canceled receipts, want 1", id, n)
		}
	}
	if n := b.waitingCount(t); n != 0 {
		t.Fatalf("%d tasks still waiting after the cascade", n)
	}
}

// testDepsCascadeBounded: the cancel of a root with more waiters than the
// budget commits with a bounded part of the cascade; the started engine's
// drainer settles the rest, each waiter canceled once. A waiter its owner
// cancels meanwhile is skipped by the drainer.
func testDepsCascadeBounded(t *testing.T, b *Bundle) {
	tr := buildCascadeTree(t, b)
	eng := cascadeEngine(t, b, cascadeBudget)
	wantCutCascade(t, b, eng, tr)
	last := tr.waiters[len(tr.waiters)-1] // the chain's end: still waiting
	if tk := b.Task(t, last); tk.State != host.StateWaiting {
		t.Fatalf("the chain's end is %s before the drainer ran", tk.State)
	}
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, last, "mine"); err != nil {
		t.Fatal(err)
	}
	eng.Start()
	wantCascadeDone(t, b, tr)
	if tk := b.Task(t, last); tk.LastError != "mine" {
		t.Fatalf("a waiter its owner canceled was canceled again: %q", tk.LastError)
	}
	for _, id := range tr.waiters[:len(tr.waiters)-1] {
		if tk := b.Task(t, id); !strings.HasPrefix(tk.LastError, "dependency ") {
			t.Fatalf("waiter %s canceled with %q, want the dependency's reason", id, tk.LastError)
		}
	}
}

// testDepsCascadeResumes: what one engine left pending is settled by
// another on the same store, started after the first closed without
// draining (the table is the resume point).
func testDepsCascadeResumes(t *testing.T, b *Bundle) {
	tr := buildCascadeTree(t, b)
	first := cascadeEngine(t, b, cascadeBudget)
	wantCutCascade(t, b, first, tr)
	first.Close()
	cascadeEngine(t, b, cascadeBudget).Start()
	wantCascadeDone(t, b, tr)
}

// testDepsCascadeFromDeadLetter: a worker's failure that dead-letters the
// root is cut the same way, and its waiters are canceled naming the dead
// letter.
func testDepsCascadeFromDeadLetter(t *testing.T, b *Bundle) {
	tr := buildCascadeTree(t, b)
	eng := cascadeEngine(t, b, cascadeBudget)
	o := b.leaseType(t, "w.1", "work")
	if o.Task.ID != tr.root {
		t.Fatalf("leased %s, want the root %s", o.Task.ID, tr.root)
	}
	if _, err := eng.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "broken input"}); err != nil {
		t.Fatal(err)
	}
	if tk := b.Task(t, tr.root); tk.State != host.StateDeadLetter {
		t.Fatalf("the root is %s after its fatal failure", tk.State)
	}
	wantCut(t, b, tr)
	eng.Start()
	wantCascadeDone(t, b, tr)
	if tk := b.Task(t, tr.waiters[len(tr.waiters)-1]); !strings.Contains(tk.LastError, "finished canceled") {
		t.Fatalf("the chain's end was canceled with %q", tk.LastError)
	}
	if tk := b.Task(t, tr.waiters[0]); !strings.Contains(tk.LastError, "dependency "+tr.root+" finished dead_letter") {
		t.Fatalf("a waiter of the root was canceled with %q", tk.LastError)
	}
}

// testWorkflowEndedByContinuedCascade: a workflow whose final step only
// the drainer's part of a cascade reaches ends canceled, naming the step
// whose cancel started the cascade and who asked, as it does when the
// whole cascade runs in one transaction.
func testWorkflowEndedByContinuedCascade(t *testing.T, b *Bundle) {
	steps := []engine.WorkflowStepRequest{step("a", "work")}
	for _, m := range []string{"m1", "m2", "m3", "m4", "m5", "m6"} {
		steps = append(steps, step(m, "other", "a"))
	}
	steps = append(steps, step("fin", "other", "m6"))
	res, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, engine.WorkflowRequest{Name: "cut", FinalStep: "fin", Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	eng := cascadeEngine(t, b, cascadeBudget)
	if _, err := eng.Cancel(b.Ctx, b.Agent, res.Steps["a"], ""); err != nil {
		t.Fatal(err)
	}
	if v := b.workflow(t, res.WorkflowID); v.State != host.WorkflowRunning {
		t.Fatalf("workflow is %s before the drainer ran; the final step was reached in the cancel's transaction", v.State)
	}
	eng.Start()
	waitFor(t, "the workflow's end", func() bool { return b.workflow(t, res.WorkflowID).State != host.WorkflowRunning })
	v := b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled)
	body := b.receiptBody(t, v.EndReceipt)
	if body["canceled_step"] != "a" || body["canceled_by"] != b.Agent.Principal || !strings.Contains(v.Error, "step a was canceled by "+b.Agent.Principal) {
		t.Fatalf("workflow ended with %q, body %v; want it to name step a and %s", v.Error, body, b.Agent.Principal)
	}
}

// CascadeAfterReopen: pending settlements survive the store's close and
// reopen (a gate stopped, or killed, after the commit that left them) and
// a started engine on the reopened store settles them. open opens the same
// database each time.
func CascadeAfterReopen(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	b := Setup(t, func(testing.TB) Store { return st })
	tr := buildCascadeTree(t, b)
	eng := cascadeEngine(t, b, cascadeBudget)
	wantCutCascade(t, b, eng, tr)
	eng.Close()
	b.Engine.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = open(t)
	defer st.Close()
	b = Setup(t, func(testing.TB) Store { return st })
	if !b.pendingSettlements(t) {
		t.Fatal("the pending settlements did not survive the reopen")
	}
	cascadeEngine(t, b, cascadeBudget).Start()
	wantCascadeDone(t, b, tr)
	b.Verify(t)
}
