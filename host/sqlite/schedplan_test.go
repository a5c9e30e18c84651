package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/store"
)

// TestScheduleReceiptsUseTheirIndex: a schedule's receipts are read
// through receipts_schedule, in seq order, never by a walk of the tenant's
// ledger: the query spells the index's expression and condition as the
// migration does.
func TestScheduleReceiptsUseTheirIndex(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "g.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q := `SELECT seq FROM receipts WHERE tenant = ? AND seq > ? AND ` + store.ScheduleIDOfReceipt + ` = ? AND ` +
		store.ScheduleReceiptOnly + ` ORDER BY seq LIMIT ?`
	rows, err := st.rdb.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, "acme", 0, "S-x", 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var a, b, n int
		var d string
		if err := rows.Scan(&a, &b, &n, &d); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, d)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "USING INDEX receipts_schedule (tenant=? AND <expr>=? AND seq>?)") || strings.Contains(text, "TEMP B-TREE") {
		t.Errorf("a schedule's receipts are not read through receipts_schedule in order:\n%s", text)
	}
}
