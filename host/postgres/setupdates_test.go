package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// priorityTo returns a request that sets task's priority to p, fenced on
// its state and on version (the task as read before the batch).
func priorityTo(task *host.Task, p int, version int64) func(store.Tx) error {
	return func(tx store.Tx) error {
		c := *task
		c.Priority = p
		return tx.UpdateTask(context.Background(), &c, store.Fence{State: host.StateQueued, Version: version})
	}
}

// The task updates of a batch's requests go to the server as one statement:
// four cost no more than one does, but for the settings that choose the
// set's plan and put them back (keyedJoin, plannerDefaults); each task is
// written and its version moves once.
func TestTaskUpdatesOfABatchAreOneStatement(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	batch := func(n, p int) int64 {
		var tasks []*host.Task
		var fns []func(store.Tx) error
		for range n {
			task := b.Task(t, b.Enqueue(t, "work").TaskID)
			tasks = append(tasks, task)
			fns = append(fns, priorityTo(task, p, task.Version))
		}
		before := st.WriterStatements()
		for i, err := range runHeld(t, st, fns...) {
			if err != nil {
				t.Fatalf("update %d of %d: %v", i, n, err)
			}
		}
		sent := st.WriterStatements() - before
		for i, task := range tasks {
			got := b.Task(t, task.ID)
			if got.Priority != p || got.Version != task.Version+1 {
				t.Errorf("batch of %d, task %d: priority %d version %d, want %d and %d", n, i, got.Priority, got.Version, p, task.Version+1)
			}
		}
		return sent
	}
	one := batch(1, 3)
	four := batch(4, 4)
	if settings := int64(len(keyedJoin) + len(plannerDefaults)); four > one+settings {
		t.Errorf("a batch of four task updates sent %d statements, a batch of one %d: want at most %d", four, one, one+settings)
	}
	b.Verify(t)
}

// An update of the set whose fence no longer holds fails its own request
// alone: the set's answer names the row, so that request is set aside and
// runs after its batch, alone and in strict mode, where it meets its
// fence; the rest of the batch runs again as it was (not strict) and
// commits, and the fenced-out row is not written.
func TestALostFenceInASetOfUpdatesFailsItsRequestAlone(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	var tasks []*host.Task
	for range 3 {
		tasks = append(tasks, b.Task(t, b.Enqueue(t, "work").TaskID))
	}
	reruns, aside := st.StrictReruns(), st.SetAside()
	errs := runHeld(t, st,
		priorityTo(tasks[0], 6, tasks[0].Version),
		priorityTo(tasks[1], 6, tasks[1].Version+3), // stale
		priorityTo(tasks[2], 6, tasks[2].Version))
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("sound updates failed with their batch: %v, %v", errs[0], errs[2])
	}
	if !errors.Is(errs[1], store.ErrFenced) {
		t.Errorf("stale fence: %v, want store.ErrFenced", errs[1])
	}
	if n := st.SetAside() - aside; n != 1 {
		t.Errorf("%d requests set aside, want the one whose fence was lost", n)
	}
	if n := st.StrictReruns() - reruns; n != 0 {
		t.Errorf("%d strict reruns of the whole batch, want none", n)
	}
	for i, want := range []int{6, tasks[1].Priority, 6} {
		if got := b.Task(t, tasks[i].ID); got.Priority != want {
			t.Errorf("task %d: priority %d, want %d", i, got.Priority, want)
		}
	}
	b.Verify(t)
}

