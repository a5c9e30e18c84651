package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestDependencyTasksPlanLooksUpByID: the generic plan of the lease's
// dependency read, made on an empty schema (as a pooled connection caches
// it on a fresh database), finds each dependency by the tasks' id index
// and walks no other index of tasks, so its cost stays with the edges as
// the queue grows.
func TestDependencyTasksPlanLooksUpByID(t *testing.T) {
	plan := genericPlan(t, `text, text[]`, dependencyTasksQuery, `'acme', '{a,b}'`)
	byID := false
	for _, l := range plan {
		if !strings.Contains(l, " on tasks") {
			continue
		}
		if !strings.Contains(l, "Index Scan using tasks_id_key on tasks") {
			t.Fatalf("the dependency read scans tasks other than by id:\n%s", strings.Join(plan, "\n"))
		}
		byID = true
	}
	if !byID {
		t.Fatalf("the dependency read never looks tasks up by id:\n%s", strings.Join(plan, "\n"))
	}
}

// TestDependencyEdgeReadsLookUpByKey: the generic plans of the reads of
// some tasks' edges (the lease's dependency read, by waiter; the waiter
// bound's and the depth's fallbacks, by dependency and by waiter), made
// while the edges have rows but no statistics (seedEdges), find the edges
// by the key they name, not by the tenant alone. Written with waiter_id = ANY($2), the lease's read kept a plan
// that walked every edge of the tenant on the primary key and filtered the
// waiters named (0.9 ms a lease at 3,000 edges, growing with them).
func TestDependencyEdgeReadsLookUpByKey(t *testing.T) {
	for _, c := range []struct {
		name, types, q, args, key string
	}{
		{"dependencyTasksQuery", `text, text[]`, dependencyTasksQuery, `'acme', '{a,b}'`, "waiter_id"},
		{"crowdedDependencySQL", `text, text[], int`, crowdedDependencySQL, `'acme', '{a,b}', 10`, "dep_id"},
		{"waiterDepthSQL", `text, text[]`, waiterDepthSQL, `'acme', '{a,b}'`, "waiter_id"},
		{"getDependencySQL", `text, text, text`, getDependencySQL, `'acme', 'w1', 'd1'`, "dep_id"},
	} {
		plan := genericPlan(t, c.types, c.q, c.args, seedEdges)
		scans := 0
		for i, l := range plan {
			if !strings.Contains(l, " on task_dependencies") {
				continue
			}
			scans++
			cond := ""
			for _, m := range plan[i+1:] {
				if strings.Contains(m, "->") {
					break
				}
				if strings.Contains(m, "Index Cond:") {
					cond = m
				}
			}
			if !strings.Contains(l, "Index") || !strings.Contains(cond, c.key) {
				t.Errorf("%s reads the edges other than by %s:\n%s", c.name, c.key, strings.Join(plan, "\n"))
				break
			}
		}
		if scans == 0 {
			t.Errorf("%s never reads the edges:\n%s", c.name, strings.Join(plan, "\n"))
		}
	}
}

// seedEdges gives one tenant 3,000 open edges and leaves the table
// without statistics, as a young database's is between autoanalyze runs:
// the planner then guesses a handful of rows for any tenant.
const seedEdges = `INSERT INTO task_dependencies (tenant, waiter_id, dep_id, rule, position)
SELECT 'acme', 'w' || g, 'd' || g, 'all_succeeded', 0 FROM generate_series(1, 3000) g`

// genericPlan is the generic plan of q (taking parameters of types) for
// args, made on a fresh schema after the seeds (SQL statements) ran.
func genericPlan(t *testing.T, types, q, args string, seeds ...string) []string {
	t.Helper()
	conn := planConn(t, seeds...)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `PREPARE planned(`+types+`) AS `+q); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `DEALLOCATE planned; RESET plan_cache_mode`) //nolint:errcheck
	return explainLines(t, conn, `EXPLAIN EXECUTE planned(`+args+`)`)
}

