package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// ledgerIn writes storetest.LedgerFixture's two-chain ledger (two hosts, one
// after the other) into a fresh schema and returns it.
func ledgerIn(t *testing.T) string {
	t.Helper()
	schema := newSchema(t)
	storetest.LedgerFixture(t, func(tb testing.TB) storetest.Store {
		st, err := Open(context.Background(), testURL(), Options{Schema: schema, Writers: 1})
		if err != nil {
			tb.Fatal(err)
		}
		return st
	})
	if rep := verifyIn(t, schema); !rep.OK || rep.Receipts != 8 || rep.Chains != 3 || rep.Checkpoints == 0 {
		t.Fatalf("fixture ledger: %+v, want 8 receipts in 2 chains (and the empty first one), checkpointed", rep)
	}
	return schema
}

func verifyIn(t *testing.T, schema string) *engine.VerifyReport {
	t.Helper()
	st := openIn(t, schema, Options{Writers: 1})
	rep, err := engine.VerifyLedger(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// execIn runs statements in schema, outside the gate.
func execIn(t *testing.T, schema string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET search_path = `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func TestLedgerVerifyDetectsTampering(t *testing.T) {
	for _, c := range storetest.TamperCases {
		t.Run(c.Name, func(t *testing.T) {
			schema := ledgerIn(t)
			execIn(t, schema, c.Stmts...)
			storetest.CheckTamper(t, c, verifyIn(t, schema))
		})
	}
}

// A database from before per-writer chains migrates: its chain becomes chain
// 1 and still verifies (and still catches tampering), new receipts go to a
// chain of their own and take their seq after the old ones.
func TestLedgerMigratesSingleChain(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{`CREATE SCHEMA ` + pgx.Identifier{schema}.Sanitize(), `SET search_path = ` + pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at bigint NOT NULL)`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for v, name := range []string{"migrations/0001_init.sql", "migrations/0002_task_version.sql"} {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.PgConn().Exec(ctx, string(body)).ReadAll(); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations VALUES ($1, 0)`, v+1); err != nil {
			t.Fatal(err)
		}
	}
	prev := ""
	for seq := int64(1); seq <= 5; seq++ {
		rc := &host.Receipt{Seq: seq, ID: fmt.Sprintf("R-OLD%d", seq), Tenant: "acme", Type: host.ReceiptProgress, From: "a", To: "b",
			Parents: []string{}, Body: json.RawMessage(`{}`), CreatedAt: storetest.Epoch}
		rc.Hash = host.ChainHash(rc, prev)
		if _, err := conn.Exec(ctx, `INSERT INTO receipts (seq, id, tenant, type, from_p, to_p, parents, body, created_at, prev_hash, hash) VALUES ($1,$2,$3,$4,$5,$6,'[]','{}',$7,$8,$9)`,
			seq, rc.ID, rc.Tenant, string(rc.Type), rc.From, rc.To, rc.CreatedAt.UnixMicro(), prev, rc.Hash); err != nil {
			t.Fatal(err)
		}
		prev = rc.Hash
	}
	if _, err := conn.Exec(ctx, `UPDATE ledger_head SET seq = 5, hash = $1`, prev); err != nil {
		t.Fatal(err)
	}

	if rep := verifyIn(t, schema); !rep.OK || rep.Receipts != 5 || rep.Chains != 1 {
		t.Fatalf("migrated ledger: %+v, want 5 receipts in chain 1", rep)
	}
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return openIn(t, schema, Options{Writers: 1}) })
	res := b.Enqueue(t, "work")
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1"))
	rep := b.Verify(t)
	if rep.Receipts != 7 || rep.Chains != 2 {
		t.Fatalf("after new receipts: %+v, want 7 receipts in 2 chains", rep)
	}
	if rs := b.Receipts(t, res.TaskID); rs[0].Seq != 6 || rs[0].ChainID != 2 || rs[0].ChainSeq != 1 {
		t.Fatalf("first new receipt: seq %d chain %d/%d, want seq 6 at chain 2 position 1", rs[0].Seq, rs[0].ChainID, rs[0].ChainSeq)
	}
	execIn(t, schema, `UPDATE receipts SET from_p = 'z' WHERE seq = 3`)
	if rep := verifyIn(t, schema); rep.OK || rep.BadSeq != 3 {
		t.Fatalf("an altered receipt of chain 1 went unnoticed: %+v", rep)
	}
}

// TestLedgerVerifyDetectsRehashedRewrites: rewrites whose hashes were
// recomputed are caught by what the checkpoints recorded
// (storetest.RehashCases).
func TestLedgerVerifyDetectsRehashedRewrites(t *testing.T) {
	for _, c := range storetest.RehashCases {
		t.Run(c.Name, func(t *testing.T) {
			schema := ledgerIn(t)
			execIn(t, schema, c.Stmts...)
			execIn(t, schema, storetest.Rehash(t, openIn(t, schema, Options{Writers: 1}), c.Chain)...)
			storetest.CheckTamper(t, c.TamperCase, verifyIn(t, schema))
		})
	}
}
