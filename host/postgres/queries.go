package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/batchkeys"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// reader implements store.Reader over one session.
type reader struct {
	s  *Store
	ss *sess
	// write is set inside the writer's batch transaction: ExpiredLeases
	// then locks what it returns.
	write bool
	// ctx, when set, is the context every statement runs on, whatever
	// context the caller hands a method: in the writer's batch, the
	// batch's own (a cancelled caller must not break the connection its
	// batch shares with others; it ends at Options.Timeout); in a View,
	// the View's, bounded by its caller's store timeout (store.Bound).
	ctx context.Context
	// deps are the counts the transaction's last LockDependencies read
	// (dependencies.go).
	deps *store.DependencyCounts
	// guess is the transaction's last MarkAndLockDependencies answered
	// from recentTasks (depspec.go), while its counts stand.
	guess *depGuess
}

// writeTx implements store.Tx inside the writer's batch transaction.
type writeTx struct {
	reader
	st *txState
	// deferWrites is set outside strict mode: writes whose answer the
	// request need not wait for are queued with a check (see runTx).
	deferWrites bool
	// locks is what the transaction knows of the resource locks it took
	// (LockResources).
	locks lockOrder
	// bh holds the rows written behind (writebehind.go), outside strict mode.
	bh behind
	// keys are the unique keys of the rows the batch inserted behind, so a
	// second insert of one is a conflict at once; a failed request's are
	// forgotten (runTx). A clash with a row committed earlier shows only
	// when the rows are sent, in the statement's check, and the batch then
	// runs again in strict mode.
	keys batchkeys.Set
	// guessed is set when the running request's dependencies were answered
	// from recentTasks (depspec.go); noGuess while a request that failed
	// after such an answer runs again. written are copies of the task rows
	// the transaction wrote, for recentTasks once it commits.
	guessed, noGuess bool
	// req is the request running.
	req     *request
	written []*host.Task
	// edges are the edges the transaction wrote and settled the
	// dependencies it settled, for recentEdges once it commits.
	edges   []host.Dependency
	settled []taskKey
	// marked are the tasks the transaction marked as waited on.
	marked []taskKey
}

// lockOrder is a transaction's resource-lock bookkeeping: whether it took
// any, the highest key it took, and whether it runs one request alone (then
// it waits for every key in order, as nothing else of its own is held). A
// request that fails keeps its keys counted: a key thought held that was
// released only makes a later request try where it could have waited.
type lockOrder struct {
	any   bool
	max   int32
	alone bool
}

// writeOne runs a write that must change one row: deferred outside strict
// mode (checked when the pipeline is read), answered at once in strict mode,
// where changing no row is the error none (nil: not an error).
func (w *writeTx) writeOne(ctx context.Context, what string, none error, q string, a ...any) error {
	if w.deferWrites {
		w.ss.queueChecked(expectOne(what), q, a...)
		return nil
	}
	n, err := w.ss.exec(w.c(ctx), q, a...)
	if err == nil && n == 0 {
		err = none
	}
	return err
}

// expectOne is the check of a deferred write that must change exactly one
// row.
func expectOne(what string) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return &mismatch{what: fmt.Sprintf("%s changed %d rows", what, tag.RowsAffected())}
		}
		return nil
	}
}

var (
	_ store.Reader = (*reader)(nil)
	_ store.Tx     = (*writeTx)(nil)
)

func (r *reader) c(ctx context.Context) context.Context {
	if r.ctx != nil {
		return r.ctx
	}
	return ctx
}

// --- time and null helpers

// us, fromUS, nus and fromNUS are sqlrows' time encodings, short for this
// package's many statements.
func us(t time.Time) int64 { return sqlrows.US(t) }

func fromUS(v int64) time.Time { return sqlrows.FromUS(v) }

func nus(t *time.Time) *int64 { return sqlrows.NUS(t) }

func fromNUS(v *int64) *time.Time { return sqlrows.FromNUS(v) }

func nullJSON(b json.RawMessage) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

func notFound(what, id string) error { return host.Errorf(host.CodeNotFound, "no %s %s", what, id) }

// --- tasks

// listedTaskColumns is sqlrows.TaskColumns of tasks t joined to task_list l.
var listedTaskColumns = sqlrows.Prefixed("t", sqlrows.TaskColumns)

// taskRow scans one row of sqlrows.TaskColumns.
type taskRow struct {
	t   *host.Task
	seq int64
}

func (r *reader) tasks(ctx context.Context, q string, args ...any) ([]taskRow, error) {
	var out []taskRow
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		t, seq, err := sqlrows.ScanTask(rows)
		if err != nil {
			return err
		}
		out = append(out, taskRow{t, seq})
		return nil
	}, q, args...)
	return out, err
}

func (r *reader) oneTask(ctx context.Context, q string, args ...any) (*host.Task, error) {
	ts, err := r.tasks(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, pgx.ErrNoRows
	}
	return ts[0].t, nil
}

// lockRow makes a task read inside a write transaction lock the row until
// commit. Writers on several hosts (or several writers of one host) run
// their batches at once under READ COMMITTED: a task read without the lock
// could miss another writer's change still in flight, and an update built
// from it and fenced only on state and lease would then overwrite that change
// once it committed (a complete erasing a concurrent accept, its obligation
// left open). With the lock the read waits for that writer and sees its
// outcome. Views never lock.
func (r *reader) lockRow() string {
	if r.write {
		return " FOR UPDATE"
	}
	return ""
}

func (r *reader) GetTask(ctx context.Context, tenant, id string) (*host.Task, error) {
	t, err := r.oneTask(ctx, `SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE id = $1 AND tenant = $2`+r.lockRow(), id, tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("task", id)
	}
	return t, err
}

// leaseByTaskSQL finds a lease made by host.NewLeaseID by the task id it
// carries, through the unique id index, and compares the whole lease id
// there ($1 task id, $2 lease id): a claim writes no lease id index entry
// (migration 0048), and a forged id naming another task matches nothing.
const leaseByTaskSQL = `SELECT ` + sqlrows.TaskColumns + ` FROM tasks WHERE id = $1 AND lease_id = $2`

// leaseByOldIDSQL finds a lease id of the form minted before 0048 (no '.')
// through tasks_lease_id, which holds only those; the predicate is spelled
// as the index's so a generic plan can use it.
const leaseByOldIDSQL = `SELECT ` + sqlrows.TaskColumns + ` FROM tasks WHERE lease_id = $1 AND lease_id <> '' AND strpos(lease_id, '.') = 0`

