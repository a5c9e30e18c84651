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
func testEnqueueBudget(t *testing.T, b *Bundle) {
	ctx := b.Ctx
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
	if d := bulk(); d >= groupcommit.MaxHold {
		t.Fatalf("a bulk update on a token took %v, MaxHold or more", d)
	}
	if d := bulk(); d < groupcommit.MaxHold*9/10 || d > 5*groupcommit.MaxHold {
		t.Fatalf("a bulk update with the budget spent took %v, want MaxHold (%v) and a little", d, groupcommit.MaxHold)
	}
	// Another tenant's bulk updates are not held by acme's backlog.
	claim(1, 1)
	start := time.Now()
	for range 5 {
		bulkFor("globex")
	}
	if d := time.Since(start); d >= groupcommit.MaxHold {
		t.Fatalf("5 bulk updates of another tenant beside acme's spent budget took %v, MaxHold or more", d)
	}
	claim(10, 1) // fewer than asked: no backlog
	start = time.Now()
	for range 5 {
		bulk()
	}
	if d := time.Since(start); d >= groupcommit.MaxHold {
		t.Fatalf("5 bulk updates without a backlog took %v, MaxHold or more", d)
	}
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
	held := make(chan time.Duration, 1)
	go func() { held <- bulkFor("acme", "other", "work") }()
	time.Sleep(groupcommit.MaxHold / 10)
	start = time.Now()
	for range 5 {
		bulkFor("acme", "other")
	}
	if d := time.Since(start); d >= groupcommit.MaxHold/2 {
		t.Fatalf("5 bulk updates of another type beside work's spent budget took %v, MaxHold/2 or more", d)
	}
	if d := <-held; d < groupcommit.MaxHold*9/10 || d > 5*groupcommit.MaxHold {
		t.Fatalf("a bulk update adding work and another type with work's budget spent took %v, want MaxHold (%v) and a little", d, groupcommit.MaxHold)
	}
	if want := 2*groupcommit.Burst + 2 + 5 + 5 + 5 + 1; ran != want {
		t.Fatalf("%d bulk updates ran, want %d", ran, want)
	}
}
