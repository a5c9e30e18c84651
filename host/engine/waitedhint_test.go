package engine

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// finishLog records, for each terminal task write made through it, whether
// the write was fenced on the has-waiters marker's absence.
type finishLog struct {
	store.Store
	mu        sync.Mutex
	noWaiters map[string][]bool
}

type finishLogTx struct {
	store.Tx
	l *finishLog
}

func (s *finishLog) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(finishLogTx{tx, s}) })
}

func (tx finishLogTx) UpdateTask(ctx context.Context, t *host.Task, f store.Fence) error {
	if t.State.Terminal() {
		tx.l.mu.Lock()
		tx.l.noWaiters[t.ID] = append(tx.l.noWaiters[t.ID], f.NoWaiters)
		tx.l.mu.Unlock()
	}
	return tx.Tx.UpdateTask(ctx, t, f)
}

// A completion built from the copy kept at lease time, before an enqueue
// on the same engine named the task in its after list, settles the waiter
// on every run of its transaction: a run rolled back (a batch run again)
// does not use up the engine's note that the task is waited on, so the run
// that commits is not fenced on the marker's absence (which the marker
// would fail, costing the write a rebuild from the row).
func TestAWaitedOnHintOutlivesARolledBackRun(t *testing.T) {
	ctx := context.Background()
	log := &finishLog{Store: openSQLite(t), noWaiters: map[string][]bool{}}
	st := &rerunStore{Store: log, between: func() {}}
	eng, err := New(Config{Store: st, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	agent := Actor{Tenant: "acme", Principal: "agent.kee", Role: RoleAgent}
	for _, typ := range []string{"work", "merge"} {
		tt := host.NewTaskType(typ)
		tt.Tenant, tt.LeaseSeconds = "acme", 60
		if _, err := eng.PutTaskType(ctx, tt); err != nil {
			t.Fatal(err)
		}
	}
	dep, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := eng.Lease(ctx, LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"work"}})
	if err != nil || len(offers) != 1 {
		t.Fatalf("lease: %d offers, %v", len(offers), err)
	}
	waiter, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "merge", After: []string{dep.TaskID}})
	if err != nil || waiter.Task.State != host.StateWaiting {
		t.Fatalf("setup: the waiter's enqueue answered %v, %v; want it waiting", waiter, err)
	}
	st.armed.Store(true)
	if _, err := eng.Complete(ctx, CompleteRequest{WorkerCall: WorkerCall{Tenant: "acme", WorkerID: "w.1", LeaseID: offers[0].LeaseID},
		Result: host.Result{Pointer: "inline:eA=="}}); err != nil {
		t.Fatal(err)
	}
	if st.armed.Load() {
		t.Fatal("setup: the completion's transaction was not run twice")
	}
	log.mu.Lock()
	runs := log.noWaiters[dep.TaskID]
	log.mu.Unlock()
	// The driver may run a failed transaction's function again on its own
	// (SQLite isolates a failed request that way): every run counts.
	if len(runs) < 2 {
		t.Fatalf("setup: %d terminal writes of the dependency, want one a run (two runs at least)", len(runs))
	}
	if slices.Contains(runs, true) {
		t.Fatalf("the completion's terminal writes, a run each, were fenced on no waiters %v; want none fenced (the rolled-back runs, then the one that commits)", runs)
	}
	got, err := eng.Lease(ctx, LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"merge"}})
	if err != nil || len(got) != 1 || got[0].Task.ID != waiter.TaskID {
		t.Fatalf("the waiter was not offered once its dependency completed: %d offers, %v", len(got), err)
	}
}