// A batch with a single task update writes it as the one-row statement
// (updateOneBehind), pipelined with the COMMIT like the set: when its fence
// is lost the statement fails on the server, nothing of the batch commits,
// its request alone is set aside (and meets its fence in strict mode), and
// the batch's other request commits once, in the run without it.
func TestALostFenceOfASingleUpdateFailsItsRequestAlone(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	task := b.Task(t, b.Enqueue(t, "work").TaskID)
	rc := &host.Receipt{ID: host.NewID("R"), Tenant: "acme", Type: host.ReceiptProgress, From: "agent.kee", To: "agent.kee",
		TaskID: task.ID, Body: []byte(`{}`), Parents: []string{}, CreatedAt: b.Clock.Now()}
	reruns, aside, trips := st.StrictReruns(), st.SetAside(), st.WriterTrips()
	errs := runHeld(t, st,
		priorityTo(task, 6, task.Version+3), // stale
		func(tx store.Tx) error { return tx.AppendReceipt(context.Background(), rc) })
	if !errors.Is(errs[0], store.ErrFenced) {
		t.Errorf("stale fence: %v, want store.ErrFenced", errs[0])
	}
	if errs[1] != nil {
		t.Fatalf("the sound request failed with its batch: %v", errs[1])
	}
	if n := st.SetAside() - aside; n != 1 {
		t.Errorf("%d requests set aside, want the one whose fence was lost", n)
	}
	if n := st.StrictReruns() - reruns; n != 0 {
		t.Errorf("%d strict reruns of the whole batch, want none", n)
	}
	// The held batch's commit, the failed run (its writes and COMMIT in
	// one trip), the run without the stale request, and that request alone.
	if n := st.WriterTrips() - trips; n > 5 {
		t.Errorf("%d round trips", n)
	}
	if got := b.Task(t, task.ID); got.Priority == 6 || got.Version != task.Version {
		t.Errorf("the fenced-out update was written: priority %d, version %d (was %d)", got.Priority, got.Version, task.Version)
	}
	var seqs []int64
	if err := st.View(context.Background(), func(r store.Reader) error {
		rcs, _, err := r.ListReceipts(context.Background(), store.ReceiptFilter{Tenant: "acme", TaskID: task.ID, Limit: 100})
		for _, x := range rcs {
			if x.ID == rc.ID {
				seqs = append(seqs, x.Seq)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 1 || seqs[0] != rc.Seq {
		t.Errorf("the sound request's receipt stored %v (reported seq %d), want once", seqs, rc.Seq)
	}
	b.Verify(t)
}

// A statement a later request queues directly runs after the task updates
// the batch's earlier requests wrote behind, as they were asked: here it
// sets the priority an earlier update set, and the later one stays.
func TestADirectWriteFollowsAnEarlierRequestsTaskUpdate(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	task := b.Task(t, b.Enqueue(t, "work").TaskID)
	errs := runHeld(t, st,
		func(tx store.Tx) error {
			c := *task
			c.Priority = 5
			return tx.UpdateTask(context.Background(), &c, store.Fence{State: host.StateQueued})
		},
		func(tx store.Tx) error {
			tx.(*writeTx).ss.queue(`UPDATE tasks SET priority = 9 WHERE id = $1`, task.ID)
			return nil
		})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if got := b.Task(t, task.ID); got.Priority != 9 {
		t.Errorf("priority %d, want 9: the earlier request's update ran after the later statement", got.Priority)
	}
}

// Terminations of several obligations in one batch are one statement and
// each ends its own obligation, by its own terminator.
func TestTerminationsOfABatchEndTheirOwnObligations(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	var openers []*host.Receipt
	for range 3 {
		o := behindReceipt(b)
		if err := st.Update(ctx, func(tx store.Tx) error { return behindAssigned(ctx, tx, o) }); err != nil {
			t.Fatal(err)
		}
		openers = append(openers, o)
	}
	var fns []func(store.Tx) error
	var enders []*host.Receipt
	for _, o := range openers {
		rc := behindReceipt(b)
		enders = append(enders, rc)
		fns = append(fns, func(tx store.Tx) error { return behindRows(ctx, tx, rc, o.ID, "I-"+rc.ID) })
	}
	for i, err := range runHeld(t, st, fns...) {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	err := st.View(ctx, func(r store.Reader) error {
		for i, o := range openers {
			by, err := r.Terminator(ctx, "acme", o.ID)
			if err != nil {
				return err
			}
			if by != enders[i].ID {
				t.Errorf("obligation %d terminated by %q, want %s", i, by, enders[i].ID)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Verify(t)
}

// Two updates of one set that both lose their fences set both their
// requests aside, not the batch: the other two commit at once.
func TestTwoLostFencesInASetSetBothRequestsAside(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	var tasks []*host.Task
	for range 4 {
		tasks = append(tasks, b.Task(t, b.Enqueue(t, "work").TaskID))
	}
	reruns, aside := st.StrictReruns(), st.SetAside()
	errs := runHeld(t, st,
		priorityTo(tasks[0], 6, tasks[0].Version+2), // stale
		priorityTo(tasks[1], 6, tasks[1].Version),
		priorityTo(tasks[2], 6, tasks[2].Version+5), // stale
		priorityTo(tasks[3], 6, tasks[3].Version))
	for _, i := range []int{0, 2} {
		if !errors.Is(errs[i], store.ErrFenced) {
			t.Errorf("stale fence %d: %v, want store.ErrFenced", i, errs[i])
		}
	}
	for _, i := range []int{1, 3} {
		if errs[i] != nil {
			t.Errorf("sound update %d failed: %v", i, errs[i])
		}
	}
	if n := st.SetAside() - aside; n != 2 {
		t.Errorf("%d requests set aside, want the two whose fences were lost", n)
	}
	if n := st.StrictReruns() - reruns; n != 0 {
		t.Errorf("%d strict reruns of the whole batch, want none", n)
	}
	for i, want := range []int{tasks[0].Priority, 6, tasks[2].Priority, 6} {
		if got := b.Task(t, tasks[i].ID); got.Priority != want {
			t.Errorf("task %d: priority %d, want %d", i, got.Priority, want)
		}
	}
	b.Verify(t)
}
