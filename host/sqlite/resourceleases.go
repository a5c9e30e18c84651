package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// Resource leases (KLIS-3). SQLite has one writer: every write transaction
// already runs alone, so LockResources has nothing to do.

func (r *reader) GetResourceLease(ctx context.Context, tenant, id string) (*host.ResourceLease, error) {
	l, _, err := sqlrows.ScanResourceLease(r.queryRow(ctx, `SELECT `+sqlrows.ResourceLeaseColumns+` FROM resource_leases WHERE id = ? AND tenant = ?`, id, tenant))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("resource lease", id)
	}
	return l, err
}

func (r *reader) ListResourceLeases(ctx context.Context, f store.ResourceLeaseFilter) ([]*host.ResourceLease, string, error) {
	after, err := store.ParseCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	q := `SELECT ` + sqlrows.ResourceLeaseColumns + ` FROM resource_leases WHERE seq > ?`
	args := []any{after}
	if f.Tenant != "" {
		q += ` AND tenant = ?`
		args = append(args, f.Tenant)
	}
	if len(f.IDs) > 0 {
		q += ` AND id IN (` + placeholders(len(f.IDs)) + `)`
		for _, id := range f.IDs {
			args = append(args, id)
		}
	}
	if f.Holder != "" {
		q += ` AND holder = ?`
		args = append(args, f.Holder)
	}
	if len(f.Resources) > 0 {
		q += ` AND resource IN (` + placeholders(len(f.Resources)) + `)`
		for _, res := range f.Resources {
			args = append(args, res)
		}
	}
	if len(f.States) == 1 && f.States[0] == host.ResourceLeaseActive {
		q += ` AND state = 'active'` // a literal, so the partial indexes apply
	} else if len(f.States) > 0 {
		q += ` AND state IN (` + placeholders(len(f.States)) + `)`
		for _, s := range f.States {
			args = append(args, string(s))
		}
	}
	if f.LiveAt != nil {
		q += ` AND state = 'active' AND expires_at > ?`
		args = append(args, us(*f.LiveAt))
	}
	if f.ExpiredAt != nil {
		q += ` AND state = 'active' AND expires_at <= ?`
		args = append(args, us(*f.ExpiredAt))
	}
	if f.EndsAfter != nil {
		q += ` AND coalesce(ended_at, expires_at) > ?`
		args = append(args, us(*f.EndsAfter))
	}
	q += ` ORDER BY seq LIMIT ?`
	args = append(args, f.Limit+1)
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	out := []*host.ResourceLease{}
	var seqs []int64
	for rows.Next() {
		l, seq, err := sqlrows.ScanResourceLease(rows)
		if err != nil {
			return nil, "", err
		}
		out = append(out, l)
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	out, cur := store.Page(out, f.Limit, func(i int) int64 { return seqs[i] })
	return out, cur, nil
}

func (r *reader) ListResourceLeaseEvents(ctx context.Context, f store.ResourceLeaseEventFilter) ([]host.ResourceLeaseEvent, string, error) {
	after, err := store.ParseCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	q := `SELECT seq, lease_id, resource, predicate, holder, kind, at, prev_expires_at, expires_at
FROM resource_lease_events WHERE tenant = ? AND seq > ?`
	args := []any{f.Tenant, after}
	if f.LeaseID != "" {
		q += ` AND lease_id = ?`
		args = append(args, f.LeaseID)
	}
	if f.Resource != "" {
		q += ` AND resource = ?`
		args = append(args, f.Resource)
	}
	q += ` ORDER BY seq LIMIT ?`
	args = append(args, f.Limit+1)
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	out := []host.ResourceLeaseEvent{}
	for rows.Next() {
		ev := host.ResourceLeaseEvent{Tenant: f.Tenant}
		var pred, kind string
		var at, exp int64
		var prev sql.NullInt64
		if err := rows.Scan(&ev.Seq, &ev.LeaseID, &ev.Resource, &pred, &ev.Holder, &kind, &at, &prev, &exp); err != nil {
			return nil, "", err
		}
		ev.Predicate, ev.Kind = host.LeasePredicate(pred), host.ResourceLeaseEventKind(kind)
		ev.At, ev.PrevExpiresAt, ev.ExpiresAt = fromUS(at), fromNUS(prev), fromUS(exp)
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	out, cur := store.Page(out, f.Limit, func(i int) int64 { return out[i].Seq })
	return out, cur, nil
}

func (r *reader) CountLiveResourceLeases(ctx context.Context, tenant string, now time.Time) (map[host.LeasePredicate]int64, error) {
	q := `SELECT predicate, count(*) FROM resource_leases WHERE state = 'active' AND expires_at > ?`
	args := []any{us(now)}
	if tenant != "" {
		q += ` AND tenant = ?`
		args = append(args, tenant)
	}
	rows, err := r.query(ctx, q+` GROUP BY predicate`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[host.LeasePredicate]int64{}
	for rows.Next() {
		var p string
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			return nil, err
		}
		out[host.LeasePredicate(p)] = n
	}
	return out, rows.Err()
}

// LockResources implements store.Tx: the single writer already serializes
// every write transaction.
func (w *writeTx) LockResources(ctx context.Context, tenant string, resources []string) (bool, error) {
	return false, nil
}

// InsertResourceLease implements store.Tx: the resource's counter row is
// bumped (or created at 1) and its new value is the lease's fencing token.
// insertResourceLeaseSQL inserts a lease: its columns, then its fencing
// token.
var insertResourceLeaseSQL = `INSERT INTO resource_leases (` + sqlrows.ResourceLeaseInsertColumns + `, fencing_token) VALUES (` +
	placeholders(len(sqlrows.Names(sqlrows.ResourceLeaseInsertColumns))+1) + `)`

func (w *writeTx) InsertResourceLease(ctx context.Context, l *host.ResourceLease) error {
	var token int64
	if err := w.queryRow(ctx, `INSERT INTO resource_fences (tenant, resource, token) VALUES (?, ?, 1)
ON CONFLICT (tenant, resource) DO UPDATE SET token = token + 1 RETURNING token`, l.Tenant, l.Resource).Scan(&token); err != nil {
		return err
	}
	_, err := w.exec(ctx, insertResourceLeaseSQL, append(sqlrows.ResourceLeaseInsertValues(l), token)...)
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return host.Errorf(host.CodeConflict, "a resource lease with id %s exists", l.ID)
	}
	if err == nil {
		l.FencingToken = token
	}
	return err
}

func (w *writeTx) UpdateResourceLease(ctx context.Context, l *host.ResourceLease, f store.ResourceLeaseFence) error {
	q := `UPDATE resource_leases SET state = ?, expires_at = ?, ended_at = ?, restarting = ?, grace_used = ?
WHERE id = ? AND tenant = ? AND state = 'active'`
	args := []any{string(l.State), us(l.ExpiresAt), nus(l.EndedAt), l.Restarting, l.GraceUsed, l.ID, l.Tenant}
	switch {
	case f.LiveAt != nil:
		q += ` AND expires_at > ?`
		args = append(args, us(*f.LiveAt))
	case f.ExpiredAt != nil:
		q += ` AND expires_at <= ?`
		args = append(args, us(*f.ExpiredAt))
	}
	res, err := w.exec(ctx, q, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.ErrFenced
	}
	return nil
}

func (w *writeTx) AppendResourceLeaseEvent(ctx context.Context, ev *host.ResourceLeaseEvent) error {
	_, err := w.exec(ctx, `INSERT INTO resource_lease_events (tenant, lease_id, resource, predicate, holder, kind, at,
prev_expires_at, expires_at) VALUES (?,?,?,?,?,?,?,?,?)`,
		ev.Tenant, ev.LeaseID, ev.Resource, string(ev.Predicate), ev.Holder, string(ev.Kind), us(ev.At),
		nus(ev.PrevExpiresAt), us(ev.ExpiresAt))
	return err
}

func (w *writeTx) GetResourceHold(ctx context.Context, tenant, holder, resource string) (store.ResourceHold, error) {
	h := store.ResourceHold{Tenant: tenant, Holder: holder, Resource: resource}
	var start, held int64
	err := w.queryRow(ctx, `SELECT window_start, held_us FROM resource_holds WHERE tenant = ? AND holder = ? AND resource = ?`,
		tenant, holder, resource).Scan(&start, &held)
	if errors.Is(err, sql.ErrNoRows) {
		return h, nil
	}
	if err != nil {
		return h, err
	}
	h.WindowStart, h.Held = fromUS(start), time.Duration(held)*time.Microsecond
	return h, nil
}

func (w *writeTx) PutResourceHold(ctx context.Context, h store.ResourceHold) error {
	_, err := w.exec(ctx, `INSERT INTO resource_holds (tenant, holder, resource, window_start, held_us) VALUES (?,?,?,?,?)
ON CONFLICT (tenant, holder, resource) DO UPDATE SET window_start = excluded.window_start, held_us = excluded.held_us`,
		h.Tenant, h.Holder, h.Resource, us(h.WindowStart), h.Held.Microseconds())
	return err
}
