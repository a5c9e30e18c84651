package postgres

import (
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/store"
)

// seedReceipts gives tenant acme 3,000 receipts, a tenth of them a
// schedule's, without statistics.
const seedReceipts = `INSERT INTO receipts (id, tenant, type, from_p, to_p, parents, body, created_at, prev_hash, hash)
SELECT 'R-' || g, 'acme', CASE WHEN g % 10 = 0 THEN 'schedule.fired' ELSE 'task.progress' END, 'a', 'a', '[]',
  '{"name":"n","schedule_id":"S-' || lpad((g % 7)::text, 26, '0') || '"}', g, '', ''
FROM generate_series(1, 3000) g`

// TestScheduleReceiptsUseTheirIndex: a schedule's receipts are read
// through receipts_schedule in seq order, planned generically on an empty
// schema and on seeded receipts: the query spells the index's expression and
// condition as the migration does, so it never walks the tenant's ledger.
func TestScheduleReceiptsUseTheirIndex(t *testing.T) {
	q := `SELECT seq FROM receipts WHERE tenant = $1 AND seq > $2 AND ` + scheduleIDOfReceipt + ` = $3 AND ` +
		store.ScheduleReceiptOnly + ` ORDER BY seq LIMIT $4`
	for _, seeds := range [][]string{nil, {seedReceipts}} {
		plan := strings.Join(genericPlan(t, `text, bigint, text, bigint`, q, `'acme', 0, 'S-`+strings.Repeat("0", 25)+`3', 10`, seeds...), "\n")
		if !strings.Contains(plan, "Index Scan using receipts_schedule on receipts") {
			t.Errorf("a schedule's receipts are not read through receipts_schedule (%d seeds):\n%s", len(seeds), plan)
		}
		for _, bad := range []string{"Seq Scan", "Sort"} {
			if strings.Contains(plan, bad) {
				t.Errorf("a schedule's receipts plan a %s (%d seeds):\n%s", bad, len(seeds), plan)
			}
		}
	}
}