func (r *reader) GetTaskByLease(ctx context.Context, leaseID string) (*host.Task, error) {
	if leaseID == "" {
		return nil, notFound("lease", leaseID)
	}
	var t *host.Task
	var err error
	if id, ok := host.LeaseTaskID(leaseID); ok {
		t, err = r.oneTask(ctx, leaseByTaskSQL+r.lockRow(), id, leaseID)
	} else {
		t, err = r.oneTask(ctx, leaseByOldIDSQL+r.lockRow(), leaseID)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("lease", leaseID)
	}
	return t, err
}

func (r *reader) FindTaskByIdempotency(ctx context.Context, k store.IdempotencyKey) (*host.Task, error) {
	t, err := r.oneTask(ctx, `SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE tenant = $1 AND created_by = $2 AND recipient = $3 AND idempotency_key = $4 AND idempotency_key <> ''`,
		k.Tenant, k.Producer, k.Recipient, k.Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return t, err
}

// args collects positional arguments and hands out their placeholders.
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

func (r *reader) ListTasks(ctx context.Context, f store.TaskFilter) ([]*host.Task, string, error) {
	after, err := store.ParseCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	// A list by state alone (and type) merges ranges of tasks'
	// (tenant, state, task_type, seq) index (listByState); any other, or
	// one that would merge too many ranges, walks the listing rows
	// (task_list, migration 0015) in seq order and joins each to its task
	// by seq until the page is full.
	if len(f.States) > 0 && f.Recipient == "" && f.CreatedBy == "" && f.Principal == "" {
		ts, cur, ok, err := r.listByState(ctx, f, after)
		if err != nil || ok {
			return ts, cur, err
		}
	}
	var a args
	q := `SELECT ` + listedTaskColumns + ` FROM task_list l JOIN tasks t ON t.seq = l.seq WHERE l.tenant = ` + a.add(f.Tenant) + ` AND l.seq > ` + a.add(after)
	if f.Recipient != "" {
		q += ` AND l.recipient = ` + a.add(f.Recipient)
	}
	if f.CreatedBy != "" {
		q += ` AND l.created_by = ` + a.add(f.CreatedBy)
	}
	if f.Principal != "" {
		p := a.add(f.Principal)
		q += ` AND (l.created_by = ` + p + ` OR l.recipient = ` + p + `)`
	}
	switch len(f.Types) {
	case 0:
	case 1:
		// Plain equality lets the (tenant, task_type, seq) index give seq
		// order, which = ANY(…) does not, so the plan needs no statistics.
		q += ` AND l.task_type = ` + a.add(f.Types[0])
	default:
		q += ` AND l.task_type = ANY(` + a.add(f.Types) + `::text[])`
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, s := range f.States {
			states[i] = string(s)
		}
		q += ` AND t.state = ANY(` + a.add(states) + `::text[])`
	}
	q += ` ORDER BY l.seq LIMIT ` + a.add(f.Limit+1)
	rows, err := r.tasks(ctx, q, a...)
	if err != nil {
		return nil, "", err
	}
	rows, cur := store.Page(rows, f.Limit, func(i int) int64 { return rows[i].seq })
	out := make([]*host.Task, len(rows))
	for i, tr := range rows {
		out[i] = tr.t
	}
	return out, cur, nil
}

// maxStateRanges bounds the index ranges a list by state merges (states ×
// types); a list that would need more walks the listing rows instead.
const maxStateRanges = 64

// stateListSQL is the merge of n ranges of tasks_state_type_seq in seq order
// (args: tenant, cursor, limit, then state and type for each range). Each
// branch is one index range already in seq order, with the page's limit of
// its own; the planner merges the branches (Merge Append) under the outer
// ORDER BY and stops at the limit, so a page reads about one row per range
// plus the page itself, however many tasks each state holds.
func stateListSQL(n int) string {
	var b strings.Builder
	b.WriteString(`SELECT ` + sqlrows.TaskColumns + ` FROM (`)
	for i := range n {
		if i > 0 {
			b.WriteString("\nUNION ALL ")
		}
		fmt.Fprintf(&b, `(SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE tenant = $1 AND state = $%d AND task_type = $%d AND seq > $2 ORDER BY seq LIMIT $3)`, 4+2*i, 5+2*i)
	}
	b.WriteString(") m\nORDER BY seq LIMIT $3")
	return b.String()
}

// typesInSQL walks tasks_state_type_seq loosely: one seek per type of a
// tenant's tasks in a state (args: tenant, state).
const typesInSQL = `WITH RECURSIVE ty(v) AS (
  (SELECT task_type FROM tasks WHERE tenant = $1 AND state = $2 ORDER BY task_type LIMIT 1)
  UNION ALL
  SELECT n.task_type FROM ty CROSS JOIN LATERAL (
    SELECT task_type FROM tasks WHERE tenant = $1 AND state = $2 AND task_type > ty.v ORDER BY task_type LIMIT 1) n
) SELECT v FROM ty`

// listByState lists tasks by state (and type) with no principal filter.
// There is no (tenant, state, seq) index: every transition would move the
// task's entry in it, and the writer's cost per cycle follows the index
// entries it moves (RATIONALE.md, "One state index, not two"). The page is a
// merge, in seq order, of one range of tasks_state_type_seq per state and
// type (stateListSQL), planned for its values; the types of a state come
// from the same index, one seek per type (typesInSQL). ok is false when the ranges would exceed the
// store's bound.
func (r *reader) listByState(ctx context.Context, f store.TaskFilter, after int64) (ts []*host.Task, cur string, ok bool, err error) {
	pairs, ok, err := store.StateRanges(ctx, f, r.s.stateRanges, func(ctx context.Context, state string) ([]string, error) {
		return r.typesIn(ctx, f.Tenant, state)
	})
	if err != nil || !ok {
		return nil, "", false, err
	}
	if len(pairs) == 0 {
		return nil, "", true, nil
	}
	a := make([]any, 0, 3+2*len(pairs))
	a = append(a, f.Tenant, after, f.Limit+1)
	for _, p := range pairs {
		a = append(a, p.State, p.Type)
	}
	// Planned for its values: a plan made once for all of them (a prepared
	// statement's generic plan, after its first runs) walks the primary key
	// in seq order with a filter once ANALYZE has seen one state hold nearly
	// every task, which for a rare state reads the whole table. The setting
	// is back to its default for the transaction's next statement.
	r.ss.queue(`SET LOCAL plan_cache_mode = force_custom_plan`)
	rows, err := r.tasks(ctx, stateListSQL(len(pairs)), a...)
	r.ss.queue(`SET LOCAL plan_cache_mode TO DEFAULT`)
	if err != nil {
		return nil, "", false, err
	}
	rows, cur = store.Page(rows, f.Limit, func(i int) int64 { return rows[i].seq })
	ts = make([]*host.Task, len(rows))
	for i, tr := range rows {
		ts[i] = tr.t
	}
	return ts, cur, true, nil
}

// typesIn returns the types of a tenant's tasks in state, in name order, one
// index seek per type however many tasks each has (typesInSQL).
func (r *reader) typesIn(ctx context.Context, tenant, state string) ([]string, error) {
	var out []string
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var v string
		if err := rows.Scan(&v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	}, typesInSQL, tenant, state)
	return out, err
}

