package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// An enqueue's marker in a batch of several requests does not wait for a
// dependency's row another transaction holds (as another writer's batch
// completing that task does, which may in turn wait for a row this batch
// holds): the request gives way and runs after its batch, alone, where it
// waits. So the rest of its batch commits while the row is still held, and
// the marker is set once it is let go. Both ways in are covered: the
// dependency answered from the rows this store committed (guessed), and
// read because another host wrote it; and one dependency named or two
// (the several-id statements), only one of them held.
func TestAMarkerInABatchGivesWayToAHeldRow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		guessed bool
		two     bool
	}{{"guessed", true, false}, {"read", false, false}, {"guessed/two", true, true}, {"read/two", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			schema := newSchema(t)
			st := openIn(t, schema, Options{Writers: 1})
			b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
			ctx := b.Ctx
			via := b
			if !tc.guessed {
				// Another host's store writes the dependency: this store
				// holds no copy of its row, so it reads it.
				other := openIn(t, schema, Options{Writers: 1})
				via = storetest.Setup(t, func(testing.TB) storetest.Store { return other })
			}
			dep := via.Enqueue(t, "work").TaskID
			after := []string{dep}
			if tc.two {
				after = append(after, via.Enqueue(t, "work").TaskID)
			}
			plain := b.Enqueue(t, "work").TaskID

			conn, err := pgx.Connect(ctx, testURL())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			hold, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer hold.Rollback(ctx)
			tbl := pgx.Identifier{schema, "tasks"}.Sanitize()
			if _, err := hold.Exec(ctx, `SELECT 1 FROM `+tbl+` WHERE id = $1 FOR NO KEY UPDATE`, dep); err != nil {
				t.Fatal(err)
			}

			// Hold the writer so both requests queue into one batch.
			writerHeld, letWriterGo := make(chan struct{}), make(chan struct{})
			go st.Update(context.Background(), func(store.Tx) error { close(writerHeld); <-letWriterGo; return nil })
			<-writerHeld
			setAside := func() int64 { return st.LockReorders() + st.SetAside() }
			before := setAside()
			firstDone, markDone := make(chan error, 1), make(chan error, 1)
			task := b.Task(t, plain)
			go func() {
				firstDone <- st.Update(ctx, func(tx store.Tx) error {
					c := *task
					c.Priority = 7
					return tx.UpdateTask(ctx, &c, store.Fence{State: task.State, Version: task.Version})
				})
			}()
			waitQueued(t, st, 1, "the first request never queued")
			go func() {
				markDone <- st.Update(ctx, func(tx store.Tx) error {
					_, err := tx.MarkAndLockDependencies(ctx, "acme", after)
					return err
				})
			}()
			waitQueued(t, st, 2, "the marker's request never queued")
			close(letWriterGo)

			select {
			case err := <-firstDone:
				if err != nil {
					t.Fatalf("the first request: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the batch waited for the held row: its first request did not commit while the row was held")
			}
			if got := b.Task(t, plain); got.Priority != 7 {
				t.Errorf("the first request's update: priority %d, want 7", got.Priority)
			}
			select {
			case err := <-markDone:
				t.Fatalf("the marker's request ended while its dependency's row was held: %v", err)
			default:
			}
			if setAside() == before {
				t.Error("the marker's request was not set aside to run after its batch (LockReorders and SetAside unchanged)")
			}
			if err := hold.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-markDone:
				if err != nil {
					t.Fatalf("the marker's request failed after the row was let go: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the marker's request did not end after the row was let go")
			}
			for _, id := range after {
				if got := b.Task(t, id); !got.HasWaiters {
					t.Errorf("dependency %s is not marked as waited on", id)
				}
			}
		})
	}
}

// An enqueue's guessed marker and its edges, queued in a batch of several
// requests, leave the batch's task updates waiting (to go out as one set)
// unless they are of the marked tasks: they read and write no row the
// updates write. The marker and the update both reach the database.
func TestDependencyStatementsLeaveTheTaskUpdatesWaiting(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	dep := b.Enqueue(t, "work").TaskID
	other := b.Task(t, b.Enqueue(t, "work").TaskID)
	var waiting []int
	errs := runHeld(t, st,
		func(store.Tx) error { return nil }, // a batch of more than one request
		func(tx store.Tx) error {
			waiting = waiting[:0]
			c := *other
			c.Priority = 4
			if err := tx.UpdateTask(ctx, &c, store.Fence{State: other.State, Version: other.Version}); err != nil {
				return err
			}
			if _, err := tx.MarkAndLockDependencies(ctx, "acme", []string{dep}); err != nil {
				return err
			}
			waiting = append(waiting, len(tx.(*writeTx).bh.updates))
			if err := tx.InsertDependencies(ctx, []host.Dependency{{Tenant: "acme", Waiter: host.NewID(host.PrefixTask),
				DependsOn: dep, Rule: host.RuleAllSucceeded}}); err != nil {
				return err
			}
			waiting = append(waiting, len(tx.(*writeTx).bh.updates))
			return nil
		})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if len(waiting) != 2 || waiting[0] != 1 || waiting[1] != 1 {
		t.Errorf("task updates waiting after the marker and after the edges: %v, want [1 1]", waiting)
	}
	if got := b.Task(t, other.ID); got.Priority != 4 {
		t.Errorf("priority %d, want 4", got.Priority)
	}
	if got := b.Task(t, dep); !got.HasWaiters {
		t.Error("the dependency is not marked as waited on")
	}
}
