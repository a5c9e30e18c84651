package sqlite

import (
	"context"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// Waiters on resources (issue 43 item 3; migration 0028).

// ListResourceWaiters implements store.ResourceLeaseWriter.
func (w *writeTx) ListResourceWaiters(ctx context.Context, tenant string, resources []string, liveAt time.Time) ([]host.ResourceWaiter, error) {
	if len(resources) == 0 {
		return nil, nil
	}
	args := []any{tenant, us(liveAt)}
	for _, r := range resources {
		args = append(args, r)
	}
	rows, err := w.query(ctx, `SELECT resource, waiter_id, holder, predicate, priority_at, task_id, expires_at FROM resource_waiters
WHERE tenant = ? AND expires_at > ? AND resource IN (`+strings.TrimSuffix(strings.Repeat("?,", len(resources)), ",")+`)
ORDER BY priority_at, waiter_id, resource`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []host.ResourceWaiter
	for rows.Next() {
		rw := host.ResourceWaiter{Tenant: tenant}
		var pred string
		var prio, exp int64
		if err := rows.Scan(&rw.Resource, &rw.WaiterID, &rw.Holder, &pred, &prio, &rw.TaskID, &exp); err != nil {
			return nil, err
		}
		rw.Predicate, rw.PriorityAt, rw.ExpiresAt = host.LeasePredicate(pred), fromUS(prio), fromUS(exp)
		out = append(out, rw)
	}
	return out, rows.Err()
}

// PutResourceWaiter implements store.ResourceLeaseWriter.
func (w *writeTx) PutResourceWaiter(ctx context.Context, rw host.ResourceWaiter) error {
	_, err := w.exec(ctx, `INSERT INTO resource_waiters (tenant, resource, waiter_id, holder, predicate, priority_at, task_id, expires_at)
VALUES (?,?,?,?,?,?,?,?)
ON CONFLICT (tenant, resource, waiter_id) DO UPDATE SET holder = excluded.holder, predicate = excluded.predicate,
priority_at = min(resource_waiters.priority_at, excluded.priority_at), task_id = excluded.task_id, expires_at = excluded.expires_at`,
		rw.Tenant, rw.Resource, rw.WaiterID, rw.Holder, string(rw.Predicate), us(rw.PriorityAt), rw.TaskID, us(rw.ExpiresAt))
	return err
}

// DeleteResourceWaiter implements store.ResourceLeaseWriter.
func (w *writeTx) DeleteResourceWaiter(ctx context.Context, tenant, waiterID string) error {
	_, err := w.exec(ctx, `DELETE FROM resource_waiters WHERE tenant = ? AND waiter_id = ?`, tenant, waiterID)
	return err
}

// DeleteLapsedResourceWaiters implements store.ResourceLeaseWriter.
func (w *writeTx) DeleteLapsedResourceWaiters(ctx context.Context, now time.Time, limit int) (int, error) {
	res, err := w.exec(ctx, `DELETE FROM resource_waiters WHERE rowid IN (SELECT rowid FROM resource_waiters WHERE expires_at <= ? LIMIT ?)`, us(now), limit)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// ReofferWaitingTasks implements store.ResourceLeaseWriter.
func (w *writeTx) ReofferWaitingTasks(ctx context.Context, tenant string, resources []string, now time.Time) ([]string, error) {
	if len(resources) == 0 {
		return nil, nil
	}
	args := []any{tenant, us(now)}
	for _, r := range resources {
		args = append(args, r)
	}
	w.wrote = true
	rows, err := w.query(ctx, `UPDATE tasks SET available_at = ?2, updated_at = ?2, version = version + 1
WHERE tenant = ?1 AND state = 'queued' AND available_at > ?2 AND id IN (
SELECT w.task_id FROM resource_waiters w WHERE w.tenant = ?1 AND w.task_id <> '' AND w.expires_at > ?2
AND w.resource IN (`+strings.TrimSuffix(strings.Repeat("?,", len(resources)), ",")+`)
AND NOT EXISTS (SELECT 1 FROM resource_waiters o WHERE o.tenant = ?1 AND o.resource = w.resource AND o.expires_at > ?2
  AND o.priority_at < w.priority_at AND (o.predicate = 'MUTATES' OR w.predicate = 'MUTATES'))) RETURNING task_type`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var types []string
	for rows.Next() {
		var typ string
		if err := rows.Scan(&typ); err != nil {
			return nil, err
		}
		types = append(types, typ)
	}
	return types, rows.Err()
}
