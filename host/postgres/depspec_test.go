package postgres

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// guessBundle is a conformance bundle on a store of its own, returned too.
func guessBundle(t *testing.T) (*storetest.Bundle, *Store) {
	st := openIn(t, newSchema(t), Options{Writers: 1}) // the guesses and round trips of one writer
	return storetest.Setup(t, func(testing.TB) store.Store { return st }), st
}

// stale puts a copy of task id, changed by edit, into the store's recent
// rows at a later version, as if another host's write had not been seen.
func stale(t *testing.T, b *storetest.Bundle, st *Store, id string, edit func(*host.Task)) {
	t.Helper()
	tk := *b.Task(t, id)
	edit(&tk)
	tk.Version += 100
	st.recent.put([]*host.Task{&tk})
}

// TestGuessedDependenciesCostNoRoundTrip: an enqueue after a task this store
// wrote costs the writer no round trip of its own (its dependency is
// answered from recentTasks, the locking read queued): one more than a
// plain enqueue, whose writes go with the COMMIT, as the guess's answer is
// read before COMMIT is sent. It still waits, marks and locks as before.
func TestGuessedDependenciesCostNoRoundTrip(t *testing.T) {
	b, st := guessBundle(t)
	a := b.Enqueue(t, "work")
	trips := st.WriterTrips()
	b.Enqueue(t, "work")
	plain := st.WriterTrips() - trips
	trips = st.WriterTrips()
	w := b.Enqueue(t, "other", func(r *engine.EnqueueRequest) { r.After = []string{a.TaskID} })
	if got := st.WriterTrips() - trips; got != plain+1 {
		t.Fatalf("an enqueue after a known task cost %d round trips, a plain one %d", got, plain)
	}
	if w.Status != string(host.StateWaiting) || !b.Task(t, a.TaskID).HasWaiters {
		t.Fatalf("waiter %s, dependency marked %v", w.Status, b.Task(t, a.TaskID).HasWaiters)
	}
	// A second waiter finds the dependency marked: the marker and the
	// locking read go as two statements, still without a round trip.
	trips = st.WriterTrips()
	w2 := b.Enqueue(t, "other", func(r *engine.EnqueueRequest) { r.After = []string{a.TaskID} })
	if got := st.WriterTrips() - trips; got != plain+1 || w2.Status != string(host.StateWaiting) {
		t.Fatalf("a second waiter: %d round trips (a plain enqueue %d), %s", got, plain, w2.Status)
	}
	if n := st.StrictReruns(); n != 0 {
		t.Fatalf("%d strict reruns", n)
	}
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1", "work"))
	for _, id := range []string{w.TaskID, w2.TaskID} {
		if tk := b.Task(t, id); tk.State != host.StateQueued {
			t.Fatalf("waiter %s after its dependency succeeded", tk.State)
		}
	}
}

// TestGuessedDependencyCheckedAgainstTheRow: a guess from a copy that no
// longer holds (the dependency finished, unseen by this store) is caught by
// its check before COMMIT, and the batch runs again with the row read: the
// waiter is ready at once, not left waiting on a finished task.
func TestGuessedDependencyCheckedAgainstTheRow(t *testing.T) {
	b, st := guessBundle(t)
	a := b.Enqueue(t, "work")
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1", "work"))
	stale(t, b, st, a.TaskID, func(tk *host.Task) {
		tk.State, tk.CompletedAt, tk.Result = host.StateLeased, nil, nil
	})
	w := b.Enqueue(t, "other", func(r *engine.EnqueueRequest) { r.After = []string{a.TaskID} })
	if w.Status != string(host.StateQueued) {
		t.Fatalf("waiter of a finished dependency enqueued %s, want queued", w.Status)
	}
	if n := st.StrictReruns(); n != 1 {
		t.Fatalf("%d strict reruns, want 1 (the guess's check)", n)
	}
}

// TestGuessedRefusalIsReadAgain: a refusal built on a guess (the copy shows
// the dependency held by no worker, so a worker may not name it) is not
// given: the request runs again with the row read, which shows the task
// held by that worker.
func TestGuessedRefusalIsReadAgain(t *testing.T) {
	b, st := guessBundle(t)
	a := b.Enqueue(t, "work")
	b.LeaseOne(t, "w.1", "work")
	stale(t, b, st, a.TaskID, func(tk *host.Task) {
		tk.State, tk.WorkerID, tk.LeaseID = host.StateQueued, "", ""
	})
	worker := engine.Actor{Tenant: "acme", Principal: "w.1", Role: engine.RoleWorker}
	w, err := b.Engine.Enqueue(b.Ctx, worker, engine.EnqueueRequest{TaskType: "other", After: []string{a.TaskID}})
	if err != nil || w.Status != string(host.StateWaiting) {
		t.Fatalf("a worker's enqueue after the task it holds: %+v, %v", w, err)
	}
	if n := st.StrictReruns(); n != 0 {
		t.Fatalf("%d strict reruns, want none (the request alone runs again)", n)
	}
}