// ExpiredLeases implements store.Reader. Inside Update it locks the rows it
// returns and skips rows another transaction holds, so sweepers on several
// hosts split the expired leases between them instead of contending.
func (r *reader) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*host.Task, error) {
	q := `SELECT ` + sqlrows.TaskColumns + ` FROM tasks WHERE state = 'leased' AND lease_expires_at <= $1 ORDER BY lease_expires_at LIMIT $2`
	if r.write {
		q += ` FOR UPDATE SKIP LOCKED`
	}
	rows, err := r.tasks(ctx, q, us(now), limit)
	if err != nil {
		return nil, err
	}
	out := make([]*host.Task, len(rows))
	for i, tr := range rows {
		out[i] = tr.t
	}
	return out, nil
}

// QueueStats implements store.Reader from the counts the writers keep
// (queue_counts: a few rows per tenant, type and writer), the paused types
// (task_type_pauses: a row per paused type), and the oldest ready task from
// the head of the state index: it never scans the queue. The oldest ready
// task is probed per type, the paused ones left out, so a paused backlog
// is never walked.
func (r *reader) QueueStats(ctx context.Context, tenant string) (store.QueueStats, error) {
	qs := store.QueueStats{ByState: map[host.TaskState]int64{}, ByType: map[string]int64{}}
	pq := `SELECT tenant, task_type FROM task_type_pauses`
	q := `SELECT tenant, task_type, state, sum(n)::bigint FROM queue_counts GROUP BY tenant, task_type, state ORDER BY tenant`
	var a []any
	if tenant != "" {
		pq += ` WHERE tenant = $1`
		q = `SELECT tenant, task_type, state, sum(n)::bigint FROM queue_counts WHERE tenant = $1 GROUP BY tenant, task_type, state`
		a = append(a, tenant)
	}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var tn, typ string
		if err := rows.Scan(&tn, &typ); err != nil {
			return err
		}
		qs.NotePaused(tn, typ)
		return nil
	}, pq, a...)
	if err != nil {
		return qs, err
	}
	type queuedIn struct {
		tenant string
		paused []string // the paused types it has queued tasks of
	}
	var queued []queuedIn // tenants with queued tasks
	err = r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var tn, typ, state string
		var n int64
		if err := rows.Scan(&tn, &typ, &state, &n); err != nil {
			return err
		}
		qs.AddCountIn(tn, typ, host.TaskState(state), n)
		if state == string(host.StateQueued) && n > 0 {
			if len(queued) == 0 || queued[len(queued)-1].tenant != tn {
				queued = append(queued, queuedIn{tenant: tn, paused: []string{}})
			}
			if qs.IsPaused(tn, typ) {
				q := &queued[len(queued)-1]
				q.paused = append(q.paused, typ)
			}
		}
		return nil
	}, q, a...)
	if err != nil {
		return qs, err
	}
	now := time.Now()
	for _, q := range queued {
		var avail *int64
		err := r.ss.queryRow(r.c(ctx), []any{&avail}, oldestReady, q.tenant, us(now), q.paused)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && avail == nil {
			continue
		}
		if err != nil {
			return qs, err
		}
		if age := now.Sub(fromUS(*avail)); age > qs.OldestReadyAge {
			qs.OldestReadyAge = age
		}
	}
	return qs, nil
}

// scheduledCountsOf counts a tenant's queued tasks not yet available, by
// type ($1 now, $2 tenant).
const scheduledCountsOf = `SELECT tenant, task_type, count(*) FROM tasks WHERE tenant = $2 AND state = 'queued' AND available_at > $1 GROUP BY tenant, task_type`

// ScheduledCounts implements store.Reader: one walk of the tenant's queued
// tasks.
func (r *reader) ScheduledCounts(ctx context.Context, tenant string, now time.Time) ([]store.CountDelta, error) {
	q := `SELECT tenant, task_type, count(*) FROM tasks WHERE state = 'queued' AND available_at > $1 GROUP BY tenant, task_type`
	a := []any{us(now)}
	if tenant != "" {
		q = scheduledCountsOf
		a = append(a, tenant)
	}
	var out []store.CountDelta
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		d := store.CountDelta{State: host.StateScheduled}
		if err := rows.Scan(&d.Tenant, &d.Type, &d.N); err != nil {
			return err
		}
		out = append(out, d)
		return nil
	}, q, a...)
	return out, err
}

// queuedTypes walks tasks_ready_type loosely: one seek per type of a
// tenant's queued tasks ($1 tenant), as a CTE ty(name) for the statements
// below.
const queuedTypes = `WITH RECURSIVE ty(name) AS (
  (SELECT task_type FROM tasks WHERE tenant = $1 AND state = 'queued' ORDER BY task_type LIMIT 1)
  UNION ALL
  SELECT n.task_type FROM ty CROSS JOIN LATERAL (
    SELECT task_type FROM tasks WHERE tenant = $1 AND state = 'queued' AND task_type > ty.name ORDER BY task_type LIMIT 1) n
)`

// oldestReady finds a tenant's oldest ready queued task with one probe of
// the typed lease index (tasks_ready_type: tenant, type, priority, seq) per
// type of its queued tasks and priority (1..10, enforced on every task),
// each O(1); the types come from the same index (queuedTypes). There is no
// untyped ready index (migration 0049). Written as one ORDER BY seq over the
// tenant's queued tasks, a planner without statistics walked one of the
// partial ready indexes over every queued task of the tenant and sorted them
// (48 ms at 35,000 queued, growing with depth); with statistics it walked the
// table from the oldest task ever queued.
const oldestReady = queuedTypes + `
SELECT min(w.available_at) FROM ty, generate_series(1, 10) AS p(v), LATERAL (
  SELECT seq FROM tasks WHERE tenant = $1 AND task_type = ty.name AND state = 'queued' AND priority = p.v AND available_at <= $2
  ORDER BY seq LIMIT 1) f, LATERAL (
  SELECT min(available_at) FILTER (WHERE available_at <= $2) AS available_at FROM (
    SELECT available_at FROM tasks WHERE tenant = $1 AND task_type = ty.name AND state = 'queued' AND priority = p.v AND seq >= f.seq
    ORDER BY seq LIMIT ` + oldestReadyWindow + `) x) w
WHERE ty.name <> ALL($3::text[])`

// oldestReadyWindow is how many queued tasks of each type and priority,
// from the first ready one in queue order, the oldest ready age looks at:
// a task released or retried keeps its place with a fresh available_at, so
// the first alone would hide the older ones behind it. The window adds at
// most that many index entries a lane to the seek of the first ready task.
const oldestReadyWindow = "100"

