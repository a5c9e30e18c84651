package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// A batch whose deferred writes fail at its end (a lost fence, a clash with a
// committed receipt) runs again in strict mode: each failure is its own
// request's error, the other requests of the batch commit, and nothing of the
// failed requests is written.
func TestDeferredWriteFailureFailsItsRequestAlone(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	stale := b.Enqueue(t, "work")
	fresh := b.Enqueue(t, "work")
	receipt := func(dedupe string) *host.Receipt {
		rc := &host.Receipt{ID: host.NewID("R"), Tenant: "acme", Type: host.ReceiptProgress, From: "agent.kee", To: "agent.kee",
			Body: []byte(`{}`), Parents: []string{}, DedupeKey: dedupe, CreatedAt: b.Clock.Now()}
		if err := rc.Validate(); err != nil {
			t.Fatal(err)
		}
		return rc
	}
	if err := st.Update(ctx, func(tx store.Tx) error { return tx.AppendReceipt(ctx, receipt("taken")) }); err != nil {
		t.Fatal(err)
	}
	reruns := st.StrictReruns()

	// Hold the writer so the three updates below queue and run as one batch.
	hold, held := make(chan struct{}), make(chan struct{})
	go st.Update(ctx, func(store.Tx) error { close(held); <-hold; return nil })
	<-held
	var wg sync.WaitGroup
	errs := make([]error, 3)
	kept := receipt("kept")
	run := func(i int, fn func(tx store.Tx) error) {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = st.Update(ctx, fn) }()
	}
	run(0, func(tx store.Tx) error { // a fence that no longer holds
		task, err := tx.GetTask(ctx, "acme", stale.TaskID)
		if err != nil {
			return err
		}
		task.Priority = 7
		return tx.UpdateTask(ctx, task, store.Fence{State: host.StateQueued, Version: task.Version + 3})
	})
	run(1, func(tx store.Tx) error { // a dedupe key a committed receipt holds
		return tx.AppendReceipt(ctx, receipt("taken"))
	})
	run(2, func(tx store.Tx) error { // fine: must commit
		task, err := tx.GetTask(ctx, "acme", fresh.TaskID)
		if err != nil {
			return err
		}
		task.Priority = 9
		if err := tx.UpdateTask(ctx, task, store.Fence{State: host.StateQueued, Version: task.Version}); err != nil {
			return err
		}
		return tx.AppendReceipt(ctx, kept)
	})
	waitQueued(t, st, 3, "the updates never queued behind the held batch")
	close(hold)
	wg.Wait()

	if !errors.Is(errs[0], store.ErrFenced) {
		t.Errorf("stale fence: %v, want store.ErrFenced", errs[0])
	}
	storetest.WantCode(t, errs[1], host.CodeConflict)
	if errs[2] != nil {
		t.Fatalf("the sound update failed with its batch: %v", errs[2])
	}
	if st.StrictReruns() <= reruns {
		t.Errorf("strict reruns %d → %d: the deferred failure was not found at the batch's end", reruns, st.StrictReruns())
	}
	if kept.Seq == 0 {
		t.Error("a committed deferred receipt has no seq")
	}
	if got := b.Task(t, stale.TaskID); got.Priority == 7 {
		t.Error("the fenced-out update was written")
	}
	if got := b.Task(t, fresh.TaskID); got.Priority != 9 {
		t.Errorf("the sound update's task has priority %d, want 9", got.Priority)
	}
	err := st.View(context.Background(), func(r store.Reader) error {
		rc, err := r.GetReceipt(ctx, "acme", kept.ID)
		if err != nil {
			return err
		}
		if rc.Seq != kept.Seq {
			t.Errorf("stored seq %d, reported %d", rc.Seq, kept.Seq)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Verify(t)
}

// A batch whose writes are all deferred costs one round trip, however many
// requests it carries: one pipeline with every write and the COMMIT behind
// them (a lost fence or a clash fails its statement on the server, which
// then skips the COMMIT: stmt.asserted). WriterTrips counts them.
func TestDeferredBatchRoundTrips(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	var tasks []*host.Task
	for range 4 {
		tasks = append(tasks, b.Task(t, b.Enqueue(t, "work").TaskID))
	}
	hold, held := make(chan struct{}), make(chan struct{})
	go st.Update(ctx, func(store.Tx) error { close(held); <-hold; return nil })
	<-held
	trips := st.WriterTrips()
	var wg sync.WaitGroup
	errs := make([]error, len(tasks))
	rcs := make([]*host.Receipt, len(tasks))
	for i, task := range tasks {
		rcs[i] = &host.Receipt{ID: host.NewID("R"), Tenant: "acme", Type: host.ReceiptProgress, From: "agent.kee", To: "agent.kee",
			TaskID: task.ID, Body: []byte(`{}`), Parents: []string{}, CreatedAt: b.Clock.Now()}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.Update(ctx, func(tx store.Tx) error {
				c := *task
				c.Priority = 5
				if err := tx.UpdateTask(ctx, &c, store.Fence{State: host.StateQueued, Version: task.Version}); err != nil {
					return err
				}
				return tx.AppendReceipt(ctx, rcs[i])
			})
		}()
	}
	waitQueued(t, st, len(tasks), "the updates never queued behind the held batch")
	if st.WriterTrips() != trips {
		t.Fatalf("the held batch made %d round trips", st.WriterTrips()-trips)
	}
	close(hold)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		if rcs[i].Seq == 0 {
			t.Errorf("receipt %d committed without a seq", i)
		}
		if got := b.Task(t, tasks[i].ID); got.Priority != 5 {
			t.Errorf("task %d: priority %d, want 5", i, got.Priority)
		}
	}
	if got := st.WriterTrips() - trips; got != 1 {
		t.Errorf("a batch of %d requests with deferred writes made %d round trips, want 1 (the writes and COMMIT)", len(tasks), got)
	}
	b.Verify(t)
}