// planConn is a connection to a fresh schema on which the seeds (SQL
// statements) ran; it is released when the test ends.
func planConn(t *testing.T, seeds ...string) *pgxpool.Conn {
	t.Helper()
	st := openTest(t)
	ctx := context.Background()
	conn, err := st.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	for _, seed := range seeds {
		if _, err := conn.Exec(ctx, seed); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// explainLines runs explain (an EXPLAIN) on q and returns its lines.
func explainLines(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, explain string) []string {
	t.Helper()
	rows, err := q.Query(context.Background(), explain)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestDependencyWriterPlansLookUpByID: the generic plans of the statements
// an enqueue naming one dependency runs in the writer (the marker, the
// locking reads, and the marker that answers for them) and of a guessed
// settlement's statement, made on an empty schema, find the tasks by the
// tasks' id index. Written with id = ANY($2::text[]) (or, for the
// settlement, id IN (SELECT waiter_id …)), their generic plans on a young
// table scanned the whole table, and kept doing so as it grew (byIDs).
func TestDependencyWriterPlansLookUpByID(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	conn, err := st.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `RESET plan_cache_mode`) //nolint:errcheck
	for name, q := range map[string]string{
		"markOneWaitedOn":      markOneWaitedOn,
		"guessMarkOneSQL":      guessMarkOneSQL,
		"lockOneDependencySQL": lockOneDependencySQL,
		"guessLockOneSQL":      guessLockOneSQL,
		"settleGuessSQL":       settleGuessSQL,
	} {
		types, args := `text, text`, `'acme', 'a'`
		if q == settleGuessSQL {
			types, args = `text, text, text`, `'acme', 'a', 'succeeded'`
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `PREPARE onedep(`+types+`) AS `+q); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rows, err := tx.Query(ctx, `EXPLAIN EXECUTE onedep(`+args+`)`)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `DEALLOCATE onedep`); err != nil {
			t.Fatal(err)
		}
		byID := false
		for _, l := range plan {
			if !strings.Contains(l, " on tasks") || strings.Contains(l, "Update on tasks") {
				continue
			}
			if !strings.Contains(l, "Index Scan using tasks_id_key on tasks") {
				t.Fatalf("%s scans tasks other than by id:\n%s", name, strings.Join(plan, "\n"))
			}
			byID = true
		}
		if !byID {
			t.Fatalf("%s never looks tasks up by id:\n%s", name, strings.Join(plan, "\n"))
		}
	}
}

// TestReopenEdgesPlanLooksUpByKey: a redrive's reopening of a dead
// letter's edges (reopenEdgesSQL) finds them by task_dependencies_dead and
// each waiter by the tasks' id index: never a walk of the tenant's edges,
// which outlive their waiters.
func TestReopenEdgesPlanLooksUpByKey(t *testing.T) {
	plan := genericPlan(t, `text, text`, reopenEdgesSQL, `'acme', 'a'`, seedEdges)
	all := strings.Join(plan, "\n")
	if !strings.Contains(all, "using task_dependencies_dead on task_dependencies") {
		t.Fatalf("the reopening does not find the edges by task_dependencies_dead:\n%s", all)
	}
	if !strings.Contains(all, "using tasks_id_key on tasks") {
		t.Fatalf("the reopening does not find each waiter by its id:\n%s", all)
	}
}

// TestOwedWaitersPlanLooksUpByKey: an archive's count of a task's
// unfinished waiters (owedWaitersSQL) finds its open edges by
// task_dependencies_open and its succeeded ones by
// task_dependencies_succeeded (migration 0056), and each waiter by the
// tasks' id index: never a walk of the tenant's edges, which outlive their
// waiters.
func TestOwedWaitersPlanLooksUpByKey(t *testing.T) {
	seedSucceeded := `INSERT INTO task_dependencies (tenant, waiter_id, dep_id, rule, position, dep_state)
SELECT 'acme', 'v' || g, 'e' || g, 'all_succeeded', 0, 'succeeded' FROM generate_series(1, 3000) g`
	plan := genericPlan(t, `text, text`, owedWaitersSQL, `'acme', 'a'`, seedEdges, seedSucceeded)
	all := strings.Join(plan, "\n")
	for _, want := range []string{"task_dependencies_open on task_dependencies", "task_dependencies_succeeded on task_dependencies", "using tasks_id_key on tasks"} {
		if !strings.Contains(all, want) {
			t.Fatalf("the count of owed waiters does not use %s:\n%s", want, all)
		}
	}
}