// flushCounts adds the transaction's task state changes to this writer's
// shard of queue_counts in one statement, queued in front of COMMIT. No other
// writer touches the shard's rows, so the upsert waits for nobody.
func (w *writeTx) flushCounts(ctx context.Context) error {
	ds := store.SumDeltas(w.st.counts)
	w.st.counts = nil
	if len(ds) == 0 {
		return nil
	}
	if w.st.chain.id == 0 {
		if err := w.loadChain(ctx); err != nil {
			return err
		}
	}
	var a args
	var b strings.Builder
	for i, d := range ds {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("(" + a.add(d.Tenant) + "," + a.add(d.Type) + "," + a.add(string(d.State)) + "," + a.add(w.st.chain.id) + "," + a.add(d.N) + ")")
	}
	w.ss.queue(`INSERT INTO queue_counts (tenant, task_type, state, shard, n) VALUES `+b.String()+
		` ON CONFLICT (tenant, task_type, state, shard) DO UPDATE SET n = queue_counts.n + excluded.n`, a...)
	return nil
}

func (r *reader) ListProgress(ctx context.Context, tenant, taskID string, limit int) ([]store.Progress, error) {
	out := []store.Progress{}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		p := store.Progress{Tenant: tenant, TaskID: taskID}
		var at int64
		if err := rows.Scan(&p.LeaseID, &p.Percent, &p.Message, &at); err != nil {
			return err
		}
		p.At = fromUS(at)
		out = append(out, p)
		return nil
	}, `SELECT lease_id, percent, message, at FROM task_progress WHERE tenant = $1 AND task_id = $2 ORDER BY seq DESC LIMIT $3`, tenant, taskID, limit)
	return out, err
}

// readyNow reports whether a queued task can be leased at once, which is when
// other hosts' long-polls should hear of it.
func readyNow(t *host.Task) bool {
	return t.State == host.StateQueued && !t.AvailableAt.After(t.UpdatedAt)
}

func (w *writeTx) InsertTask(ctx context.Context, t *host.Task) error {
	row, err := sqlrows.TaskInsertValues(t)
	if err != nil {
		return err
	}
	if w.deferWrites {
		// Written behind, with the batch's other new tasks in one statement
		// (writebehind.go).
		if !w.keys.Claim(batchkeys.Task(t)) {
			return host.Errorf(host.CodeConflict, "a task with this id or idempotency key exists")
		}
		w.bh.tasks = append(w.bh.tasks, row)
	} else {
		// One statement writes the task and its listing row (task_list,
		// migration 0015); it changes one row, or none on a clash.
		if err := w.writeOne(ctx, "task insert", host.Errorf(host.CodeConflict, "a task with this id or idempotency key exists"), taskInsert, row...); err != nil {
			return err
		}
	}
	t.Version = 1
	w.wrote(t)
	w.st.counts = store.Moved(w.st.counts, t, "", t.State)
	if readyNow(t) {
		w.st.notify = append(w.st.notify, t.Tenant)
	}
	return nil
}

// updateTaskSQL is a task update up to its fence's first value: every
// column of sqlrows.TaskSetColumns, then the task's id.
var updateTaskSQL = func() string {
	var b strings.Builder
	b.WriteString(`UPDATE tasks SET `)
	for i, c := range sqlrows.TaskSetColumns {
		b.WriteString(c + `=$` + strconv.Itoa(i+1) + `, `)
	}
	b.WriteString(`version=version+1 WHERE id = `)
	return b.String()
}()

// UpdateTask implements store.Tx. Outside strict mode the update is written
// behind (writebehind.go), with the batch's other task updates as one
// statement (setupdates.go); a lost fence then runs the batch again in
// strict mode, where the request meets it.
func (w *writeTx) UpdateTask(ctx context.Context, t *host.Task, f store.Fence) error {
	u, err := newTaskUpdate(t, f)
	if err != nil {
		return err
	}
	if w.deferWrites {
		w.updateBehind(u)
	} else {
		one := updateOne(u)
		n, err := w.ss.exec(w.c(ctx), one.sql, one.args...)
		if err == nil && n == 0 {
			err = store.ErrFenced
		}
		if err != nil {
			return err
		}
	}
	t.Version++
	w.wrote(t)
	w.st.counts = store.Moved(w.st.counts, t, f.State, t.State)
	if readyNow(t) {
		w.st.notify = append(w.st.notify, t.Tenant)
	}
	return nil
}

// claimAny serves a lease naming no type as claimTyped does, over every
// type the tenant has queued tasks of (queuedTypes): one range of
// tasks_ready_type per type, each locked with SKIP LOCKED, merged. There is
// no untyped ready index for it to walk: every enqueue and requeue would
// write an entry in it too (migration 0049).
var claimAny = queuedTypes + `
SELECT t.* FROM ty, LATERAL (
  ` + claimRange(`ty.name`) + `) t
ORDER BY t.priority DESC, t.seq LIMIT $3`

// claimTyped walks one index range per type (tasks_ready_type), each locked
// with SKIP LOCKED, and merges them: the cost follows the batch, not the queue.
var claimTyped = `SELECT t.* FROM unnest($4::text[]) AS ty(name), LATERAL (
  ` + claimRange(`ty.name`) + `) t
ORDER BY t.priority DESC, t.seq LIMIT $3`

// claimOneType is claimTyped for a lease naming one type ($4), the common
// case: one range of tasks_ready_type. Its generic plan is as cheap as a
// custom one, so the server plans it once a connection; claimTyped's, made
// for an array of unknown length, looked dearer than a plan for one type,
// and the server planned it afresh at every claim (95–120 µs, as much as
// the claim's own work).
var claimOneType = claimRange(`$4`)

// claimRange is a claim's range of tasks_ready_type for the type typ names
// ($1 tenant, $2 now, $3 limit), locked with SKIP LOCKED, in lease order.
func claimRange(typ string) string {
	return `SELECT ` + sqlrows.TaskColumns + ` FROM tasks WHERE tenant = $1 AND task_type = ` + typ + ` AND state = 'queued' AND available_at <= $2
  ORDER BY priority DESC, seq LIMIT $3 FOR UPDATE SKIP LOCKED`
}

