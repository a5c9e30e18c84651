package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/store"
)

// TestBatchLockWaitsFollowKeyOrder builds the deadlock two writers' batches
// used to meet: host a's batch locks resource hi and then lo, host b's locks
// lo and then hi, each batch's first lock taken before either second. A
// batch now never waits for a key below one it holds: a's request for lo
// finds it taken and runs after a's batch commits, in a transaction of its
// own, so every request succeeds and no batch is rerun after a deadlock
// (before, PostgreSQL broke the cycle after deadlock_timeout and one batch
// ran again).
func TestBatchLockWaitsFollowKeyOrder(t *testing.T) {
	schema := newSchema(t)
	// A first run may wait 10 s for a lock, past the server's
	// deadlock_timeout, so a rerun counted is a deadlock the server found,
	// not a wait a loaded machine stretched past the usual 50 ms.
	a := openIn(t, schema, Options{Writers: 1, firstRunLockWait: 10 * time.Second})
	b := openIn(t, schema, Options{Writers: 1, firstRunLockWait: 10 * time.Second})
	const tenant = "t"
	lo, hi := "res-1", "res-2"
	if resourceLockKeys(a.schema, tenant, []string{lo})[0] > resourceLockKeys(a.schema, tenant, []string{hi})[0] {
		lo, hi = hi, lo
	}

	// hold occupies st's writer until release is closed, so that the
	// requests sent meanwhile form its next batch.
	hold := func(st *Store, release <-chan struct{}) <-chan error {
		running := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- st.Update(context.Background(), func(store.Tx) error {
				close(running)
				<-release
				return nil
			})
		}()
		<-running
		return done
	}
	wait := func(ch <-chan struct{}, what string) error {
		select {
		case <-ch:
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("timed out waiting for " + what)
		}
	}
	lock := func(st *Store, res string, after func() error) <-chan error {
		done := make(chan error, 1)
		go func() {
			done <- st.Update(context.Background(), func(tx store.Tx) error {
				if _, err := tx.LockResources(context.Background(), tenant, []string{res}); err != nil {
					return err
				}
				if after != nil {
					return after()
				}
				return nil
			})
		}()
		return done
	}

	releaseA, releaseB := make(chan struct{}), make(chan struct{})
	holdA, holdB := hold(a, releaseA), hold(b, releaseB)
	// A batch rerun (after a deadlock, before the fix) runs its requests
	// again: each signal is given once.
	aHolds, bHolds := make(chan struct{}), make(chan struct{})
	var aOnce, bOnce sync.Once
	// a's batch: hi, then (once b holds lo) lo.
	a1 := lock(a, hi, func() error { aOnce.Do(func() { close(aHolds) }); return wait(bHolds, "b's first lock") })
	waitQueued(t, a, 1, "a's first request was not queued")
	a2 := lock(a, lo, nil)
	waitQueued(t, a, 2, "a's second request was not queued")
	// b's batch: lo, then (once a holds hi) hi.
	b1 := lock(b, lo, func() error { bOnce.Do(func() { close(bHolds) }); return wait(aHolds, "a's first lock") })
	waitQueued(t, b, 1, "b's first request was not queued")
	b2 := lock(b, hi, nil)
	waitQueued(t, b, 2, "b's second request was not queued")
	close(releaseA)
	close(releaseB)

	for name, ch := range map[string]<-chan error{"hold a": holdA, "hold b": holdB, "a1": a1, "a2": a2, "b1": b1, "b2": b2} {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not finish", name)
		}
	}
	if n := a.BatchRetries() + b.BatchRetries(); n != 0 {
		t.Errorf("%d batches were rerun after a deadlock; want none", n)
	}
	if n := a.LockReorders(); n != 1 {
		t.Errorf("host a ran %d requests on their own for lock order; want 1 (its request for the lower key)", n)
	}
	if n := b.LockReorders(); n != 0 {
		t.Errorf("host b ran %d requests on their own for lock order; want 0", n)
	}
}
