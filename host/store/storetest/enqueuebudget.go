package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/groupcommit"
)

// testEnqueueBudget: a driver tells its writer queue what its claims find
// (groupcommit's enqueue budget). While a claim took all it asked for (a
// backlog) and prompt updates arrive, bulk updates pass on the budget's
// tokens and then wait for one, at most MaxHold, and still run; another
// tenant's bulk updates run at once beside that backlog; once a claim finds
// fewer than it asked for, bulk updates run at once. A claim naming task
// types finds a backlog of those types alone: bulk updates adding another
// type run at once beside it.
//
// Whether an update was held is read from the store's WriterStats, not
// from how long it took: on a loaded machine an update that passed at once
// may take longer than MaxHold, and only the bound of a held one, which
// cannot end early, is a time worth asserting.
func testEnqueueBudget(t *testing.T, b *Bundle) {
	ctx := b.Ctx
	ws, ok := b.Store.(store.WriterStatser)
	if !ok {
		t.Skip("the store reports no writer stats")
	}
	// held reports the updates held and those let go by MaxHold alone so far.
	held := func() (held, expired int64) {
		s := ws.WriterStats()
		return s.EnqueuesHeld, s.EnqueueHoldsExpired
	}
	// wantHeld fails unless the updates held and expired since h0, e0 are
	// dh and de.
	wantHeld := func(what string, h0, e0, dh, de int64) {
		t.Helper()
		if h, e := held(); h-h0 != dh || e-e0 != de {
			t.Fatalf("%s: %d held, %d of them the whole MaxHold; want %d and %d", what, h-h0, e-e0, dh, de)
		}
	}
	insert := func(from, to int) {
		t.Helper()
		if err := b.Store.Update(ctx, func(tx store.Tx) error {
			for i := from; i < to; i++ {
				if err := tx.InsertTask(ctx, wbTask(fmt.Sprintf("T-EB%d", i), "")); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	insert(0, 4)
	claimOf := func(types []string, limit, want int) {
		t.Helper()
		if err := b.Store.Update(ctx, func(tx store.Tx) error {
			ts, err := tx.ClaimTasks(ctx, store.ClaimQuery{Tenant: "acme", Types: types, Now: Epoch, Limit: limit, Grant: func(t *host.Task) {
				t.State, t.LeaseID, t.WorkerID = host.StateLeased, "L-"+t.ID, "w.1"
				t.LeasedAt, t.LeaseExpiresAt = &Epoch, new(Epoch.Add(60e9))
			}})
			if err == nil && len(ts) != want {
				err = fmt.Errorf("claimed %d, want %d", len(ts), want)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(limit, want int) { t.Helper(); claimOf(nil, limit, want) }
	ran := 0
	var mu sync.Mutex
	bulkFor := func(tenant string, types ...string) time.Duration {
		t.Helper()
		start := time.Now()
		if err := b.Store.Update(store.BulkUpdate(ctx, tenant, types...), func(store.Tx) error {
			mu.Lock()
			ran++
			mu.Unlock()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	bulk := func() time.Duration { t.Helper(); return bulkFor("acme") }
	claim(1, 1) // a backlog
	var wg sync.WaitGroup
	for range groupcommit.Burst { // the saved tokens, spent at once
		wg.Go(func() { bulk() })
	}
	wg.Wait()
	claim(1, 1) // the backlog again, and a token
	h0, e0 := held()
	bulk()
	wantHeld("a bulk update on a token", h0, e0, 0, 0)
	if d := bulk(); d < groupcommit.MaxHold*9/10 {
		t.Fatalf("a bulk update with the budget spent took %v, want MaxHold (%v) and a little", d, groupcommit.MaxHold)
	}
	wantHeld("a bulk update with the budget spent", h0, e0, 1, 1)
	// Another tenant's bulk updates are not held by acme's backlog.
	claim(1, 1)
	h0, e0 = held()
	for range 5 {
		bulkFor("globex")
	}
	wantHeld("5 bulk updates of another tenant beside acme's spent budget", h0, e0, 0, 0)
	claim(10, 1) // fewer than asked: no backlog
	for range 5 {
		bulk()
	}
	wantHeld("5 bulk updates without a backlog", h0, e0, 0, 0)
	// A claim naming its type (wbTask's "work") finds a backlog: once the
	// saved tokens are spent, a bulk update adding work among other types
	// waits, and while it waits bulk updates adding another type of acme
	// run at once.
	insert(4, 6)
	claimOf([]string{"work"}, 1, 1)
	for range groupcommit.Burst {
		wg.Go(func() { bulkFor("acme", "work") })
	}
	wg.Wait()
	h0, e0 = held()
	heldFor := make(chan time.Duration, 1)
	go func() { heldFor <- bulkFor("acme", "other", "work") }()
	for deadline := time.Now().Add(30 * time.Second); ws.WriterStats().EnqueuesWaiting == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a bulk update adding work with work's budget spent was not held in 30 s")
		}
	}
	for range 5 {
		bulkFor("acme", "other")
	}
	d := <-heldFor
	wantHeld("5 bulk updates of another type beside work's spent budget, and one adding work", h0, e0, 1, 1)
	if d < groupcommit.MaxHold*9/10 {
		t.Fatalf("a bulk update adding work and another type with work's budget spent took %v, want MaxHold (%v) and a little", d, groupcommit.MaxHold)
	}
	if want := 2*groupcommit.Burst + 2 + 5 + 5 + 5 + 1; ran != want {
		t.Fatalf("%d bulk updates ran, want %d", ran, want)
	}
}
