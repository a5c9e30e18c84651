package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// reader implements store.Reader over one transaction.
type reader struct {
	s  *Store
	db *sql.DB
	tx *sql.Tx
	// wrote is set by every write statement, so the writer knows whether a
	// failed update left anything to undo.
	wrote bool
	// bound caches the transaction's handles of prepared statements.
	bound map[string]*sql.Stmt
	// wb is the write transaction this reader belongs to, nil in a view: its
	// rows written behind are written before any statement that may read them.
	wb *writeTx
	// deps are the counts the running update's last LockDependencies read
	// (dependencies.go); an edge written forgets them.
	deps *store.DependencyCounts
}

// writeTx implements store.Tx inside the writer's batch transaction.
type writeTx struct {
	reader
	// counts journals the batch's task state changes; the writer adds them
	// to queue_counts before commit.
	counts []store.CountDelta
	// obligations are opened obligations not written yet: the writer adds
	// them with one multi-row INSERT when the batch ends (or an update ends,
	// in savepoint mode), or before anything reads obligations.
	obligations []pendingObligation
	// ended is how many of obligations belong to updates that have ended;
	// endedTerms are those of them the running update terminated in memory,
	// which its failure must reopen (their rows stay: their updates
	// succeeded).
	ended      int
	endedTerms []int
	// behind holds the inserted tasks and receipts not written yet
	// (writebehind.go).
	behind
}

type pendingObligation struct {
	o            host.Obligation
	terminatedBy string
}

var (
	_ store.Reader = (*reader)(nil)
	_ store.Tx     = (*writeTx)(nil)
)

// st returns the transaction's handle of a statement prepared once on the
// database, or nil when it is not prepared yet (the caller then runs the query
// unprepared, and the statement is prepared for next time outside any
// transaction: the writer has a single connection, which the transaction holds).
func (r *reader) st(ctx context.Context, q string) *sql.Stmt {
	if st, ok := r.bound[q]; ok {
		return st
	}
	st := r.s.stmt(r.db, q)
	if st == nil {
		return nil
	}
	if r.bound == nil {
		r.bound = map[string]*sql.Stmt{}
	}
	st = r.tx.StmtContext(ctx, st)
	r.bound[q] = st
	return st
}

// c detaches the writer's statements from the caller's cancellation: the
// transaction is shared by a whole batch, and an interrupted statement would
// roll back everyone's updates (store.Store.Update).
func (r *reader) c(ctx context.Context) context.Context {
	if r.db == r.s.wdb {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// query, queryRow and exec run a statement after writing the rows written
// behind, so any statement sees them; the raw forms skip that, for the
// statements that are known not to read those rows.
func (r *reader) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := r.flushBehind(ctx); err != nil {
		return nil, err
	}
	return r.rawQuery(ctx, q, args...)
}

func (r *reader) queryRow(ctx context.Context, q string, args ...any) row {
	if err := r.flushBehind(ctx); err != nil {
		return row{err: err}
	}
	return row{row: r.rawQueryRow(ctx, q, args...)}
}

func (r *reader) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if err := r.flushBehind(ctx); err != nil {
		return nil, err
	}
	return r.rawExec(ctx, q, args...)
}

// row is a *sql.Row, or the error that kept its query from running.
type row struct {
	row *sql.Row
	err error
}

func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return r.row.Scan(dest...)
}

