package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// InsertDependencies implements store.Tx: one statement for every edge,
// deferred outside strict mode (no answer awaited; its check wants every
// edge written). A read that follows sends it first, so the settling of a
// dependency later in the batch sees the edges.
func (w *writeTx) InsertDependencies(ctx context.Context, deps []host.Dependency) error {
	if len(deps) == 0 {
		return nil
	}
	w.deps, w.guess = nil, nil // the counts LockDependencies read no longer hold
	tenant, rows, err := store.DependencyRowsJSON(deps)
	if err != nil {
		return err
	}
	const q = `INSERT INTO task_dependencies (tenant, waiter_id, dep_id, rule, position, dep_state, depth)
SELECT $1, j.w, j.d, j.r, j.p, j.s, j.h FROM jsonb_to_recordset($2::jsonb) AS j(w text, d text, r text, p integer, s text, h integer)`
	w.edges = append(w.edges, deps...)
	if w.deferWrites {
		// It writes no task row: the batch's task updates may stay one set.
		w.queueCheckedOn(nil, stmt{sql: q, args: []any{tenant, rows}, check: expectRows("dependency insert", len(deps)), asserted: true})
		return nil
	}
	_, err = w.ss.exec(w.c(ctx), q, tenant, rows)
	return err
}

// SettleDependency implements store.Tx. The UPDATE runs after the caller's
// locking read of the dependency, so under READ COMMITTED it sees every
// edge of an enqueue that locked the dependency first and committed.
func (w *writeTx) SettleDependency(ctx context.Context, tenant, dep string, state host.TaskState) ([]string, error) {
	w.deps, w.guess = nil, nil
	var out []string
	err := w.ss.query(w.c(ctx), appendIDs(&out), `UPDATE task_dependencies SET dep_state = $1 WHERE tenant = $2 AND dep_id = $3 AND dep_state = '' RETURNING waiter_id`, string(state), tenant, dep)
	return out, err
}

// ReopenDependency implements store.Tx. Its read sends the batch's rows
// written behind first, so the waiters' states it reads are the batch's
// own. A waiter another writer settles at the same moment (its other
// dependency's end) may be settled counting dep's dead letter: the two
// acts race, and either order is an order they could have come in.
func (w *writeTx) ReopenDependency(ctx context.Context, tenant, dep string) ([]string, error) {
	w.deps, w.guess = nil, nil
	var out []string
	err := w.ss.query(w.c(ctx), appendIDs(&out), reopenEdgesSQL, tenant, dep)
	return out, err
}

// reopenEdgesSQL clears the state of the edges naming dead letter $2 whose
// waiters are still waiting: the edges by task_dependencies_dead (migration
// 0053), each waiter by its id: a scalar subquery, which the planner never
// flattens into a join that may walk tasks instead.
const reopenEdgesSQL = `UPDATE task_dependencies AS d SET dep_state = '' WHERE d.tenant = $1 AND d.dep_id = $2 AND d.dep_state = 'dead_letter'
AND (SELECT t.state FROM tasks t WHERE t.id = d.waiter_id) = 'waiting' RETURNING d.waiter_id`

// appendIDs is a query's row callback that appends each row's one text
// column (an id) to out.
func appendIDs(out *[]string) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		*out = append(*out, id)
		return nil
	}
}

// markWaitedOn sets the marker on the unfinished tasks among the ids,
// locking them in id order (FOR NO KEY UPDATE). Already marked rows are
// neither written nor locked: an enqueue that finds the marker holds only
// its FOR SHARE lock, so enqueues naming one dependency do not wait for
// each other once it is marked. A row is never locked FOR SHARE before
// this statement runs in the same transaction (LockDependencies follows
// it), so two enqueues cannot both hold a share lock and wait to upgrade
// it.
//
// tenant || ”: the ids are looked up by their unique index. Compared as
// the bare column, a generic plan (or stale statistics, as on a young
// table) walks every task of the tenant on tasks_state_type_seq instead,
// per enqueue: ~1,400 buffers a call at 2,000 tasks.
const markWaitedOn = `UPDATE tasks SET has_waiters = true FROM (
SELECT id FROM tasks WHERE tenant || '' = $1 AND id = ANY($2::text[]) AND NOT has_waiters
AND state NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived') ORDER BY id FOR NO KEY UPDATE) m
WHERE tasks.tenant = $1 AND tasks.id = m.id`

