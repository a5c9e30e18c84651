package sqlite

import (
	"context"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// InsertDependencies implements store.Tx. Edges are never written behind,
// and the statement reads no task, so it does not make the rows written
// behind go out first.
func (w *writeTx) InsertDependencies(ctx context.Context, deps []host.Dependency) error {
	if len(deps) == 0 {
		return nil
	}
	tenant, rows, err := store.DependencyRowsJSON(deps)
	if err != nil {
		return err
	}
	_, err = w.rawExec(ctx, `INSERT INTO task_dependencies (tenant, waiter_id, dep_id, rule, position, dep_state, depth)
SELECT ?, json_extract(j.value, '$.w'), json_extract(j.value, '$.d'), json_extract(j.value, '$.r'), json_extract(j.value, '$.p'), json_extract(j.value, '$.s'), json_extract(j.value, '$.h')
FROM json_each(?) j`, tenant, rows)
	return err
}

// SettleDependency implements store.Tx. It reads and writes only edges, so
// a completion's rows written behind stay in their multi-row statements.
func (w *writeTx) SettleDependency(ctx context.Context, tenant, dep string, state host.TaskState) ([]string, error) {
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

// SettleWaiters implements store.Tx, a statement a step: SQLite's
// statements cost no round trip.
func (w *writeTx) SettleWaiters(ctx context.Context, tenant, dep string, state host.TaskState) ([]store.SettledWaiter, error) {
	return store.SettleWaitersStepwise(ctx, w, tenant, dep, state)
}

// MarkWaitedOn implements store.Tx.
func (w *writeTx) MarkWaitedOn(ctx context.Context, tenant string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	for _, id := range ids {
		if w.inserted(id) {
			// Inserted in this batch and still kept: write it first.
			if err := w.flushBehind(ctx); err != nil {
				return err
			}
			break
		}
	}
	_, err := w.rawExec(ctx, `UPDATE tasks SET has_waiters = 1 WHERE +tenant = ? AND id IN (SELECT value FROM json_each(?))
AND has_waiters = 0 AND state NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived')`, tenant, store.IDsJSON(ids))
	return err
}

// ListDependencies implements store.Reader.
func (r *reader) ListDependencies(ctx context.Context, tenant, waiter string) ([]host.Dependency, error) {
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
// inside Update is enough to order an enqueue and a completion.
func (r *reader) LockDependencies(ctx context.Context, tenant string, ids []string) ([]*host.Task, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	// +tenant: look the ids up by their unique index; on tenant the planner
	// walks every task of the tenant.
	ts, _, err := r.tasks(ctx, `SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE +tenant = ? AND id IN (SELECT value FROM json_each(?))`, tenant, store.IDsJSON(ids))
	return ts, err
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
	var depth int
	err := r.rawQueryRow(ctx, `SELECT coalesce(max(depth), 0) FROM task_dependencies WHERE tenant = ? AND waiter_id IN (SELECT value FROM json_each(?))`,
		tenant, store.IDsJSON(ids)).Scan(&depth)
	return depth, err
}
