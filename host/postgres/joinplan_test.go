package postgres

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
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
		for _, l := range plan {
			if strings.Contains(l, " on tasks") && !strings.Contains(l, "using tasks_ready_type on tasks") {
				t.Errorf("the claim of one type reads another index of tasks (%d seeds):\n%s", len(seeds), text)
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

// TestTheWritersJoinsKeepOnePlan runs the writer's own statements: batches
// whose task updates go out as one set statement, and claims naming one
// type. On the writer's connection the set statement then has only generic
// plans and the one-type claim was planned afresh at most five times (the
// server's first custom plans); and a read sent after a set statement in
// the same transaction finds the planner's settings back at their
// defaults.
func TestTheWritersJoinsKeepOnePlan(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	const runs = 12
	for i := range runs {
		var fns []func(store.Tx) error
		for range 3 {
			task := b.Task(t, b.Enqueue(t, "work").TaskID)
			fns = append(fns, priorityTo(task, i+1, task.Version))
		}
		for j, err := range runHeld(t, st, fns...) {
			if err != nil {
				t.Fatalf("batch %d, update %d: %v", i, j, err)
			}
		}
		if err := st.Update(ctx, func(tx store.Tx) error {
			_, err := tx.ClaimTasks(ctx, store.ClaimQuery{Tenant: "acme", Types: []string{"work"}, Now: b.Clock.Now(), Limit: 1,
				Grant: func(t *host.Task) { t.State, t.LeaseID, t.WorkerID = host.StateLeased, "lease-"+t.ID, "w" }})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	plans := map[string][2]int64{}
	var settings []string
	t1, t2 := b.Task(t, b.Enqueue(t, "work").TaskID), b.Task(t, b.Enqueue(t, "work").TaskID)
	err := st.Update(ctx, func(tx store.Tx) error {
		w := tx.(*writeTx)
		clear(plans)
		settings = nil
		// Two updates in one request: a set statement, then a read.
		for _, task := range []*host.Task{t1, t2} {
			if err := priorityTo(task, 9, task.Version)(tx); err != nil {
				return err
			}
		}
		if err := w.ss.query(ctx, func(r pgx.Rows) error {
			var s string
			if err := r.Scan(&s); err != nil {
				return err
			}
			settings = append(settings, s)
			return nil
		}, `SELECT unnest(ARRAY[current_setting('plan_cache_mode'), current_setting('enable_hashjoin'),
current_setting('enable_mergejoin'), current_setting('enable_seqscan')])`); err != nil {
			return err
		}
		return w.ss.query(ctx, func(r pgx.Rows) error {
			var q string
			var g, c int64
			if err := r.Scan(&q, &g, &c); err != nil {
				return err
			}
			plans[q] = [2]int64{g, c}
			return nil
		}, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = ANY($1::text[])`,
			[]string{tasksUpdateSet, claimOneType})
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"auto", "on", "on", "on"}; !slices.Equal(settings, want) {
		t.Errorf("after a set statement the transaction's planner settings are %v, want %v", settings, want)
	}
	if p, ok := plans[tasksUpdateSet]; !ok || p[0] < runs || p[1] != 0 {
		t.Errorf("the set statement of task updates: %d generic and %d custom plans (found %v), want %d or more generic and no custom", p[0], p[1], ok, runs)
	}
	if p, ok := plans[claimOneType]; !ok || p[1] > 5 || p[0] < runs-5 {
		t.Errorf("the claim of one type: %d generic and %d custom plans (found %v), want %d or more generic and at most 5 custom", p[0], p[1], ok, runs-5)
	}
	b.Verify(t)
}
