package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// Waiters on resources (issue 43 item 3; migration 0028).

// ListResourceWaiters implements store.ResourceLeaseWriter.
func (w *writeTx) ListResourceWaiters(ctx context.Context, tenant string, resources []string, liveAt time.Time) ([]host.ResourceWaiter, error) {
	if len(resources) == 0 {
		return nil, nil
	}
	var out []host.ResourceWaiter
	err := w.ss.query(w.c(ctx), scanWaiters(tenant, &out), listResourceWaiters, tenant, us(liveAt), resources)
	return out, err
}

// listResourceWaiters is ListResourceWaiters' statement ($1 tenant, $2 the
// time the registrations are live at, $3 the resources).
const listResourceWaiters = `SELECT resource, waiter_id, holder, predicate, priority_at, task_id, expires_at FROM resource_waiters
WHERE tenant = $1 AND expires_at > $2 AND resource = ANY($3::text[]) ORDER BY priority_at, waiter_id, resource`

// scanWaiters appends each row of listResourceWaiters to out.
func scanWaiters(tenant string, out *[]host.ResourceWaiter) func(pgx.Rows) error {
	return func(r pgx.Rows) error {
		rw := host.ResourceWaiter{Tenant: tenant}
		var pred string
		var prio, exp int64
		if err := r.Scan(&rw.Resource, &rw.WaiterID, &rw.Holder, &pred, &prio, &rw.TaskID, &exp); err != nil {
			return err
		}
		rw.Predicate, rw.PriorityAt, rw.ExpiresAt = host.LeasePredicate(pred), fromUS(prio), fromUS(exp)
		*out = append(*out, rw)
		return nil
	}
}

var _ store.ResourceAcquireViewTx = (*writeTx)(nil)

// ResourceAcquireView implements store.ResourceAcquireViewTx: the reads
// (with the holder's quota rows) go in one pipeline, one round trip.
func (w *writeTx) ResourceAcquireView(ctx context.Context, tenant, holder string, resources []string, now time.Time) (*store.ResourceAcquireView, error) {
	limit := 100000
	mf := store.ResourceLeaseFilter{Tenant: tenant, Holder: holder, LiveAt: &now, Limit: limit}
	lf := store.ResourceLeaseFilter{Tenant: tenant, Resources: resources, LiveAt: &now, Limit: limit}
	mq, ma, err := resourceLeaseQuery(&mf)
	if err != nil {
		return nil, err
	}
	lq, la, err := resourceLeaseQuery(&lf)
	if err != nil {
		return nil, err
	}
	var mine, live []rleaseRow
	scanLease := func(out *[]rleaseRow) func(pgx.Rows) error {
		return func(rows pgx.Rows) error {
			l, seq, err := sqlrows.ScanResourceLease(rows)
			if err != nil {
				return err
			}
			*out = append(*out, rleaseRow{l, seq})
			return nil
		}
	}
	v := &store.ResourceAcquireView{}
	err = w.ss.queryAll(w.c(ctx), []query{
		{sql: mq, args: ma, each: scanLease(&mine)},
		{sql: lq, args: la, each: scanLease(&live)},
		{sql: listResourceWaiters, args: []any{tenant, us(now), resources}, each: scanWaiters(tenant, &v.Waiters)},
		{sql: `SELECT resource, window_start, held_us FROM resource_holds WHERE tenant = $1 AND holder = $2 AND resource = ANY($3::text[])`,
			args: []any{tenant, holder, resources}, each: func(r pgx.Rows) error {
				h := store.ResourceHold{Tenant: tenant, Holder: holder}
				var start, held int64
				if err := r.Scan(&h.Resource, &start, &held); err != nil {
					return err
				}
				h.WindowStart, h.Held = fromUS(start), time.Duration(held)*time.Microsecond
				v.Holds = append(v.Holds, h)
				return nil
			}},
	})
	if err != nil {
		return nil, err
	}
	v.HoldsRead = true
	v.Mine, _, _ = pageLeases(mine, limit)
	v.Live, _, _ = pageLeases(live, limit)
	return v, nil
}