// ClaimTasks implements store.Tx: rows another host has locked are skipped, and
// the chosen rows stay locked until commit, so no task is leased twice.
func (w *writeTx) ClaimTasks(ctx context.Context, q store.ClaimQuery) ([]*host.Task, error) {
	if q.Limit <= 0 {
		return nil, nil
	}
	var rows []taskRow
	var err error
	if len(q.Types) == 0 {
		rows, err = w.tasks(ctx, claimAny, q.Tenant, us(q.Now), q.Limit)
	} else {
		seen := map[string]bool{}
		types := make([]string, 0, len(q.Types))
		for _, t := range q.Types {
			if !seen[t] {
				seen[t] = true
				types = append(types, t)
			}
		}
		if len(types) == 1 {
			rows, err = w.tasks(ctx, claimOneType, q.Tenant, us(q.Now), q.Limit, types[0])
		} else {
			rows, err = w.tasks(ctx, claimTyped, q.Tenant, us(q.Now), q.Limit, types)
		}
		sort.SliceStable(rows, func(i, j int) bool {
			if rows[i].t.Priority != rows[j].t.Priority {
				return rows[i].t.Priority > rows[j].t.Priority
			}
			return rows[i].seq < rows[j].seq
		})
	}
	if err != nil {
		return nil, err
	}
	// A claim that found all it asked for tells the writer queue that the
	// types it named (every type of the tenant, when it named none) have a
	// backlog (the enqueue budget); one that found fewer, that they have
	// none.
	w.s.queue.Claimed(store.ClaimKeys(q.Tenant, q.Types), len(rows) >= q.Limit)
	if len(rows) == 0 {
		return nil, nil
	}
	ups := make([]taskUpdate, len(rows))
	for i, c := range rows {
		q.Grant(c.t)
		if ups[i], err = newTaskUpdate(c.t, store.Fence{State: host.StateQueued}); err != nil {
			return nil, err
		}
	}
	var ns []int64
	if w.deferWrites {
		// The rows are locked FOR UPDATE by this transaction and were
		// queued when read, so their fenced updates cannot lose: they are
		// written behind like every other task update, one statement for
		// all of them, and cost no round trip of their own. Should one
		// change no row after all, its statement fails (fence_check) and
		// the batch runs again without this request, which then runs in
		// strict mode and skips that row.
		ns = make([]int64, len(ups))
		for i, u := range ups {
			w.updateBehind(u)
			ns[i] = 1
		}
	} else {
		// Strict: each row its own statement, answered at once.
		stmts := make([]stmt, len(ups))
		for i, u := range ups {
			stmts[i] = updateOne(u)
		}
		if ns, err = w.ss.execAll(w.c(ctx), stmts); err != nil {
			return nil, err
		}
	}
	out := make([]*host.Task, 0, len(rows))
	for i, c := range rows {
		if ns[i] > 0 {
			c.t.Version++
			w.wrote(c.t)
			w.st.counts = store.Moved(w.st.counts, c.t, host.StateQueued, c.t.State)
			out = append(out, c.t)
		}
	}
	return out, nil
}

// InsertProgress implements store.Tx. Unlike the written-behind inserts it
// runs at once: a worker's message may hold a value PostgreSQL refuses (a NUL
// byte), and that error belongs to this request alone.
func (w *writeTx) InsertProgress(ctx context.Context, p store.Progress) error {
	_, err := w.ss.exec(w.c(ctx), `INSERT INTO task_progress (tenant, task_id, lease_id, percent, message, at) VALUES ($1,$2,$3,$4,$5,$6)`,
		p.Tenant, p.TaskID, p.LeaseID, p.Percent, p.Message, us(p.At))
	return err
}

// --- task types

func (r *reader) GetTaskType(ctx context.Context, tenant, name string) (*host.TaskType, error) {
	var body string
	err := r.ss.queryRow(r.c(ctx), []any{&body}, `SELECT body FROM task_types WHERE tenant = $1 AND name = $2`, tenant, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("task type", name)
	}
	if err != nil {
		return nil, err
	}
	var tt host.TaskType
	if err := json.Unmarshal([]byte(body), &tt); err != nil {
		return nil, err
	}
	return &tt, nil
}

func (r *reader) ListTaskTypes(ctx context.Context, tenant string) ([]*host.TaskType, error) {
	out := []*host.TaskType{}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var body string
		if err := rows.Scan(&body); err != nil {
			return err
		}
		var tt host.TaskType
		if err := json.Unmarshal([]byte(body), &tt); err != nil {
			return err
		}
		out = append(out, &tt)
		return nil
	}, `SELECT body FROM task_types WHERE tenant = $1 ORDER BY name`, tenant)
	return out, err
}

func (w *writeTx) PutTaskType(ctx context.Context, tt *host.TaskType) error {
	b, err := json.Marshal(tt)
	if err != nil {
		return err
	}
	_, err = w.ss.exec(w.c(ctx), `INSERT INTO task_types (tenant, name, body) VALUES ($1,$2,$3)
ON CONFLICT (tenant, name) DO UPDATE SET body = excluded.body`, tt.Tenant, tt.Name, string(b))
	return err
}

// ListTaskTypePauses implements store.Reader.
func (r *reader) ListTaskTypePauses(ctx context.Context, tenant string) ([]store.TaskTypePause, error) {
	var out []store.TaskTypePause
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		p := store.TaskTypePause{Tenant: tenant}
		var at int64
		if err := rows.Scan(&p.TaskType, &p.PausedBy, &at, &p.Reason); err != nil {
			return err
		}
		p.PausedAt = fromUS(at)
		out = append(out, p)
		return nil
	}, `SELECT task_type, paused_by, paused_at, reason FROM task_type_pauses WHERE tenant = $1 ORDER BY task_type`, tenant)
	return out, err
}

// PauseTaskType implements store.Tx.
func (w *writeTx) PauseTaskType(ctx context.Context, p store.TaskTypePause) error {
	_, err := w.ss.exec(w.c(ctx), `INSERT INTO task_type_pauses (tenant, task_type, paused_by, paused_at, reason) VALUES ($1,$2,$3,$4,$5)
ON CONFLICT (tenant, task_type) DO NOTHING`, p.Tenant, p.TaskType, p.PausedBy, us(p.PausedAt), p.Reason)
	return err
}

// ResumeTaskType implements store.Tx.
func (w *writeTx) ResumeTaskType(ctx context.Context, tenant, name string) (bool, error) {
	n, err := w.ss.exec(w.c(ctx), `DELETE FROM task_type_pauses WHERE tenant = $1 AND task_type = $2`, tenant, name)
	return n > 0, err
}

// DeleteTaskType implements store.Tx.
func (w *writeTx) DeleteTaskType(ctx context.Context, tenant, name string) error {
	n, err := w.ss.exec(w.c(ctx), `DELETE FROM task_types WHERE tenant = $1 AND name = $2`, tenant, name)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFound("task type", name)
	}
	return nil
}

// --- receipts

func (r *reader) receipts(ctx context.Context, q string, args ...any) ([]*host.Receipt, error) {
	var out []*host.Receipt
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		rc, err := sqlrows.ScanReceipt(rows)
		if err != nil {
			return err
		}
		out = append(out, rc)
		return nil
	}, q, args...)
	return out, err
}