// MarkWaitedOn implements store.Tx. Outside strict mode it is queued, no
// answer awaited: LockDependencies, which follows it, sends it.
func (w *writeTx) MarkWaitedOn(ctx context.Context, tenant string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	for _, id := range ids {
		if w.keys.HasTask(id) {
			// Inserted in this batch: its insert goes into the queue
			// ahead of the marker.
			w.materialize()
			break
		}
	}
	w.noteMarked(tenant, ids)
	if w.deferWrites {
		q, args := byIDs(markWaitedOn, markOneWaitedOn, tenant, ids)
		w.ss.queue(q, args...)
		return nil
	}
	q, args := byIDs(markWaitedOn, markOneWaitedOn, tenant, ids)
	_, err := w.ss.exec(w.c(ctx), q, args...)
	return err
}

// An enqueue's marker and locking read lock rows other transactions write:
// a completion's or a claim's batch on another writer (or host) holds its
// tasks' rows until it commits. Two batches that each hold a row the other
// then waits for deadlock, and each batch takes its rows in its requests'
// order, not in one order for all. So a marker in a batch of several
// requests does not wait: it takes the rows it can (SKIP LOCKED), and if
// another transaction holds one the request gives way (errLockOrder),
// undone, and runs after its batch in a transaction of its own, which
// holds nothing when it waits (as LockResources does for resources). A
// request alone in its transaction waits as before.

// markNoWaitSQL locks every one of the ids' rows without waiting: the
// unfinished unmarked ones FOR NO KEY UPDATE, marking them, the others
// FOR SHARE (what LockDependencies takes, so enqueues naming one marked
// dependency do not give way to each other), and answers whether it
// locked every row there is. A row that changed since the statement's
// snapshot may fall out of both sets: the request then gives way too.
const markNoWaitSQL = `WITH a AS (SELECT id FROM tasks WHERE tenant || '' = $1 AND id = ANY($2::text[]) AND NOT has_waiters
AND state NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived') FOR NO KEY UPDATE SKIP LOCKED),
b AS (SELECT id FROM tasks WHERE tenant || '' = $1 AND id = ANY($2::text[])
AND (has_waiters OR state IN ('succeeded', 'canceled', 'dead_letter', 'archived')) FOR SHARE SKIP LOCKED),
u AS (UPDATE tasks SET has_waiters = true WHERE tenant || '' = $1 AND id = ANY($2::text[]) AND id IN (SELECT id FROM a))
SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b) = (SELECT count(*) FROM tasks WHERE tenant || '' = $1 AND id = ANY($2::text[]))`

// markNoWaitOneSQL is markNoWaitSQL for one id (byIDs).
var markNoWaitOneSQL = allOneID(markNoWaitSQL)

// allOneID is q, which reads its ids as id = ANY($2::text[]) (each time
// it names them), for one id compared as id = $2 (byIDs).
func allOneID(q string) string {
	const many = `id = ANY($2::text[])`
	if !strings.Contains(q, many) {
		panic("postgres: allOneID: no " + many + " in " + q)
	}
	return strings.ReplaceAll(q, many, `id = $2`)
}

// markOrGiveWay is the marker of an enqueue in a batch of several
// requests (markNoWaitSQL): errLockOrder when a row is held elsewhere.
// The locking read that follows then waits for nothing: every row it
// reads is locked by this transaction already.
func (w *writeTx) markOrGiveWay(ctx context.Context, tenant string, ids []string) error {
	for _, id := range ids {
		if w.keys.HasTask(id) {
			w.materialize() // its insert goes into the queue ahead of the marker
			break
		}
	}
	w.noteMarked(tenant, ids)
	q, args := byIDs(markNoWaitSQL, markNoWaitOneSQL, tenant, ids)
	var all bool
	if err := w.ss.queryRow(w.c(ctx), []any{&all}, q, args...); err != nil {
		return err
	}
	if !all {
		return errLockOrder
	}
	return nil
}

