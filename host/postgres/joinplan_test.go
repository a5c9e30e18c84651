package postgres

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// seedTasks gives one tenant 3,000 tasks, a third of them queued, and
// leaves tasks without statistics, as a young database's is between
// autoanalyze runs (seedEdges).
const seedTasks = `INSERT INTO tasks (id, tenant, task_type, created_by, recipient, state, priority, params,
created_at, updated_at, available_at, max_retries)
SELECT 'task' || g, 'acme', 'bench', 'a', 'a', CASE WHEN g % 3 = 0 THEN 'queued' ELSE 'succeeded' END, 0, '{}', g, g, g, 3
FROM generate_series(1, 3000) g`

// TestClaimOfOneTypeSeeksItsRange: the claim of a lease naming one type,
// planned generically on an empty schema and on seeded tasks without
// statistics, walks its range of tasks_ready_type in order: no sort, no
// scan, no other index of tasks.
func TestClaimOfOneTypeSeeksItsRange(t *testing.T) {
	for _, seeds := range [][]string{nil, {seedTasks}} {
		plan := genericPlan(t, `text, bigint, bigint, text`, claimOneType, `'acme', 9999, 50, 'bench'`, seeds...)
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "Index Scan using tasks_ready_type on tasks") {
			t.Errorf("the claim of one type does not walk tasks_ready_type (%d seeds):\n%s", len(seeds), text)
		}
		for _, bad := range []string{"Seq Scan", "Bitmap", "Sort"} {
			if strings.Contains(text, bad) {
				t.Errorf("the claim of one type plans a %s (%d seeds):\n%s", bad, len(seeds), text)
			}
		}
	}
}

// TestSetUpdatesProbeTheKey: the batch's set statements (the task updates
// and the obligation terminations), planned generically under keyedJoin as
// the writer runs them, on seeded tables without statistics, are nested
// loops that probe each table's key for each element of the arrays — no
// hash or merge join, no scan of the table.
func TestSetUpdatesProbeTheKey(t *testing.T) {
	for _, c := range []struct{ name, q, table, index string }{
		{"tasksUpdateSet", tasksUpdateSet, "tasks", "tasks_id_key"},
		{"termsSet", termsSet, "obligations", "obligations_pkey"},
	} {
		plan := keyedPlan(t, c.q, seedTasks,
			`INSERT INTO obligations (receipt_id, tenant, type, obligor, obligee, task_id, created_at, seq)
SELECT 'rcpt' || g, 'acme', 'task.assigned', 'gate', 'a', 'task' || g, g, g FROM generate_series(1, 3000) g`)
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "Index Scan using "+c.index+" on "+c.table) {
			t.Errorf("%s does not probe %s:\n%s", c.name, c.index, text)
		}
		for _, bad := range []string{"Seq Scan on " + c.table, "Bitmap", "Hash Join", "Merge Join"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s plans a %s:\n%s", c.name, bad, text)
			}
		}
	}
}

// keyedPlan is the generic plan of q under keyedJoin, every parameter
// NULL, made on a fresh schema after the seeds ran.
func keyedPlan(t *testing.T, q string, seeds ...string) []string {
	t.Helper()
	conn := planConn(t, seeds...)
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	for _, s := range keyedJoin {
		if _, err := tx.Exec(ctx, s.sql); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, `PREPARE keyed AS `+q); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range regexp.MustCompile(`\$(\d+)`).FindAllStringSubmatch(q, -1) {
		if k, _ := strconv.Atoi(m[1]); k > n {
			n = k
		}
	}
	return explainLines(t, tx, `EXPLAIN EXECUTE keyed(`+strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ")+`)`)
}

// TestClaimOfOneTypeIsPlannedOnce: run as the writer runs it (a prepared
// statement, plan_cache_mode left to the server), the claim of one type
// is planned generically after its first runs, not afresh at every claim.
func TestClaimOfOneTypeIsPlannedOnce(t *testing.T) {
	conn := planConn(t, seedTasks)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `PREPARE claim1(text, bigint, bigint, text) AS `+claimOneType); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `DEALLOCATE claim1`) //nolint:errcheck
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := tx.Exec(ctx, `EXECUTE claim1('acme', 9999, 8, 'bench')`); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var generic, custom int64
	if err := conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'claim1'`).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	if custom > 5 || generic < 15 {
		t.Fatalf("20 claims of one type: %d generic plans, %d custom plans (planned afresh after the first 5)", generic, custom)
	}
}
