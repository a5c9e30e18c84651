package storetest

import (
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// testDepsOwedWaiters: OwedWaiters counts the unfinished tasks that wait on
// a task, by an open edge (it has not finished, or its settlement is
// pending) or one settled as succeeded (their workers read its result), and
// names the first by id; a finished waiter, another task's waiter or another
// tenant's id counts for nothing. Inside Update it sees a waiter the same
// transaction wrote.
func testDepsOwedWaiters(t *testing.T, b *Bundle) {
	owed := func(tenant, dep string) (int, string) {
		t.Helper()
		var n int
		var first string
		if err := b.Store.View(b.Ctx, func(r store.Reader) error {
			var err error
			n, first, err = r.OwedWaiters(b.Ctx, tenant, dep)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n, first
	}
	wantOwed := func(dep string, n int, first, why string) {
		t.Helper()
		if gn, gf := owed("acme", dep); gn != n || gf != first {
			t.Fatalf("%s: OwedWaiters = %d, %q; want %d, %q", why, gn, gf, n, first)
		}
	}
	a := b.Enqueue(t, "work")
	other := b.Enqueue(t, "work")
	wantOwed(a.TaskID, 0, "", "no waiter yet")
	w1 := b.Enqueue(t, "other", after("", a.TaskID))
	w2 := b.Enqueue(t, "other", after(host.RuleAllFinished, a.TaskID, other.TaskID))
	first := min(w1.TaskID, w2.TaskID)
	wantOwed(a.TaskID, 2, first, "two waiting on open edges")
	wantOwed(other.TaskID, 1, w2.TaskID, "the other dependency")
	if n, f := owed("globex", a.TaskID); n != 0 || f != "" {
		t.Fatalf("another tenant: OwedWaiters = %d, %q", n, f)
	}

	// a succeeds: its edges are settled as succeeded and w1 is queued; w2
	// still waits on other; both read a's result. Then other succeeds.
	o := b.leaseType(t, "w.1", "work")
	if o.Task.ID != a.TaskID {
		t.Fatalf("offered %s, want %s", o.Task.ID, a.TaskID)
	}
	b.Complete(t, "w.1", o)
	wantOwed(a.TaskID, 2, first, "waiters of a succeeded task")
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	wantOwed(a.TaskID, 2, first, "its waiters queued")
	// A waiter queued after a finished: its edge is written settled.
	w3 := b.Enqueue(t, "other", after("", a.TaskID))
	wantOwed(a.TaskID, 3, min(first, w3.TaskID), "a waiter queued after it succeeded")

	// Finished waiters owe nothing: w1 canceled, and every waiter leased
	// and completed.
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, w1.TaskID, "not needed"); err != nil {
		t.Fatal(err)
	}
	wantOwed(a.TaskID, 2, min(w2.TaskID, w3.TaskID), "one waiter canceled")
	for range 2 {
		b.Complete(t, "w.1", b.leaseType(t, "w.1", "other"))
	}
	wantOwed(a.TaskID, 0, "", "every waiter finished")

	// Inside a write transaction, after the waiter's own rows.
	w4 := b.Enqueue(t, "other", after("", a.TaskID))
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		n, f, err := tx.OwedWaiters(b.Ctx, "acme", a.TaskID)
		if err == nil && (n != 1 || f != w4.TaskID) {
			t.Errorf("inside Update: OwedWaiters = %d, %q; want 1, %q", n, f, w4.TaskID)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
