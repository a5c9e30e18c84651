package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// TestBeginFailsWhileAnotherProcessWrites holds the database's write lock
// from another connection (as a second process would) past the writer's busy
// timeout: the batch cannot begin, its callers get database_unavailable and
// nothing is written; once the lock is gone the next update commits and the
// ledger verifies.
func TestBeginFailsWhileAnotherProcessWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	t.Cleanup(func() { st.Close() })
	b.Enqueue(t, "work")
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(1000)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	// The writer waits its busy timeout (10 s), then gives up.
	err = st.Update(ctx, func(tx store.Tx) error {
		tt := host.NewTaskType("blocked")
		tt.Tenant = "acme"
		return tx.PutTaskType(ctx, &tt)
	})
	storetest.WantCode(t, err, host.CodeDatabaseUnavailable)
	if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	_, err = b.Engine.GetTaskType(ctx, "acme", "blocked")
	storetest.WantCode(t, err, host.CodeNotFound)
	res := b.Enqueue(t, "work")
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1"))
	if tk := b.Task(t, res.TaskID); tk.State != host.StateQueued {
		t.Fatalf("second task %s, want queued (the first one was leased)", tk.State)
	}
	if rep := b.Verify(t); rep.Receipts != 3 {
		t.Fatalf("ledger holds %d receipts, want 3", rep.Receipts)
	}
}