// TestGuessedSettlementCostsNoRoundTrip: completing a dependency whose one
// waiter this store enqueued costs the writer no round trip of its own (the
// settlement answered from recentEdges, settle_waiters queued): one more
// than a plain completion, as the guess's answer is read before COMMIT is
// sent. The waiter is ready.
func TestGuessedSettlementCostsNoRoundTrip(t *testing.T) {
	b, st := guessBundle(t)
	plain := b.Enqueue(t, "work")
	a := b.Enqueue(t, "work")
	w := b.Enqueue(t, "other", func(r *engine.EnqueueRequest) { r.After = []string{a.TaskID} })
	offers, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"work"}, MaxTasks: 2})
	if err != nil || len(offers) != 2 {
		t.Fatalf("lease: %d offers, %v", len(offers), err)
	}
	if offers[0].Task.ID != plain.TaskID {
		offers[0], offers[1] = offers[1], offers[0]
	}
	trips := st.WriterTrips()
	b.Complete(t, "w.1", offers[0])
	plainTrips := st.WriterTrips() - trips
	trips = st.WriterTrips()
	b.Complete(t, "w.1", offers[1])
	if got := st.WriterTrips() - trips; got != plainTrips+1 {
		t.Fatalf("completing a task waited on cost %d round trips, a plain one %d", got, plainTrips)
	}
	if tk := b.Task(t, w.TaskID); tk.State != host.StateQueued {
		t.Fatalf("waiter %s after its dependency succeeded", tk.State)
	}
	if n := st.StrictReruns(); n != 0 {
		t.Fatalf("%d strict reruns", n)
	}
}

