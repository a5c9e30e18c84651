package storetest

import (
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// testPausedStats: the queued tasks of a type whose leasing is paused are
// not ready to lease, so the stats count them apart (Paused, by type, every
// paused type listed) and the oldest ready age leaves them out, however old
// they are; a pause is its tenant's own, and a resume puts them back.
func testPausedStats(t *testing.T, b *Bundle) {
	ctx := b.Ctx
	now := time.Now().UTC().Truncate(time.Microsecond)
	mk := func(id, tenant, typ string, avail time.Time) *host.Task {
		tk := wbTask(id, "")
		tk.Tenant, tk.Type, tk.AvailableAt = tenant, typ, avail
		return tk
	}
	if err := b.Store.Update(ctx, func(tx store.Tx) error {
		for _, tk := range []*host.Task{
			mk("T-PS1", "acme", "work", now.Add(-300*time.Second)),   // paused, the oldest of all
			mk("T-PS2", "acme", "work", now.Add(time.Hour)),          // paused and scheduled
			mk("T-PS3", "acme", "other", now.Add(-20*time.Second)),   // the oldest ready one of acme
			mk("T-PS4", "globex", "work", now.Add(-100*time.Second)), // work is not paused in globex
		} {
			if err := tx.InsertTask(ctx, tk); err != nil {
				return err
			}
		}
		for _, typ := range []string{"work", "idle"} {
			if err := tx.PauseTaskType(ctx, store.TaskTypePause{Tenant: "acme", TaskType: typ, PausedBy: "ops", PausedAt: now}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stats := func(tenant string) store.QueueStats {
		t.Helper()
		var qs store.QueueStats
		if err := b.Store.View(ctx, func(r store.Reader) error {
			var err error
			qs, err = engine.QueueStats(ctx, r, tenant, time.Now())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return qs
	}
	// The age is measured from QueueStats' own now, a little after ours.
	near := func(got, want time.Duration) bool { return got >= want && got < want+60*time.Second }

	qs := stats("acme")
	if qs.ByState[host.StateQueued] != 2 || qs.ByState[host.StateScheduled] != 1 {
		t.Errorf("acme by state %v, want 2 queued (their status) and 1 scheduled", qs.ByState)
	}
	if len(qs.Paused) != 2 || qs.Paused["work"] != 1 || qs.Paused["idle"] != 0 {
		t.Errorf("acme paused %v, want work 1 (its scheduled task apart) and idle 0", qs.Paused)
	}
	if n := qs.ReadyQueued(); n != 1 {
		t.Errorf("acme ready queued %d, want 1", n)
	}
	if !near(qs.OldestReadyAge, 20*time.Second) {
		t.Errorf("acme oldest ready age %v, want T-PS3's (20 s), not the paused T-PS1's", qs.OldestReadyAge)
	}

	qs = stats("")
	if qs.Paused["work"] != 1 || qs.ReadyQueued() != 2 {
		t.Errorf("every tenant: paused %v, ready %d, want work 1 (acme's only) and 2 ready", qs.Paused, qs.ReadyQueued())
	}
	if !near(qs.OldestReadyAge, 100*time.Second) {
		t.Errorf("every tenant: oldest ready age %v, want globex's T-PS4 (100 s)", qs.OldestReadyAge)
	}

	if err := b.Store.Update(ctx, func(tx store.Tx) error {
		for _, typ := range []string{"work", "idle"} {
			if _, err := tx.ResumeTaskType(ctx, "acme", typ); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	qs = stats("acme")
	if qs.Paused != nil || qs.ReadyQueued() != 2 || !near(qs.OldestReadyAge, 300*time.Second) {
		t.Errorf("acme resumed: paused %v, ready %d, oldest %v, want none paused, 2 ready, T-PS1's age (300 s)",
			qs.Paused, qs.ReadyQueued(), qs.OldestReadyAge)
	}
}
