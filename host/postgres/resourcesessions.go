package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
)

// Resource sessions (issue 43 item 4; migration 0029).

const sessionCols = `id, tenant, holder, state, ttl_ms, created_at, expires_at, ended_at`

// InsertResourceSession implements store.ResourceLeaseWriter; queued in
// front of the transaction's next statement.
func (w *writeTx) InsertResourceSession(ctx context.Context, s *host.ResourceSession) error {
	w.ss.queue(`INSERT INTO resource_sessions (`+sessionCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)`,
		s.ID, s.Tenant, s.Holder, string(s.State), s.TTLMs, us(s.CreatedAt), us(s.ExpiresAt), nus(s.EndedAt))
	return nil
}

// GetResourceSession implements store.ResourceLeaseWriter.
func (w *writeTx) GetResourceSession(ctx context.Context, tenant, id string) (*host.ResourceSession, error) {
	s := &host.ResourceSession{}
	var state string
	var created, expires int64
	var ended *int64
	err := w.ss.queryRow(w.c(ctx), []any{&s.ID, &s.Tenant, &s.Holder, &state, &s.TTLMs, &created, &expires, &ended},
		`SELECT `+sessionCols+` FROM resource_sessions WHERE tenant = $1 AND id = $2`, tenant, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, host.Errorf(host.CodeNotFound, "no resource session %s", id)
	}
	if err != nil {
		return nil, err
	}
	s.State, s.CreatedAt, s.ExpiresAt = host.ResourceSessionState(state), fromUS(created), fromUS(expires)
	if ended != nil {
		t := fromUS(*ended)
		s.EndedAt = &t
	}
	return s, nil
}

// UpdateResourceSession implements store.ResourceLeaseWriter; queued.
func (w *writeTx) UpdateResourceSession(ctx context.Context, s *host.ResourceSession) error {
	w.ss.queue(`UPDATE resource_sessions SET state = $1, ttl_ms = $2, expires_at = $3, ended_at = $4 WHERE tenant = $5 AND id = $6`,
		string(s.State), s.TTLMs, us(s.ExpiresAt), nus(s.EndedAt), s.Tenant, s.ID)
	return nil
}

// AddResourceSessionLease implements store.ResourceLeaseWriter; queued.
func (w *writeTx) AddResourceSessionLease(ctx context.Context, tenant, sessionID, leaseID string) error {
	w.ss.queue(`INSERT INTO resource_session_leases (tenant, session_id, lease_id) VALUES ($1,$2,$3)`, tenant, sessionID, leaseID)
	return nil
}

// ListResourceSessionLeases implements store.ResourceLeaseWriter.
func (w *writeTx) ListResourceSessionLeases(ctx context.Context, tenant, sessionID string) ([]string, error) {
	var out []string
	err := w.ss.query(w.c(ctx), func(r pgx.Rows) error {
		var id string
		if err := r.Scan(&id); err != nil {
			return err
		}
		out = append(out, id)
		return nil
	}, `SELECT lease_id FROM resource_session_leases WHERE tenant = $1 AND session_id = $2 ORDER BY lease_id`, tenant, sessionID)
	return out, err
}

// ResourceSessionsOfLeases implements store.ResourceLeaseWriter.
func (w *writeTx) ResourceSessionsOfLeases(ctx context.Context, tenant string, leaseIDs []string) (map[string]string, error) {
	out := map[string]string{}
	if len(leaseIDs) == 0 {
		return out, nil
	}
	err := w.ss.query(w.c(ctx), func(r pgx.Rows) error {
		var l, s string
		if err := r.Scan(&l, &s); err != nil {
			return err
		}
		out[l] = s
		return nil
	}, `SELECT lease_id, session_id FROM resource_session_leases WHERE tenant = $1 AND lease_id = ANY($2::text[])`, tenant, leaseIDs)
	return out, err
}

// CountLiveResourceSessions implements store.ResourceLeaseWriter.
func (w *writeTx) CountLiveResourceSessions(ctx context.Context, tenant, holder string, now time.Time) (int, error) {
	var n int64
	err := w.ss.queryRow(w.c(ctx), []any{&n}, `SELECT count(*) FROM resource_sessions WHERE tenant = $1 AND holder = $2 AND expires_at > $3 AND state = 'active'`,
		tenant, holder, us(now))
	return int(n), err
}

// RemoveResourceSessionLeases implements store.ResourceLeaseWriter; queued
// in front of the transaction's next statement (a release pays no round
// trip for it).
func (w *writeTx) RemoveResourceSessionLeases(ctx context.Context, tenant string, leaseIDs []string) error {
	if len(leaseIDs) == 0 {
		return nil
	}
	w.ss.queue(`DELETE FROM resource_session_leases WHERE tenant = $1 AND lease_id = ANY($2::text[])`, tenant, leaseIDs)
	return nil
}

// DeleteEndedResourceSessions implements store.ResourceLeaseWriter.
func (w *writeTx) DeleteEndedResourceSessions(ctx context.Context, endedBy time.Time, limit int) (int, error) {
	var n int64
	err := w.ss.queryRow(w.c(ctx), []any{&n}, `WITH d AS (DELETE FROM resource_sessions WHERE id IN (
  SELECT id FROM resource_sessions WHERE coalesce(ended_at, expires_at) <= $1 LIMIT $2) RETURNING tenant, id),
l AS (DELETE FROM resource_session_leases x USING d WHERE x.tenant = d.tenant AND x.session_id = d.id)
SELECT count(*) FROM d`, us(endedBy), limit)
	return int(n), err
}
