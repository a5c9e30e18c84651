package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store/storetest"
	"github.com/jackc/pgx/v5"
)

// TestLedgerVerifyDetectsTampering alters, removes and reorders receipts
// with plain SQL behind the gate's back; the verifier must notice each time.
// It names rows by their order in the receipts table, not by seq values, so
// it holds whatever numbering the chain uses.
func TestLedgerVerifyDetectsTampering(t *testing.T) {
	cases := []struct {
		name  string
		stmts func(tbl string, seqs []int64) []string
	}{
		{"altered body", func(tbl string, s []int64) []string {
			return []string{fmt.Sprintf(`UPDATE %s SET body = '{"result_pointer":"inline:ZXZpbA=="}' WHERE seq = %d`, tbl, s[3])}
		}},
		{"removed", func(tbl string, s []int64) []string {
			return []string{fmt.Sprintf(`DELETE FROM %s WHERE seq = %d`, tbl, s[2])}
		}},
		{"removed tail", func(tbl string, s []int64) []string {
			return []string{fmt.Sprintf(`DELETE FROM %s WHERE seq = %d`, tbl, s[len(s)-1])}
		}},
		{"reordered", func(tbl string, s []int64) []string {
			return []string{
				fmt.Sprintf(`UPDATE %s SET seq = -1 WHERE seq = %d`, tbl, s[1]),
				fmt.Sprintf(`UPDATE %s SET seq = %d WHERE seq = %d`, tbl, s[1], s[2]),
				fmt.Sprintf(`UPDATE %s SET seq = %d WHERE seq = -1`, tbl, s[2]),
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			schema := newSchema(t)
			st := openIn(t, schema, Options{})
			b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
			for i := 0; i < 3; i++ {
				b.Enqueue(t, "work")
				b.Complete(t, "w.1", b.LeaseOne(t, "w.1"))
			}
			if rep := b.Verify(t); rep.Receipts != 6 {
				t.Fatalf("want 6 receipts, got %d", rep.Receipts)
			}
			ctx := context.Background()
			tbl := pgx.Identifier{schema, "receipts"}.Sanitize()
			rows, err := st.pool.Query(ctx, `SELECT seq FROM `+tbl+` ORDER BY seq`)
			if err != nil {
				t.Fatal(err)
			}
			seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil || len(seqs) != 6 {
				t.Fatalf("seqs %v, %v", seqs, err)
			}
			for _, s := range c.stmts(tbl, seqs) {
				if _, err := st.pool.Exec(ctx, s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			rep, err := engine.VerifyLedger(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK {
				t.Fatalf("tampering went unnoticed: %+v", rep)
			}
			t.Logf("%s: %+v", c.name, rep)
		})
	}
}
