package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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

// insertDependencies writes edges with multi-row INSERTs (insertRows: a
// few prepared statement texts serve every batch; no JSON to build and
// take apart, which the edges cost before).
func (w *writeTx) insertDependencies(ctx context.Context, deps []host.Dependency) error {
	rows := make([][]any, len(deps))
	for i, d := range deps {
		rows[i] = []any{d.Tenant, d.Waiter, d.DependsOn, string(d.Rule), d.Position, string(d.DepState), d.Depth}
	}
	return w.insertRows(ctx, `INSERT OR FAIL INTO task_dependencies (tenant, waiter_id, dep_id, rule, position, dep_state, depth) VALUES `, 7, rows, errEdgeClash)
}

var errEdgeClash = host.Errorf(host.CodeConflict, "a dependency edge with this waiter and dependency exists")

// SettleDependency implements store.Tx. It reads and writes only edges, so
// a completion's rows written behind stay in their multi-row statements.
func (w *writeTx) SettleDependency(ctx context.Context, tenant, dep string, state host.TaskState) ([]string, error) {
	w.deps = nil
	if err := w.flushDepsFor(ctx, dep); err != nil {
		return nil, err
	}
	// INDEXED BY: without statistics the planner walks the tenant's whole
	// primary key range instead (every edge of the tenant, per finished task).
	return w.writeIDs(ctx, `UPDATE task_dependencies INDEXED BY task_dependencies_open SET dep_state = ? WHERE tenant = ? AND dep_id = ? AND dep_state = '' RETURNING waiter_id`,
		string(state), tenant, dep)
}

// ReopenDependency implements store.Tx. A redrive is an operator's act,
// rare: the batch's rows written behind go out first, so the waiters'
// states read here are the batch's own.
func (w *writeTx) ReopenDependency(ctx context.Context, tenant, dep string) ([]string, error) {
	w.deps = nil
	if w.wb != nil {
		if err := w.wb.flushRows(ctx); err != nil {
			return nil, err
		}
	}
	return w.writeIDs(ctx, reopenEdgesSQL, tenant, dep)
}

// reopenEdgesSQL clears the state of the edges naming dead letter $2 whose
// waiters are still waiting: the edges by task_dependencies_dead (migration
// 0049), each waiter by its id.
const reopenEdgesSQL = `UPDATE task_dependencies INDEXED BY task_dependencies_dead SET dep_state = '' WHERE tenant = ? AND dep_id = ? AND dep_state = 'dead_letter'
AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = task_dependencies.waiter_id AND t.state = 'waiting') RETURNING waiter_id`

// writeIDs runs a write that returns one id a row, and returns them.
func (w *writeTx) writeIDs(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := w.rawQuery(ctx, q, args...)
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
	return w.settledWaiters(ctx, tenant, dep, ids)
}

