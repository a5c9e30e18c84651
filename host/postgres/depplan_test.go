package postgres

import (
	"context"
	"strings"
	"testing"
)

// TestDependencyTasksPlanLooksUpByID: the generic plan of the lease's
// dependency read, made on an empty schema (as a pooled connection caches
// it on a fresh database), finds each dependency by the tasks' id index
// and walks no other index of tasks, so its cost stays with the edges as
// the queue grows.
func TestDependencyTasksPlanLooksUpByID(t *testing.T) {
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
	if _, err := conn.Exec(ctx, `PREPARE deptasks(text, text[]) AS `+dependencyTasksQuery); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `DEALLOCATE deptasks; RESET plan_cache_mode`) //nolint:errcheck
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE deptasks('acme', '{a,b}')`)
	if err != nil {
		t.Fatal(err)
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