func (r *reader) oneReceipt(ctx context.Context, q string, args ...any) (*host.Receipt, error) {
	rs, err := r.receipts(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, pgx.ErrNoRows
	}
	return rs[0], nil
}

func (r *reader) GetReceipt(ctx context.Context, tenant, id string) (*host.Receipt, error) {
	rc, err := r.oneReceipt(ctx, `SELECT `+sqlrows.ReceiptColumns+` FROM receipts WHERE id = $1 AND tenant = $2`, id, tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("receipt", id)
	}
	return rc, err
}

func (r *reader) GetReceiptByDedupe(ctx context.Context, tenant, from, key string) (*host.Receipt, error) {
	q, args := `SELECT `+sqlrows.ReceiptColumns+` FROM receipts WHERE tenant = $1 AND dedupe_key = $2 AND dedupe_key <> ''`, []any{tenant, key}
	if from != "" {
		q, args = q+` AND from_p = $3`, append(args, from)
	}
	rc, err := r.oneReceipt(ctx, q, args...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return rc, err
}

func (r *reader) GetLeaseReceipt(ctx context.Context, tenant, taskID, leaseID string, typ host.ReceiptType) (*host.Receipt, error) {
	if taskID == "" || leaseID == "" {
		return nil, nil
	}
	rc, err := r.oneReceipt(ctx, `SELECT `+sqlrows.ReceiptColumns+` FROM receipts WHERE tenant = $1 AND task_id = $2 AND task_id <> ''`+
		` AND lease_id = $3 AND type = $4 ORDER BY seq LIMIT 1`, tenant, taskID, leaseID, string(typ))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return rc, err
}

func (r *reader) ListReceipts(ctx context.Context, f store.ReceiptFilter) ([]*host.Receipt, string, error) {
	after, err := store.ParseCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var a args
	q := `SELECT ` + sqlrows.ReceiptColumns + ` FROM receipts WHERE tenant = ` + a.add(f.Tenant) + ` AND seq > ` + a.add(after)
	if f.TaskID != "" {
		q += ` AND task_id = ` + a.add(f.TaskID)
	}
	if f.ScheduleID != "" {
		q += ` AND ` + scheduleIDOfReceipt + ` = ` + a.add(f.ScheduleID) + ` AND ` + store.ScheduleReceiptOnly
	}
	if f.Latest {
		q += ` ORDER BY seq DESC LIMIT ` + a.add(f.Limit)
		rs, err := r.receipts(ctx, q, a...)
		slices.Reverse(rs)
		return rs, "", err
	}
	q += ` ORDER BY seq LIMIT ` + a.add(f.Limit+1)
	rs, err := r.receipts(ctx, q, a...)
	if err != nil {
		return nil, "", err
	}
	rs, cur := store.Page(rs, f.Limit, func(i int) int64 { return rs[i].Seq })
	return rs, cur, nil
}

// scheduleIDOfReceipt is store.ScheduleIDOfReceipt in PostgreSQL's words.
var scheduleIDOfReceipt = strings.Replace(store.ScheduleIDOfReceipt, "instr(", "strpos(", 1)

func (r *reader) ScanReceipts(ctx context.Context, afterSeq int64, limit int) ([]*host.Receipt, error) {
	return r.receipts(ctx, `SELECT `+sqlrows.ReceiptColumns+` FROM receipts WHERE seq > $1 ORDER BY seq LIMIT $2`, afterSeq, limit)
}

func (r *reader) Terminator(ctx context.Context, tenant, receiptID string) (string, error) {
	var term *string
	err := r.ss.queryRow(r.c(ctx), []any{&term}, `SELECT terminated_by FROM obligations WHERE receipt_id = $1 AND tenant = $2`, receiptID, tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil || term == nil {
		return "", err
	}
	return *term, nil
}

func (r *reader) ListOpenObligations(ctx context.Context, f store.ObligationFilter) ([]host.Obligation, string, error) {
	after, err := store.ParseCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	const cols = `receipt_id, tenant, type, obligor, obligee, task_id, created_at, seq`
	byRole := func(col string) string {
		return `(SELECT ` + cols + ` FROM obligations WHERE tenant = $1 AND ` + col +
			` = $2 AND terminated_by IS NULL AND seq > $3 ORDER BY seq LIMIT $4)`
	}
	var open string
	switch f.Role {
	case "obligor", "obligee":
		open = byRole(f.Role)
	default:
		open = byRole("obligor") + ` UNION ` + byRole("obligee")
	}
	// Bodies come from one indexed lookup per obligation on the page.
	q := `SELECT o.receipt_id, o.tenant, o.type, o.obligor, o.obligee, o.task_id, o.created_at, o.seq, r.body
FROM (` + open + `) o LEFT JOIN receipts r ON r.id = o.receipt_id ORDER BY o.seq LIMIT $4`
	out := []host.Obligation{}
	err = r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var o host.Obligation
		var typ string
		var created int64
		var body *string
		if err := rows.Scan(&o.ReceiptID, &o.Tenant, &typ, &o.Obligor, &o.Obligee, &o.TaskID, &created, &o.Seq, &body); err != nil {
			return err
		}
		o.Type, o.CreatedAt = host.ReceiptType(typ), fromUS(created)
		if body != nil {
			o.Body = json.RawMessage(*body)
		}
		out = append(out, o)
		return nil
	}, q, f.Tenant, f.Principal, after, f.Limit+1)
	if err != nil {
		return nil, "", err
	}
	out, cur := store.Page(out, f.Limit, func(i int) int64 { return out[i].Seq })
	return out, cur, nil
}

// GetObligations implements store.Reader.
func (r *reader) GetObligations(ctx context.Context, ids []string) ([]store.ObligationRow, error) {
	out := []store.ObligationRow{}
	if len(ids) == 0 {
		return out, nil
	}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var o store.ObligationRow
		var typ string
		var created int64
		if err := rows.Scan(&o.ReceiptID, &o.Tenant, &typ, &o.Obligor, &o.Obligee, &o.TaskID, &created, &o.Seq, &o.Open, &o.TerminatedBy); err != nil {
			return err
		}
		o.Type, o.CreatedAt = host.ReceiptType(typ), fromUS(created)
		out = append(out, o)
		return nil
	}, `SELECT receipt_id, tenant, type, obligor, obligee, task_id, created_at, seq, terminated_by IS NULL, coalesce(terminated_by, '')
FROM obligations WHERE receipt_id = ANY($1)`, ids)
	return out, err
}

// CountObligations implements store.Reader.
func (r *reader) CountObligations(ctx context.Context) (int64, error) {
	var n int64
	err := r.ss.queryRow(r.c(ctx), []any{&n}, `SELECT count(*) FROM obligations`)
	return n, err
}