// settledWaiters reads the waiters ids of dep with their tallies
// (settledWaitersSQL).
func (w *writeTx) settledWaiters(ctx context.Context, tenant, dep string, ids []string) ([]store.SettledWaiter, error) {
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

// SettleReadyWaiters implements store.WaiterReadier: the edges' update
// (which also answers each waiter's rule), then, for the waiters whose
// verdict cannot be a cancel, one update per rule that moves those the
// rule now lets run to queued (readyWaitersSQL). A pair (one waiter, one
// dependency that succeeded) costs two statements, where SettleWaiters and
// the engine's update of the waiter cost three, the read and the update
// of a whole row among them. The other waiters are read as SettleWaiters
// reads them.
//
// A dependency that succeeded is only noted: its waiters are settled with
// the batch's other succeeded dependencies' by writeSettles, when the
// batch's rows written behind go out (at its end, or before a statement
// that may see them), and their long-polls are woken once the batch
// commits (Store.AddReadyHook; without a hook added, nobody would hear of
// them, and they are settled at once). Such an end can only make a waiter
// ready, so nothing is returned for the engine to decide.
func (w *writeTx) SettleReadyWaiters(ctx context.Context, tenant, dep string, state host.TaskState, now time.Time) ([]*host.Task, []store.SettledWaiter, error) {
	w.deps = nil
	if state == host.StateSucceeded && w.s.hearsReady() {
		if len(w.settles) == 0 {
			w.settleMark = w.queuedN
		}
		w.settles = append(w.settles, pendingSettle{tenant: tenant, dep: dep, now: now})
		return nil, nil, nil
	}
	if err := w.flushDepsFor(ctx, dep); err != nil {
		return nil, nil, err
	}
	w.wrote = true // before the statement: OR FAIL leaves what it wrote before an error
	rows, err := w.rawQuery(ctx, settleEdgesSQL, string(state), tenant, dep)
	if err != nil {
		return nil, nil, err
	}
	// by[readyAny], by[readyAllFinished], by[readyAllSucceeded]: the
	// waiters each ready statement tries; decide: the engine's.
	var by [readyKinds][]string
	var all, decide []string
	for rows.Next() {
		var id, rule string
		if err := rows.Scan(&id, &rule); err != nil {
			rows.Close()
			return nil, nil, err
		}
		all = append(all, id)
		switch {
		case host.DependencyRule(rule) == host.RuleAllFinished:
			by[readyAllFinished] = append(by[readyAllFinished], id)
		case state != host.StateSucceeded:
			decide = append(decide, id)
		case host.DependencyRule(rule) == host.RuleAnySucceeded:
			by[readyAny] = append(by[readyAny], id)
		default:
			by[readyAllSucceeded] = append(by[readyAllSucceeded], id)
		}
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return nil, nil, err
	}
	rows.Close()
	if len(all) == 0 {
		return nil, nil, nil
	}
	if err := w.flushFor(ctx, all...); err != nil {
		return nil, nil, err
	}
	if err := w.flushDepsFor(ctx, all...); err != nil {
		return nil, nil, err
	}
	ready, err := w.readyWaiters(ctx, tenant, &by, now)
	if err != nil {
		return nil, nil, err
	}
	if len(decide) == 0 {
		return ready, nil, nil
	}
	rest, err := w.settledWaiters(ctx, tenant, dep, decide)
	return ready, rest, err
}

var _ store.WaiterReadier = (*writeTx)(nil)

// pendingSettle is a dependency that succeeded in the batch, its waiters
// not settled yet (SettleReadyWaiters).
type pendingSettle struct {
	tenant, dep string
	now         time.Time
}

// writeSettles settles the waiters of the batch's succeeded dependencies,
// per tenant in two statements or three: the edges' update of all of them
// (settleEdgesSQL, settleManyEdgesSQL), then per rule the update that moves
// the waiters it now lets run to queued (readyWaitersSQL). Settled together
// or one after another, the same waiters end ready: a success only closes
// edges, and a rule's check reads the edges after all of them are closed.
// flushRows calls it last, after the kept tasks and edges it may touch. A
// waiter takes the latest of its tenant's noted successes' times as its
// updated_at and the floor of its available_at: a few milliseconds later
// than its own dependency's at most, and none of them visible before the
// batch commits, after all of them. A failure sticks, as flushRows'.
func (w *writeTx) writeSettles(ctx context.Context) error {
	if w.failed != nil {
		return w.failed
	}
	for len(w.settles) > 0 {
		tenant, now := w.settles[0].tenant, w.settles[0].now
		var deps []string
		rest := w.settles[:0]
		for _, p := range w.settles {
			switch {
			case p.tenant != tenant:
				rest = append(rest, p)
			case !slices.Contains(deps, p.dep):
				deps = append(deps, p.dep)
				fallthrough
			default:
				if p.now.After(now) {
					now = p.now
				}
			}
		}
		if err := w.settleSucceeded(ctx, tenant, deps, now); err != nil {
			w.failed = err
			return err
		}
		w.settles = rest
	}
	return nil
}

// settleSucceeded is writeSettles for one tenant's dependencies.
func (w *writeTx) settleSucceeded(ctx context.Context, tenant string, deps []string, now time.Time) error {
	q, arg := settleEdgesSQL, any(deps[0])
	if len(deps) > 1 {
		q, arg = settleManyEdgesSQL, store.IDsJSON(deps)
	}
	w.wrote = true // before the statement: OR FAIL leaves what it wrote before an error
	rows, err := w.rawQuery(ctx, q, string(host.StateSucceeded), tenant, arg)
	if err != nil {
		return err
	}
	var by [readyKinds][]string
	for rows.Next() {
		var id, rule string
		if err := rows.Scan(&id, &rule); err != nil {
			rows.Close()
			return err
		}
		kind := readyAllSucceeded
		switch host.DependencyRule(rule) {
		case host.RuleAllFinished:
			kind = readyAllFinished
		case host.RuleAnySucceeded:
			kind = readyAny
		}
		if !slices.Contains(by[kind], id) {
			by[kind] = append(by[kind], id)
		}
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	rows.Close()
	ready, err := w.readyWaiters(ctx, tenant, &by, now)
	w.readied = append(w.readied, ready...)
	return err
}

// readyWaiters runs readyWaitersSQL for the waiters of each kind and
// returns those it moved to queued (id, tenant, type and state), counted in
// the queue counts.
func (w *writeTx) readyWaiters(ctx context.Context, tenant string, by *[readyKinds][]string, now time.Time) ([]*host.Task, error) {
	var ready []*host.Task
	for kind, ids := range by {
		if len(ids) == 0 {
			continue
		}
		q, arg := readyWaitersSQL[kind][0], any(ids[0])
		if len(ids) > 1 {
			q, arg = readyWaitersSQL[kind][1], store.IDsJSON(ids)
		}
		rows, err := w.rawQuery(ctx, q, us(now), us(now), tenant, arg)
		if err != nil {
			return ready, err
		}
		for rows.Next() {
			t := &host.Task{Tenant: tenant, State: host.StateQueued}
			if err := rows.Scan(&t.ID, &t.Type); err != nil {
				rows.Close()
				return ready, err
			}
			w.counts = store.Moved(w.counts, t, host.StateWaiting, host.StateQueued)
			ready = append(ready, t)
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return ready, err
		}
		rows.Close()
	}
	return ready, nil
}

// settleEdgesSQL records a dependency's end on its open edges and answers
// each one's waiter and rule.
const settleEdgesSQL = `UPDATE OR FAIL task_dependencies INDEXED BY task_dependencies_open SET dep_state = ? WHERE tenant = ? AND dep_id = ? AND dep_state = '' RETURNING waiter_id, rule`

// settleManyEdgesSQL is settleEdgesSQL for a JSON array of dependencies.
const settleManyEdgesSQL = `UPDATE OR FAIL task_dependencies INDEXED BY task_dependencies_open SET dep_state = ? WHERE tenant = ? AND dep_id IN (SELECT value FROM json_each(?)) AND dep_state = '' RETURNING waiter_id, rule`

// The ready statements of SettleReadyWaiters, by what the rule needs of
// the waiter's edges once the dependency's end is recorded.
const (
	readyAny          = iota // any_succeeded, the dependency succeeded: nothing more
	readyAllFinished         // all_finished: no edge still open
	readyAllSucceeded        // all_succeeded, the dependency succeeded: every edge succeeded
	readyKinds
)

// readyWaitersSQL are, by kind, the update that moves the waiting waiters
// among the ids the rule lets run to queued, as the engine's update of a
// ready waiter does; [0] for one id, [1] for a JSON array of them. The
// edges are read on their primary key (tenant, waiter_id).
var readyWaitersSQL = func() (out [readyKinds][2]string) {
	conds := [readyKinds]string{
		readyAny:          ``,
		readyAllFinished:  ` AND NOT EXISTS (SELECT 1 FROM task_dependencies d WHERE d.tenant = tasks.tenant AND d.waiter_id = tasks.id AND d.dep_state = '')`,
		readyAllSucceeded: ` AND NOT EXISTS (SELECT 1 FROM task_dependencies d WHERE d.tenant = tasks.tenant AND d.waiter_id = tasks.id AND d.dep_state <> 'succeeded')`,
	}
	for kind, cond := range conds {
		for i, ids := range []string{`id = ?`, `id IN (SELECT value FROM json_each(?))`} {
			out[kind][i] = `UPDATE OR FAIL tasks SET state = 'queued', updated_at = ?, available_at = max(available_at, ?), version = version + 1
WHERE +tenant = ? AND ` + ids + ` AND state = 'waiting'` + cond + `
RETURNING id, task_type`
		}
	}
	return out
}()

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

// MarkAndLockDependencies implements store.Tx with a read of the tasks
// and their counts (checkDepsSQL, or checkDepsOneSQL for a single id, which
// spares the json_each), then, when some named task is unfinished and not
// yet marked, one update of the marker on those alone (markSQL). The read
// also answers the counts CrowdedDependency and WaiterDepth then answer
// from. The tasks hold only the fields of sqlrows.DependencyCheckColumns:
// the enqueue checks no more, and a whole row (the params above all) was
// most of the cost. A read and a plain update cost the writer less than
// the one UPDATE … RETURNING they replace (which wrote every row named),
// and a dependency already marked (a fan-out's) costs the read alone.
func (w *writeTx) MarkAndLockDependencies(ctx context.Context, tenant string, ids []string) ([]*host.Task, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if err := w.flushFor(ctx, ids...); err != nil {
		return nil, err
	}
	// The batch's unsettled successes (writeSettles) close only edges
	// of finished tasks, which this read does not count: its edges need
	// writing first, not the settling, unless a named task waits (its
	// state and depth are the settling's to change).
	if err := w.flushKeptDepsFor(ctx, ids...); err != nil {
		return nil, err
	}
	q, arg := checkDepsOneSQL, any(ids[0])
	if len(ids) > 1 {
		q, arg = checkDepsSQL, store.IDsJSON(ids)
	}
	var counts *store.DependencyCounts
	var out, mark []*host.Task
	for settled := false; ; settled = true {
		rows, err := w.rawQuery(ctx, q, tenant, arg)
		if err != nil {
			return nil, err
		}
		counts = store.NewDependencyCounts(tenant)
		out, mark = out[:0], mark[:0]
		waiting := false
		for rows.Next() {
			var open, depth int
			t, err := sqlrows.ScanDependencyCheck(suffixScanner{rows, []any{&open, &depth}})
			if err != nil {
				rows.Close()
				return nil, err
			}
			counts.Open[t.ID], counts.Depth[t.ID] = open, depth
			out = append(out, t)
			if !t.HasWaiters && !t.State.Terminal() {
				mark = append(mark, t)
			}
			waiting = waiting || t.State == host.StateWaiting
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return nil, err
		}
		rows.Close()
		if settled || !waiting || len(w.settles) == 0 {
			break
		}
		if err := w.flushRows(ctx); err != nil {
			return nil, err
		}
	}
	if len(mark) > 0 {
		ids := make([]string, len(mark))
		for i, t := range mark {
			ids[i] = t.ID
		}
		q, arg := markOneSQL, any(ids[0])
		if len(ids) > 1 {
			q, arg = markSQL, store.IDsJSON(ids)
		}
		if _, err := w.rawExec(ctx, q, tenant, arg); err != nil {
			return nil, err
		}
		for _, t := range mark {
			t.HasWaiters = true
		}
	}
	w.deps = counts
	return out, nil
}

// checkDepsSQL reads an enqueue's dependencies with the columns it checks
// (sqlrows.DependencyCheckColumns) and their counts, as lockDependenciesSQL
// does; a task without the marker has no open edge (edges to an
// unfinished task are written only once it is marked, and the marker is
// never taken off), so its open edges are not counted.
var checkDepsSQL = checkDeps(`t.id IN (SELECT value FROM json_each(?))`)

// checkDepsOneSQL is checkDepsSQL for one id.
var checkDepsOneSQL = checkDeps(`t.id = ?`)

func checkDeps(ids string) string {
	return `SELECT ` + sqlrows.Prefixed("t", sqlrows.DependencyCheckColumns) +
		strings.Replace(dependencyCountsSQL, "CASE WHEN t.state IN", "CASE WHEN t.has_waiters = 0 OR t.state IN", 1) + `
FROM tasks t WHERE +t.tenant = ? AND ` + ids
}

// markSQL and markOneSQL set the marker on the unfinished tasks the read
// found unmarked. The dependency statements that write say OR FAIL, as the
// rows written behind do (writebehind.go): no statement journal. What one
// wrote before an error is undone with its update, which has said it wrote
// first.
const (
	markSQL    = `UPDATE OR FAIL tasks SET has_waiters = 1 WHERE +tenant = ? AND id IN (SELECT value FROM json_each(?))`
	markOneSQL = `UPDATE OR FAIL tasks SET has_waiters = 1 WHERE +tenant = ? AND id = ?`
)

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

// getDependencySQL reads one edge by the edges' primary key.
const getDependencySQL = `SELECT rule, position, dep_state FROM task_dependencies WHERE tenant = ? AND waiter_id = ? AND dep_id = ?`

// GetDependency implements store.Reader.
func (r *reader) GetDependency(ctx context.Context, tenant, waiter, dep string) (*host.Dependency, error) {
	if err := r.flushDepsFor(ctx, waiter); err != nil {
		return nil, err
	}
	d := host.Dependency{Tenant: tenant, Waiter: waiter, DependsOn: dep}
	var rule, state string
	err := r.rawQueryRow(ctx, getDependencySQL, tenant, waiter, dep).Scan(&rule, &d.Position, &state)
	if errors.Is(err, sql.ErrNoRows) {
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

// lockWithCounts runs q (lockDependenciesSQL) inside Update: the tasks,
// and their counts kept for CrowdedDependency and WaiterDepth.
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

// OwedWaiters implements store.Reader. queryRow writes the batch's kept
// rows first (its edges, settlements and tasks), so the read sees them.
func (r *reader) OwedWaiters(ctx context.Context, tenant, dep string) (int, string, error) {
	var n int
	var first sql.NullString
	err := r.queryRow(ctx, owedWaitersSQL, tenant, dep, tenant, dep).Scan(&n, &first)
	return n, first.String, err
}

// owedWaitersSQL is OwedWaiters' read: dep's open edges and its succeeded
// ones, each on its partial index, and each waiter's state by its id (a
// scalar subquery: one look-up a waiter, never a walk of the tasks). An
// edge's waiter is of its tenant.
const owedWaitersSQL = `SELECT count(*), min(w.waiter_id) FROM (
  SELECT waiter_id FROM task_dependencies INDEXED BY task_dependencies_open WHERE tenant = ? AND dep_id = ? AND dep_state = ''
  UNION ALL
  SELECT waiter_id FROM task_dependencies INDEXED BY task_dependencies_succeeded WHERE tenant = ? AND dep_id = ? AND dep_state = 'succeeded') w
WHERE (SELECT t.state FROM tasks t WHERE t.id = w.waiter_id) NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived')`

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

// HasPendingSettlements implements store.Reader. The table is never held
// behind, so the probe reads it as it is.
func (r *reader) HasPendingSettlements(ctx context.Context) (bool, error) {
	var n int
	err := r.rawQueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM pending_settlements LIMIT 1)`).Scan(&n)
	return n > 0, err
}

// CountPendingSettlements implements store.Reader.
func (r *reader) CountPendingSettlements(ctx context.Context) (int64, error) {
	var n int64
	err := r.rawQueryRow(ctx, `SELECT count(*) FROM pending_settlements`).Scan(&n)
	return n, err
}

// AddPendingSettlements implements store.Tx. It reads nothing the batch
// holds behind, so it runs raw.
func (w *writeTx) AddPendingSettlements(ctx context.Context, ps []store.PendingSettlement) error {
	for _, p := range ps {
		if _, err := w.rawExec(ctx, `INSERT INTO pending_settlements (tenant, task_id, state, cause, created_at) VALUES (?,?,?,?,?)
ON CONFLICT (tenant, task_id) DO UPDATE SET state = excluded.state, cause = excluded.cause`,
			p.Tenant, p.TaskID, string(p.State), p.Cause, us(p.CreatedAt)); err != nil {
			return err
		}
	}
	return nil
}

// ClaimPendingSettlements implements store.Tx: the single writer holds
// every row it reads until the batch ends.
func (w *writeTx) ClaimPendingSettlements(ctx context.Context, limit int) ([]store.PendingSettlement, error) {
	rows, err := w.rawQuery(ctx, `SELECT tenant, task_id, state, cause, created_at FROM pending_settlements ORDER BY created_at, tenant, task_id LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.PendingSettlement
	for rows.Next() {
		var p store.PendingSettlement
		var state string
		var at int64
		if err := rows.Scan(&p.Tenant, &p.TaskID, &state, &p.Cause, &at); err != nil {
			return nil, err
		}
		p.State, p.CreatedAt = host.TaskState(state), fromUS(at)
		out = append(out, p)
	}
	return out, rows.Err()
}

// DeletePendingSettlement implements store.Tx.
func (w *writeTx) DeletePendingSettlement(ctx context.Context, tenant, taskID string) error {
	_, err := w.rawExec(ctx, `DELETE FROM pending_settlements WHERE tenant = ? AND task_id = ?`, tenant, taskID)
	return err
}