// markOneWaitedOn is markWaitedOn for one id: a plain UPDATE, which has one
// row to lock and so no order to keep, comparing id = $2.
const markOneWaitedOn = `UPDATE tasks SET has_waiters = true
WHERE tenant || '' = $1 AND id = $2 AND NOT has_waiters
AND state NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived')`

// byIDs returns the statement for ids, many (which reads them as
// $2::text[]) or, for one id, one (which compares id = $2), with its
// arguments. A prepared statement's generic plan is made once a
// connection has run it five times, from the statistics of that moment;
// on a young tasks table (never analyzed, a few pages) the planner takes
// id = ANY($2) for ten ids and finds a scan of the whole table cheaper
// than ten probes of the unique index, and keeps that plan as the table
// grows: ~1,400 buffers a marker at 2,000 tasks in BenchmarkDependencyCost,
// a few milliseconds each. id = $2 is one probe of the unique index, which
// no table is cheaper to scan than.
func byIDs(many, one, tenant string, ids []string) (string, []any) {
	if len(ids) == 1 {
		return one, []any{tenant, ids[0]}
	}
	return many, []any{tenant, ids}
}

// oneID is q, which reads its ids as t.id = ANY($2::text[]), for one id
// compared as t.id = $2 (byIDs).
func oneID(q string) string {
	const many = `t.id = ANY($2::text[])`
	if strings.Count(q, many) != 1 {
		panic("postgres: oneID: no single " + many + " in " + q)
	}
	return strings.Replace(q, many, `t.id = $2`, 1)
}

// MarkAndLockDependencies implements store.Tx. Outside strict mode it is
// answered from the rows this store last committed when it can be, with
// the marker and the locking read queued and their answer checked before
// COMMIT (depspec.go); else the marker is queued and sent with the locking
// read, one round trip.
func (w *writeTx) MarkAndLockDependencies(ctx context.Context, tenant string, ids []string) ([]*host.Task, error) {
	return w.guessedMarkAndLock(ctx, tenant, ids)
}

// settleWaitersSQL calls settle_waiters (migration 0040): the waiters'
// rows as sqlrows.TaskColumns, then the tally's rule, states and counts.
var settleWaitersSQL = func() string {
	var b strings.Builder
	b.WriteString(`SELECT `)
	for i, c := range strings.Split(sqlrows.TaskColumns, ",") {
		if i > 0 {
			b.WriteString(`, `)
		}
		b.WriteString(`(s.o_task).` + strings.TrimSpace(c))
	}
	b.WriteString(`, coalesce(s.o_rule, ''), coalesce(s.o_states, '{}'), coalesce(s.o_counts, '{}') FROM settle_waiters($1, $2, $3) s`)
	return b.String()
}()

// SettleWaiters implements store.Tx in one round trip: settle_waiters
// records the edges, locks the waiters in id order and counts each one's
// edges once its lock is held. Outside strict mode it is answered without
// one when every waiter is known (depspec.go).
func (w *writeTx) SettleWaiters(ctx context.Context, tenant, dep string, state host.TaskState) ([]store.SettledWaiter, error) {
	w.deps, w.guess = nil, nil
	w.settled = append(w.settled, taskKey{tenant, dep})
	if out := w.guessSettle(tenant, dep, state); out != nil {
		return out, nil
	}
	var out []store.SettledWaiter
	err := w.ss.query(w.c(ctx), func(rows pgx.Rows) error {
		sw, err := scanSettled(rows)
		if err != nil {
			return err
		}
		out = append(out, sw)
		return nil
	}, settleWaitersSQL, tenant, dep, string(state))
	return out, err
}

// scanSettled reads one row of settleWaitersSQL.
func scanSettled(rows pgx.Rows) (store.SettledWaiter, error) {
	var rule string
	var states []string
	var counts []int32
	t, _, err := sqlrows.ScanTask(suffixScanner{rows, []any{&rule, &states, &counts}})
	if err != nil {
		return store.SettledWaiter{}, err
	}
	sw := store.SettledWaiter{Task: t}
	if t.State == host.StateWaiting {
		sw.Tally.Rule = host.DependencyRule(rule)
		for i, st := range states {
			if i < len(counts) {
				sw.Tally.Add(host.TaskState(st), int(counts[i]))
			}
		}
	}
	return sw, nil
}

