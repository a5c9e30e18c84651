package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestDependencyQueriesUseTheirIndexes: the dependency statements that run
// in the writer for every finished task and every enqueue with after look
// rows up by key. Without statistics SQLite's planner otherwise walks every
// task, or every edge, of the tenant: a cost that grows with the database
// (a 20,000-task run of BenchmarkDependencyCost slowed to a crawl).
func TestDependencyQueriesUseTheirIndexes(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "g.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, c := range []struct{ q, want string }{
		{`SELECT id FROM tasks WHERE +tenant = 'x' AND id IN (SELECT value FROM json_each('["a"]'))`, "SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		{`UPDATE task_dependencies INDEXED BY task_dependencies_open SET dep_state = 's' WHERE tenant = 'x' AND dep_id = 'y' AND dep_state = '' RETURNING waiter_id`, "USING INDEX task_dependencies_open (tenant=? AND dep_id=?)"},
		{`SELECT rule, dep_state, count(*) FROM task_dependencies WHERE tenant = 'x' AND waiter_id = 'y' GROUP BY rule, dep_state`, "USING PRIMARY KEY (tenant=? AND waiter_id=?)"},
		// A fan-in's read of one dependency's result: its one edge.
		{getDependencySQL, "USING PRIMARY KEY (tenant=? AND waiter_id=? AND dep_id=?)"},
		// The enqueue's read of its dependencies, with their open edges
		// and depth: each by its index.
		{lockDependenciesSQL, "SEARCH t USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		{lockDependenciesSQL, "USING COVERING INDEX task_dependencies_open (tenant=? AND dep_id=?)"},
		{lockDependenciesSQL, "USING PRIMARY KEY (tenant=? AND waiter_id=?)"},
		{checkDepsSQL, "SEARCH t USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		{checkDepsSQL, "USING COVERING INDEX task_dependencies_open (tenant=? AND dep_id=?)"},
		{checkDepsSQL, "USING PRIMARY KEY (tenant=? AND waiter_id=?)"},
		{checkDepsOneSQL, "SEARCH t USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		{checkDepsOneSQL, "USING COVERING INDEX task_dependencies_open (tenant=? AND dep_id=?)"},
		{checkDepsOneSQL, "USING PRIMARY KEY (tenant=? AND waiter_id=?)"},
		{markSQL, "SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		{markOneSQL, "SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		// The settling's read of the waiters with their tallies.
		{settledWaitersSQL, "SEARCH t USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		{settledWaitersSQL, "USING PRIMARY KEY (tenant=? AND waiter_id=?)"},
		// The settling's edge update, and its updates of the ready waiters:
		// each waiter by its id, its edges by their key.
		{settleEdgesSQL, "USING INDEX task_dependencies_open (tenant=? AND dep_id=?)"},
		{settleManyEdgesSQL, "USING INDEX task_dependencies_open (tenant=? AND dep_id=?)"},
		// A redrive's reopening: the dead letter's edges by their index,
		// each waiter by its id, never a walk of the tenant's edges.
		{reopenEdgesSQL, "USING INDEX task_dependencies_dead (tenant=? AND dep_id=?)"},
		{reopenEdgesSQL, "SEARCH t USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		// An archive's count of a task's unfinished waiters: its open and
		// succeeded edges by their indexes, each waiter by its id.
		{owedWaitersSQL, "USING COVERING INDEX task_dependencies_open (tenant=? AND dep_id=?)"},
		{owedWaitersSQL, "USING COVERING INDEX task_dependencies_succeeded (tenant=? AND dep_id=?)"},
		{owedWaitersSQL, "SEARCH t USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		{readyWaitersSQL[readyAny][0], "SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		{readyWaitersSQL[readyAny][1], "SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		{readyWaitersSQL[readyAllFinished][0], "SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		{readyWaitersSQL[readyAllFinished][1], "USING PRIMARY KEY (tenant=? AND waiter_id=?)"},
		{readyWaitersSQL[readyAllSucceeded][0], "USING PRIMARY KEY (tenant=? AND waiter_id=?)"},
		{readyWaitersSQL[readyAllSucceeded][1], "SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
	} {
		args := make([]any, strings.Count(c.q, "?"))
		for i := range args {
			args[i] = `["a"]`
		}
		rows, err := st.rdb.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+c.q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var a, b, n int
			var d string
			if err := rows.Scan(&a, &b, &n, &d); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, d)
		}
		rows.Close()
		if !strings.Contains(strings.Join(plan, "\n"), c.want) {
			t.Errorf("%s\nplan: %v\nwant a step %q", c.q, plan, c.want)
		}
	}
}
