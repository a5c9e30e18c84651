package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// testOldestReady: QueueStats reports how long the longest-waiting ready
// queued task has waited since it became ready (its available_at), across
// priorities, skipping delayed and leased tasks — also when it sits behind a
// task that became ready again a moment ago (released, retried: it keeps its
// place in the queue with a fresh time, and must not hide the older ones).
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
		mk("T-OR0", 3, now.Add(-time.Second)),      // first in its lane, ready again a moment ago
		mk("T-OR1", 1, now.Add(time.Hour)),         // delayed: not ready
		mk("T-OR2", 3, now.Add(-30*time.Second)),   // behind T-OR0 in its lane, waiting longer
		mk("T-OR3", 9, now.Add(-10*time.Second)),   // ready, higher priority
		mk("T-OR4", 10, now.Add(-300*time.Second)), // the longest wait, queued last
	}
	b.insertTasks(t, tasks)
	age := func() time.Duration { return b.queueStats(t, "acme").OldestReadyAge }
	lease := func(tk *host.Task) {
		t.Helper()
		tk.State, tk.LeaseID, tk.WorkerID = host.StateLeased, "L-"+tk.ID, "w.1"
		tk.LeasedAt, tk.LeaseExpiresAt = &now, new(now.Add(time.Minute))
		if err := b.Store.Update(ctx, func(tx store.Tx) error {
			return tx.UpdateTask(ctx, tk, store.Fence{State: host.StateQueued})
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The age is measured from QueueStats' own now, a little after ours.
	for _, step := range []struct {
		lease    *host.Task
		min, max time.Duration
		who      string
	}{
		{nil, 300 * time.Second, 360 * time.Second, "T-OR4's (300 s and a little)"},
		{tasks[4], 30 * time.Second, 90 * time.Second, "T-OR2's (30 s), behind T-OR0's fresh time"},
		{tasks[2], 10 * time.Second, 70 * time.Second, "T-OR3's (10 s)"},
		{tasks[3], time.Second, 60 * time.Second, "T-OR0's (1 s)"},
	} {
		if step.lease != nil {
			lease(step.lease)
		}
		if got := age(); got < step.min || got > step.max {
			t.Fatalf("oldest ready age %v, want %s", got, step.who)
		}
	}
}

// testOldestReadyPerType: the oldest ready age looks at each type's queue
// on its own: 120 tasks of one type ready a moment ago ahead, in queue
// order, of another type's task ready an hour ago do not hide it, nor do
// 150 delayed tasks of its own type ahead of it (more than the window: it
// starts at the first ready task, not at the head of the lane).
func testOldestReadyPerType(t *testing.T, b *Bundle) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	var tasks []*host.Task
	for i := range 120 {
		tk := wbTask(fmt.Sprintf("T-ORA%03d", i), "")
		tk.AvailableAt = now.Add(-time.Second)
		tasks = append(tasks, tk)
	}
	for i := range 150 { // delayed, ahead of the hour-old one in its lane: more than a window
		tk := wbTask(fmt.Sprintf("T-ORD%03d", i), "")
		tk.Type, tk.AvailableAt = "other", now.Add(time.Hour)
		tasks = append(tasks, tk)
	}
	old := wbTask("T-ORB", "")
	old.Type, old.AvailableAt = "other", now.Add(-time.Hour)
	tasks = append(tasks, old)
	b.insertTasks(t, tasks)
	if got := b.queueStats(t, "acme").OldestReadyAge; got < time.Hour || got > time.Hour+time.Minute {
		t.Fatalf("oldest ready age %v, want T-ORB's hour, behind another type's 120 fresh tasks and 150 delayed ones of its own", got)
	}
}

// insertTasks writes tasks as they are, in their order (so their seqs), in
// one update.
func (b *Bundle) insertTasks(t *testing.T, tasks []*host.Task) {
	t.Helper()
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		for _, tk := range tasks {
			if err := tx.InsertTask(b.Ctx, tk); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// queueStats reads tenant's QueueStats.
func (b *Bundle) queueStats(t *testing.T, tenant string) store.QueueStats {
	t.Helper()
	var qs store.QueueStats
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		qs, err = r.QueueStats(b.Ctx, tenant)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return qs
}

// testOldestReadyManyTypes: with a queue of many types the oldest ready
// age is the oldest of every type's, whichever type holds it, paused types
// left out: 200 types in two tenants, type i's one ready task i+1 seconds
// old (priorities mixed), and an older one of a paused type.
func testOldestReadyManyTypes(t *testing.T, b *Bundle) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	var tasks []*host.Task
	for i := range 200 {
		tk := wbTask(fmt.Sprintf("T-ORM%03d", i), "")
		tk.Type, tk.Priority, tk.AvailableAt = fmt.Sprintf("type-%03d", i), i%10+1, now.Add(-time.Duration(i+1)*time.Second)
		if i%2 == 1 {
			tk.Tenant = "globex"
		}
		tasks = append(tasks, tk)
	}
	paused := wbTask("T-ORMP", "")
	paused.Type, paused.AvailableAt = "paused", now.Add(-time.Hour)
	tasks = append(tasks, paused)
	b.insertTasks(t, tasks)
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		return tx.PauseTaskType(b.Ctx, store.TaskTypePause{Tenant: "acme", TaskType: "paused", PausedBy: "ops", PausedAt: now})
	}); err != nil {
		t.Fatal(err)
	}
	// The age is measured from QueueStats' own now, a little after ours.
	for _, c := range []struct {
		tenant string
		want   time.Duration
		who    string
	}{
		{"acme", 199 * time.Second, "type-198's (199 s), not the paused type's hour"},
		{"globex", 200 * time.Second, "type-199's (200 s)"},
		{"", 200 * time.Second, "globex's type-199 (200 s)"},
	} {
		qs := b.queueStats(t, c.tenant)
		if got := qs.OldestReadyAge; got < c.want || got > c.want+time.Minute {
			t.Errorf("tenant %q: oldest ready age %v, want %s", c.tenant, got, c.who)
		}
	}
}