// suffixScanner scans the columns the wrapped scan expects, then rest.
type suffixScanner struct {
	sc   sqlrows.Scanner
	rest []any
}

func (s suffixScanner) Scan(dest ...any) error {
	return s.sc.Scan(append(dest, s.rest...)...)
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

// getDependencySQL reads one edge by the edges' primary key.
const getDependencySQL = `SELECT rule, position, dep_state FROM task_dependencies WHERE tenant = $1 AND waiter_id = $2 AND dep_id = $3`

// GetDependency implements store.Reader.
func (r *reader) GetDependency(ctx context.Context, tenant, waiter, dep string) (*host.Dependency, error) {
	d := host.Dependency{Tenant: tenant, Waiter: waiter, DependsOn: dep}
	var rule, state string
	err := r.ss.queryRow(r.c(ctx), []any{&rule, &d.Position, &state}, getDependencySQL, tenant, waiter, dep)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	d.Rule, d.DepState = host.DependencyRule(rule), host.TaskState(state)
	return &d, nil
}

// dependencyTaskColumns are the dependency tasks' columns in DependencyTasks.
var dependencyTaskColumns = sqlrows.Prefixed("t", sqlrows.OutcomeColumns)

// DependencyTasks implements store.Reader. The waiters drive the read:
// each waiter's edges are one range of the edges' primary key, and each
// dependency one lookup of tasks by its unique id, both in LATERAL
// subqueries the planner cannot flatten (OFFSET 0, LIMIT 1) into a join it
// may turn around. A lease asks this for every batch of offers; as a plain
// join, the generic plan a pooled connection cached while tasks was small
// walked every task of the tenant by its index and probed
// task_dependencies for each, a read that grew with the queue (0.01 ms on
// a fresh database, 33 ms ten seconds into an HTTP run); and with the
// waiters as waiter_id = ANY($2), one cached while the edges had no
// statistics walked every edge of the tenant (0.9 ms a lease at 3,000
// edges), until autoanalyze replanned them.
func (r *reader) DependencyTasks(ctx context.Context, tenant string, waiters []string) (map[string][]*host.Task, error) {
	if len(waiters) == 0 {
		return nil, nil
	}
	// Each waiter once: the read gives a row for each one named.
	waiters = slices.Compact(slices.Sorted(slices.Values(waiters)))
	out := map[string][]*host.Task{}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var waiter string
		t, err := sqlrows.ScanOutcome(prefixScanner{rows, &waiter})
		if err != nil {
			return err
		}
		out[waiter] = append(out[waiter], t)
		return nil
	}, dependencyTasksQuery, tenant, waiters)
	return out, err
}

// dependencyTasksQuery reads the outcomes of the dependencies of waiters
// ($2, each once) in tenant ($1), in each waiter's after order.
var dependencyTasksQuery = `SELECT w.id, ` + dependencyTaskColumns + ` FROM unnest($2::text[]) AS w(id)
CROSS JOIN LATERAL (SELECT dep_id, position FROM task_dependencies WHERE tenant = $1 AND waiter_id = w.id OFFSET 0) d
CROSS JOIN LATERAL (SELECT tenant, ` + sqlrows.OutcomeColumns + ` FROM tasks WHERE id = d.dep_id LIMIT 1) t
WHERE t.tenant = $1 ORDER BY w.id, d.position`

