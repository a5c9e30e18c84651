package postgres

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
	"github.com/jackc/pgx/v5"
)

// TestWriterRetriesDeadlock makes the writer's batch transaction the victim
// of a real deadlock with another session: the writer must classify the
// error as retryable and run the batch again, and the caller must see its
// update succeed once.
func TestWriterRetriesDeadlock(t *testing.T) {
	schema := newSchema(t)
	st := openIn(t, schema, Options{Writers: 1})
	ctx := context.Background()
	put := func(tx store.Tx, name, note string) error {
		tt := host.NewTaskType(name)
		tt.Tenant, tt.Description = "acme", note
		return tx.PutTaskType(ctx, &tt)
	}
	if err := st.Update(ctx, func(tx store.Tx) error {
		if err := put(tx, "a", "start"); err != nil {
			return err
		}
		return put(tx, "b", "start")
	}); err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tbl := pgx.Identifier{schema, "task_types"}.Sanitize()
	// The other session waits long before it looks for deadlocks, so the
	// writer (default 1 s) finds the cycle and is the one rolled back.
	var otherPID uint32
	if err := other.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `SET deadlock_timeout = '60s'`); err != nil {
		t.Fatal(err)
	}
	otherDone := make(chan error, 1)
	var attempts atomic.Int32
	err = st.Update(ctx, func(tx store.Tx) error {
		if attempts.Add(1) > 1 {
			if err := put(tx, "a", "writer"); err != nil {
				return err
			}
			return put(tx, "b", "writer")
		}
		if err := put(tx, "a", "writer"); err != nil { // the writer holds a
			return err
		}
		otx, err := other.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := otx.Exec(ctx, `UPDATE `+tbl+` SET name = name WHERE tenant = 'acme' AND name = 'b'`); err != nil {
			return err // the other session holds b
		}
		go func() { // ... and waits for a
			_, err := otx.Exec(ctx, `UPDATE `+tbl+` SET name = name WHERE tenant = 'acme' AND name = 'a'`)
			if err == nil {
				err = otx.Commit(ctx)
			}
			otherDone <- err
		}()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var wait *string
			if err := st.pool.QueryRow(ctx, `SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, int32(otherPID)).Scan(&wait); err != nil {
				return err
			}
			if wait != nil && *wait == "Lock" {
				break
			}
			if time.Now().After(deadline) {
				t.Error("the other session was not waiting for the writer's lock within 30 s")
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return put(tx, "b", "writer") // the writer waits for b: a cycle
	})
	if err != nil {
		t.Fatalf("update after a deadlock: %v, want it rerun and committed", err)
	}
	select {
	case err := <-otherDone:
		if err != nil {
			t.Fatalf("the other session: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the other session did not finish within 30 s")
	}
	if n := attempts.Load(); n < 2 {
		t.Fatalf("fn ran %d times, want a rerun after the deadlock", n)
	}
	if st.BatchRetries() == 0 {
		t.Error("the writer did not count a batch retry")
	}
	if err := st.View(ctx, func(r store.Reader) error {
		for _, name := range []string{"a", "b"} {
			tt, err := r.GetTaskType(ctx, "acme", name)
			if err != nil {
				return err
			}
			if tt.Description != "writer" {
				t.Errorf("task type %s: %q, want the writer's rerun", name, tt.Description)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRetryPauseIsBoundedAndRandom: the pause before a rerun after a deadlock
// or serialization failure grows with the attempt up to 250 ms, is never
// zero, and is random (two requests that deadlocked together do not come
// back at the same moment).
func TestRetryPauseIsBoundedAndRandom(t *testing.T) {
	for n := 1; n <= maxAttempts+4; n++ {
		ceiling := min(time.Duration(1)<<min(n, 8)*time.Millisecond, 250*time.Millisecond) + time.Millisecond
		seen := map[time.Duration]bool{}
		for range 200 {
			p := retryPause(n)
			if p < time.Millisecond || p > ceiling {
				t.Fatalf("attempt %d: pause %v outside [1ms, %v]", n, p, ceiling)
			}
			seen[p] = true
		}
		if n >= 3 && len(seen) < 2 {
			t.Fatalf("attempt %d: 200 pauses all %v", n, p0(seen))
		}
	}
}

func p0(m map[time.Duration]bool) time.Duration {
	for k := range m {
		return k
	}
	return 0
}

// A batch's first run waits for a row lock another transaction holds no
// longer than its bound (firstRunLockWait), then runs again without it and
// commits when the lock is let go: a deadlock between two writers' batches
// costs the bound, not the server's deadlock_timeout.
func TestAFirstRunsLockWaitIsBounded(t *testing.T) {
	schema := newSchema(t)
	st := openIn(t, schema, Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	task := b.Task(t, b.Enqueue(t, "work").TaskID)
	other, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	hold, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	tbl := pgx.Identifier{schema, "tasks"}.Sanitize()
	if _, err := hold.Exec(ctx, `SELECT 1 FROM `+tbl+` WHERE id = $1 FOR UPDATE`, task.ID); err != nil {
		t.Fatal(err)
	}
	retries := st.BatchRetries()
	done := make(chan error, 1)
	go func() {
		done <- st.Update(ctx, func(tx store.Tx) error {
			c := *task
			c.Priority = 8
			return tx.UpdateTask(ctx, &c, store.Fence{State: host.StateQueued, Version: task.Version})
		})
	}()
	for deadline := time.Now().Add(20 * time.Second); st.BatchRetries() == retries; {
		if time.Now().After(deadline) {
			t.Fatal("the batch waited for the lock past its bound without running again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("the update ended while the lock was held: %v", err)
	default:
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the update failed after the lock was let go: %v", err)
	}
	if got := b.Task(t, task.ID); got.Priority != 8 {
		t.Errorf("priority %d, want 8", got.Priority)
	}
}
