package postgres

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

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
	var a args
	q := `SELECT ` + sqlrows.InboxColumns + ` FROM inbox WHERE tenant = ` + a.add(f.Tenant) + ` AND seq > ` + a.add(after)
	if f.Recipient != "" {
		q += ` AND recipient = ` + a.add(f.Recipient)
	}
	if f.Unread {
		q += ` AND read_at IS NULL`
	}
	if f.TaskID != "" {
		q += ` AND task_id = ` + a.add(f.TaskID)
	}
	if len(f.IDs) > 0 {
		q += ` AND id = ANY(` + a.add(f.IDs) + `::text[])`
	}
	q += ` ORDER BY seq LIMIT ` + a.add(f.Limit+1)
	out := []host.InboxItem{}
	err = r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		it, err := sqlrows.ScanInbox(rows)
		if err == nil {
			out = append(out, it)
		}
		return err
	}, q, a...)
	if err != nil {
		return nil, "", err
	}
	out, cur := store.Page(out, f.Limit, func(i int) int64 { return out[i].Seq })
	return out, cur, nil
}

// InsertInbox implements store.Tx.
func (w *writeTx) InsertInbox(ctx context.Context, it host.InboxItem) error {
	if w.deferWrites {
		w.bh.inbox = append(w.bh.inbox, it) // written behind
		return nil
	}
	q := `INSERT INTO inbox (id, tenant, recipient, kind, task_id, task_type, receipt_id, summary, created_at, delivered_at, read_at, fetched_at, promoted_at)
VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)`
	a := []any{it.ID, it.Tenant, it.Recipient, string(it.Kind), it.TaskID, it.TaskType, it.ReceiptID, it.Summary,
		us(it.CreatedAt), nus(it.DeliveredAt), nus(it.ReadAt), nus(it.FetchedAt), nus(it.PromotedAt)}
	return w.writeOne(ctx, "inbox insert", nil, q, a...)
}

// MarkInbox implements store.Tx.
func (w *writeTx) MarkInbox(ctx context.Context, m store.InboxMark) (int64, error) {
	if !m.Field.Valid() {
		return 0, host.Errorf(host.CodeBadRequest, "no inbox timestamp %q", m.Field)
	}
	col := string(m.Field)
	var a args
	q := `UPDATE inbox SET ` + col + ` = ` + a.add(us(m.At)) + ` WHERE tenant = ` + a.add(m.Tenant) + ` AND ` + col + ` IS NULL`
	if m.Recipient != "" {
		q += ` AND recipient = ` + a.add(m.Recipient)
	}
	switch {
	case len(m.IDs) > 0:
		q += ` AND id = ANY(` + a.add(m.IDs) + `::text[])`
	case m.TaskID != "":
		q += ` AND task_id = ` + a.add(m.TaskID)
	default:
		return 0, nil
	}
	return w.ss.exec(w.c(ctx), q, a...)
}

