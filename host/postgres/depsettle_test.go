package postgres

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// A guessed settlement reads the edges only once the finishing
// dependency's row is its transaction's, although the dependency's own
// update waits to go out with the batch's set after it: an enqueue on
// another host that holds the dependency FOR SHARE (its locking read) and
// adds an edge is waited for, and its waiter is settled too. Read before
// that wait, the edges would miss the new waiter and it would wait forever
// on a dependency that succeeded.
func TestAGuessedSettlementSeesAnEdgeAddedUnderTheDependencysLock(t *testing.T) {
	schema := newSchema(t)
	st := openIn(t, schema, Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) store.Store { return st })
	ctx := b.Ctx
	dep := b.Enqueue(t, "work")
	// A waiter this store committed: the dependency's settlement is guessed.
	w1 := b.Enqueue(t, "other", func(r *engine.EnqueueRequest) { r.After = []string{dep.TaskID} })
	offer := b.LeaseOne(t, "w.1", "work")

	// Another host's enqueue of a second waiter, under way: it holds the
	// dependency FOR SHARE and has inserted its waiter and open edge.
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	other, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	tasks := pgx.Identifier{schema, "tasks"}.Sanitize()
	edges := pgx.Identifier{schema, "task_dependencies"}.Sanitize()
	if _, err := other.Exec(ctx, `SELECT 1 FROM `+tasks+` WHERE id = $1 FOR SHARE`, dep.TaskID); err != nil {
		t.Fatal(err)
	}
	w2 := host.NewID(host.PrefixTask)
	if _, err := other.Exec(ctx, `INSERT INTO `+tasks+` (id, tenant, task_type, created_by, recipient, state, priority, params, created_at, updated_at, available_at, max_retries)
SELECT $1, tenant, task_type, created_by, recipient, 'waiting', priority, params, created_at, updated_at, available_at, max_retries FROM `+tasks+` WHERE id = $2`, w2, w1.TaskID); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `INSERT INTO `+edges+` (tenant, waiter_id, dep_id, rule, position, dep_state, depth) VALUES ('acme', $1, $2, 'all_succeeded', 0, '', 1)`, w2, dep.TaskID); err != nil {
		t.Fatal(err)
	}
	var holder uint32
	if err := other.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := b.Engine.Complete(ctx, engine.CompleteRequest{WorkerCall: storetest.Call("w.1", offer), Result: storetest.Pointer})
		done <- err
	}()
	// The completion's transaction waits for the other enqueue's lock.
	watch, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	for deadline := time.Now().Add(20 * time.Second); ; {
		var n int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, int(holder)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the completion ended without waiting for the dependency's lock: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the completion never waited for the dependency's lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("complete: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the completion did not end after the lock was let go")
	}
	if got := b.Task(t, dep.TaskID); got.State != host.StateSucceeded {
		t.Fatalf("dependency %s, want succeeded", got.State)
	}
	var edge, state string
	if err := watch.QueryRow(ctx, `SELECT d.dep_state, t.state FROM `+edges+` d JOIN `+tasks+` t ON t.id = d.waiter_id WHERE d.waiter_id = $1`, w2).Scan(&edge, &state); err != nil {
		t.Fatal(err)
	}
	if edge != string(host.StateSucceeded) || state != string(host.StateQueued) {
		t.Errorf("the second waiter's edge is %q and it is %s: want succeeded and queued", edge, state)
	}
	if got := b.Task(t, w1.TaskID); got.State != host.StateQueued {
		t.Errorf("the first waiter is %s, want queued", got.State)
	}
}