// TestGuessedSettlementCheckedAgainstTheRows: a settlement guessed from
// what this store wrote misses a waiter another host enqueued, or a waiter
// another host canceled; its check catches either before COMMIT, and the
// batch runs again with settle_waiters answered: every waiter settled
// right.
func TestGuessedSettlementCheckedAgainstTheRows(t *testing.T) {
	schema := newSchema(t)
	st := openIn(t, schema, Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) store.Store { return st })
	far, err := engine.New(engine.Config{Store: openIn(t, schema, Options{Writers: 1}), Clock: b.Clock, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	after := func(id string) func(*engine.EnqueueRequest) {
		return func(r *engine.EnqueueRequest) { r.After = []string{id} }
	}
	// Another host's waiter, unknown here.
	a := b.Enqueue(t, "work")
	w := b.Enqueue(t, "other", after(a.TaskID))
	req := engine.EnqueueRequest{TaskType: "other"}
	after(a.TaskID)(&req)
	w2, err := far.Enqueue(b.Ctx, b.Agent, req)
	if err != nil || w2.Status != string(host.StateWaiting) {
		t.Fatalf("far enqueue: %+v, %v", w2, err)
	}
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1", "work"))
	for _, id := range []string{w.TaskID, w2.TaskID} {
		if tk := b.Task(t, id); tk.State != host.StateQueued {
			t.Fatalf("waiter %s is %s after its dependency succeeded", id, tk.State)
		}
	}
	if n := st.StrictReruns(); n != 1 {
		t.Fatalf("%d strict reruns, want 1 (the guess's check)", n)
	}
	// A waiter canceled by another host, unseen here.
	c := b.Enqueue(t, "work")
	w3 := b.Enqueue(t, "other", after(c.TaskID))
	if _, err := far.Cancel(b.Ctx, b.Agent, w3.TaskID, "not needed"); err != nil {
		t.Fatal(err)
	}
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1", "work"))
	if tk := b.Task(t, w3.TaskID); tk.State != host.StateCanceled {
		t.Fatalf("a canceled waiter became %s", tk.State)
	}
	if n := st.StrictReruns(); n != 2 {
		t.Fatalf("%d strict reruns, want 2", n)
	}
}

// TestGuessedSettlementOfAMarkedWaiter: a waiter that is itself waited on
// (marked when the next task was enqueued after it, which changes no
// version) is guessed with its marker, so its settlement needs no rerun.
func TestGuessedSettlementOfAMarkedWaiter(t *testing.T) {
	b, st := guessBundle(t)
	a := b.Enqueue(t, "work")
	w1 := b.Enqueue(t, "other", func(r *engine.EnqueueRequest) { r.After = []string{a.TaskID} })
	w2 := b.Enqueue(t, "other", func(r *engine.EnqueueRequest) { r.After = []string{w1.TaskID} })
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1", "work"))
	if tk := b.Task(t, w1.TaskID); tk.State != host.StateQueued || !tk.HasWaiters {
		t.Fatalf("first waiter %s (marked %v), want queued and marked", tk.State, tk.HasWaiters)
	}
	if n := st.StrictReruns(); n != 0 {
		t.Fatalf("%d strict reruns, want none", n)
	}
	b.Complete(t, "w.2", b.LeaseOne(t, "w.2", "other"))
	if tk := b.Task(t, w2.TaskID); tk.State != host.StateQueued {
		t.Fatalf("second waiter %s, want queued", tk.State)
	}
	if n := st.StrictReruns(); n != 0 {
		t.Fatalf("%d strict reruns, want none", n)
	}
}

// TestRecentTasksHoldNoLargeRows: the rows kept for guesses are bounded in
// bytes, not only in number. An agent that enqueues tasks with the largest
// params the gate takes (256 KiB) must not make the host hold maxRecentTasks
// of them (2 GiB) until the set starts again: a row larger than
// maxRecentRowBytes is not held, and a copy held of an earlier version of
// it is dropped.
func TestRecentTasksHoldNoLargeRows(t *testing.T) {
	var c recentTasks
	big := json.RawMessage(`{"x":"` + strings.Repeat("a", engine.MaxParamsBytes-10) + `"}`)
	small := &host.Task{Tenant: "acme", ID: "T-small", State: host.StateQueued, Version: 1, Params: json.RawMessage(`{}`)}
	c.put([]*host.Task{small})
	ts := make([]*host.Task, 0, maxRecentTasks)
	for i := range maxRecentTasks {
		ts = append(ts, &host.Task{Tenant: "acme", ID: fmt.Sprintf("T-%d", i), State: host.StateQueued, Version: 1, Params: big})
	}
	grown := *small
	grown.Version, grown.Summary = 2, strings.Repeat("s", 1000)
	grown.LastError = strings.Repeat("e", 8<<10)
	c.put(append(ts[:maxRecentTasks-2:maxRecentTasks-2], &grown)) // one short of the count that starts the set again
	held := 0
	for _, tk := range c.m {
		held += len(tk.Params) + len(tk.Summary) + len(tk.LastError)
	}
	if limit := maxRecentTasks * 4096; held > limit {
		t.Fatalf("recent rows hold %d bytes of params, summaries and errors, more than %d", held, limit)
	}
	if got := c.guessable("acme", []string{"T-small"}, nil); got != nil {
		t.Fatalf("a copy of T-small at version 1 is still held after a version too large to hold: %+v", got[0])
	}
}

// A guessed enqueue past the waiter bound: the bound is asked of the guess
// after its read was queued, the guess's check (read before COMMIT) finds
// the dependency crowded, and the request meets the bound in strict mode as
// CodeTooManyWaiters; nothing of it is written.
func TestGuessedEnqueuePastTheWaiterBoundIsRefused(t *testing.T) {
	b, st := guessBundle(t)
	limited, err := engine.New(engine.Config{Store: st, Clock: b.Clock, ExpiryJitter: -1, MaxWaiters: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	a := b.Enqueue(t, "work")
	if _, err := limited.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a.TaskID}}); err != nil {
		t.Fatalf("the first waiter: %v", err)
	}
	aside, reruns := st.SetAside(), st.StrictReruns()
	_, err = limited.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a.TaskID}, IdempotencyKey: "second"})
	storetest.WantCode(t, err, host.CodeTooManyWaiters)
	// Alone in its batch, the request is the batch: it runs again in strict
	// mode, not set aside.
	if a, r := st.SetAside()-aside, st.StrictReruns()-reruns; a != 0 || r != 1 {
		t.Errorf("%d requests set aside and %d strict reruns, want 0 and 1", a, r)
	}
	var n int
	if err := st.View(b.Ctx, func(r store.Reader) error {
		tasks, _, err := r.ListTasks(b.Ctx, store.TaskFilter{Tenant: "acme", Types: []string{"other"}, Limit: 10})
		n = len(tasks)
		return err
	}); err != nil || n != 1 {
		t.Errorf("%d tasks of type other (%v), want the first waiter alone", n, err)
	}
	b.Verify(t)
}

