package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// InsertDependencies implements store.Tx. The edges are written behind
// (writebehind.go): kept, and written with the batch's other kept edges in
// one statement, before the first statement that reads an edge among them
// (flushDepsFor) or when the rows written behind go out.
func (w *writeTx) InsertDependencies(ctx context.Context, deps []host.Dependency) error {
	w.deps = nil
	w.newDeps = append(w.newDeps, deps...)
	return nil
}

// insertDependencies writes edges of one tenant with one statement.
func (w *writeTx) insertDependencies(ctx context.Context, deps []host.Dependency) error {
	tenant, rows, err := store.DependencyRowsJSON(deps)
	if err != nil {
		return err
	}
	_, err = w.rawExec(ctx, `INSERT OR FAIL INTO task_dependencies (tenant, waiter_id, dep_id, rule, position, dep_state, depth)
SELECT ?, json_extract(j.value, '$.w'), json_extract(j.value, '$.d'), json_extract(j.value, '$.r'), json_extract(j.value, '$.p'), json_extract(j.value, '$.s'), json_extract(j.value, '$.h')
FROM json_each(?) j`, tenant, rows)
	return err
}

// SettleDependency implements store.Tx. It reads and writes only edges, so
// a completion's rows written behind stay in their multi-row statements.
func (w *writeTx) SettleDependency(ctx context.Context, tenant, dep string, state host.TaskState) ([]string, error) {
	w.deps = nil
	if err := w.flushDepsFor(ctx, dep); err != nil {
		return nil, err
	}
	// INDEXED BY: without statistics the planner walks the tenant's whole
	// primary key range instead (every edge of the tenant, per finished task).
	rows, err := w.rawQuery(ctx, `UPDATE task_dependencies INDEXED BY task_dependencies_open SET dep_state = ? WHERE tenant = ? AND dep_id = ? AND dep_state = '' RETURNING waiter_id`,
		string(state), tenant, dep)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	w.wrote = true
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// SettleWaiters implements store.Tx in two statements: the edges' update,
// then one read of the waiters' rows with each waiting one's tally
// (settledWaitersSQL). Neither makes the batch's rows written behind go out
// first unless they hold a waiter or its edges.
func (w *writeTx) SettleWaiters(ctx context.Context, tenant, dep string, state host.TaskState) ([]store.SettledWaiter, error) {
	ids, err := w.SettleDependency(ctx, tenant, dep, state)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	if err := w.flushFor(ctx, ids...); err != nil {
		return nil, err
	}
	if err := w.flushDepsFor(ctx, ids...); err != nil {
		return nil, err
	}
	rows, err := w.rawQuery(ctx, settledWaitersSQL, tenant, store.IDsJSON(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.SettledWaiter
	for rows.Next() {
		var tally sql.NullString
		t, _, err := sqlrows.ScanTask(suffixScanner{rows, []any{&tally}})
		if err != nil {
			return nil, err
		}
		sw := store.SettledWaiter{Task: t}
		if t.State == host.StateWaiting {
			if sw.Tally, err = parseTally(tally.String); err != nil {
				return nil, err
			}
		}
		out = append(out, sw)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != len(ids) {
		return nil, fmt.Errorf("settling %s: %d of its %d waiters have no row", dep, len(ids)-len(out), len(ids))
	}
	return out, nil
}

// settledWaitersSQL reads the waiters SettleWaiters settled an edge of, in
// id order (one lock order for every writer, as store.SettleWaitersStepwise),
// each waiting one with its edges' tally (TallyDependencies) as
// "rule state count" groups joined by commas (neither a rule nor a state
// holds a space or a comma).
var settledWaitersSQL = `SELECT ` + sqlrows.Prefixed("t", sqlrows.TaskColumns) + `,
CASE WHEN t.state = 'waiting' THEN (SELECT group_concat(g.rule || ' ' || g.dep_state || ' ' || g.n, ',') FROM (
  SELECT d.rule, d.dep_state, count(*) AS n FROM task_dependencies d WHERE d.tenant = t.tenant AND d.waiter_id = t.id GROUP BY d.rule, d.dep_state) g) END
FROM tasks t WHERE +t.tenant = ? AND t.id IN (SELECT value FROM json_each(?)) ORDER BY t.id`

// parseTally reads settledWaitersSQL's tally.
func parseTally(s string) (host.DependencyTally, error) {
	var t host.DependencyTally
	if s == "" {
		return t, nil
	}
	for _, g := range strings.Split(s, ",") {
		f := strings.Split(g, " ")
		n, err := strconv.Atoi(f[len(f)-1])
		if len(f) != 3 || err != nil {
			return t, fmt.Errorf("settling: a tally group %q", g)
		}
		t.Rule = host.DependencyRule(f[0])
		t.Add(host.TaskState(f[1]), n)
	}
	return t, nil
}

// MarkWaitedOn implements store.Tx. It makes the rows written behind go out
// first only when it names one of them.
func (w *writeTx) MarkWaitedOn(ctx context.Context, tenant string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := w.flushFor(ctx, ids...); err != nil {
		return err
	}
	_, err := w.rawExec(ctx, `UPDATE tasks SET has_waiters = 1 WHERE +tenant = ? AND id IN (SELECT value FROM json_each(?))
AND has_waiters = 0 AND state NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived')`, tenant, store.IDsJSON(ids))
	return err
}

// MarkAndLockDependencies implements store.Tx with one statement
// (markAndLockSQL), which also reads the counts CrowdedDependency and
// WaiterDepth then answer from.
func (w *writeTx) MarkAndLockDependencies(ctx context.Context, tenant string, ids []string) ([]*host.Task, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	// The statement writes (rawQuery does not say so): an update refused
	// after it must be undone by a savepoint, or its marker commits with
	// the batch's other updates.
	w.wrote = true
	return w.lockWithCounts(ctx, markAndLockSQL, tenant, ids)
}

// ListDependencies implements store.Reader.
func (r *reader) ListDependencies(ctx context.Context, tenant, waiter string) ([]host.Dependency, error) {
	if err := r.flushDepsFor(ctx, waiter); err != nil {
		return nil, err
	}
	rows, err := r.rawQuery(ctx, `SELECT dep_id, rule, position, dep_state FROM task_dependencies WHERE tenant = ? AND waiter_id = ? ORDER BY position`, tenant, waiter)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []host.Dependency
	for rows.Next() {
		d := host.Dependency{Tenant: tenant, Waiter: waiter}
		var rule, state string
		if err := rows.Scan(&d.DependsOn, &rule, &d.Position, &state); err != nil {
			return nil, err
		}
		d.Rule, d.DepState = host.DependencyRule(rule), host.TaskState(state)
		out = append(out, d)
	}
	return out, rows.Err()
}

// dependencyTaskColumns are the dependency tasks' columns in DependencyTasks.
var dependencyTaskColumns = sqlrows.Prefixed("t", sqlrows.OutcomeColumns)

// DependencyTasks implements store.Reader.
func (r *reader) DependencyTasks(ctx context.Context, tenant string, waiters []string) (map[string][]*host.Task, error) {
	if len(waiters) == 0 {
		return nil, nil
	}
	rows, err := r.query(ctx, `SELECT d.waiter_id, `+dependencyTaskColumns+` FROM task_dependencies d
JOIN tasks t ON t.tenant = d.tenant AND t.id = d.dep_id
WHERE d.tenant = ? AND d.waiter_id IN (SELECT value FROM json_each(?)) ORDER BY d.waiter_id, d.position`, tenant, store.IDsJSON(waiters))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]*host.Task{}
	for rows.Next() {
		var waiter string
		t, err := sqlrows.ScanOutcome(prefixScanner{rows, &waiter})
		if err != nil {
			return nil, err
		}
		out[waiter] = append(out[waiter], t)
	}
	return out, rows.Err()
}

// LockDependencies implements store.Reader. SQLite has one writer: reading
// inside Update is enough to order an enqueue and a completion. Inside
// Update it reads, beside each task, its open edges and (when it is
// waiting) its edges' depth, which CrowdedDependency and WaiterDepth then
// answer from (store.DependencyCounts), and it makes the rows written
// behind go out first only when they hold one of ids or its edges.
func (r *reader) LockDependencies(ctx context.Context, tenant string, ids []string) ([]*host.Task, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	// +tenant: look the ids up by their unique index; on tenant the planner
	// walks every task of the tenant.
	if r.wb == nil {
		ts, _, err := scanTasks(r.rawQuery(ctx, `SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE +tenant = ? AND id IN (SELECT value FROM json_each(?))`, tenant, store.IDsJSON(ids)))
		return ts, err
	}
	return r.lockWithCounts(ctx, lockDependenciesSQL, tenant, ids)
}

// lockWithCounts runs q (lockDependenciesSQL or markAndLockSQL) inside
// Update: the tasks, and their counts kept for CrowdedDependency and
// WaiterDepth.
func (r *reader) lockWithCounts(ctx context.Context, q, tenant string, ids []string) ([]*host.Task, error) {
	if err := r.flushFor(ctx, ids...); err != nil {
		return nil, err
	}
	if err := r.flushDepsFor(ctx, ids...); err != nil {
		return nil, err
	}
	rows, err := r.rawQuery(ctx, q, tenant, store.IDsJSON(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := store.NewDependencyCounts(tenant)
	var out []*host.Task
	for rows.Next() {
		var open, depth int
		t, _, err := sqlrows.ScanTask(suffixScanner{rows, []any{&open, &depth}})
		if err != nil {
			return nil, err
		}
		counts.Open[t.ID], counts.Depth[t.ID] = open, depth
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	r.deps = counts
	return out, nil
}

// dependencyCountsSQL are, beside a dependency's row (tasks, aliased t),
// its open edges (on task_dependencies_open) and its own edges' depth (a
// range of the edges' key).
const dependencyCountsSQL = `,
CASE WHEN t.state IN ('succeeded', 'canceled', 'dead_letter', 'archived') THEN 0 ELSE
  (SELECT count(*) FROM task_dependencies d INDEXED BY task_dependencies_open WHERE d.tenant = t.tenant AND d.dep_id = t.id AND d.dep_state = '') END,
CASE WHEN t.state = 'waiting' THEN
  (SELECT coalesce(max(d.depth), 0) FROM task_dependencies d WHERE d.tenant = t.tenant AND d.waiter_id = t.id) ELSE 0 END`

// lockDependenciesSQL reads an enqueue's dependencies with their counts.
var lockDependenciesSQL = `SELECT ` + sqlrows.Prefixed("t", sqlrows.TaskColumns) + dependencyCountsSQL + `
FROM tasks t WHERE +t.tenant = ? AND t.id IN (SELECT value FROM json_each(?))`

// markAndLockSQL is MarkWaitedOn and lockDependenciesSQL in one statement:
// every row named is written (a finished one, or one already marked, with
// the marker it has), so the statement answers them all.
var markAndLockSQL = `UPDATE tasks SET has_waiters = CASE WHEN state IN ('succeeded', 'canceled', 'dead_letter', 'archived') THEN has_waiters ELSE 1 END
WHERE +tenant = ? AND id IN (SELECT value FROM json_each(?))
RETURNING ` + sqlrows.TaskColumns + strings.ReplaceAll(dependencyCountsSQL, " t.", " tasks.")

// suffixScanner scans the columns the wrapped scan expects, then rest.
type suffixScanner struct {
	sc   sqlrows.Scanner
	rest []any
}

func (s suffixScanner) Scan(dest ...any) error {
	return s.sc.Scan(append(dest, s.rest...)...)
}

// prefixScanner scans one leading column into first and the rest as the
// wrapped scan expects.
type prefixScanner struct {
	sc    sqlrows.Scanner
	first *string
}

func (p prefixScanner) Scan(dest ...any) error {
	return p.sc.Scan(append([]any{p.first}, dest...)...)
}

// TallyDependencies implements store.Reader: one range of the edges' primary
// key (the table is WITHOUT ROWID, so the states are in the key's pages).
func (r *reader) TallyDependencies(ctx context.Context, tenant, waiter string) (host.DependencyTally, error) {
	if err := r.flushDepsFor(ctx, waiter); err != nil {
		return host.DependencyTally{}, err
	}
	return tally(r.rawQuery(ctx, `SELECT rule, dep_state, count(*) FROM task_dependencies WHERE tenant = ? AND waiter_id = ? GROUP BY rule, dep_state`, tenant, waiter))
}

func tally(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close() error
}, err error) (host.DependencyTally, error) {
	var t host.DependencyTally
	if err != nil {
		return t, err
	}
	defer rows.Close()
	for rows.Next() {
		var rule, state string
		var n int
		if err := rows.Scan(&rule, &state, &n); err != nil {
			return t, err
		}
		t.Rule = host.DependencyRule(rule)
		t.Add(host.TaskState(state), n)
	}
	return t, rows.Err()
}

// CrowdedDependency implements store.Reader.
func (r *reader) CrowdedDependency(ctx context.Context, tenant string, ids []string, limit int) (string, error) {
	if len(ids) == 0 {
		return "", nil
	}
	if c := r.deps; r.wb != nil && c.Covers(tenant, ids) {
		return c.Crowded(ids, limit), nil
	}
	if err := r.flushDepsFor(ctx, ids...); err != nil {
		return "", err
	}
	rows, err := r.rawQuery(ctx, `SELECT dep_id FROM task_dependencies INDEXED BY task_dependencies_open
WHERE tenant = ? AND dep_id IN (SELECT value FROM json_each(?)) AND dep_state = ''
GROUP BY dep_id HAVING count(*) >= ? ORDER BY dep_id LIMIT 1`, tenant, store.IDsJSON(ids), limit)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var id string
	if rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return "", err
		}
	}
	return id, rows.Err()
}

// WaiterDepth implements store.Reader.
func (r *reader) WaiterDepth(ctx context.Context, tenant string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	if c := r.deps; r.wb != nil && c.Covers(tenant, ids) {
		return c.MaxDepth(ids), nil
	}
	if err := r.flushDepsFor(ctx, ids...); err != nil {
		return 0, err
	}
	var depth int
	err := r.rawQueryRow(ctx, `SELECT coalesce(max(depth), 0) FROM task_dependencies WHERE tenant = ? AND waiter_id IN (SELECT value FROM json_each(?))`,
		tenant, store.IDsJSON(ids)).Scan(&depth)
	return depth, err
}