// AppendReceipt implements store.Tx: the receipt is linked into this
// writer's own chain, which no other writer touches, and takes its place in
// the whole ledger from the receipts_seq sequence. Nothing is locked that
// another host's append would wait for.
func (w *writeTx) AppendReceipt(ctx context.Context, rc *host.Receipt) error {
	c := &w.st.chain
	if !c.known || c.id == 0 {
		if err := w.loadChain(ctx); err != nil {
			return err
		}
	}
	rc.ChainID, rc.ChainSeq, rc.PrevHash = c.id, c.seq+1, c.hash
	rc.Hash = host.ChainHashV2(rc, rc.PrevHash)
	parents, err := sqlrows.ReceiptParents(rc)
	if err != nil {
		return err
	}
	if w.deferWrites {
		if !w.keys.Claim(batchkeys.Receipt(rc)) {
			return host.Errorf(host.CodeConflict, "a receipt with this id or dedupe key exists")
		}
		// Written behind: its seq is read with the pipeline's answers,
		// before the batch commits and its callers hear of it (Flush
		// forces it sooner); an obligation opened on this receipt takes
		// it from the same statement.
		w.bh.receipts, w.bh.parents = append(w.bh.receipts, rc), append(w.bh.parents, parents)
		c.seq, c.hash = rc.ChainSeq, rc.Hash
		rc.Seq = 0 // not known yet: one read in an earlier run of the batch no longer holds
		return nil
	}
	q := `INSERT INTO receipts (id, tenant, type, from_p, to_p, task_id, lease_id, parents, body, dedupe_key,
created_at, prev_hash, hash, chain_id, chain_seq) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15) ON CONFLICT DO NOTHING RETURNING seq`
	a := []any{rc.ID, rc.Tenant, string(rc.Type), rc.From, rc.To, rc.TaskID, rc.LeaseID, parents, string(rc.Body),
		rc.DedupeKey, us(rc.CreatedAt), rc.PrevHash, rc.Hash, rc.ChainID, rc.ChainSeq}
	var seq int64
	err = w.ss.queryRow(w.c(ctx), []any{&seq}, q, a...)
	if errors.Is(err, pgx.ErrNoRows) {
		return host.Errorf(host.CodeConflict, "a receipt with this id or dedupe key exists")
	}
	if err != nil {
		return err
	}
	rc.Seq = seq
	c.seq, c.hash = rc.ChainSeq, rc.Hash
	return nil
}

// loadChain reads the writer's chain head, or registers the writer's chain
// on its first receipt.
func (w *writeTx) loadChain(ctx context.Context) error {
	c := &w.st.chain
	if c.id != 0 {
		err := w.ss.queryRow(w.c(ctx), []any{&c.seq, &c.hash}, `SELECT seq, hash FROM ledger_chains WHERE chain_id = $1`, c.id)
		if err == nil {
			c.rowSeq, c.known = c.seq, true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// The chain's row is gone: start another chain.
	}
	var id int64
	if err := w.ss.queryRow(w.c(ctx), []any{&id}, `INSERT INTO ledger_chains (seq, hash, hash_version, opened_at) VALUES (0, '', $1, $2) RETURNING chain_id`,
		host.ChainV2, time.Now().UnixMicro()); err != nil {
		return err
	}
	*c = chainHead{id: id, known: true}
	return nil
}

// writeHead records the chain's head in its ledger_chains row if it moved.
// Only this writer updates that row, so the update waits for nobody.
func (w *writeTx) writeHead() {
	c := &w.st.chain
	if c.id == 0 || !c.known || c.seq == c.rowSeq {
		return
	}
	w.ss.queue(`UPDATE ledger_chains SET seq = $1, hash = $2 WHERE chain_id = $3`, c.seq, c.hash, c.id)
	c.rowSeq = c.seq
}

// checkpoint records every non-empty chain's head in a new checkpoint linked
// to the last one. Unless wait is set, it skips its turn when another host
// holds the checkpoint head.
func (w *writeTx) checkpoint(ctx context.Context, wait bool) error {
	w.writeHead()
	lock := `SELECT checkpoint_id, hash FROM ledger_checkpoint_head WHERE id = 1 FOR UPDATE`
	if !wait {
		lock += ` SKIP LOCKED`
	}
	var last int64
	var prev string
	err := w.ss.queryRow(w.c(ctx), []any{&last, &prev}, lock)
	if errors.Is(err, pgx.ErrNoRows) && !wait {
		return nil // another host is writing one
	}
	if err != nil {
		return err
	}
	heads, err := w.chainHeads(ctx, true)
	if err != nil {
		return err
	}
	cp := host.Checkpoint{ID: last + 1, At: time.Now().UTC().Truncate(time.Microsecond), Heads: heads, PrevHash: prev}
	cp.Hash = host.CheckpointHash(&cp, prev)
	hj, err := json.Marshal(cp.Heads)
	if err != nil {
		return err
	}
	w.ss.queue(`INSERT INTO ledger_checkpoints (id, at, heads, prev_hash, hash) VALUES ($1,$2,$3,$4,$5)`, cp.ID, us(cp.At), string(hj), cp.PrevHash, cp.Hash)
	w.ss.queue(`UPDATE ledger_checkpoint_head SET checkpoint_id = $1, hash = $2 WHERE id = 1`, cp.ID, cp.Hash)
	w.st.lastCheckpoint = time.Now()
	for _, h := range heads {
		if h.ID == w.st.chain.id {
			w.st.checkpointed = h.Seq
		}
	}
	return nil
}

// chainHeads reads the chains' recorded heads by id: the non-empty ones for a
// checkpoint (without their hash version), or all of them.
func (r *reader) chainHeads(ctx context.Context, forCheckpoint bool) ([]host.ChainHead, error) {
	q := `SELECT chain_id, seq, hash, hash_version FROM ledger_chains ORDER BY chain_id`
	if forCheckpoint {
		q = `SELECT chain_id, seq, hash, hash_version FROM ledger_chains WHERE seq > 0 ORDER BY chain_id`
	}
	out := []host.ChainHead{}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var h host.ChainHead
		if err := rows.Scan(&h.ID, &h.Seq, &h.Hash, &h.Version); err != nil {
			return err
		}
		if forCheckpoint {
			h.Version = 0
		}
		out = append(out, h)
		return nil
	}, q)
	return out, err
}

func (r *reader) LedgerHeads(ctx context.Context) (store.LedgerHeads, error) {
	var lh store.LedgerHeads
	var err error
	if lh.Chains, err = r.chainHeads(ctx, false); err != nil {
		return lh, err
	}
	err = r.ss.queryRow(r.c(ctx), []any{&lh.Checkpoint.Seq, &lh.Checkpoint.Hash}, `SELECT checkpoint_id, hash FROM ledger_checkpoint_head WHERE id = 1`)
	return lh, err
}