func (r *reader) rawQuery(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if r.s.onStatement != nil {
		r.s.onStatement(q)
	}
	ctx = r.c(ctx)
	if st := r.st(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return r.tx.QueryContext(ctx, q, args...)
}

func (r *reader) rawQueryRow(ctx context.Context, q string, args ...any) *sql.Row {
	if r.s.onStatement != nil {
		r.s.onStatement(q)
	}
	ctx = r.c(ctx)
	if st := r.st(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return r.tx.QueryRowContext(ctx, q, args...)
}

func (r *reader) rawExec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if r.s.onStatement != nil {
		r.s.onStatement(q)
	}
	r.wrote = true
	ctx = r.c(ctx)
	if st := r.st(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return r.tx.ExecContext(ctx, q, args...)
}

// --- time and null helpers

// us, fromUS and nus are sqlrows' time encodings, short for this
// package's many statements.
func us(t time.Time) int64 { return sqlrows.US(t) }

func fromUS(v int64) time.Time { return sqlrows.FromUS(v) }

func nus(t *time.Time) *int64 { return sqlrows.NUS(t) }

// fromNUS is sqlrows.FromNUS for a column scanned as sql.NullInt64.
func fromNUS(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromUS(v.Int64)
	return &t
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// --- tasks

func notFound(what, id string) error { return host.Errorf(host.CodeNotFound, "no %s %s", what, id) }

func (r *reader) oneTask(ctx context.Context, q string, args ...any) (*host.Task, error) {
	t, _, err := sqlrows.ScanTask(r.queryRow(ctx, q, args...))
	return t, err
}

func (r *reader) GetTask(ctx context.Context, tenant, id string) (*host.Task, error) {
	t, err := r.oneTask(ctx, `SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE id = ? AND tenant = ?`, id, tenant)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("task", id)
	}
	return t, err
}

func (r *reader) GetTaskByLease(ctx context.Context, leaseID string) (*host.Task, error) {
	t, err := r.oneTask(ctx, `SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE lease_id = ? AND lease_id <> ''`, leaseID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("lease", leaseID)
	}
	return t, err
}

func (r *reader) FindTaskByIdempotency(ctx context.Context, k store.IdempotencyKey) (*host.Task, error) {
	t, err := r.oneTask(ctx, `SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE tenant = ? AND created_by = ? AND recipient = ? AND idempotency_key = ? AND idempotency_key <> ''`,
		k.Tenant, k.Producer, k.Recipient, k.Key)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return t, err
}

// tasks runs a task query and returns the tasks with their queue positions.
func (r *reader) tasks(ctx context.Context, q string, args ...any) ([]*host.Task, []int64, error) {
	return scanTasks(r.query(ctx, q, args...))
}

// scanTasks reads the tasks and queue positions of a task query's rows.
func scanTasks(rows *sql.Rows, err error) ([]*host.Task, []int64, error) {
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var out []*host.Task
	var seqs []int64
	for rows.Next() {
		t, seq, err := sqlrows.ScanTask(rows)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, t)
		seqs = append(seqs, seq)
	}
	return out, seqs, rows.Err()
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

func (r *reader) ListTasks(ctx context.Context, f store.TaskFilter) ([]*host.Task, string, error) {
	after, err := store.ParseCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if len(f.States) > 0 && f.Recipient == "" && f.CreatedBy == "" && f.Principal == "" {
		ts, cur, ok, err := r.listByState(ctx, f, after)
		if ok || err != nil {
			return ts, cur, err
		}
	}
	q := `SELECT ` + sqlrows.TaskColumns + ` FROM tasks WHERE tenant = ? AND seq > ?`
	args := []any{f.Tenant, after}
	if f.Recipient != "" {
		q += ` AND recipient = ?`
		args = append(args, f.Recipient)
	}
	if f.CreatedBy != "" {
		q += ` AND created_by = ?`
		args = append(args, f.CreatedBy)
	}
	if f.Principal != "" {
		q += ` AND (created_by = ? OR recipient = ?)`
		args = append(args, f.Principal, f.Principal)
	}
	if len(f.Types) > 0 {
		q += ` AND task_type IN (` + placeholders(len(f.Types)) + `)`
		for _, t := range f.Types {
			args = append(args, t)
		}
	}
	if len(f.States) > 0 {
		q += ` AND state IN (` + placeholders(len(f.States)) + `)`
		for _, s := range f.States {
			args = append(args, string(s))
		}
	}
	q += ` ORDER BY seq LIMIT ?`
	args = append(args, f.Limit+1)
	ts, seqs, err := r.tasks(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	ts, cur := store.Page(ts, f.Limit, func(i int) int64 { return seqs[i] })
	return ts, cur, nil
}

// maxStateRanges bounds the index ranges a list by state merges (states ×
// types); a list that would need more is one filtered walk of the tenant's
// tasks in seq order instead.
const maxStateRanges = 64

// stateListSQL is the merge of n ranges of tasks_state_type_seq in seq order
// (args: tenant, state, type and cursor for each range, then the limit).
func stateListSQL(n int) string {
	return mergeSQL(n, `SELECT `+sqlrows.TaskColumns+` FROM tasks INDEXED BY tasks_state_type_seq
WHERE tenant = ? AND state = ? AND task_type = ? AND seq > ?`, "seq")
}

// mergeSQL repeats a range n times under UNION ALL and one ORDER BY … LIMIT
// ? (the limit is the last argument). SQLite applies the ORDER BY to each
// branch and merges the branches lazily as coroutines; when each branch is
// an index range already in that order, nothing is sorted and a page reads
// about one row per range plus the page itself.
func mergeSQL(n int, branch, orderBy string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString(branch)
	}
	b.WriteString(` ORDER BY ` + orderBy + ` LIMIT ?`)
	return b.String()
}

// typesInSQL walks tasks_state_type_seq loosely: one seek per type of a
// tenant's tasks in a state (args: tenant, state).
const typesInSQL = `WITH RECURSIVE ty(v) AS (
  SELECT (SELECT task_type FROM tasks INDEXED BY tasks_state_type_seq WHERE tenant = ?1 AND state = ?2 ORDER BY task_type LIMIT 1)
  UNION ALL
  SELECT (SELECT task_type FROM tasks INDEXED BY tasks_state_type_seq WHERE tenant = ?1 AND state = ?2 AND task_type > ty.v
    ORDER BY task_type LIMIT 1) FROM ty WHERE ty.v IS NOT NULL
) SELECT v FROM ty WHERE v IS NOT NULL`

// listByState lists tasks by state (and type) with no principal filter.
// There is no (tenant, state, seq) index: every transition would move the
// task's entry in it, and the writer's cost per cycle follows the index
// entries it moves (RATIONALE.md, "One state index, not two"). The page is a
// merge, in seq order, of one walk of tasks_state_type_seq per state and
// type: a compound SELECT whose ORDER BY SQLite applies to each branch (each
// an index range already in seq order, no sort) and merges lazily, so a page
// reads about one row per range plus the page itself. The types of a state
// come from the same index, one seek per type. ok is false when the ranges
// would exceed maxStateRanges.
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
	args := make([]any, 0, len(pairs)*4+1)
	for _, p := range pairs {
		args = append(args, f.Tenant, p.State, p.Type, after)
	}
	args = append(args, f.Limit+1)
	ts, seqs, err := r.tasks(ctx, stateListSQL(len(pairs)), args...)
	if err != nil {
		return nil, "", false, err
	}
	ts, cur = store.Page(ts, f.Limit, func(i int) int64 { return seqs[i] })
	return ts, cur, true, nil
}

// typesIn returns the types of a tenant's tasks in state, in name order, one
// index seek per type however many tasks each has (typesInSQL).
func (r *reader) typesIn(ctx context.Context, tenant, state string) ([]string, error) {
	rows, err := r.query(ctx, typesInSQL, tenant, state)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func (r *reader) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*host.Task, error) {
	ts, _, err := r.tasks(ctx, `SELECT `+sqlrows.TaskColumns+` FROM tasks WHERE state = 'leased' AND lease_expires_at <= ? ORDER BY lease_expires_at LIMIT ?`, us(now), limit)
	return ts, err
}

// QueueStats implements store.Reader from the counts the writer keeps
// (queue_counts: a few rows per tenant and type), the paused types
// (task_type_pauses: a row per paused type), and the oldest ready age over
// the types with queued tasks, the paused ones left out, from the typed
// lease index (oldestReadySQL: the first ready task of each type and
// priority and at most oldestReadyWindow entries past it): three statements
// however many types, it never scans the queue, and a paused backlog is
// never walked.
func (r *reader) QueueStats(ctx context.Context, tenant string) (store.QueueStats, error) {
	qs := store.QueueStats{ByState: map[host.TaskState]int64{}, ByType: map[string]int64{}}
	pq := `SELECT tenant, task_type FROM task_type_pauses`
	q := `SELECT tenant, task_type, state, sum(n) FROM queue_counts GROUP BY tenant, task_type, state ORDER BY tenant`
	args := []any{}
	if tenant != "" {
		pq += ` WHERE tenant = ?`
		q = `SELECT tenant, task_type, state, sum(n) FROM queue_counts WHERE tenant = ? GROUP BY tenant, task_type, state`
		args = append(args, tenant)
	}
	rows, err := r.query(ctx, pq, args...)
	if err != nil {
		return qs, err
	}
	for rows.Next() {
		var tn, typ string
		if err := rows.Scan(&tn, &typ); err != nil {
			rows.Close()
			return qs, err
		}
		qs.NotePaused(tn, typ)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return qs, err
	}
	rows, err = r.query(ctx, q, args...)
	if err != nil {
		return qs, err
	}
	var queued [][2]string // (tenant, type) of the queued tasks of types not paused
	for rows.Next() {
		var tn, typ, state string
		var n int64
		if err := rows.Scan(&tn, &typ, &state, &n); err != nil {
			rows.Close()
			return qs, err
		}
		qs.AddCountIn(tn, typ, host.TaskState(state), n)
		if state != string(host.StateQueued) || n <= 0 {
			continue
		}
		if !qs.IsPaused(tn, typ) {
			queued = append(queued, [2]string{tn, typ})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return qs, err
	}
	if len(queued) == 0 {
		return qs, nil
	}
	now := time.Now()
	lanes, err := json.Marshal(queued)
	if err != nil {
		return qs, err
	}
	var avail sql.NullInt64
	err = r.queryRow(ctx, oldestReadySQL, string(lanes), us(now)).Scan(&avail)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !avail.Valid {
		return qs, nil
	}
	if err != nil {
		return qs, err
	}
	qs.OldestReadyAge = max(now.Sub(fromUS(avail.Int64)), 0)
	return qs, nil
}

// ScheduledCounts implements store.Reader: one walk of the tenant's queued
// tasks through the lease index.
func (r *reader) ScheduledCounts(ctx context.Context, tenant string, now time.Time) ([]store.CountDelta, error) {
	q := `SELECT tenant, task_type, count(*) FROM tasks WHERE state = 'queued' AND available_at > ? GROUP BY tenant, task_type`
	args := []any{us(now)}
	if tenant != "" {
		q = `SELECT tenant, task_type, count(*) FROM tasks INDEXED BY tasks_ready_type WHERE tenant = ? AND state = 'queued' AND available_at > ?
GROUP BY tenant, task_type`
		args = []any{tenant, us(now)}
	}
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.CountDelta
	for rows.Next() {
		d := store.CountDelta{State: host.StateScheduled}
		if err := rows.Scan(&d.Tenant, &d.Type, &d.N); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// oldestReadySQL is the oldest available_at among the first
// oldestReadyWindow queued tasks of each type and priority from its first
// ready one (available_at <= ?2) in queue order, through the typed lease
// index (tasks_ready_type: tenant, type, priority, seq), over the types ?1
// names (a JSON array of [tenant, type] pairs): one statement however many
// types, each type and priority one seek and at most a window of entries.
const oldestReadySQL = `WITH ty(tenant, task_type) AS (SELECT value->>0, value->>1 FROM json_each(?1)),
p(v) AS (VALUES (1),(2),(3),(4),(5),(6),(7),(8),(9),(10))
SELECT min((SELECT min(available_at) FROM (SELECT available_at FROM tasks INDEXED BY tasks_ready_type
  WHERE tenant = ty.tenant AND task_type = ty.task_type AND state = 'queued' AND priority = p.v AND seq >= (SELECT seq FROM tasks INDEXED BY tasks_ready_type
    WHERE tenant = ty.tenant AND task_type = ty.task_type AND state = 'queued' AND priority = p.v AND available_at <= ?2 ORDER BY seq LIMIT 1)
  ORDER BY seq LIMIT ` + oldestReadyWindow + `) WHERE available_at <= ?2)) FROM ty, p`

// oldestReadyWindow is how many queued tasks of each type and priority,
// from the first ready one in queue order, the oldest ready age looks at:
// a task released or retried keeps its place with a fresh available_at, so
// the first alone would hide the older ones behind it. The window adds at
// most that many index entries a lane to the seek of the first ready task.
const oldestReadyWindow = "100"

// flushCounts adds the batch's task state changes to queue_counts in one
// statement.
func (w *writeTx) flushCounts(ctx context.Context) error {
	ds := store.SumDeltas(w.counts)
	w.counts = w.counts[:0]
	if len(ds) == 0 {
		return nil
	}
	args := make([]any, 0, 4*len(ds))
	for _, d := range ds {
		args = append(args, d.Tenant, d.Type, string(d.State), d.N)
	}
	_, err := w.rawExec(ctx, `INSERT INTO queue_counts (tenant, task_type, state, shard, n) VALUES `+
		strings.TrimSuffix(strings.Repeat("(?,?,?,0,?),", len(ds)), ",")+
		` ON CONFLICT (tenant, task_type, state, shard) DO UPDATE SET n = n + excluded.n`, args...)
	return err
}

func (r *reader) ListProgress(ctx context.Context, tenant, taskID string, limit int) ([]store.Progress, error) {
	rows, err := r.query(ctx, `SELECT lease_id, percent, message, at FROM task_progress WHERE tenant = ? AND task_id = ? ORDER BY seq DESC LIMIT ?`, tenant, taskID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Progress{}
	for rows.Next() {
		p := store.Progress{Tenant: tenant, TaskID: taskID}
		var pct sql.NullFloat64
		var at int64
		if err := rows.Scan(&p.LeaseID, &pct, &p.Message, &at); err != nil {
			return nil, err
		}
		if pct.Valid {
			v := pct.Float64
			p.Percent = &v
		}
		p.At = fromUS(at)
		out = append(out, p)
	}
	return out, rows.Err()
}

// InsertTask implements store.Tx. The row is written behind, with the
// other tasks the batch inserts, in one statement (writebehind.go).
func (w *writeTx) InsertTask(ctx context.Context, t *host.Task) error {
	return w.bufferTask(t)
}

// updateTaskSQL is a task update's head: every column of
// sqlrows.TaskSetColumns, fenced on the task's id and state.
var updateTaskSQL = func() string {
	var b strings.Builder
	b.WriteString(`UPDATE tasks SET `)
	for _, c := range sqlrows.TaskSetColumns {
		b.WriteString(c + `=?, `)
	}
	b.WriteString(`version=version+1 WHERE id = ? AND state = ?`)
	return b.String()
}()

func (w *writeTx) UpdateTask(ctx context.Context, t *host.Task, f store.Fence) error {
	args, err := sqlrows.TaskSetValues(t)
	if err != nil {
		return err
	}
	q := updateTaskSQL
	args = append(args, t.ID, string(f.State))
	if f.LeaseID != "" {
		q += ` AND lease_id = ?`
		args = append(args, f.LeaseID)
	}
	if f.LiveAt != nil {
		q += ` AND lease_expires_at > ?`
		args = append(args, us(*f.LiveAt))
	}
	if f.ExpiredAt != nil {
		q += ` AND lease_expires_at <= ?`
		args = append(args, us(*f.ExpiredAt))
	}
	if f.Version != 0 {
		q += ` AND version = ?`
		args = append(args, f.Version)
	}
	if f.NoWaiters {
		q += ` AND has_waiters = 0`
	}
	if w.inserted(t.ID) || (f.State == host.StateWaiting && len(w.settles) > 0) {
		// The task was inserted in this batch, or waits while the batch
		// has successes whose waiters are not settled yet (writeSettles,
		// which may move it to queued): write those first.
		if err := w.flushBehind(ctx); err != nil {
			return err
		}
	}
	wrote := w.wrote
	out, err := w.rawExec(ctx, q, args...)
	if err != nil {
		return err
	}
	n, err := out.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		w.wrote = wrote // a fenced update changed nothing: nothing to undo
		return store.ErrFenced
	}
	t.Version++
	w.counts = store.Moved(w.counts, t, f.State, t.State)
	if t.State == host.StateQueued {
		w.queuedN++
	}
	return nil
}

type candidate struct {
	t   *host.Task
	seq int64
}

func (w *writeTx) ClaimTasks(ctx context.Context, q store.ClaimQuery) ([]*host.Task, error) {
	if q.Limit <= 0 {
		return nil, nil
	}
	now := us(q.Now)
	var cands []candidate
	collect := func(query string, args ...any) error {
		// A claim that may see a task the batch queued after noting a
		// success (one enqueued after the finished task, queued at once)
		// must see the waiters that success readied too (writeSettles),
		// or no order of the batch's updates would explain what it took.
		// One that cannot is ordered before the success: it sees nothing
		// the success wrote (a claim reads only queued tasks).
		flush := w.flushTasks
		if len(w.settles) > 0 && w.queuedN > w.settleMark {
			flush = w.flushRows
		}
		if err := flush(ctx); err != nil {
			return err
		}
		rows, err := w.rawQuery(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			t, seq, err := sqlrows.ScanTask(rows)
			if err != nil {
				return err
			}
			cands = append(cands, candidate{t, seq})
		}
		return rows.Err()
	}
	if len(q.Types) == 0 {
		if err := collect(`SELECT `+sqlrows.TaskColumns+` FROM tasks INDEXED BY tasks_ready WHERE tenant = ? AND state = 'queued' AND available_at <= ?
ORDER BY priority DESC, seq LIMIT ?`, q.Tenant, now, q.Limit); err != nil {
			return nil, err
		}
	} else {
		// One index range per type, merged: cost follows the batch, not the queue.
		seen := map[string]bool{}
		for _, typ := range q.Types {
			if seen[typ] {
				continue
			}
			seen[typ] = true
			if err := collect(`SELECT `+sqlrows.TaskColumns+` FROM tasks INDEXED BY tasks_ready_type WHERE tenant = ? AND task_type = ? AND state = 'queued'
AND available_at <= ? ORDER BY priority DESC, seq LIMIT ?`, q.Tenant, typ, now, q.Limit); err != nil {
				return nil, err
			}
		}
		sort.Slice(cands, func(i, j int) bool {
			if cands[i].t.Priority != cands[j].t.Priority {
				return cands[i].t.Priority > cands[j].t.Priority
			}
			return cands[i].seq < cands[j].seq
		})
	}
	// A claim that found all it asked for tells the writer queue that the
	// types it named (every type of the tenant, when it named none) have a
	// backlog (the enqueue budget); one that found fewer, that they have
	// none.
	w.s.queue.Claimed(store.ClaimKeys(q.Tenant, q.Types), len(cands) >= q.Limit)
	if len(cands) > q.Limit {
		cands = cands[:q.Limit]
	}
	ts := make([]*host.Task, len(cands))
	for i, c := range cands {
		q.Grant(c.t)
		ts[i] = c.t
	}
	return w.updateQueued(ctx, ts)
}

// updateQueued writes every mutable field of each task in one statement
// (UPDATE … FROM a VALUES list), each row fenced on still being queued, and
// returns the tasks it wrote: a lease batch costs one statement, not one per
// task.
func (w *writeTx) updateQueued(ctx context.Context, ts []*host.Task) ([]*host.Task, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString(`WITH v(id, ` + strings.Join(sqlrows.TaskSetColumns, ", ") + `) AS (VALUES `)
	row := "(" + placeholders(len(sqlrows.TaskSetColumns)+1) + ")"
	args := make([]any, 0, len(ts)*(len(sqlrows.TaskSetColumns)+1))
	for i, t := range ts {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(row)
		a, err := sqlrows.TaskSetValues(t)
		if err != nil {
			return nil, err
		}
		args = append(append(args, t.ID), a...)
	}
	b.WriteString(`) UPDATE tasks SET `)
	for i, c := range sqlrows.TaskSetColumns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c + " = v." + c)
	}
	b.WriteString(`, version = tasks.version + 1 FROM v WHERE tasks.id = v.id AND tasks.state = 'queued' RETURNING tasks.id`)
	// Its one caller, ClaimTasks, wrote the batch's kept tasks before it
	// read these; the statement touches no other table.
	rows, err := w.rawQuery(ctx, b.String(), args...)
	if err != nil {
		return nil, err
	}
	wrote := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		wrote[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(wrote) > 0 {
		w.wrote = true
	}
	out := make([]*host.Task, 0, len(wrote))
	for _, t := range ts {
		if wrote[t.ID] {
			t.Version++
			w.counts = store.Moved(w.counts, t, host.StateQueued, t.State)
			out = append(out, t)
		}
	}
	return out, nil
}

func (w *writeTx) InsertProgress(ctx context.Context, p store.Progress) error {
	var pct any
	if p.Percent != nil {
		pct = *p.Percent
	}
	_, err := w.exec(ctx, `INSERT INTO task_progress (tenant, task_id, lease_id, percent, message, at) VALUES (?,?,?,?,?,?)`,
		p.Tenant, p.TaskID, p.LeaseID, pct, p.Message, us(p.At))
	return err
}

// --- task types

func (r *reader) GetTaskType(ctx context.Context, tenant, name string) (*host.TaskType, error) {
	var body string
	err := r.rawQueryRow(ctx, `SELECT body FROM task_types WHERE tenant = ? AND name = ?`, tenant, name).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
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
	rows, err := r.query(ctx, `SELECT body FROM task_types WHERE tenant = ? ORDER BY name`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*host.TaskType{}
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		var tt host.TaskType
		if err := json.Unmarshal([]byte(body), &tt); err != nil {
			return nil, err
		}
		out = append(out, &tt)
	}
	return out, rows.Err()
}

func (w *writeTx) PutTaskType(ctx context.Context, tt *host.TaskType) error {
	b, err := json.Marshal(tt)
	if err != nil {
		return err
	}
	_, err = w.exec(ctx, `INSERT INTO task_types (tenant, name, body) VALUES (?,?,?) ON CONFLICT (tenant, name) DO UPDATE SET body = excluded.body`,
		tt.Tenant, tt.Name, string(b))
	return err
}

// DeleteTaskType implements store.Tx.
// ListTaskTypePauses implements store.Reader.
func (r *reader) ListTaskTypePauses(ctx context.Context, tenant string) ([]store.TaskTypePause, error) {
	rows, err := r.query(ctx, `SELECT task_type, paused_by, paused_at, reason FROM task_type_pauses WHERE tenant = ? ORDER BY task_type`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.TaskTypePause
	for rows.Next() {
		p := store.TaskTypePause{Tenant: tenant}
		var at int64
		if err := rows.Scan(&p.TaskType, &p.PausedBy, &at, &p.Reason); err != nil {
			return nil, err
		}
		p.PausedAt = fromUS(at)
		out = append(out, p)
	}
	return out, rows.Err()
}

// PauseTaskType implements store.Tx.
func (w *writeTx) PauseTaskType(ctx context.Context, p store.TaskTypePause) error {
	_, err := w.exec(ctx, `INSERT INTO task_type_pauses (tenant, task_type, paused_by, paused_at, reason) VALUES (?,?,?,?,?)
ON CONFLICT (tenant, task_type) DO NOTHING`, p.Tenant, p.TaskType, p.PausedBy, us(p.PausedAt), p.Reason)
	return err
}

// ResumeTaskType implements store.Tx.
func (w *writeTx) ResumeTaskType(ctx context.Context, tenant, name string) (bool, error) {
	res, err := w.exec(ctx, `DELETE FROM task_type_pauses WHERE tenant = ? AND task_type = ?`, tenant, name)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (w *writeTx) DeleteTaskType(ctx context.Context, tenant, name string) error {
	res, err := w.exec(ctx, `DELETE FROM task_types WHERE tenant = ? AND name = ?`, tenant, name)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return err
		}
		return notFound("task type", name)
	}
	return nil
}

// --- receipts

func (r *reader) receipts(ctx context.Context, q string, args ...any) ([]*host.Receipt, error) {
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*host.Receipt
	for rows.Next() {
		rc, err := sqlrows.ScanReceipt(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, rc)
	}
	return out, rows.Err()
}

func (r *reader) GetReceipt(ctx context.Context, tenant, id string) (*host.Receipt, error) {
	rc, err := sqlrows.ScanReceipt(r.queryRow(ctx, `SELECT `+sqlrows.ReceiptColumns+` FROM receipts WHERE id = ? AND tenant = ?`, id, tenant))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("receipt", id)
	}
	return rc, err
}

func (r *reader) GetReceiptByDedupe(ctx context.Context, tenant, from, key string) (*host.Receipt, error) {
	q, args := `SELECT `+sqlrows.ReceiptColumns+` FROM receipts WHERE tenant = ? AND dedupe_key = ? AND dedupe_key <> ''`, []any{tenant, key}
	if from != "" {
		q, args = q+` AND from_p = ?`, append(args, from)
	}
	rc, err := sqlrows.ScanReceipt(r.queryRow(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return rc, err
}

func (r *reader) GetLeaseReceipt(ctx context.Context, tenant, taskID, leaseID string, typ host.ReceiptType) (*host.Receipt, error) {
	if taskID == "" || leaseID == "" {
		return nil, nil
	}
	rc, err := sqlrows.ScanReceipt(r.queryRow(ctx, `SELECT `+sqlrows.ReceiptColumns+` FROM receipts WHERE tenant = ? AND task_id = ? AND task_id <> ''`+
		` AND lease_id = ? AND type = ? ORDER BY seq LIMIT 1`, tenant, taskID, leaseID, string(typ)))
	if errors.Is(err, sql.ErrNoRows) {
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
	q := `SELECT ` + sqlrows.ReceiptColumns + ` FROM receipts WHERE tenant = ? AND seq > ?`
	args := []any{f.Tenant, after}
	if f.TaskID != "" {
		q += ` AND task_id = ? AND task_id <> ''` // lets SQLite use the partial index
		args = append(args, f.TaskID)
	}
	if f.ScheduleID != "" {
		q += ` AND ` + store.ScheduleIDOfReceipt + ` = ? AND ` + store.ScheduleReceiptOnly
		args = append(args, f.ScheduleID)
	}
	if f.Latest {
		rs, err := r.receipts(ctx, q+` ORDER BY seq DESC LIMIT ?`, append(args, f.Limit)...)
		slices.Reverse(rs)
		return rs, "", err
	}
	q += ` ORDER BY seq LIMIT ?`
	args = append(args, f.Limit+1)
	rs, err := r.receipts(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	rs, cur := store.Page(rs, f.Limit, func(i int) int64 { return rs[i].Seq })
	return rs, cur, nil
}

func (r *reader) ScanReceipts(ctx context.Context, afterSeq int64, limit int) ([]*host.Receipt, error) {
	return r.receipts(ctx, `SELECT `+sqlrows.ReceiptColumns+` FROM receipts WHERE seq > ? ORDER BY seq LIMIT ?`, afterSeq, limit)
}

func (r *reader) Terminator(ctx context.Context, tenant, receiptID string) (string, error) {
	var term sql.NullString
	err := r.queryRow(ctx, `SELECT terminated_by FROM obligations WHERE receipt_id = ? AND tenant = ?`, receiptID, tenant).Scan(&term)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return term.String, err
}

func (r *reader) ListOpenObligations(ctx context.Context, f store.ObligationFilter) ([]host.Obligation, string, error) {
	after, err := store.ParseCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	const cols = `o.receipt_id, o.tenant, o.type, o.obligor, o.obligee, o.task_id, o.created_at, o.seq`
	byRole := func(col string) string {
		return `SELECT ` + cols + ` FROM obligations o INDEXED BY obligations_open_` + col + ` WHERE o.tenant = ? AND o.` + col +
			` = ? AND o.terminated_by IS NULL AND o.seq > ? ORDER BY o.seq LIMIT ?`
	}
	var q string
	var args []any
	switch f.Role {
	case "obligor", "obligee":
		q, args = byRole(f.Role), []any{f.Tenant, f.Principal, after, f.Limit + 1}
	default:
		q = `SELECT * FROM (SELECT * FROM (` + byRole("obligor") + `) UNION SELECT * FROM (` + byRole("obligee") + `)) ORDER BY seq LIMIT ?`
		args = []any{f.Tenant, f.Principal, after, f.Limit + 1, f.Tenant, f.Principal, after, f.Limit + 1, f.Limit + 1}
	}
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	out := []host.Obligation{}
	for rows.Next() {
		var o host.Obligation
		var typ string
		var created int64
		if err := rows.Scan(&o.ReceiptID, &o.Tenant, &typ, &o.Obligor, &o.Obligee, &o.TaskID, &created, &o.Seq); err != nil {
			return nil, "", err
		}
		o.Type, o.CreatedAt = host.ReceiptType(typ), fromUS(created)
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	out, cur := store.Page(out, f.Limit, func(i int) int64 { return out[i].Seq })
	// Attach bodies (one indexed lookup per obligation on the page).
	for i := range out {
		var body string
		if err := r.queryRow(ctx, `SELECT body FROM receipts WHERE id = ?`, out[i].ReceiptID).Scan(&body); err == nil {
			out[i].Body = json.RawMessage(body)
		}
	}
	return out, cur, nil
}

// GetObligations implements store.Reader.
func (r *reader) GetObligations(ctx context.Context, ids []string) ([]store.ObligationRow, error) {
	out := []store.ObligationRow{}
	for len(ids) > 0 {
		n := min(len(ids), 500)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		ids = ids[n:]
		rows, err := r.query(ctx, `SELECT receipt_id, tenant, type, obligor, obligee, task_id, created_at, seq, terminated_by IS NULL, coalesce(terminated_by, '')
FROM obligations WHERE receipt_id IN (?`+strings.Repeat(",?", n-1)+`)`, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var o store.ObligationRow
			var typ string
			var created int64
			if err := rows.Scan(&o.ReceiptID, &o.Tenant, &typ, &o.Obligor, &o.Obligee, &o.TaskID, &created, &o.Seq, &o.Open, &o.TerminatedBy); err != nil {
				rows.Close()
				return nil, err
			}
			o.Type, o.CreatedAt = host.ReceiptType(typ), fromUS(created)
			out = append(out, o)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CountObligations implements store.Reader.
func (r *reader) CountObligations(ctx context.Context) (int64, error) {
	var n int64
	err := r.queryRow(ctx, `SELECT count(*) FROM obligations`).Scan(&n)
	return n, err
}

// AppendReceipt implements store.Tx: the receipt goes at the end of the
// ledger (receipts.seq, read under the write lock, so processes sharing the
// file share one order) and at the end of this store's own chain.
func (w *writeTx) AppendReceipt(ctx context.Context, rc *host.Receipt) error {
	c := &w.s.chain
	if !c.loaded {
		if err := w.loadChain(ctx); err != nil {
			return err
		}
	}
	rc.Seq = c.global + 1
	rc.ChainID, rc.ChainSeq = c.id, c.seq+1
	rc.PrevHash = c.hash
	rc.Hash = host.ChainHashV2(rc, rc.PrevHash)
	if err := w.bufferReceipt(rc); err != nil {
		return err
	}
	c.global, c.seq, c.hash = rc.Seq, rc.ChainSeq, rc.Hash
	return nil
}

// loadChain reads, under the transaction's write lock, the ledger's last seq
// and this store's chain head, registering the chain on its first receipt.
// The head is read again in every transaction, so a commit whose outcome was
// unknown cannot fork the chain.
func (w *writeTx) loadChain(ctx context.Context) error {
	c := &w.s.chain
	if c.id != 0 {
		err := w.rawQueryRow(ctx, `SELECT (SELECT coalesce(max(seq), 0) FROM receipts), seq, hash FROM ledger_chains WHERE chain_id = ?`, c.id).
			Scan(&c.global, &c.seq, &c.hash)
		if err == nil {
			c.rowSeq, c.loaded = c.seq, true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		c.id = 0 // the chain's row is gone: start another chain
	}
	res, err := w.rawExec(ctx, `INSERT INTO ledger_chains (seq, hash, hash_version, opened_at) VALUES (0, '', ?, ?)`, host.ChainV2, time.Now().UnixMicro())
	if err != nil {
		return err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return err
	}
	if err := w.rawQueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM receipts`).Scan(&c.global); err != nil {
		return err
	}
	c.id, c.seq, c.hash, c.rowSeq, c.loaded = id, 0, "", 0, true
	return nil
}

// writeHead records the chain's head in its ledger_chains row if it moved.
func (w *writeTx) writeHead(ctx context.Context) error {
	c := &w.s.chain
	if !c.loaded || c.seq == c.rowSeq {
		return nil
	}
	if _, err := w.rawExec(ctx, `UPDATE ledger_chains SET seq = ?, hash = ? WHERE chain_id = ?`, c.seq, c.hash, c.id); err != nil {
		return err
	}
	c.rowSeq = c.seq
	return nil
}

// checkpoint records every non-empty chain's head in a new checkpoint linked
// to the last one.
func (w *writeTx) checkpoint(ctx context.Context) error {
	if err := w.writeHead(ctx); err != nil {
		return err
	}
	var last int64
	var prev string
	if err := w.queryRow(ctx, `SELECT checkpoint_id, hash FROM ledger_checkpoint_head WHERE id = 1`).Scan(&last, &prev); err != nil {
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
	if _, err := w.exec(ctx, `INSERT INTO ledger_checkpoints (id, at, heads, prev_hash, hash) VALUES (?,?,?,?,?)`,
		cp.ID, us(cp.At), string(hj), cp.PrevHash, cp.Hash); err != nil {
		return err
	}
	if _, err := w.exec(ctx, `UPDATE ledger_checkpoint_head SET checkpoint_id = ?, hash = ? WHERE id = 1`, cp.ID, cp.Hash); err != nil {
		return err
	}
	w.s.lastCheckpoint = time.Now()
	for _, h := range heads {
		if h.ID == w.s.chain.id {
			w.s.checkpointed = h.Seq
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
	rows, err := r.query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []host.ChainHead{}
	for rows.Next() {
		var h host.ChainHead
		if err := rows.Scan(&h.ID, &h.Seq, &h.Hash, &h.Version); err != nil {
			return nil, err
		}
		if forCheckpoint {
			h.Version = 0
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

func (r *reader) LedgerHeads(ctx context.Context) (store.LedgerHeads, error) {
	var lh store.LedgerHeads
	var err error
	if lh.Chains, err = r.chainHeads(ctx, false); err != nil {
		return lh, err
	}
	err = r.queryRow(ctx, `SELECT checkpoint_id, hash FROM ledger_checkpoint_head WHERE id = 1`).Scan(&lh.Checkpoint.Seq, &lh.Checkpoint.Hash)
	return lh, err
}

func (r *reader) ScanCheckpoints(ctx context.Context, afterID int64, limit int) ([]host.Checkpoint, error) {
	rows, err := r.query(ctx, `SELECT id, at, heads, prev_hash, hash FROM ledger_checkpoints WHERE id > ? ORDER BY id LIMIT ?`, afterID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []host.Checkpoint
	for rows.Next() {
		var c host.Checkpoint
		var at int64
		var heads string
		if err := rows.Scan(&c.ID, &at, &heads, &c.PrevHash, &c.Hash); err != nil {
			return nil, err
		}
		c.At = fromUS(at)
		if err := json.Unmarshal([]byte(heads), &c.Heads); err != nil {
			return nil, host.Errorf(host.CodeInternal, "checkpoint %d: heads are not JSON: %v", c.ID, err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// OpenObligation implements store.Tx. The row is written behind, with the
// other obligations of the batch in one statement (flushObligations). Its
// values cannot clash: the receipt with the same id was just inserted.
func (w *writeTx) OpenObligation(ctx context.Context, o host.Obligation) error {
	w.obligations = append(w.obligations, pendingObligation{o: o})
	return nil
}

// Terminate implements store.Tx. An obligation opened in this batch and not
// written yet is terminated in memory.
func (w *writeTx) Terminate(ctx context.Context, tenant, parentID, terminatorID string) error {
	for i := range w.obligations {
		if p := &w.obligations[i]; p.o.ReceiptID == parentID && p.o.Tenant == tenant {
			if p.terminatedBy == "" {
				p.terminatedBy = terminatorID
				if i < w.ended {
					w.endedTerms = append(w.endedTerms, i)
				}
			}
			return nil
		}
	}
	_, err := w.rawExec(ctx, `UPDATE obligations SET terminated_by = ? WHERE receipt_id = ? AND tenant = ? AND terminated_by IS NULL`, terminatorID, parentID, tenant)
	return err
}

// Flush implements store.Tx. Receipts get their seq as they are appended;
// the rows held back are written.
func (w *writeTx) Flush(ctx context.Context) error { return w.flushBehind(ctx) }

// Terminator implements store.Reader inside the batch: obligations written
// behind are written first.
func (w *writeTx) Terminator(ctx context.Context, tenant, receiptID string) (string, error) {
	if err := w.flushObligations(ctx); err != nil {
		return "", err
	}
	return w.reader.Terminator(ctx, tenant, receiptID)
}

// GetObligations implements store.Reader inside the batch: obligations
// written behind are written first.
func (w *writeTx) GetObligations(ctx context.Context, ids []string) ([]store.ObligationRow, error) {
	if err := w.flushObligations(ctx); err != nil {
		return nil, err
	}
	return w.reader.GetObligations(ctx, ids)
}

// CountObligations implements store.Reader inside the batch: obligations
// written behind are written first.
func (w *writeTx) CountObligations(ctx context.Context) (int64, error) {
	if err := w.flushObligations(ctx); err != nil {
		return 0, err
	}
	return w.reader.CountObligations(ctx)
}

// ListOpenObligations implements store.Reader inside the batch: obligations
// written behind are written first.
func (w *writeTx) ListOpenObligations(ctx context.Context, f store.ObligationFilter) ([]host.Obligation, string, error) {
	if err := w.flushObligations(ctx); err != nil {
		return nil, "", err
	}
	return w.reader.ListOpenObligations(ctx, f)
}

// flushObligations writes the pending obligations with multi-row INSERTs.
func (w *writeTx) flushObligations(ctx context.Context) error {
	for len(w.obligations) > 0 {
		n := chunk(len(w.obligations))
		args := make([]any, 0, 9*n)
		for _, p := range w.obligations[:n] {
			var term any
			if p.terminatedBy != "" {
				term = p.terminatedBy
			}
			o := p.o
			args = append(args, o.ReceiptID, o.Tenant, string(o.Type), o.Obligor, o.Obligee, o.TaskID, us(o.CreatedAt), o.Seq, term)
		}
		// OR FAIL, as the rows written behind (writebehind.go): no statement
		// journal, and a failure sticks, so that it is undone whole.
		if _, err := w.rawExec(ctx, `INSERT OR FAIL INTO obligations (receipt_id, tenant, type, obligor, obligee, task_id, created_at, seq, terminated_by) VALUES `+
			strings.TrimSuffix(strings.Repeat("(?,?,?,?,?,?,?,?,?),", n), ","), args...); err != nil {
			w.failed = err
			return err
		}
		w.obligations = w.obligations[n:]
	}
	w.obligations = nil
	return nil
}

// --- workers and keys

func (r *reader) ListWorkers(ctx context.Context, tenant string) ([]store.Worker, error) {
	rows, err := r.query(ctx, `SELECT id, capabilities, first_seen, last_seen FROM workers WHERE tenant = ? ORDER BY id`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Worker{}
	for rows.Next() {
		w := store.Worker{Tenant: tenant}
		var caps sql.NullString
		var first, last int64
		if err := rows.Scan(&w.ID, &caps, &first, &last); err != nil {
			return nil, err
		}
		if caps.Valid {
			w.Capabilities = json.RawMessage(caps.String)
		}
		w.FirstSeen, w.LastSeen = fromUS(first), fromUS(last)
		out = append(out, w)
	}
	return out, rows.Err()
}

func (w *writeTx) UpsertWorker(ctx context.Context, wk store.Worker) error {
	_, err := w.exec(ctx, `INSERT INTO workers (tenant, id, capabilities, first_seen, last_seen) VALUES (?,?,?,?,?)
ON CONFLICT (tenant, id) DO UPDATE SET last_seen = max(last_seen, excluded.last_seen), capabilities = coalesce(excluded.capabilities, capabilities)`,
		wk.Tenant, wk.ID, nullJSON(wk.Capabilities), us(wk.FirstSeen), us(wk.LastSeen))
	return err
}

func (r *reader) GetKeyByHash(ctx context.Context, hash string) (*store.Key, error) {
	k, err := sqlrows.ScanKey(r.queryRow(ctx, `SELECT `+sqlrows.KeyColumns+` FROM api_keys WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, host.Errorf(host.CodeNotFound, "no such key")
	}
	return k, err
}

func (r *reader) ListKeys(ctx context.Context) ([]store.Key, error) {
	return r.apiKeys(ctx, `SELECT `+sqlrows.KeyColumns+` FROM api_keys ORDER BY created_at, id`)
}

func (r *reader) PrincipalKeys(ctx context.Context, tenant, principal string) ([]store.Key, error) {
	return r.apiKeys(ctx, `SELECT `+sqlrows.KeyColumns+` FROM api_keys WHERE tenant = ? AND principal = ? ORDER BY created_at, id`, tenant, principal)
}

// apiKeys reads the API keys of a query of sqlrows.KeyColumns.
func (r *reader) apiKeys(ctx context.Context, q string, args ...any) ([]store.Key, error) {
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Key{}
	for rows.Next() {
		k, err := sqlrows.ScanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *k)
	}
	return out, rows.Err()
}

func (w *writeTx) PutKey(ctx context.Context, k store.Key) error {
	_, err := w.exec(ctx, `INSERT INTO api_keys (`+sqlrows.KeyColumns+`) VALUES (?,?,?,?,?,?,?,?)`,
		k.ID, k.Hash, k.Prefix, k.Role, k.Tenant, k.Principal, us(k.CreatedAt), nus(k.RevokedAt))
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return host.Errorf(host.CodeConflict, "a key with this id exists")
	}
	return err
}

func (w *writeTx) RevokeKey(ctx context.Context, id string, at time.Time) error {
	res, err := w.exec(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, us(at), id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return notFound("key", id)
	}
	return nil
}
