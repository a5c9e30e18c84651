package postgres

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/jackc/pgx/v5"
)

// repeatableRead opens a store on a fresh schema whose sessions default to
// REPEATABLE READ, as on a database an operator configured so
// (default_transaction_isolation): there a row another session changed
// after the writer's snapshot cannot be updated by the writer, and the
// server answers 40001 (serialization failure).
func repeatableRead(t *testing.T) (st *Store, other *pgx.Conn, table string) {
	t.Helper()
	schema := newSchema(t)
	sep := "?"
	if strings.Contains(testURL(), "?") {
		sep = "&"
	}
	ctx := context.Background()
	st, err := Open(ctx, testURL()+sep+"default_transaction_isolation=repeatable%20read", Options{Schema: schema})
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	var iso string
	if err := st.pool.QueryRow(ctx, `SHOW default_transaction_isolation`).Scan(&iso); err != nil || iso != "repeatable read" {
		t.Fatalf("the store's sessions run at %q (%v), want repeatable read", iso, err)
	}
	other, err = pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close(context.Background()) })
	if err := st.Update(ctx, func(tx store.Tx) error { return putType(ctx, tx, "a", "start") }); err != nil {
		t.Fatal(err)
	}
	return st, other, pgx.Identifier{schema, "task_types"}.Sanitize()
}

func putType(ctx context.Context, tx store.Tx, name, note string) error {
	tt := host.NewTaskType(name)
	tt.Tenant, tt.Description = "acme", note
	return tx.PutTaskType(ctx, &tt)
}

// collide makes the writer's transaction lose a real serialization race: it
// reads task type a (taking its snapshot), another session changes a and
// commits, and then the writer writes a, which the server refuses with 40001.
func collide(ctx context.Context, tx store.Tx, other *pgx.Conn, table, note string) error {
	if _, err := tx.GetTaskType(ctx, "acme", "a"); err != nil {
		return err
	}
	if _, err := other.Exec(ctx, `UPDATE `+table+` SET body = body WHERE tenant = 'acme' AND name = 'a'`); err != nil {
		return err
	}
	return putType(ctx, tx, "a", note)
}

func description(t *testing.T, st *Store, name string) string {
	t.Helper()
	ctx := context.Background()
	var d string
	if err := st.View(ctx, func(r store.Reader) error {
		tt, err := r.GetTaskType(ctx, "acme", name)
		if err != nil {
			return err
		}
		d = tt.Description
		return nil
	}); err != nil {
		t.Fatalf("task type %s: %v", name, err)
	}
	return d
}

// TestWriterRetriesSerializationFailure: the writer's batch loses a real
// serialization race once; it classifies 40001 as retryable, runs the batch
// again, and the caller sees its update succeed once.
func TestWriterRetriesSerializationFailure(t *testing.T) {
	st, other, table := repeatableRead(t)
	ctx := context.Background()
	retries := st.BatchRetries()
	var attempts atomic.Int32
	err := st.Update(ctx, func(tx store.Tx) error {
		if attempts.Add(1) == 1 {
			return collide(ctx, tx, other, table, "writer")
		}
		return putType(ctx, tx, "a", "writer")
	})
	if err != nil {
		t.Fatalf("update after a serialization failure: %v, want it rerun and committed", err)
	}
	if n := attempts.Load(); n != 2 {
		t.Fatalf("fn ran %d times, want 2 (one rerun after the serialization failure)", n)
	}
	if n := st.BatchRetries() - retries; n != 1 {
		t.Errorf("the writer counted %d batch retries, want 1", n)
	}
	if d := description(t, st, "a"); d != "writer" {
		t.Fatalf("task type a: %q, want the rerun's write", d)
	}
}

// TestWriterGivesUpOnRepeatedSerializationFailures: every run of the batch
// loses the race. The writer stops after maxAttempts runs and the caller
// gets database_unavailable; nothing of the update is written, and the
// writer goes on to commit the next update.
func TestWriterGivesUpOnRepeatedSerializationFailures(t *testing.T) {
	st, other, table := repeatableRead(t)
	ctx := context.Background()
	retries := st.BatchRetries()
	var attempts atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- st.Update(ctx, func(tx store.Tx) error {
			attempts.Add(1)
			if err := putType(ctx, tx, "b", "half"); err != nil {
				return err
			}
			return collide(ctx, tx, other, table, "writer")
		})
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the writer was still retrying after 2 minutes (%d runs so far, limit %d)", attempts.Load(), maxAttempts)
	}
	if !host.IsCode(err, host.CodeDatabaseUnavailable) || !strings.Contains(err.Error(), "could not serialize") {
		t.Fatalf("update that always loses the race: %v, want database_unavailable (could not serialize)", err)
	}
	if n := attempts.Load(); n != maxAttempts {
		t.Fatalf("fn ran %d times, want %d (maxAttempts)", n, maxAttempts)
	}
	if n := st.BatchRetries() - retries; n != maxAttempts-1 {
		t.Errorf("the writer counted %d batch retries, want %d", n, maxAttempts-1)
	}
	if err := st.View(ctx, func(r store.Reader) error {
		_, err := r.GetTaskType(ctx, "acme", "b")
		return err
	}); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("task type b written by the given-up batch: %v, want not_found", err)
	}
	if d := description(t, st, "a"); d != "start" {
		t.Fatalf("task type a: %q, want it as it was before the given-up batch", d)
	}
	if err := st.Update(ctx, func(tx store.Tx) error { return putType(ctx, tx, "c", "after") }); err != nil {
		t.Fatalf("the next update: %v", err)
	}
	if d := description(t, st, "c"); d != "after" {
		t.Fatalf("task type c: %q", d)
	}
}
