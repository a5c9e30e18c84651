package postgres

import (
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// guessBundle is a conformance bundle on a store of its own, returned too.
func guessBundle(t *testing.T) (*storetest.Bundle, *Store) {
	st := openTest(t)
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
// wrote costs the writer the round trips of a plain enqueue (its
// dependency is answered from recentTasks, the locking read queued), and
// still waits, marks and locks as before.
func TestGuessedDependenciesCostNoRoundTrip(t *testing.T) {
	b, st := guessBundle(t)
	a := b.Enqueue(t, "work")
	trips := st.WriterTrips()
	b.Enqueue(t, "work")
	plain := st.WriterTrips() - trips
	trips = st.WriterTrips()
	w := b.Enqueue(t, "other", func(r *engine.EnqueueRequest) { r.After = []string{a.TaskID} })
	if got := st.WriterTrips() - trips; got != plain {
		t.Fatalf("an enqueue after a known task cost %d round trips, a plain one %d", got, plain)
	}
	if w.Status != string(host.StateWaiting) || !b.Task(t, a.TaskID).HasWaiters {
		t.Fatalf("waiter %s, dependency marked %v", w.Status, b.Task(t, a.TaskID).HasWaiters)
	}
	if n := st.StrictReruns(); n != 0 {
		t.Fatalf("%d strict reruns", n)
	}
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1", "work"))
	if tk := b.Task(t, w.TaskID); tk.State != host.StateQueued {
		t.Fatalf("waiter %s after its dependency succeeded", tk.State)
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