func (r *reader) ScanCheckpoints(ctx context.Context, afterID int64, limit int) ([]host.Checkpoint, error) {
	var out []host.Checkpoint
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var c host.Checkpoint
		var at int64
		var heads string
		if err := rows.Scan(&c.ID, &at, &heads, &c.PrevHash, &c.Hash); err != nil {
			return err
		}
		c.At = fromUS(at)
		if err := json.Unmarshal([]byte(heads), &c.Heads); err != nil {
			return host.Errorf(host.CodeInternal, "checkpoint %d: heads are not JSON: %v", c.ID, err)
		}
		out = append(out, c)
		return nil
	}, `SELECT id, at, heads, prev_hash, hash FROM ledger_checkpoints WHERE id > $1 ORDER BY id LIMIT $2`, afterID, limit)
	return out, err
}

// OpenObligation implements store.Tx. Outside strict mode the row is written
// behind (writebehind.go) and takes its receipt's seq from the statement that
// inserts the receipt. In strict mode the receipt was inserted at once, so
// o.Seq is known, and the insert rides along with the next statement of the
// batch. It cannot fail on its values (the receipt with the same ones was just
// inserted); should it fail anyway, the batch runs again in strict mode
// (written behind) or is abandoned (strict), never a request acknowledged
// without its writes.
func (w *writeTx) OpenObligation(ctx context.Context, o host.Obligation) error {
	if w.deferWrites {
		w.bh.obligations = append(w.bh.obligations, o)
		return nil
	}
	w.ss.queue(`INSERT INTO obligations (receipt_id, tenant, type, obligor, obligee, task_id, created_at, seq) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)`,
		o.ReceiptID, o.Tenant, string(o.Type), o.Obligor, o.Obligee, o.TaskID, us(o.CreatedAt), o.Seq)
	return nil
}

// Terminate implements store.Tx. The row is found by its primary key only:
// written as "terminated_by IS NULL", the condition matches the predicate of
// the open-obligation indexes (tenant, obligor|obligee, seq), and a planner
// without statistics (a young table, autovacuum off) walks one of them over
// every open obligation of the tenant, so each completion cost grew with the
// depth of the queue. The coalesce form says the same and matches no
// partial index.
func (w *writeTx) Terminate(ctx context.Context, tenant, parentID, terminatorID string) error {
	if w.deferWrites {
		// Nothing waits for it: it is written behind.
		w.bh.terms = append(w.bh.terms, termination{tenant: tenant, parent: parentID, by: terminatorID})
		return nil
	}
	_, err := w.ss.exec(w.c(ctx), terminateQ, terminatorID, parentID, tenant)
	return err
}

const terminateQ = `UPDATE obligations SET terminated_by = $1 WHERE receipt_id = $2 AND tenant = $3 AND coalesce(terminated_by, '') = ''`

// Flush implements store.Tx: deferred writes are sent and their answers
// (receipt seqs) read.
func (w *writeTx) Flush(ctx context.Context) error { return w.ss.flush(w.c(ctx)) }

// --- workers and keys

func (r *reader) ListWorkers(ctx context.Context, tenant string) ([]store.Worker, error) {
	out := []store.Worker{}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		w := store.Worker{Tenant: tenant}
		var caps *string
		var first, last int64
		if err := rows.Scan(&w.ID, &caps, &first, &last); err != nil {
			return err
		}
		if caps != nil {
			w.Capabilities = json.RawMessage(*caps)
		}
		w.FirstSeen, w.LastSeen = fromUS(first), fromUS(last)
		out = append(out, w)
		return nil
	}, `SELECT id, capabilities, first_seen, last_seen FROM workers WHERE tenant = $1 ORDER BY id`, tenant)
	return out, err
}

// UpsertWorker implements store.Tx. It is written behind, like
// OpenObligation: worker ids are validated ASCII and capabilities are JSON
// made by the engine, so its values cannot be refused.
func (w *writeTx) UpsertWorker(ctx context.Context, wk store.Worker) error {
	w.ss.queue(`INSERT INTO workers (tenant, id, capabilities, first_seen, last_seen) VALUES ($1,$2,$3,$4,$5)
ON CONFLICT (tenant, id) DO UPDATE SET last_seen = greatest(workers.last_seen, excluded.last_seen),
capabilities = coalesce(excluded.capabilities, workers.capabilities)`,
		wk.Tenant, wk.ID, nullJSON(wk.Capabilities), us(wk.FirstSeen), us(wk.LastSeen))
	return nil
}

func (r *reader) GetKeyByHash(ctx context.Context, hash string) (*store.Key, error) {
	var k *store.Key
	err := r.ss.scanRow(r.c(ctx), func(rows pgx.Rows) error {
		var err error
		k, err = sqlrows.ScanKey(rows)
		return err
	}, `SELECT `+sqlrows.KeyColumns+` FROM api_keys WHERE hash = $1`, hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, host.Errorf(host.CodeNotFound, "no such key")
	}
	return k, err
}

func (r *reader) ListKeys(ctx context.Context) ([]store.Key, error) {
	return r.apiKeys(ctx, `SELECT `+sqlrows.KeyColumns+` FROM api_keys ORDER BY created_at, id`)
}

func (r *reader) PrincipalKeys(ctx context.Context, tenant, principal string) ([]store.Key, error) {
	return r.apiKeys(ctx, `SELECT `+sqlrows.KeyColumns+` FROM api_keys WHERE tenant = $1 AND principal = $2 ORDER BY created_at, id`, tenant, principal)
}

// apiKeys reads the API keys of a query of sqlrows.KeyColumns.
func (r *reader) apiKeys(ctx context.Context, q string, args ...any) ([]store.Key, error) {
	out := []store.Key{}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		k, err := sqlrows.ScanKey(rows)
		if err != nil {
			return err
		}
		out = append(out, *k)
		return nil
	}, q, args...)
	return out, err
}

func (w *writeTx) PutKey(ctx context.Context, k store.Key) error {
	n, err := w.ss.exec(w.c(ctx), `INSERT INTO api_keys (`+sqlrows.KeyColumns+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT DO NOTHING`,
		k.ID, k.Hash, k.Prefix, k.Role, k.Tenant, k.Principal, us(k.CreatedAt), nus(k.RevokedAt))
	if err != nil {
		return err
	}
	if n == 0 {
		return host.Errorf(host.CodeConflict, "a key with this id exists")
	}
	return nil
}

func (w *writeTx) RevokeKey(ctx context.Context, id string, at time.Time) error {
	n, err := w.ss.exec(w.c(ctx), `UPDATE api_keys SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2`, us(at), id)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFound("key", id)
	}
	// Every other host drops its cached keys once this commits.
	w.st.notify = append(w.st.notify, store.KeysRevokedNotice)
	return nil
}
