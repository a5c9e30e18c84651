package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// InsertDependencies implements store.Tx: one statement for every edge.
func (w *writeTx) InsertDependencies(ctx context.Context, deps []host.Dependency) error {
	if len(deps) == 0 {
		return nil
	}
	tenant, rows, err := store.DependencyRowsJSON(deps)
	if err != nil {
		return err
	}
	_, err = w.ss.exec(w.c(ctx), `INSERT INTO task_dependencies (tenant, waiter_id, dep_id, rule, position, dep_state, depth)
SELECT $1, j.w, j.d, j.r, j.p, j.s, j.h FROM jsonb_to_recordset($2::jsonb) AS j(w text, d text, r text, p integer, s text, h integer)`, tenant, rows)
	return err
}

// SettleDependency implements store.Tx. The UPDATE runs after the caller's
// locking read of the dependency, so under READ COMMITTED it sees every
// edge of an enqueue that locked the dependency first and committed.
func (w *writeTx) SettleDependency(ctx context.Context, tenant, dep string, state host.TaskState) ([]string, error) {
	var out []string
	err := w.ss.query(w.c(ctx), func(rows pgx.Rows) error {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		out = append(out, id)
		return nil
	}, `UPDATE task_dependencies SET dep_state = $1 WHERE tenant = $2 AND dep_id = $3 AND dep_state = '' RETURNING waiter_id`, string(state), tenant, dep)
	return out, err
}

// ListDependencies implements store.Reader.
func (r *reader) ListDependencies(ctx context.Context, tenant, waiter string) ([]host.Dependency, error) {
	var out []host.Dependency
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		d := host.Dependency{Tenant: tenant, Waiter: waiter}
		var rule, state string
		if err := rows.Scan(&d.DependsOn, &rule, &d.Position, &state); err != nil {
			return err
		}
		d.Rule, d.DepState = host.DependencyRule(rule), host.TaskState(state)
		out = append(out, d)
		return nil
	}, `SELECT dep_id, rule, position, dep_state FROM task_dependencies WHERE tenant = $1 AND waiter_id = $2 ORDER BY position`, tenant, waiter)
	return out, err
}

// dependencyTaskColumns are the dependency tasks' columns in DependencyTasks.
var dependencyTaskColumns = sqlrows.Prefixed("t", sqlrows.OutcomeColumns)

// DependencyTasks implements store.Reader.
func (r *reader) DependencyTasks(ctx context.Context, tenant string, waiters []string) (map[string][]*host.Task, error) {
	if len(waiters) == 0 {
		return nil, nil
	}
	out := map[string][]*host.Task{}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var waiter string
		t, err := sqlrows.ScanOutcome(prefixScanner{rows, &waiter})
		if err != nil {
			return err
		}
		out[waiter] = append(out[waiter], t)
		return nil
	}, `SELECT d.waiter_id, `+dependencyTaskColumns+` FROM task_dependencies d
JOIN tasks t ON t.tenant = d.tenant AND t.id = d.dep_id
WHERE d.tenant = $1 AND d.waiter_id = ANY($2::text[]) ORDER BY d.waiter_id, d.position`, tenant, waiters)
	return out, err
}

// LockDependencies implements store.Reader: inside Update the rows are
// locked FOR SHARE in id order (enqueues naming the same dependency do not
// wait for each other; a completion of it waits for them, and they for it).
func (r *reader) LockDependencies(ctx context.Context, tenant string, ids []string) ([]*host.Task, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	lock := ""
	if r.write {
		lock = " ORDER BY id FOR SHARE"
	}
	ts, err := r.tasks(ctx, `SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE tenant = $1 AND id = ANY($2::text[])`+lock, tenant, ids)
	if err != nil {
		return nil, err
	}
	out := make([]*host.Task, len(ts))
	for i, tr := range ts {
		out[i] = tr.t
	}
	return out, nil
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

// TallyDependencies implements store.Reader.
func (r *reader) TallyDependencies(ctx context.Context, tenant, waiter string) (host.DependencyTally, error) {
	var t host.DependencyTally
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var rule, state string
		var n int
		if err := rows.Scan(&rule, &state, &n); err != nil {
			return err
		}
		t.Rule = host.DependencyRule(rule)
		t.Add(host.TaskState(state), n)
		return nil
	}, `SELECT rule, dep_state, count(*)::int FROM task_dependencies WHERE tenant = $1 AND waiter_id = $2 GROUP BY rule, dep_state`, tenant, waiter)
	return t, err
}

// CrowdedDependency implements store.Reader. Concurrent enqueues naming the
// same dependency do not wait for each other (FOR SHARE), so on several
// writers the bound may be passed by the enqueues in flight at once.
func (r *reader) CrowdedDependency(ctx context.Context, tenant string, ids []string, limit int) (string, error) {
	if len(ids) == 0 {
		return "", nil
	}
	var id string
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		return rows.Scan(&id)
	}, `SELECT dep_id FROM task_dependencies
WHERE tenant = $1 AND dep_id = ANY($2::text[]) AND dep_state = ''
GROUP BY dep_id HAVING count(*) >= $3 ORDER BY dep_id LIMIT 1`, tenant, ids, limit)
	return id, err
}

// WaiterDepth implements store.Reader.
func (r *reader) WaiterDepth(ctx context.Context, tenant string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var depth int
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		return rows.Scan(&depth)
	}, `SELECT coalesce(max(depth), 0) FROM task_dependencies WHERE tenant = $1 AND waiter_id = ANY($2::text[])`, tenant, ids)
	return depth, err
}