// A claim's task updates are deferred too: the rows are locked by the claim,
// so they cannot lose their fence. A batch that claims tasks and then makes
// deferred writes costs two round trips: the claim's read, and one pipeline
// with every write and the COMMIT.
func TestClaimUpdatesAreDeferred(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	for range 3 {
		b.Enqueue(t, "work")
	}
	other := b.Task(t, b.Enqueue(t, "other").TaskID)
	hold, held := make(chan struct{}), make(chan struct{})
	go st.Update(ctx, func(store.Tx) error { close(held); <-hold; return nil })
	<-held
	trips := st.WriterTrips()
	var wg sync.WaitGroup
	var claimed []*host.Task
	var claimErr, updateErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		claimErr = st.Update(ctx, func(tx store.Tx) error {
			var err error
			claimed, err = tx.ClaimTasks(ctx, store.ClaimQuery{Tenant: "acme", Types: []string{"work"}, Now: b.Clock.Now(), Limit: 3,
				Grant: func(t *host.Task) {
					t.State, t.LeaseID, t.WorkerID = host.StateLeased, host.NewID("L"), "w1"
					exp := b.Clock.Now().Add(time.Minute)
					t.LeaseExpiresAt = &exp
					t.Attempts++
				}})
			return err
		})
	}()
	waitQueued(t, st, 1, "the claim never queued behind the held batch")
	rc := &host.Receipt{ID: host.NewID("R"), Tenant: "acme", Type: host.ReceiptProgress, From: "agent.kee", To: "agent.kee",
		TaskID: other.ID, Body: []byte(`{}`), Parents: []string{}, CreatedAt: b.Clock.Now()}
	wg.Add(1)
	go func() {
		defer wg.Done()
		updateErr = st.Update(ctx, func(tx store.Tx) error {
			c := *other
			c.Priority = 5
			if err := tx.UpdateTask(ctx, &c, store.Fence{State: host.StateQueued, Version: other.Version}); err != nil {
				return err
			}
			return tx.AppendReceipt(ctx, rc)
		})
	}()
	waitQueued(t, st, 2, "the update never queued behind the held batch")
	close(hold)
	wg.Wait()
	if claimErr != nil || updateErr != nil {
		t.Fatalf("claim: %v; update: %v", claimErr, updateErr)
	}
	if len(claimed) != 3 {
		t.Fatalf("claimed %d tasks, want 3", len(claimed))
	}
	for _, c := range claimed {
		got := b.Task(t, c.ID)
		if got.State != host.StateLeased || got.LeaseID != c.LeaseID || got.Version != c.Version {
			t.Errorf("task %s: stored state %s lease %q version %d; claimed lease %q version %d",
				c.ID, got.State, got.LeaseID, got.Version, c.LeaseID, c.Version)
		}
	}
	if got := b.Task(t, other.ID); got.Priority != 5 {
		t.Errorf("the other task's priority is %d, want 5", got.Priority)
	}
	if got := st.WriterTrips() - trips; got != 2 {
		t.Errorf("a batch that claims and then writes made %d round trips, want 2 (the claim; the writes and COMMIT)", got)
	}
	b.Verify(t)
}

// waitQueued waits until n requests wait for st's writer (held by a batch
// that blocks), failing the test with what after 30 s.
func waitQueued(t *testing.T, st *Store, n int, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); st.queue.Len() < n; {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Only a statement's failure on the server before a pipelined COMMIT means
// the server skipped it: a check's own finding after it (none of the
// asserted checks makes one) leaves the outcome unknown, and such a batch
// must not run again (refusedBeforeCommit).
func TestOnlyAServerFailureRefusesAPipelinedCommit(t *testing.T) {
	server := &pgconn.PgError{Code: "23505", Message: "duplicate key"}
	cases := []struct {
		name     string
		err      error
		deferred error
		want     bool
	}{
		{"a lost fence (fence_check)", errDeferred, &deferredFailure{err: &mismatch{what: "lost", aborted: true}}, true},
		{"a clash", errDeferred, &deferredFailure{err: server}, true},
		{"a check's own mismatch", errDeferred, &deferredFailure{err: &mismatch{what: "wrote 1 of 2 rows"}}, false},
		{"a check that found no row", errDeferred, &deferredFailure{err: pgx.ErrNoRows}, false},
		{"an unchecked statement's failure", server, nil, true},
		{"a lost connection", errors.New("conn closed"), nil, false},
	}
	for _, c := range cases {
		if got := refusedBeforeCommit(c.err, c.deferred); got != c.want {
			t.Errorf("%s: refused before COMMIT %v, want %v", c.name, got, c.want)
		}
	}
}
