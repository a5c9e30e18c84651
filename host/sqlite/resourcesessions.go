package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// Resource sessions (issue 43 item 4; migration 0029).

const sessionCols = `id, tenant, holder, state, ttl_ms, created_at, expires_at, ended_at`

// InsertResourceSession implements store.ResourceLeaseWriter.
func (w *writeTx) InsertResourceSession(ctx context.Context, s *host.ResourceSession) error {
	_, err := w.exec(ctx, `INSERT INTO resource_sessions (`+sessionCols+`) VALUES (?,?,?,?,?,?,?,?)`,
		s.ID, s.Tenant, s.Holder, string(s.State), s.TTLMs, us(s.CreatedAt), us(s.ExpiresAt), nus(s.EndedAt))
	return err
}

// GetResourceSession implements store.ResourceLeaseWriter.
func (w *writeTx) GetResourceSession(ctx context.Context, tenant, id string) (*host.ResourceSession, error) {
	s := &host.ResourceSession{}
	var state string
	var created, expires int64
	var ended sql.NullInt64
	err := w.queryRow(ctx, `SELECT `+sessionCols+` FROM resource_sessions WHERE tenant = ? AND id = ?`, tenant, id).
		Scan(&s.ID, &s.Tenant, &s.Holder, &state, &s.TTLMs, &created, &expires, &ended)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, host.Errorf(host.CodeNotFound, "no resource session %s", id)
	}
	if err != nil {
		return nil, err
	}
	s.State, s.CreatedAt, s.ExpiresAt = host.ResourceSessionState(state), fromUS(created), fromUS(expires)
	if ended.Valid {
		t := fromUS(ended.Int64)
		s.EndedAt = &t
	}
	return s, nil
}

// UpdateResourceSession implements store.ResourceLeaseWriter.
func (w *writeTx) UpdateResourceSession(ctx context.Context, s *host.ResourceSession) error {
	_, err := w.exec(ctx, `UPDATE resource_sessions SET state = ?, ttl_ms = ?, expires_at = ?, ended_at = ? WHERE tenant = ? AND id = ?`,
		string(s.State), s.TTLMs, us(s.ExpiresAt), nus(s.EndedAt), s.Tenant, s.ID)
	return err
}

// AddResourceSessionLease implements store.ResourceLeaseWriter.
func (w *writeTx) AddResourceSessionLease(ctx context.Context, tenant, sessionID, leaseID string) error {
	_, err := w.exec(ctx, `INSERT INTO resource_session_leases (tenant, session_id, lease_id) VALUES (?,?,?)`, tenant, sessionID, leaseID)
	return err
}

// ListResourceSessionLeases implements store.ResourceLeaseWriter.
func (w *writeTx) ListResourceSessionLeases(ctx context.Context, tenant, sessionID string) ([]string, error) {
	rows, err := w.query(ctx, `SELECT lease_id FROM resource_session_leases WHERE tenant = ? AND session_id = ? ORDER BY lease_id`, tenant, sessionID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
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

// ResourceSessionsOfLeases implements store.ResourceLeaseWriter.
func (w *writeTx) ResourceSessionsOfLeases(ctx context.Context, tenant string, leaseIDs []string) (map[string]string, error) {
	out := map[string]string{}
	if len(leaseIDs) == 0 {
		return out, nil
	}
	args := []any{tenant}
	for _, id := range leaseIDs {
		args = append(args, id)
	}
	rows, err := w.query(ctx, `SELECT lease_id, session_id FROM resource_session_leases WHERE tenant = ? AND lease_id IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(leaseIDs)), ",")+`)`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var l, s string
		if err := rows.Scan(&l, &s); err != nil {
			return nil, err
		}
		out[l] = s
	}
	return out, rows.Err()
}

// CountLiveResourceSessions implements store.ResourceLeaseWriter.
func (w *writeTx) CountLiveResourceSessions(ctx context.Context, tenant, holder string, now time.Time) (int, error) {
	var n int
	err := w.queryRow(ctx, `SELECT count(*) FROM resource_sessions WHERE tenant = ? AND holder = ? AND expires_at > ? AND state = 'active'`,
		tenant, holder, us(now)).Scan(&n)
	return n, err
}

// RemoveResourceSessionLeases implements store.ResourceLeaseWriter.
func (w *writeTx) RemoveResourceSessionLeases(ctx context.Context, tenant string, leaseIDs []string) error {
	if len(leaseIDs) == 0 {
		return nil
	}
	args := []any{tenant}
	for _, id := range leaseIDs {
		args = append(args, id)
	}
	_, err := w.exec(ctx, `DELETE FROM resource_session_leases WHERE tenant = ? AND lease_id IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(leaseIDs)), ",")+`)`, args...)
	return err
}

// DeleteEndedResourceSessions implements store.ResourceLeaseWriter.
func (w *writeTx) DeleteEndedResourceSessions(ctx context.Context, endedBy time.Time, limit int) (int, error) {
	rows, err := w.query(ctx, `SELECT tenant, id FROM resource_sessions WHERE coalesce(ended_at, expires_at) <= ? LIMIT ?`, us(endedBy), limit)
	if err != nil {
		return 0, err
	}
	var ids [][2]string
	for rows.Next() {
		var k [2]string
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, k)
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return 0, err
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	for _, k := range ids {
		if _, err := w.exec(ctx, `DELETE FROM resource_session_leases WHERE tenant = ? AND session_id = ?`, k[0], k[1]); err != nil {
			return 0, err
		}
		if _, err := w.exec(ctx, `DELETE FROM resource_sessions WHERE tenant = ? AND id = ?`, k[0], k[1]); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}
