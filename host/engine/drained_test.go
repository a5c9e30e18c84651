package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// claimCount counts the claims of ready tasks made through it.
type claimCount struct {
	store.Store
	n atomic.Int64
}

type claimCountTx struct {
	store.Tx
	n *atomic.Int64
}

func (s *claimCount) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(claimCountTx{tx, &s.n}) })
}

func (tx claimCountTx) ClaimTasks(ctx context.Context, q store.ClaimQuery) ([]*host.Task, error) {
	tx.n.Add(1)
	return tx.Tx.ClaimTasks(ctx, q)
}

// parked is how many lease calls of tenant wait to be woken.
func (ws *waiters) parked(tenant string) int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.byT[tenant])
}

// A long-polling lease call that arrives while a look of its kind has just
// found the queue empty parks without a claim of its own, and is still woken
// by the next task queued.
func TestALeaseCallArrivingAtADrainedQueueParksWithoutAClaim(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &claimCount{Store: openSQLite(t)}
	eng, err := New(Config{Store: st, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	eng.waiters.drainedFor = time.Hour // the mark must not lapse while the test runs
	agent := Actor{Tenant: "acme", Principal: "agent.kee", Role: RoleAgent}
	tt := host.NewTaskType("work")
	tt.Tenant, tt.LeaseSeconds = "acme", 60
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	type leased struct {
		offers []host.Offer
		err    error
	}
	got := make(chan leased, 2)
	lease := func(worker string) {
		offers, err := eng.Lease(ctx, LeaseRequest{Tenant: "acme", WorkerID: worker, Types: []string{"work"}, MaxTasks: 4, Wait: time.Minute})
		got <- leased{offers, err}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 10s for %s: %d claims, %d parked", what, st.n.Load(), eng.waiters.parked("acme"))
			}
		}
	}
	go lease("w.1")
	waitFor("the first call to claim and park", func() bool { return st.n.Load() == 1 && eng.waiters.parked("acme") == 1 })
	go lease("w.2")
	waitFor("the second call to park", func() bool { return eng.waiters.parked("acme") == 2 })
	if n := st.n.Load(); n != 1 {
		t.Fatalf("the call arriving at a drained queue claimed: %d claims, want 1", n)
	}
	for i := range 2 {
		if _, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "work"}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			if r.err != nil || len(r.offers) != 1 {
				t.Fatalf("task %d: a parked call answered %d offers, %v; want the task", i+1, len(r.offers), r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("task %d was queued and no parked call was offered it in 10s", i+1)
		}
	}
	if n := st.n.Load(); n != 3 {
		t.Errorf("%d claims in all, want 3 (the first call's look, then one a woken call)", n)
	}
}