// LockDependencies implements store.Reader: inside Update the rows are
// locked FOR SHARE in id order (enqueues naming the same dependency do not
// wait for each other; a completion of it waits for them, and they for it).
// Inside Update the same statement also counts, for each dependency, its
// open edges (when it is unfinished) and its own edges' depth (when it is
// waiting), which CrowdedDependency and WaiterDepth then answer from
// without a round trip of their own (depCounts).
func (r *reader) LockDependencies(ctx context.Context, tenant string, ids []string) ([]*host.Task, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if !r.write {
		ts, err := r.tasks(ctx, `SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE tenant || '' = $1 AND id = ANY($2::text[])`, tenant, ids)
		if err != nil {
			return nil, err
		}
		out := make([]*host.Task, len(ts))
		for i, tr := range ts {
			out[i] = tr.t
		}
		return out, nil
	}
	var out []*host.Task
	counts := store.NewDependencyCounts(tenant)
	q, args := byIDs(lockDependenciesSQL, lockOneDependencySQL, tenant, ids)
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var open, depth int
		t, _, err := sqlrows.ScanTask(suffixScanner{rows, []any{&open, &depth}})
		if err != nil {
			return err
		}
		counts.Open[t.ID], counts.Depth[t.ID] = open, depth
		out = append(out, t)
		return nil
	}, q, args...)
	if err != nil {
		return nil, err
	}
	r.deps, r.guess = counts, nil
	return out, nil
}

// lockDependenciesSQL reads and locks an enqueue's dependencies with their
// open edges and depth (LockDependencies). tenant || ”: by the ids' unique
// index (markWaitedOn).
const lockDependenciesSQL = `SELECT ` + sqlrows.TaskColumns + `,
CASE WHEN t.state IN ('succeeded', 'canceled', 'dead_letter', 'archived') THEN 0 ELSE
  (SELECT count(*)::int FROM task_dependencies d WHERE d.tenant = t.tenant AND d.dep_id = t.id AND d.dep_state = '') END,
CASE WHEN t.state = 'waiting' THEN
  (SELECT coalesce(max(d.depth), 0)::int FROM task_dependencies d WHERE d.tenant = t.tenant AND d.waiter_id = t.id) ELSE 0 END
FROM tasks t WHERE t.tenant || '' = $1 AND t.id = ANY($2::text[]) ORDER BY t.id FOR SHARE`

// lockOneDependencySQL is lockDependenciesSQL for one id (byIDs).
var lockOneDependencySQL = oneID(lockDependenciesSQL)

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
// writers the bound may be passed by the enqueues in flight at once. Inside
// Update, right after LockDependencies read ids, it answers from the counts
// that read took.
func (r *reader) CrowdedDependency(ctx context.Context, tenant string, ids []string, limit int) (string, error) {
	if len(ids) == 0 {
		return "", nil
	}
	if c := r.deps; r.write && c.Covers(tenant, ids) {
		return c.Crowded(ids, limit), nil
	}
	if g := r.guess; r.write && g.covers(tenant, ids) {
		return g.crowded(ids, limit), nil
	}
	var id string
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		return rows.Scan(&id)
	}, crowdedDependencySQL, tenant, ids, limit)
	return id, err
}

// crowdedDependencySQL is CrowdedDependency's read when no counts cover
// it: each dependency's open edges counted on their index by its id (a
// scalar subquery, which the planner never flattens), so no plan walks
// every open edge of the tenant (DependencyTasks).
var crowdedDependencySQL = `SELECT x.id FROM unnest($2::text[]) AS x(id)
WHERE (SELECT count(*) FROM task_dependencies d WHERE d.tenant = $1 AND d.dep_id = x.id AND d.dep_state = '') >= $3
ORDER BY x.id LIMIT 1`

// WaiterDepth implements store.Reader. Inside Update, right after
// LockDependencies read ids, it answers from the depths that read took.
func (r *reader) WaiterDepth(ctx context.Context, tenant string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	if c := r.deps; r.write && c.Covers(tenant, ids) {
		return c.MaxDepth(ids), nil
	}
	var depth int
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		return rows.Scan(&depth)
	}, waiterDepthSQL, tenant, ids)
	return depth, err
}

// waiterDepthSQL is WaiterDepth's read when no counts cover it: each
// waiter's edges on their primary key (as crowdedDependencySQL).
var waiterDepthSQL = `SELECT coalesce(max((SELECT max(d.depth) FROM task_dependencies d WHERE d.tenant = $1 AND d.waiter_id = w.id)), 0)
FROM unnest($2::text[]) AS w(id)`

// OwedWaiters implements store.Reader.
func (r *reader) OwedWaiters(ctx context.Context, tenant, dep string) (int, string, error) {
	var n int
	var first *string
	err := r.ss.queryRow(r.c(ctx), []any{&n, &first}, owedWaitersSQL, tenant, dep)
	if err != nil || first == nil {
		return n, "", err
	}
	return n, *first, nil
}