// RetentionDue implements store.Reader. It reads tasks_finished alone
// (migration 0031 dropped tasks_unarchived, an index entry every completion
// wrote): the tasks of one type are a merge of one range per state, each
// already in completion order, so a batch reads about its own size however
// many tasks are due; orphans first walk the index's (tenant, type) pairs,
// one seek a pair, for the types no longer registered. A succeeded task
// still owed to a waiter is passed by in its range (owedSQL): a range
// reads the owed tasks in front of its batch, not the batch alone.
func (r *reader) RetentionDue(ctx context.Context, q store.RetentionQuery) ([]*host.Task, error) {
	if len(q.States) == 0 || q.Limit <= 0 {
		return nil, nil
	}
	if !q.Orphans {
		return r.retentionDueOf(ctx, q, q.Tenant, q.Type)
	}
	var pairs [][2]string
	if err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var p [2]string
		err := rows.Scan(&p[0], &p[1])
		pairs = append(pairs, p)
		return err
	}, orphanTypesSQL); err != nil {
		return nil, err
	}
	var out []*host.Task
	for _, p := range pairs {
		ts, err := r.retentionDueOf(ctx, q, p[0], p[1])
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

// orphanTypesSQL walks tasks_finished loosely, one seek per (tenant, type)
// pair of a finished task, and keeps the pairs whose type is no longer
// registered.
const orphanTypesSQL = `WITH RECURSIVE k(tenant, task_type) AS (
  (SELECT tenant, task_type FROM tasks WHERE completed_at IS NOT NULL ORDER BY tenant, task_type LIMIT 1)
  UNION ALL
  SELECT n.tenant, n.task_type FROM k CROSS JOIN LATERAL (
    SELECT tenant, task_type FROM tasks WHERE completed_at IS NOT NULL AND (tenant, task_type) > (k.tenant, k.task_type)
    ORDER BY tenant, task_type LIMIT 1) n
) SELECT tenant, task_type FROM k
WHERE NOT EXISTS (SELECT 1 FROM task_types tt WHERE tt.tenant = k.tenant AND tt.name = k.task_type)`

// retentionDueOf returns up to q.Limit tasks of one type in q.States that
// completed at or before q.Before, oldest first: one range of
// tasks_finished per state, merged.
func (r *reader) retentionDueOf(ctx context.Context, q store.RetentionQuery, tenant, typ string) ([]*host.Task, error) {
	seen := map[host.TaskState]bool{}
	var a args
	var b strings.Builder
	for _, st := range q.States {
		if seen[st] {
			continue
		}
		seen[st] = true
		if b.Len() > 0 {
			b.WriteString(` UNION ALL `)
		}
		b.WriteString(`(SELECT ` + sqlrows.TaskColumns + ` FROM tasks WHERE tenant = ` + a.add(tenant) + ` AND task_type = ` + a.add(typ) +
			` AND state = ` + a.add(string(st)) + ` AND completed_at IS NOT NULL AND completed_at <= ` + a.add(us(q.Before)))
		if st == host.StateSucceeded {
			b.WriteString(` AND NOT ` + owedSQL)
		}
		b.WriteString(` ORDER BY completed_at LIMIT ` + a.add(q.Limit) + `)`)
	}
	rows, err := r.tasks(ctx, `SELECT * FROM (`+b.String()+`) u ORDER BY completed_at LIMIT `+a.add(q.Limit), a...)
	if err != nil {
		return nil, err
	}
	out := make([]*host.Task, len(rows))
	for i, tr := range rows {
		out[i] = tr.t
	}
	return out, nil
}

// owedSQL is true, in a read of tasks, of a task still owed to an
// unfinished waiter (OwedWaiters' rule: an edge to it, open or settled as
// succeeded, from a task not finished), so retention passes it by instead
// of handing batch after batch the same owed rows. Each edge is found on
// its partial index and each waiter's state by its id (a scalar subquery,
// as in owedWaitersSQL); a task none waits on costs the two empty probes.
const owedSQL = `EXISTS (
  SELECT 1 FROM task_dependencies d WHERE d.tenant = tasks.tenant AND d.dep_id = tasks.id AND d.dep_state = ''
    AND (SELECT w.state FROM tasks w WHERE w.id = d.waiter_id) NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived')
  UNION ALL
  SELECT 1 FROM task_dependencies d WHERE d.tenant = tasks.tenant AND d.dep_id = tasks.id AND d.dep_state = 'succeeded'
    AND (SELECT w.state FROM tasks w WHERE w.id = d.waiter_id) NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived'))`

// ListTaskTypeKeys implements store.Reader.
func (r *reader) ListTaskTypeKeys(ctx context.Context) ([]store.TaskTypeKey, error) {
	var out []store.TaskTypeKey
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var k store.TaskTypeKey
		err := rows.Scan(&k.Tenant, &k.Name)
		out = append(out, k)
		return err
	}, `SELECT tenant, name FROM task_types ORDER BY tenant, name`)
	return out, err
}

func (r *reader) outbox(ctx context.Context, q string, a ...any) ([]store.OutboxEntry, error) {
	var out []store.OutboxEntry
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		e, err := sqlrows.ScanOutbox(rows)
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	}, q, a...)
	return out, err
}