// A guessed enqueue holds each dependency to its own bound: one its caller
// created to the whole bound, one another principal created to the bound
// less the creator's reserve (host.CreatorWaiterReserve). An enqueue
// naming both, with the caller's own dependency between the two bounds,
// is written from its guess (no strict rerun); another principal's past
// its share is refused.
func TestGuessedEnqueueHoldsEachDependencyToItsBound(t *testing.T) {
	b, st := guessBundle(t)
	const limit = 10
	limited, err := engine.New(engine.Config{Store: st, Clock: b.Clock, ExpiryJitter: -1, MaxWaiters: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	hexy := engine.Actor{Tenant: "acme", Principal: "agent.hexy", Role: engine.RoleAgent}
	enqueue := func(a engine.Actor, ids ...string) error {
		_, err := limited.Enqueue(b.Ctx, a, engine.EnqueueRequest{TaskType: "other", After: ids, AfterRule: host.RuleAllFinished})
		return err
	}
	mine := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.Recipient = hexy.Principal }) // kee's
	theirs, err := limited.Enqueue(b.Ctx, hexy, engine.EnqueueRequest{TaskType: "work", Recipient: "agent.kee"})
	if err != nil {
		t.Fatal(err)
	}
	share := limit - host.CreatorWaiterReserve(limit)
	for i := range share {
		if err := enqueue(b.Agent, mine.TaskID); err != nil {
			t.Fatalf("kee's waiter %d: %v", i+1, err)
		}
	}
	reruns := st.StrictReruns()
	if err := enqueue(b.Agent, mine.TaskID, theirs.TaskID); err != nil {
		t.Fatalf("kee's waiter on its own task (%d waiting) and hexy's: %v", share, err)
	}
	if n := st.StrictReruns() - reruns; n != 0 {
		t.Errorf("%d strict reruns, want the guess's own answer", n)
	}
	storetest.WantCode(t, enqueue(hexy, mine.TaskID), host.CodeTooManyWaiters)
	b.Verify(t)
}

// Two wrong guesses in one batch: their checks are read before COMMIT, and
// neither fails on the server, so both are found in the one run and set
// aside together; the batch's plain enqueue commits without them, and each
// waiter, read again in strict mode, is ready at once (its dependency
// finished). (Checked on the server, as a lost fence is, the first would
// stop the pipeline and each would cost a run of its own: RATIONALE.md, "A
// batch commits in the round trip that carries its writes".)
func TestTwoWrongGuessesInABatchAreFoundInOneRun(t *testing.T) {
	b, st := guessBundle(t)
	var deps []string
	for range 2 {
		a := b.Enqueue(t, "work")
		b.Complete(t, "w.1", b.LeaseOne(t, "w.1", "work"))
		stale(t, b, st, a.TaskID, func(tk *host.Task) {
			tk.State, tk.CompletedAt, tk.Result = host.StateLeased, nil, nil
		})
		deps = append(deps, a.TaskID)
	}
	aside, reruns := st.SetAside(), st.StrictReruns()
	hold, held := make(chan struct{}), make(chan struct{})
	go st.Update(b.Ctx, func(store.Tx) error { close(held); <-hold; return nil })
	<-held
	trips := st.WriterTrips()
	results := make([]*engine.EnqueueResult, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		req := engine.EnqueueRequest{TaskType: "other"}
		if i < 2 {
			req.After = []string{deps[i]}
		}
		wg.Add(1)
		go func() { defer wg.Done(); results[i], errs[i] = b.Engine.Enqueue(b.Ctx, b.Agent, req) }()
		waitQueued(t, st, i+1, "an enqueue never queued behind the held batch")
	}
	close(hold)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
		if results[i].Status != string(host.StateQueued) {
			t.Errorf("enqueue %d: %s, want queued", i, results[i].Status)
		}
	}
	if a, r := st.SetAside()-aside, st.StrictReruns()-reruns; a != 2 || r != 0 {
		t.Errorf("%d requests set aside and %d strict reruns of the batch, want 2 and 0", a, r)
	}
	// The run that found both (its writes and both reads, then ROLLBACK),
	// the batch without them (writes and COMMIT), and the two in strict
	// mode: 13 round trips. Had each wrong guess stopped its run, it would
	// have cost one of its own: 14.
	if n := st.WriterTrips() - trips; n > 13 {
		t.Errorf("%d round trips, want 13 (both wrong guesses found in one run)", n)
	}
	b.Verify(t)
}