// owedWaitersSQL is OwedWaiters' read: dep's open edges and its succeeded
// ones, each on its partial index, and each waiter's state by its id (a
// scalar subquery, which the planner never flattens: a join walked the
// tenant's tasks on a young table). An edge's waiter is of its tenant.
const owedWaitersSQL = `SELECT count(*)::int, min(w.waiter_id) FROM (
  SELECT waiter_id FROM task_dependencies WHERE tenant = $1 AND dep_id = $2 AND dep_state = ''
  UNION ALL
  SELECT waiter_id FROM task_dependencies WHERE tenant = $1 AND dep_id = $2 AND dep_state = 'succeeded') w
WHERE (SELECT t.state FROM tasks t WHERE t.id = w.waiter_id) NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived')`

// HasPendingSettlements implements store.Reader.
func (r *reader) HasPendingSettlements(ctx context.Context) (bool, error) {
	var found bool
	err := r.ss.queryRow(r.c(ctx), []any{&found}, `SELECT EXISTS (SELECT 1 FROM pending_settlements)`)
	return found, err
}

// CountPendingSettlements implements store.Reader.
func (r *reader) CountPendingSettlements(ctx context.Context) (int64, error) {
	var n int64
	err := r.ss.queryRow(r.c(ctx), []any{&n}, `SELECT count(*) FROM pending_settlements`)
	return n, err
}

// AddPendingSettlements implements store.Tx: one statement for the
// update's rows, whatever their number.
func (w *writeTx) AddPendingSettlements(ctx context.Context, ps []store.PendingSettlement) error {
	if len(ps) == 0 {
		return nil
	}
	tenants, ids, states, causes, ats := make([]string, len(ps)), make([]string, len(ps)), make([]string, len(ps)), make([]string, len(ps)), make([]int64, len(ps))
	for i, p := range ps {
		tenants[i], ids[i], states[i], causes[i], ats[i] = p.Tenant, p.TaskID, string(p.State), p.Cause, us(p.CreatedAt)
	}
	_, err := w.ss.exec(w.c(ctx), addPendingSQL, tenants, ids, states, causes, ats)
	return err
}

// addPendingSQL inserts pending settlements from arrays; a task named
// twice keeps its last row (an update's work-list names a task once).
const addPendingSQL = `INSERT INTO pending_settlements (tenant, task_id, state, cause, created_at)
SELECT DISTINCT ON (v.tenant, v.task_id) v.tenant, v.task_id, v.state, v.cause, v.at
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[]) WITH ORDINALITY AS v(tenant, task_id, state, cause, at, n)
ORDER BY v.tenant, v.task_id, v.n DESC
ON CONFLICT (tenant, task_id) DO UPDATE SET state = excluded.state, cause = excluded.cause`

// ClaimPendingSettlements implements store.Tx. Rows another host's
// drainer holds are skipped; the ones returned stay locked until this
// transaction ends, which deletes those it settles.
func (w *writeTx) ClaimPendingSettlements(ctx context.Context, limit int) ([]store.PendingSettlement, error) {
	var out []store.PendingSettlement
	err := w.ss.query(w.c(ctx), func(rows pgx.Rows) error {
		var p store.PendingSettlement
		var state string
		var at int64
		if err := rows.Scan(&p.Tenant, &p.TaskID, &state, &p.Cause, &at); err != nil {
			return err
		}
		p.State, p.CreatedAt = host.TaskState(state), fromUS(at)
		out = append(out, p)
		return nil
	}, `SELECT tenant, task_id, state, cause, created_at FROM pending_settlements ORDER BY created_at, tenant, task_id LIMIT $1 FOR UPDATE SKIP LOCKED`, limit)
	return out, err
}

// DeletePendingSettlement implements store.Tx.
func (w *writeTx) DeletePendingSettlement(ctx context.Context, tenant, taskID string) error {
	_, err := w.ss.exec(w.c(ctx), `DELETE FROM pending_settlements WHERE tenant = $1 AND task_id = $2`, tenant, taskID)
	return err
}
