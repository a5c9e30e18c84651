package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// ledgerWith writes storetest.LedgerFixture's two-chain ledger (two
// processes on one file) and returns the database path.
func ledgerWith(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gate.db")
	storetest.LedgerFixture(t, func(tb testing.TB) storetest.Store {
		st, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		return st
	})
	if rep := verify(t, path); !rep.OK || rep.Receipts != 8 || rep.Chains != 3 || rep.Checkpoints == 0 {
		t.Fatalf("fixture ledger: %+v, want 8 receipts in 2 chains (and the empty first one), checkpointed", rep)
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
	for _, c := range storetest.TamperCases {
		t.Run(c.Name, func(t *testing.T) {
			path := ledgerWith(t)
			tamper(t, path, c.Stmts...)
			storetest.CheckTamper(t, c, verify(t, path))
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
// one ledger, each to its own chain: the writer reads the ledger's last seq
// and its chain's head under each batch's write lock.
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
	if rep := b1.Verify(t); rep.Receipts != 12 || rep.Chains != 3 {
		t.Fatalf("ledger has %d receipts in %d chains, want 12 in 3 (one per process and the first schema's)", rep.Receipts, rep.Chains)
	}
}

// A data folder from before per-writer chains migrates: its chain becomes
// chain 1 and still verifies (and still catches tampering), and new receipts
// go to a chain of their own.
func TestLedgerMigratesSingleChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for v, name := range []string{"migrations/0001_init.sql", "migrations/0002_task_version.sql"} {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(body)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO schema_migrations VALUES (?, 0)`, v+1); err != nil {
			t.Fatal(err)
		}
	}
	prev := ""
	for seq := int64(1); seq <= 5; seq++ {
		rc := &host.Receipt{Seq: seq, ID: fmt.Sprintf("R-OLD%d", seq), Tenant: "acme", Type: host.ReceiptProgress, From: "a", To: "b",
			Parents: []string{}, Body: json.RawMessage(`{}`), CreatedAt: storetest.Epoch}
		rc.Hash = host.ChainHash(rc, prev)
		if _, err := db.Exec(`INSERT INTO receipts (seq, id, tenant, type, from_p, to_p, parents, body, created_at, prev_hash, hash) VALUES (?,?,?,?,?,?,'[]','{}',?,?,?)`,
			seq, rc.ID, rc.Tenant, string(rc.Type), rc.From, rc.To, rc.CreatedAt.UnixMicro(), prev, rc.Hash); err != nil {
			t.Fatal(err)
		}
		prev = rc.Hash
	}
	if _, err := db.Exec(`UPDATE ledger_head SET seq = 5, hash = ?`, prev); err != nil {
		t.Fatal(err)
	}
	for i, state := range []string{"queued", "succeeded", "queued"} {
		if _, err := db.Exec(`INSERT INTO tasks (id, tenant, task_type, created_by, recipient, state, priority, params, created_at, updated_at, available_at, max_retries)
VALUES (?, 'acme', 'work', 'a', 'b', ?, 1, '{}', 0, 0, 0, 3)`, fmt.Sprintf("T-OLD%d", i), state); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	if rep := verify(t, path); !rep.OK || rep.Receipts != 5 || rep.Chains != 1 {
		t.Fatalf("migrated ledger: %+v, want 5 receipts in chain 1", rep)
	}
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	b.Enqueue(t, "work")
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1"))
	// The tasks from before were counted by the migration.
	if qs, err := b.Engine.Stats(b.Ctx, "acme"); err != nil || qs.ByState[host.StateQueued] != 2 || qs.ByState[host.StateSucceeded] != 2 || qs.ByType["work"] != 2 {
		t.Fatalf("stats after migration: %+v %v", qs, err)
	}
	rep := b.Verify(t)
	if rep.Receipts != 7 || rep.Chains != 2 {
		t.Fatalf("after new receipts: %+v, want 7 receipts in 2 chains", rep)
	}
	b.Engine.Close()
	st.Close()
	tamper(t, path, `UPDATE receipts SET from_p = 'z' WHERE seq = 3`)
	if rep := verify(t, path); rep.OK || rep.BadSeq != 3 {
		t.Fatalf("an altered receipt of chain 1 went unnoticed: %+v", rep)
	}
}

// A store rewritten whole (its checkpoints with their head row, a chain with
// its head row and its rows in the obligation index) verifies on its own: nothing inside it is left to
// contradict the rewrite. A checkpoint hash kept from an earlier verify
// catches it.
func TestLedgerVerifyAgainstAKeptCheckpoint(t *testing.T) {
	path := ledgerWith(t)
	kept := verify(t, path).HeadHash
	tamper(t, path,
		`DELETE FROM ledger_checkpoints`, `UPDATE ledger_checkpoint_head SET checkpoint_id = 0, hash = ''`,
		`DELETE FROM obligations WHERE receipt_id IN (SELECT id FROM receipts WHERE chain_id = 3)`,
		`DELETE FROM receipts WHERE chain_id = 3`, `DELETE FROM ledger_chains WHERE chain_id = 3`)
	if rep := verify(t, path); !rep.OK {
		t.Fatalf("the whole rewrite was expected to verify without a kept hash (or the fixture changed): %+v", rep)
	}
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rep, err := engine.VerifyLedgerExpecting(context.Background(), st, []string{kept})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || !strings.Contains(rep.Problem, "not in the checkpoint chain") {
		t.Fatalf("verify against the kept checkpoint %s: %+v, want it missing", kept, rep)
	}
}

// An open obligation hidden from open-obligation queries by marking its
// index row terminated (the index is what those queries read, and no hash
// covers it) is caught: no receipt of the ledger terminates it.
func TestLedgerVerifyFindsAnObligationHiddenInTheIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	b.Enqueue(t, "work")
	b.Engine.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if rep := verify(t, path); !rep.OK || rep.Receipts != 1 {
		t.Fatalf("ledger of one open assignment: %+v", rep)
	}
	for _, term := range []string{"R-FAKE", ""} {
		t.Run(fmt.Sprintf("terminated by %q", term), func(t *testing.T) {
			copyPath := filepath.Join(t.TempDir(), "gate.db")
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(copyPath, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			tamper(t, copyPath, `UPDATE obligations SET terminated_by = '`+term+`'`)
			rep := verify(t, copyPath)
			if rep.OK || rep.BadSeq != 1 || !strings.Contains(rep.Problem, "no receipt of the ledger terminates it") {
				t.Fatalf("an open obligation marked terminated in the index: %+v", rep)
			}
		})
	}
}

// A task leased by a gate whose resource names were not yet in NFC (its
// intents and its resource lease stored with a decomposed "é") keeps its
// resource on a heartbeat after the upgrade, which reads the intents in NFC.
func TestTaskLeasedUnderAnOldSpellingKeepsItsResource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	tt := host.NewTaskType("edit")
	tt.Tenant, tt.LeaseSeconds = "acme", 3600
	tt.ResourceIntents = []host.ResourceIntent{{Resource: "FILE:/caf\u00e9.go", Predicate: host.PredicateMutates}}
	b.MustPutType(t, tt)
	b.Enqueue(t, "edit")
	o := b.LeaseOne(t, "w.1")
	old := "FILE:/cafe\u0301.go"
	tamper(t, path, `UPDATE resource_leases SET resource = '`+old+`'`,
		`UPDATE tasks SET resource_intents = '[{"resource":"`+old+`","predicate":"MUTATES"}]'`)
	b.Clock.Advance(30 * time.Second)
	if _, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: storetest.Call("w.1", o)}); err != nil {
		t.Fatalf("heartbeat of a task leased under the old spelling: %v", err)
	}
}

// TestLedgerVerifyDetectsRehashedRewrites: rewrites whose hashes were
// recomputed are caught by what the checkpoints recorded
// (storetest.RehashCases).
func TestLedgerVerifyDetectsRehashedRewrites(t *testing.T) {
	for _, c := range storetest.RehashCases {
		t.Run(c.Name, func(t *testing.T) {
			path := ledgerWith(t)
			tamper(t, path, c.Stmts...)
			st, err := sqlite.Open(path, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			stmts := storetest.Rehash(t, st, c.Chain)
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			tamper(t, path, stmts...)
			storetest.CheckTamper(t, c.TamperCase, verify(t, path))
		})
	}
}