// PutResourceWaiter implements store.ResourceLeaseWriter; the upsert is
// queued in front of the transaction's next statement.
func (w *writeTx) PutResourceWaiter(ctx context.Context, rw host.ResourceWaiter) error {
	w.ss.queue(`INSERT INTO resource_waiters (tenant, resource, waiter_id, holder, predicate, priority_at, task_id, expires_at)
VALUES ($1,$2,$3,$4,$5,$6,$7,$8)
ON CONFLICT (tenant, resource, waiter_id) DO UPDATE SET holder = excluded.holder, predicate = excluded.predicate,
priority_at = least(resource_waiters.priority_at, excluded.priority_at), task_id = excluded.task_id, expires_at = excluded.expires_at`,
		rw.Tenant, rw.Resource, rw.WaiterID, rw.Holder, string(rw.Predicate), us(rw.PriorityAt), rw.TaskID, us(rw.ExpiresAt))
	return nil
}

// DeleteResourceWaiter implements store.ResourceLeaseWriter; queued like
// PutResourceWaiter.
func (w *writeTx) DeleteResourceWaiter(ctx context.Context, tenant, waiterID string) error {
	w.ss.queue(`DELETE FROM resource_waiters WHERE tenant = $1 AND waiter_id = $2`, tenant, waiterID)
	return nil
}

// DeleteLapsedResourceWaiters implements store.ResourceLeaseWriter.
func (w *writeTx) DeleteLapsedResourceWaiters(ctx context.Context, now time.Time, limit int) (int, error) {
	var n int64
	err := w.ss.queryRow(w.c(ctx), []any{&n}, `WITH d AS (DELETE FROM resource_waiters WHERE (tenant, resource, waiter_id) IN
(SELECT tenant, resource, waiter_id FROM resource_waiters WHERE expires_at <= $1 LIMIT $2) RETURNING 1) SELECT count(*) FROM d`, us(now), limit)
	return int(n), err
}

// ReofferWaitingTasks implements store.ResourceLeaseWriter. The statement
// is queued in front of the transaction's next one (in a release, its
// COMMIT), so it costs no round trip of its own: an uncontended release,
// where nothing waits, pays only its execution, an index probe of
// resource_waiters that finds nothing. So it returns no task types: for
// each type it made tasks of available, the statement itself sends a
// store.ReofferNotice (with how many), delivered at the commit to every host's
// subscription, this host's included (Subscribe), whose engine wakes a
// long-polling worker of the type. Rows another transaction holds are
// skipped (SKIP LOCKED): the caller holds the resources' locks, so such a
// holder is a claim that decides the task after this transaction.
func (w *writeTx) ReofferWaitingTasks(ctx context.Context, tenant string, resources []string, now time.Time) ([]string, error) {
	if len(resources) == 0 {
		return nil, nil
	}
	w.ss.queue(reofferWaitingTasks, tenant, resources, us(now), w.s.opts.Channel, store.ReofferNoticePrefix+tenant+"\n")
	return nil, nil
}

// reofferWaitingTasks is ReofferWaitingTasks' statement ($1 tenant, $2
// resources, $3 now, $4 the notification channel, $5 the notice's prefix).
const reofferWaitingTasks = `WITH u AS (UPDATE tasks SET available_at = $3, updated_at = $3, version = version + 1 WHERE id IN (
SELECT id FROM tasks WHERE tenant = $1 AND state = 'queued' AND available_at > $3 AND id IN (
SELECT w.task_id FROM resource_waiters w WHERE w.tenant = $1 AND w.resource = ANY($2::text[]) AND w.task_id <> '' AND w.expires_at > $3
AND NOT EXISTS (SELECT 1 FROM resource_waiters o WHERE o.tenant = $1 AND o.resource = w.resource AND o.expires_at > $3
  AND o.priority_at < w.priority_at AND (o.predicate = 'MUTATES' OR w.predicate = 'MUTATES')))
FOR UPDATE SKIP LOCKED) RETURNING task_type)
SELECT pg_notify($4, $5 || task_type || E'\n' || count(*)) FROM u GROUP BY task_type`