// ListOutbox implements store.Reader.
func (r *reader) ListOutbox(ctx context.Context, state store.OutboxState, afterID int64, limit int) ([]store.OutboxEntry, error) {
	return r.outbox(ctx, `SELECT `+sqlrows.OutboxColumns+` FROM outbox WHERE state = $1 AND id > $2 ORDER BY id LIMIT $3`, string(state), afterID, limit)
}

// OutboxStats implements store.Reader.
func (r *reader) OutboxStats(ctx context.Context) (store.OutboxStats, error) {
	var s store.OutboxStats
	var oldest *int64
	err := r.ss.queryRow(r.c(ctx), []any{&s.Pending, &s.Dead, &oldest}, `SELECT (SELECT count(*) FROM outbox WHERE state = 'pending'),
(SELECT count(*) FROM outbox WHERE state = 'dead'), (SELECT min(created_at) FROM outbox WHERE state = 'pending')`)
	s.OldestPendingAt = fromNUS(oldest)
	return s, err
}

// InsertOutbox implements store.Tx.
func (w *writeTx) InsertOutbox(ctx context.Context, es []store.OutboxEntry) error {
	for _, e := range es {
		if _, err := w.ss.exec(w.c(ctx), `INSERT INTO outbox (tenant, task_id, kind, dedupe_key, body, state, next_at, created_at) VALUES ($1,$2,$3,$4,$5,'pending',$6,$7)`,
			e.Tenant, e.TaskID, e.Kind, e.Key, string(e.Body), us(e.NextAt), us(e.CreatedAt)); err != nil {
			return err
		}
	}
	return nil
}

// ClaimOutbox implements store.Tx. Rows another host is claiming are skipped.
func (w *writeTx) ClaimOutbox(ctx context.Context, now, claimUntil time.Time, limit int, kinds []string) ([]store.OutboxEntry, error) {
	if len(kinds) == 0 {
		return nil, nil
	}
	return w.outbox(ctx, `UPDATE outbox SET claimed_until = $3 WHERE id IN (
SELECT id FROM outbox o WHERE state = 'pending' AND next_at <= $1 AND (claimed_until IS NULL OR claimed_until <= $1)
AND kind = ANY($4::text[]) AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.state = 'pending' AND p.task_id = o.task_id AND o.task_id <> '' AND p.id < o.id)
ORDER BY next_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING `+sqlrows.OutboxColumns, us(now), limit, us(claimUntil), kinds)
}

// FinishOutbox implements store.Tx.
// Delivered entries go in one DELETE.
func (w *writeTx) FinishOutbox(ctx context.Context, es []store.OutboxEntry) error {
	var done []int64
	for i, e := range es {
		if e.State == store.OutboxDone {
			done = append(done, e.ID)
			continue
		}
		n, err := w.ss.exec(w.c(ctx), `UPDATE outbox SET state = $1, attempts = $2, next_at = $3, last_error = $4, claimed_until = NULL
WHERE id = $5 AND claimed_until IS NOT DISTINCT FROM $6`,
			string(e.State), e.Attempts, us(e.NextAt), e.LastError, e.ID, nus(e.ClaimedTill))
		if err != nil {
			return err
		}
		if n == 0 {
			es[i].State = store.OutboxReclaimed
		}
	}
	if len(done) > 0 {
		if _, err := w.ss.exec(w.c(ctx), `DELETE FROM outbox WHERE id = ANY($1::bigint[])`, done); err != nil {
			return err
		}
	}
	return nil
}

// RetryOutbox implements store.Tx.
func (w *writeTx) RetryOutbox(ctx context.Context, ids []int64, now time.Time) (int64, error) {
	var a args
	q := `UPDATE outbox SET state = 'pending', next_at = ` + a.add(us(now)) + `, claimed_until = NULL, attempts = 0 WHERE state = 'dead'`
	if len(ids) > 0 {
		q += ` AND id = ANY(` + a.add(ids) + `::bigint[])`
	}
	return w.ss.exec(w.c(ctx), q, a...)
}
