package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// ledgerWith makes a ledger of a few tasks' receipts, closes it, and returns
// the database path.
func ledgerWith(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gate.db")
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	for i := 0; i < 3; i++ {
		b.Enqueue(t, "work")
		b.Complete(t, "w.1", b.LeaseOne(t, "w.1"))
	}
	if rep := b.Verify(t); rep.Receipts != 6 {
		t.Fatalf("want 6 receipts, got %d", rep.Receipts)
	}
	b.Engine.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func tamper(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func verify(t *testing.T, path string) *engine.VerifyReport {
	t.Helper()
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rep, err := engine.VerifyLedger(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestLedgerVerifyDetectsTampering(t *testing.T) {
	cases := []struct {
		name    string
		stmts   []string
		badSeq  int64
		problem string
	}{
		{"altered body", []string{`UPDATE receipts SET body = '{"result_pointer":"inline:ZXZpbA=="}' WHERE seq = 4`}, 4, "altered"},
		{"altered party", []string{`UPDATE receipts SET to_p = 'mallory' WHERE seq = 2`}, 2, "altered"},
		{"removed", []string{`DELETE FROM receipts WHERE seq = 3`}, 4, "removed"},
		{"removed tail", []string{`DELETE FROM receipts WHERE seq = 6`}, 5, "removed from the end"},
		{"inserted", []string{`UPDATE receipts SET seq = -seq WHERE seq >= 3`, `UPDATE receipts SET seq = 1 - seq WHERE seq < 0`, `INSERT INTO receipts SELECT 3, 'R-FAKE', tenant, type, from_p, to_p, task_id, lease_id, parents, body, '', created_at, prev_hash, hash FROM receipts WHERE seq = 2`}, 3, ""},
		{"reordered", []string{`UPDATE receipts SET seq = -1 WHERE seq = 2`, `UPDATE receipts SET seq = 2 WHERE seq = 3`, `UPDATE receipts SET seq = 3 WHERE seq = -1`}, 2, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := ledgerWith(t)
			if rep := verify(t, path); !rep.OK {
				t.Fatalf("untouched ledger does not verify: %+v", rep)
			}
			tamper(t, path, c.stmts...)
			rep := verify(t, path)
			if rep.OK {
				t.Fatalf("tampering went unnoticed: %+v", rep)
			}
			if rep.BadSeq != c.badSeq || !strings.Contains(rep.Problem, c.problem) {
				t.Fatalf("report %+v, want bad seq %d and problem mentioning %q", rep, c.badSeq, c.problem)
			}
		})
	}
}

func TestAcknowledgedWritesSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	b.Engine.Close()
	st.Close()

	st2, err := sqlite.Open(path, sqlite.Options{}) // migrations run again: a no-op
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st2.Close() })
	b2 := storetest.Setup(t, func(testing.TB) storetest.Store { return st2 })
	tk := b2.Task(t, res.TaskID)
	if tk.LeaseID != o.LeaseID || tk.AssignReceipt != res.ReceiptID {
		t.Fatalf("task after reopen: %+v", tk)
	}
	b2.Complete(t, "w.1", o)
	b2.Verify(t)
}

// Two processes on one data folder (gate serve and gate mcp, say) append to
// one chain: the writer reads the head under each batch's write lock.
func TestTwoOpenersShareOneChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	open := func(tb testing.TB) storetest.Store {
		st, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { st.Close() })
		return st
	}
	b1 := storetest.Setup(t, open)
	b2 := storetest.Setup(t, open)
	for i := 0; i < 5; i++ {
		b1.Enqueue(t, "work")
		b2.Enqueue(t, "work")
	}
	b1.Complete(t, "w.1", b1.LeaseOne(t, "w.1"))
	b2.Complete(t, "w.2", b2.LeaseOne(t, "w.2"))
	if rep := b1.Verify(t); rep.Receipts != 12 {
		t.Fatalf("chain has %d receipts, want 12", rep.Receipts)
	}
}
