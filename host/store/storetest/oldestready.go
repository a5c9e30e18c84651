package storetest

import (
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// testOldestReady: QueueStats reports the age of the oldest ready queued task
// (in queue order) across priorities, skipping delayed and leased tasks.
// QueueStats reads the wall clock, so the tasks' times are set from it.
func testOldestReady(t *testing.T, b *Bundle) {
	ctx := b.Ctx
	now := time.Now().UTC().Truncate(time.Microsecond)
	mk := func(id string, prio int, avail time.Time) *host.Task {
		tk := wbTask(id, "")
		tk.Priority, tk.AvailableAt = prio, avail
		return tk
	}
	tasks := []*host.Task{
		mk("T-OR1", 1, now.Add(time.Hour)),         // first in the queue, delayed: not ready
		mk("T-OR2", 3, now.Add(-30*time.Second)),   // the oldest ready one
		mk("T-OR3", 9, now.Add(-10*time.Second)),   // ready, higher priority, queued later
		mk("T-OR4", 10, now.Add(-300*time.Second)), // older by its time but queued last
	}
	if err := b.Store.Update(ctx, func(tx store.Tx) error {
		for _, tk := range tasks {
			if err := tx.InsertTask(ctx, tk); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	age := func() time.Duration {
		t.Helper()
		var qs store.QueueStats
		if err := b.Store.View(ctx, func(r store.Reader) error {
			var err error
			qs, err = r.QueueStats(ctx, "acme")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return qs.OldestReadyAge
	}
	// The age is measured from QueueStats' own now, a little after ours.
	if got := age(); got < 30*time.Second || got > 90*time.Second {
		t.Fatalf("oldest ready age %v, want T-OR2's (30 s and a little)", got)
	}
	t2 := tasks[1]
	t2.State, t2.LeaseID, t2.WorkerID = host.StateLeased, "L-OR2", "w.1"
	t2.LeasedAt, t2.LeaseExpiresAt = &now, new(now.Add(time.Minute))
	if err := b.Store.Update(ctx, func(tx store.Tx) error {
		return tx.UpdateTask(ctx, t2, store.Fence{State: host.StateQueued})
	}); err != nil {
		t.Fatal(err)
	}
	if got := age(); got < 10*time.Second || got > 70*time.Second {
		t.Fatalf("oldest ready age after leasing T-OR2: %v, want T-OR3's (10 s and a little)", got)
	}
}
