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
	waitFor("the second call to park or claim", func() bool { return eng.waiters.skips.Load() == 1 || st.n.Load() == 2 })
	if n := st.n.Load(); n != 1 {
		t.Fatalf("the call arriving at a drained queue claimed: %d claims, want 1", n)
	}
	waitFor("the second call to park", func() bool { return eng.waiters.parked("acme") == 2 })
	// A call that does not wait looks whatever the mark says.
	if offers, err := eng.Lease(ctx, LeaseRequest{Tenant: "acme", WorkerID: "w.3", Types: []string{"work"}, MaxTasks: 4}); err != nil || len(offers) != 0 {
		t.Fatalf("a call without wait answered %d offers, %v", len(offers), err)
	}
	if n := st.n.Load(); n != 2 {
		t.Fatalf("a call without wait made %d claims, want 1", n-1)
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
	if n := st.n.Load(); n != 4 {
		t.Errorf("%d claims in all, want 4 (the first call's look, the call without wait's, then one a woken call)", n)
	}
}

// A call that parks on a drained mark looks again when the mark lapses, not
// at the fallback poll: a task made ready by time alone (here a delay
// that passes) wakes no one.
func TestATaskReadyByTimeIsFoundByAnArrivingCallWhenTheMarkLapses(t *testing.T) {
	ctx := context.Background()
	clock := host.NewManualClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	// The fallback poll is longer than the call's wait: only the mark's
	// lapse can find the task in time.
	eng, err := New(Config{Store: openSQLite(t), ExpiryJitter: -1, Clock: clock, FallbackPoll: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	eng.waiters.drainedFor = 200 * time.Millisecond
	agent := Actor{Tenant: "acme", Principal: "agent.kee", Role: RoleAgent}
	tt := host.NewTaskType("work")
	tt.Tenant, tt.LeaseSeconds = "acme", 60
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	req := LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"work"}, MaxTasks: 4}
	if _, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "work", DelaySeconds: 60}); err != nil {
		t.Fatal(err)
	}
	// A look that finds nothing ready marks the queue drained.
	req.Wait = time.Millisecond
	if offers, err := eng.Lease(ctx, req); err != nil || len(offers) != 0 {
		t.Fatalf("setup: a lease before the delay passed answered %d offers, %v", len(offers), err)
	}
	clock.Advance(61 * time.Second) // the task is ready now, and nothing woke anyone
	req.Wait = 10 * time.Second
	start := time.Now()
	offers, err := eng.Lease(ctx, req)
	took := time.Since(start)
	if err != nil || len(offers) != 1 {
		t.Fatalf("an arriving call answered %d offers, %v; want the task that became ready", len(offers), err)
	}
	if took >= 5*time.Second {
		t.Errorf("an arriving call found a task ready by time after %s; want it by the mark's lapse (200ms), long before the poll (1m)", took)
	}
}

// Resuming a paused type wakes every parked call that wants it: its backlog
// may be larger than any one call's room.
func TestResumingATypeWakesEveryParkedCall(t *testing.T) {
	ctx := context.Background()
	eng, err := New(Config{Store: openSQLite(t), ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	agent := Actor{Tenant: "acme", Principal: "agent.kee", Role: RoleAgent}
	tt := host.NewTaskType("work")
	tt.Tenant, tt.LeaseSeconds = "acme", 60
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.PauseTaskType(ctx, "acme", "work", "agent.kee", "backlog"); err != nil {
		t.Fatal(err)
	}
	const backlog = MaxBatch + 20
	for range backlog {
		if _, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "work"}); err != nil {
			t.Fatal(err)
		}
	}
	type leased struct {
		n   int
		err error
	}
	got := make(chan leased, 2)
	for _, w := range []string{"w.1", "w.2"} {
		go func() {
			offers, err := eng.Lease(ctx, LeaseRequest{Tenant: "acme", WorkerID: w, Types: []string{"work"}, MaxTasks: MaxBatch, Wait: 10 * time.Second})
			got <- leased{len(offers), err}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); eng.waiters.parked("acme") != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the two calls did not park in 10s: %d parked", eng.waiters.parked("acme"))
		}
	}
	woke := eng.waiters.woke.Load()
	if was, err := eng.ResumeTaskType(ctx, "acme", "work"); err != nil || !was {
		t.Fatalf("resume: %v, %v", was, err)
	}
	if n := eng.waiters.woke.Load() - woke; n != 2 {
		t.Errorf("the resume woke %d of the 2 parked calls", n)
	}
	total := 0
	for range 2 {
		r := <-got
		if r.err != nil || r.n == 0 {
			t.Fatalf("a parked call answered %d offers, %v after the resume", r.n, r.err)
		}
		total += r.n
	}
	if total != backlog {
		t.Errorf("the two calls were offered %d tasks, want the backlog's %d", total, backlog)
	}
}
