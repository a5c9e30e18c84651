package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// Delivery (issue 13): the inbox, retention and the outbox.

// ListInbox implements store.Reader.
func (r *reader) ListInbox(ctx context.Context, f store.InboxFilter) ([]host.InboxItem, string, error) {
	after, err := store.ParseCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	q := `SELECT ` + sqlrows.InboxColumns + ` FROM inbox WHERE tenant = ? AND seq > ?`
	args := []any{f.Tenant, after}
	if f.Recipient != "" {
		q += ` AND recipient = ?`
		args = append(args, f.Recipient)
	}
	if f.Unread {
		q += ` AND read_at IS NULL`
	}
	if f.TaskID != "" {
		q += ` AND task_id = ?`
		args = append(args, f.TaskID)
	}
	if len(f.IDs) > 0 {
		q += ` AND id IN (` + placeholders(len(f.IDs)) + `)`
		for _, id := range f.IDs {
			args = append(args, id)
		}
	}
	q += ` ORDER BY seq LIMIT ?`
	args = append(args, f.Limit+1)
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	out := []host.InboxItem{}
	for rows.Next() {
		it, err := sqlrows.ScanInbox(rows)
		if err != nil {
			return nil, "", err
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	out, cur := store.Page(out, f.Limit, func(i int) int64 { return out[i].Seq })
	return out, cur, nil
}

// inboxInsertN is the number of sqlrows.InboxInsertColumns.
var inboxInsertN = len(sqlrows.Names(sqlrows.InboxInsertColumns))

var errInboxClash = host.Errorf(host.CodeConflict, "an inbox item with this id exists")

// InsertInbox implements store.Tx. The row is written behind with the
// batch's tasks and receipts (writebehind.go): one multi-row INSERT per
// batch, so an outcome's inbox row costs no statement of its own.
func (w *writeTx) InsertInbox(ctx context.Context, it host.InboxItem) error {
	w.newInbox = append(w.newInbox, sqlrows.InboxInsertValues(it))
	return nil
}

// MarkInbox implements store.Tx.
func (w *writeTx) MarkInbox(ctx context.Context, m store.InboxMark) (int64, error) {
	if !m.Field.Valid() {
		return 0, host.Errorf(host.CodeBadRequest, "no inbox timestamp %q", m.Field)
	}
	col := string(m.Field)
	q := `UPDATE inbox SET ` + col + ` = ? WHERE tenant = ? AND ` + col + ` IS NULL`
	args := []any{us(m.At), m.Tenant}
	if m.Recipient != "" {
		q += ` AND recipient = ?`
		args = append(args, m.Recipient)
	}
	switch {
	case len(m.IDs) > 0:
		q += ` AND id IN (` + placeholders(len(m.IDs)) + `)`
		for _, id := range m.IDs {
			args = append(args, id)
		}
	case m.TaskID != "":
		q += ` AND task_id = ?`
		args = append(args, m.TaskID)
	default:
		return 0, nil
	}
	// The kept rows are written first (an item may be one of them), and
	// that write stays a write whatever the UPDATE matches.
	if err := w.flushBehind(ctx); err != nil {
		return 0, err
	}
	wrote := w.wrote
	res, err := w.rawExec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if n == 0 {
		w.wrote = wrote
	}
	return n, err
}

// RetentionDue implements store.Reader. Both kinds of query walk
// tasks_finished (tenant, task_type, state, completed_at): one type's due
// tasks directly; orphans (tasks of types no longer registered) by a loose
// walk of the index's (tenant, type) pairs, one seek each, then each orphan
// type's due tasks, merged by completion time. A global index on completed_at
// would serve orphans in one walk, but every completion would write it an
// entry (RATIONALE.md, "One state index, not two"). A succeeded task still
// owed to a waiter is passed by in its range (owedSQL): a range reads the
// owed tasks in front of its batch, not the batch alone.
func (r *reader) RetentionDue(ctx context.Context, q store.RetentionQuery) ([]*host.Task, error) {
	if len(q.States) == 0 || q.Limit <= 0 {
		return nil, nil
	}
	if !q.Orphans {
		return r.retentionDueOf(ctx, q, q.Tenant, q.Type)
	}
	var out []*host.Task
	tenant, typ := "", ""
	for {
		var registered bool
		err := r.queryRow(ctx, nextFinishedTypeSQL, tenant, typ).Scan(&tenant, &typ, &registered)
		if errors.Is(err, sql.ErrNoRows) {
			break
		}
		if err != nil {
			return nil, err
		}
		if registered {
			continue
		}
		ts, err := r.retentionDueOf(ctx, q, tenant, typ)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CompletedAt.Before(*out[j].CompletedAt) })
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// nextFinishedTypeSQL is one step of the loose walk of tasks_finished: the
// first (tenant, type) pair of a finished task after the one given, and
// whether that type is registered.
const nextFinishedTypeSQL = `SELECT tenant, task_type, EXISTS (SELECT 1 FROM task_types tt WHERE tt.tenant = tasks.tenant AND tt.name = tasks.task_type)
FROM tasks INDEXED BY tasks_finished WHERE completed_at IS NOT NULL AND (tenant, task_type) > (?, ?) ORDER BY tenant, task_type LIMIT 1`

// retentionDueOf returns up to q.Limit tasks of one type in q.States that
// completed at or before q.Before, oldest first: a merge of one range of
// tasks_finished per state, each already in completion order (finishedSQL).
func (r *reader) retentionDueOf(ctx context.Context, q store.RetentionQuery, tenant, typ string) ([]*host.Task, error) {
	states := store.Distinct(q.States)
	args := make([]any, 0, 4*len(states)+1)
	for _, s := range states {
		args = append(args, tenant, typ, string(s), us(q.Before))
	}
	args = append(args, q.Limit)
	ts, _, err := r.tasks(ctx, finishedSQL(len(states)), args...)
	return ts, err
}

// finishedSQL merges n ranges of tasks_finished in completion order (args:
// tenant, type, state and time bound of each range, then the limit), so a
// batch reads about its own size however many tasks are due (mergeSQL).
func finishedSQL(n int) string {
	return mergeSQL(n, `SELECT `+sqlrows.TaskColumns+` FROM tasks INDEXED BY tasks_finished
WHERE tenant = ? AND task_type = ? AND state = ? AND completed_at IS NOT NULL AND completed_at <= ? AND NOT `+owedSQL, "completed_at")
}

// owedSQL holds, in a read of tasks, a succeeded task that is still owed to
// an unfinished waiter (OwedWaiters' rule: an edge to it, open or settled
// as succeeded, from a task not finished), so retention passes it by
// instead of handing batch after batch the same owed rows. Each edge is
// found on its partial index and each waiter's state by its id; a task
// none waits on costs the two empty probes.
const owedSQL = `(tasks.state = 'succeeded' AND EXISTS (
  SELECT 1 FROM task_dependencies d INDEXED BY task_dependencies_open WHERE d.tenant = tasks.tenant AND d.dep_id = tasks.id AND d.dep_state = ''
    AND (SELECT w.state FROM tasks w WHERE w.id = d.waiter_id) NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived')
  UNION ALL
  SELECT 1 FROM task_dependencies d INDEXED BY task_dependencies_succeeded WHERE d.tenant = tasks.tenant AND d.dep_id = tasks.id AND d.dep_state = 'succeeded'
    AND (SELECT w.state FROM tasks w WHERE w.id = d.waiter_id) NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived')))`

// ListTaskTypeKeys implements store.Reader.
func (r *reader) ListTaskTypeKeys(ctx context.Context) ([]store.TaskTypeKey, error) {
	rows, err := r.query(ctx, `SELECT tenant, name FROM task_types ORDER BY tenant, name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.TaskTypeKey
	for rows.Next() {
		var k store.TaskTypeKey
		if err := rows.Scan(&k.Tenant, &k.Name); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

func (r *reader) outbox(ctx context.Context, q string, args ...any) ([]store.OutboxEntry, error) {
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.OutboxEntry
	for rows.Next() {
		e, err := sqlrows.ScanOutbox(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// ListOutbox implements store.Reader.
func (r *reader) ListOutbox(ctx context.Context, state store.OutboxState, afterID int64, limit int) ([]store.OutboxEntry, error) {
	return r.outbox(ctx, `SELECT `+sqlrows.OutboxColumns+` FROM outbox WHERE state = ? AND id > ? ORDER BY id LIMIT ?`, string(state), afterID, limit)
}

// OutboxStats implements store.Reader.
func (r *reader) OutboxStats(ctx context.Context) (store.OutboxStats, error) {
	var s store.OutboxStats
	var oldest sql.NullInt64
	err := r.queryRow(ctx, `SELECT (SELECT count(*) FROM outbox WHERE state = 'pending'), (SELECT count(*) FROM outbox WHERE state = 'dead'),
(SELECT min(created_at) FROM outbox WHERE state = 'pending')`).Scan(&s.Pending, &s.Dead, &oldest)
	s.OldestPendingAt = fromNUS(oldest)
	return s, err
}

// InsertOutbox implements store.Tx. Like InsertInbox it reads nothing the
// batch holds behind, so it runs raw.
func (w *writeTx) InsertOutbox(ctx context.Context, es []store.OutboxEntry) error {
	for _, e := range es {
		if _, err := w.rawExec(ctx, `INSERT INTO outbox (tenant, task_id, kind, dedupe_key, body, state, next_at, created_at) VALUES (?,?,?,?,?,'pending',?,?)`,
			e.Tenant, e.TaskID, e.Kind, e.Key, string(e.Body), us(e.NextAt), us(e.CreatedAt)); err != nil {
			return err
		}
	}
	return nil
}

// ClaimOutbox implements store.Tx.
func (w *writeTx) ClaimOutbox(ctx context.Context, now, claimUntil time.Time, limit int, kinds []string) ([]store.OutboxEntry, error) {
	if len(kinds) == 0 {
		return nil, nil
	}
	args := []any{us(now), us(now)}
	for _, k := range kinds {
		args = append(args, k)
	}
	es, err := w.outbox(ctx, `SELECT `+sqlrows.OutboxColumns+` FROM outbox o WHERE state = 'pending' AND next_at <= ? AND (claimed_until IS NULL OR claimed_until <= ?)
AND kind IN (`+placeholders(len(kinds))+`)
AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.state = 'pending' AND p.task_id = o.task_id AND o.task_id <> '' AND p.id < o.id)
ORDER BY next_at, id LIMIT ?`, append(args, limit)...)
	if err != nil || len(es) == 0 {
		return es, err
	}
	args = []any{us(claimUntil)}
	for i := range es {
		args = append(args, es[i].ID)
		es[i].ClaimedTill = &claimUntil
	}
	_, err = w.exec(ctx, `UPDATE outbox SET claimed_until = ? WHERE id IN (`+placeholders(len(es))+`)`, args...)
	return es, err
}

// FinishOutbox implements store.Tx.
// Delivered entries go in one DELETE per 500.
func (w *writeTx) FinishOutbox(ctx context.Context, es []store.OutboxEntry) error {
	var done []any
	for i, e := range es {
		if e.State == store.OutboxDone {
			done = append(done, e.ID)
			continue
		}
		res, err := w.exec(ctx, `UPDATE outbox SET state = ?, attempts = ?, next_at = ?, last_error = ?, claimed_until = NULL
WHERE id = ? AND claimed_until IS ?`,
			string(e.State), e.Attempts, us(e.NextAt), e.LastError, e.ID, nus(e.ClaimedTill))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			es[i].State = store.OutboxReclaimed
		}
	}
	for len(done) > 0 {
		n := min(len(done), 500)
		if _, err := w.exec(ctx, `DELETE FROM outbox WHERE id IN (`+placeholders(n)+`)`, done[:n]...); err != nil {
			return err
		}
		done = done[n:]
	}
	return nil
}

// RetryOutbox implements store.Tx.
func (w *writeTx) RetryOutbox(ctx context.Context, ids []int64, now time.Time) (int64, error) {
	q := `UPDATE outbox SET state = 'pending', next_at = ?, claimed_until = NULL, attempts = 0 WHERE state = 'dead'`
	args := []any{us(now)}
	if len(ids) > 0 {
		q += ` AND id IN (` + placeholders(len(ids)) + `)`
		for _, id := range ids {
			args = append(args, id)
		}
	}
	res, err := w.exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
