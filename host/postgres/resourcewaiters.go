package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
)

// Waiters on resources (issue 43 item 3; migration 0028).

// ListResourceWaiters implements store.ResourceLeaseWriter.
func (w *writeTx) ListResourceWaiters(ctx context.Context, tenant string, resources []string, liveAt time.Time) ([]host.ResourceWaiter, error) {
	if len(resources) == 0 {
		return nil, nil
	}
	var out []host.ResourceWaiter
	err := w.ss.query(w.c(ctx), func(r pgx.Rows) error {
		rw := host.ResourceWaiter{Tenant: tenant}
		var pred string
		var prio, exp int64
		if err := r.Scan(&rw.Resource, &rw.WaiterID, &rw.Holder, &pred, &prio, &rw.TaskID, &exp); err != nil {
			return err
		}
		rw.Predicate, rw.PriorityAt, rw.ExpiresAt = host.LeasePredicate(pred), fromUS(prio), fromUS(exp)
		out = append(out, rw)
		return nil
	}, `SELECT resource, waiter_id, holder, predicate, priority_at, task_id, expires_at FROM resource_waiters
WHERE tenant = $1 AND expires_at > $2 AND resource = ANY($3::text[]) ORDER BY priority_at, waiter_id, resource`, tenant, us(liveAt), resources)
	return out, err
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
