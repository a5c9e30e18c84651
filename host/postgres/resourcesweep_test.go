package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// pausingClock is a manual clock whose next reading, once armed, waits until
// the test lets it go: the test then knows the caller read the clock and
// holds whatever it took before.
type pausingClock struct {
	*host.ManualClock
	armed   atomic.Bool
	reached chan time.Time
	resume  chan struct{}
}

func (c *pausingClock) Now() time.Time {
	t := c.ManualClock.Now()
	if c.armed.CompareAndSwap(true, false) {
		c.reached <- t
		<-c.resume
	}
	return t
}

// TestResourceLeaseSweepWaitsForDecisionsOnItsResources: host a decides an
// acquire of a resource (it holds the resource's lock and has read the clock,
// one millisecond before the holder's lease expires) when host b's sweeper,
// a moment later by the clock, records that lease as expired. The sweep must
// wait for the resource's lock: recorded before the acquire reads the leases,
// the expiry would hide a lease that was live at the acquire's time, and the
// acquire would be granted a lease overlapping it (seen under load by the
// multi-host end-to-end test: MUTATES leases overlapping by 5.6 ms).
func TestResourceLeaseSweepWaitsForDecisionsOnItsResources(t *testing.T) {
	schema := newSchema(t)
	epoch := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := &pausingClock{ManualClock: host.NewManualClock(epoch), reached: make(chan time.Time), resume: make(chan struct{})}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	newEngine := func(st *Store) *engine.Engine {
		eng, err := engine.New(engine.Config{Store: st, Clock: clock, ExpiryJitter: -1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(eng.Close) // never started: no sweeper of its own reads the clock
		return eng
	}
	stA, stB := openIn(t, schema, Options{Writers: 1}), openIn(t, schema, Options{Writers: 1})
	a, b := newEngine(stA), newEngine(stB)
	ctx := context.Background()
	const tenant = "acme"
	resource := "FILE:/sweep/" + schema // a lock key no concurrent test shares
	in := []engine.ResourceIntent{{Resource: resource, Predicate: host.PredicateMutates}}

	first, err := a.AcquireResources(ctx, engine.AcquireRequest{Tenant: tenant, Holder: "h1", Intents: in, TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	held := first.Leases[0]

	locks, err := pgx.Connect(ctx, testURL()) // reads pg_locks, outside the gate
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close(ctx)

	clock.Advance(99 * time.Millisecond)
	clock.armed.Store(true)
	prio := epoch // given, so the acquire's one clock reading is the one under the lock
	type outcome struct {
		res *engine.AcquireResult
		err error
	}
	acquired := make(chan outcome, 1)
	go func() {
		res, err := a.AcquireResources(ctx, engine.AcquireRequest{Tenant: tenant, Holder: "h2", Intents: in,
			TTL: 100 * time.Millisecond, PriorityAt: &prio})
		acquired <- outcome{res, err}
	}()
	decidedAt := <-clock.reached
	if lockHolders(t, locks, stA.schema, tenant, resource, true) != 1 {
		t.Fatal("the acquire read the clock without holding the resource's lock")
	}
	if !decidedAt.Before(held.ExpiresAt) {
		t.Fatalf("the acquire read %s, not before the lease's expiry %s", decidedAt, held.ExpiresAt)
	}

	clock.Advance(2 * time.Millisecond) // the lease is past its expiry now
	swept := make(chan error, 1)
	var n int
	go func() {
		var err error
		n, err = b.SweepResourceLeases(ctx)
		swept <- err
	}()
	// Let the acquire go on once the sweep has finished, or is waiting for
	// the resource's lock (before the fix it finished, the expiry recorded).
	waiting := func() bool { return lockHolders(t, locks, stA.schema, tenant, resource, false) > 0 }
	var sweepErr error
	sweepDone := false
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		select {
		case sweepErr = <-swept:
			sweepDone = true
		default:
		}
		if sweepDone || waiting() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sweep neither finished nor waited for the resource's lock")
		}
	}
	close(clock.resume)
	out := <-acquired
	if !sweepDone {
		sweepErr = <-swept
	}
	if sweepErr != nil {
		t.Fatalf("sweep: %v", sweepErr)
	}

	var ce *engine.ResourceConflictError
	if out.err == nil {
		t.Fatalf("the acquire decided at %s was granted lease %s (from %s) while lease %s of h1 was live until %s",
			decidedAt.Format(time.RFC3339Nano), out.res.Leases[0].ID, out.res.Leases[0].AcquiredAt.Format(time.RFC3339Nano),
			held.ID, held.ExpiresAt.Format(time.RFC3339Nano))
	}
	if !errors.As(out.err, &ce) || ce.Holder == nil || ce.Holder.ID != held.ID {
		t.Fatalf("acquire: %v; want a resource conflict naming lease %s", out.err, held.ID)
	}
	if n != 1 {
		t.Fatalf("the sweep recorded %d expiries, want 1 (h1's lease)", n)
	}
	var l *host.ResourceLease
	if err := stA.View(ctx, func(r store.Reader) error {
		var err error
		l, err = r.GetResourceLease(ctx, tenant, held.ID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if l.State != host.ResourceLeaseExpired || l.EndedAt == nil || !l.EndedAt.Equal(held.ExpiresAt) {
		t.Fatalf("h1's lease after the sweep: state %s, ended %v; want expired, ended at %s", l.State, l.EndedAt, held.ExpiresAt)
	}
	storetest.CheckResourceLeaseHistory(t, stA, tenant)
}

// lockHolders counts, through conn, the sessions holding (granted) or
// waiting for the advisory lock of tenant's resource in schema.
func lockHolders(t *testing.T, conn *pgx.Conn, schema, tenant, resource string, granted bool) int {
	t.Helper()
	key := resourceLockKeys(schema, tenant, []string{resource})[0]
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted = $3
AND classid = $1 AND objid = $2 AND objsubid = 2`, uint32(resourceLockClass), uint32(key), granted).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestResourceLocksAreSchemaScoped runs two gates on one server in separate
// schemas, each locking a resource of the same name for the same tenant.
// Advisory locks belong to the database, not to a schema, so before the keys
// covered the schema, gate b's batch waited for the lock gate a's batch held
// on its own, unrelated resource.
func TestResourceLocksAreSchemaScoped(t *testing.T) {
	a := openIn(t, newSchema(t), Options{Writers: 1})
	b := openIn(t, newSchema(t), Options{Writers: 1})
	ctx := context.Background()
	const tenant, resource = "acme", "FILE:/shared/name"

	// Hold gate a's lock on the resource as a's batch does, in a transaction
	// outside both gates, until the test ends.
	holder, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, int32(resourceLockClass),
		resourceLockKeys(a.schema, tenant, []string{resource})[0]); err != nil {
		t.Fatal(err)
	}

	locks, err := pgx.Connect(ctx, testURL()) // reads pg_locks
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.Update(ctx, func(tx store.Tx) error {
			_, err := tx.LockResources(ctx, tenant, []string{resource})
			return err
		})
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		if lockHolders(t, locks, a.schema, tenant, resource, false) > 0 {
			t.Fatal("gate b's batch waits for the lock gate a holds on its own resource of the same name")
		}
		time.Sleep(time.Millisecond)
	}
}

// The concurrent-lease cap per holder holds across hosts: two hosts grant
// one holder leases on two different resources at the same moment, and at
// most one of them may be granted under a cap of 1. The resources' own locks
// do not order the two decisions; the holder's lock does.
func TestHolderCapHoldsAcrossHosts(t *testing.T) {
	schema := newSchema(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var engs []*engine.Engine
	for range 2 {
		eng, err := engine.New(engine.Config{Store: openIn(t, schema, Options{}), ExpiryJitter: -1, Logger: quiet,
			ResourceLeases: engine.ResourceLeaseConfig{MaxLeasesPerHolder: 1, HoldQuota: -1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(eng.Close)
		engs = append(engs, eng)
	}
	ctx := context.Background()
	for round := range 200 {
		holder := fmt.Sprintf("agent.%d", round)
		var wg sync.WaitGroup
		granted := make([]string, len(engs))
		for i, eng := range engs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := eng.AcquireResources(ctx, engine.AcquireRequest{Tenant: "acme", Holder: holder, TTL: time.Minute,
					Intents: []host.ResourceIntent{{Resource: fmt.Sprintf("FILE:/cap/%d/%d", round, i), Predicate: host.PredicateMutates}}})
				switch {
				case err == nil:
					granted[i] = r.Leases[0].ID
				case !host.IsCode(err, host.CodeQuotaExceeded):
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if granted[0] != "" && granted[1] != "" {
			t.Fatalf("round %d: %s holds two live leases (%s, %s) under a cap of 1", round, holder, granted[0], granted[1])
		}
		if granted[0] == "" && granted[1] == "" {
			t.Fatalf("round %d: neither acquire was granted", round)
		}
	}
}
