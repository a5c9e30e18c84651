package engine

import (
	"context"
	"errors"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Resource sessions (issue 43 item 4), as Consul sessions and etcd leases
// with attached keys: a holder creates a session with a TTL, acquires leases
// in it (AcquireRequest.SessionID), and heartbeats the session once instead
// of each lease. A lease granted in a session expires when the session does
// (its expires_at is the session's, moved by the session's heartbeats), so
// losing the session — no heartbeat before its expiry — loses every lease in
// it at that instant, by the server clock; ending the session releases them
// all. A lease in a session is not heartbeated on its own (409 conflict); it
// may be released on its own.
//
// Operators revoke single leases in any tenant (RevokeResourceLease): the
// lease ends at once, its resource's waiters are woken, and the holder's next
// heartbeat of it is refused with 409 lease_revoked.

// ResourceSessionResult answers a session call: the session, the leases
// granted in it (with their state by the server clock), and the server time.
type ResourceSessionResult struct {
	Session    *host.ResourceSession `json:"session"`
	Leases     []*host.ResourceLease `json:"leases"`
	ServerTime time.Time             `json:"server_time"`
}

// sessionLockName is the name under which the changes of one session lock
// each other (LockResources); no resource is named with a NUL.
func sessionLockName(id string) string { return "\x00session\x00" + id }

// notYourSession is the answer to a session id of another holder: the same
// 404 not_found as an unknown id, so a guessed id tells neither that the
// session exists nor whose it is.
func notYourSession(id string) error {
	return host.Errorf(host.CodeNotFound, "no resource session %s", id)
}

// sessionOf loads a session for its holder a.Principal (an admin may act on
// any), refusing one that is no longer live with 409 session_ended.
func sessionOf(ctx context.Context, tx store.Tx, a Actor, id string, now time.Time) (*host.ResourceSession, error) {
	if id == "" || len(id) > 128 {
		return nil, host.Errorf(host.CodeBadRequest, "session_id: 1..128 bytes")
	}
	s, err := tx.GetResourceSession(ctx, a.Tenant, id)
	if err != nil {
		return nil, err
	}
	if s.Holder != a.Principal && a.Role != RoleAdmin {
		return nil, notYourSession(id)
	}
	if !s.LiveAt(now) {
		return s, host.Errorf(host.CodeSessionEnded, "resource session %s is %s (server time %s, expires_at %s): its leases are no longer held; create a session and acquire again",
			id, s.StateAt(now), now.Format(time.RFC3339Nano), s.ExpiresAt.Format(time.RFC3339Nano)).At(now)
	}
	return s, nil
}

// CreateResourceSession opens a session for the caller with the TTL (0: the
// default; capped and raised to the minimum like a lease's).
func (e *Engine) CreateResourceSession(ctx context.Context, a Actor, ttl time.Duration) (*ResourceSessionResult, error) {
	if err := validHolder(a.Principal); err != nil {
		return nil, err
	}
	ttl, err := e.resourceTTL(ttl)
	if err != nil {
		return nil, err
	}
	var out *ResourceSessionResult
	cfg := e.rl().cfg
	err = e.update(ctx, func(tx store.Tx) error {
		// The holder's lock orders its creates, so two cannot both pass
		// the cap.
		if _, err := tx.LockResources(ctx, a.Tenant, []string{holderLockName(a.Principal)}); err != nil {
			return err
		}
		now := e.now()
		if cfg.MaxSessionsPerHolder > 0 {
			n, err := tx.CountLiveResourceSessions(ctx, a.Tenant, a.Principal, now)
			if err != nil {
				return err
			}
			if n >= cfg.MaxSessionsPerHolder {
				return host.Errorf(host.CodeQuotaExceeded, "holder %s has %d open resource sessions, its quota: end one (or let one expire) before opening another",
					a.Principal, n).At(now)
			}
		}
		s := &host.ResourceSession{ID: host.NewID(host.PrefixResourceSession), Tenant: a.Tenant, Holder: a.Principal, State: host.ResourceSessionActive,
			TTLMs: ttl.Milliseconds(), CreatedAt: now, ExpiresAt: now.Add(ttl)}
		if err := tx.InsertResourceSession(ctx, s); err != nil {
			return err
		}
		out = &ResourceSessionResult{Session: s, Leases: []*host.ResourceLease{}, ServerTime: now}
		return nil
	})
	return out, err
}

// sessionLeases locks the session, loads it and the active leases granted in
// it, locks their resources, and reads the clock.
func (e *Engine) sessionLeases(ctx context.Context, tx store.Tx, a Actor, id string) (*host.ResourceSession, []*host.ResourceLease, time.Time, error) {
	if id == "" || len(id) > 128 {
		return nil, nil, time.Time{}, host.Errorf(host.CodeBadRequest, "session_id: 1..128 bytes")
	}
	if _, err := tx.LockResources(ctx, a.Tenant, []string{sessionLockName(id)}); err != nil {
		return nil, nil, time.Time{}, err
	}
	ids, err := tx.ListResourceSessionLeases(ctx, a.Tenant, id)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	load := func() ([]*host.ResourceLease, error) {
		if len(ids) == 0 {
			return nil, nil
		}
		ls, _, err := tx.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: a.Tenant, IDs: ids, Limit: len(ids)})
		return ls, err
	}
	ls, err := load()
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	var active []string
	for _, l := range ls {
		if l.State == host.ResourceLeaseActive {
			active = append(active, l.Resource)
		}
	}
	if len(active) > 0 {
		locked, err := tx.LockResources(ctx, a.Tenant, active)
		if err != nil {
			return nil, nil, time.Time{}, err
		}
		if locked {
			if ls, err = load(); err != nil {
				return nil, nil, time.Time{}, err
			}
		}
	}
	now := e.now()
	s, err := tx.GetResourceSession(ctx, a.Tenant, id)
	if err != nil {
		return nil, nil, now, err
	}
	if s.Holder != a.Principal && a.Role != RoleAdmin {
		return nil, nil, now, notYourSession(id)
	}
	if ls == nil {
		ls = []*host.ResourceLease{}
	}
	return s, ls, now, nil
}

// HeartbeatResourceSession extends the session and every live lease granted
// in it to now + its TTL (or ttl, capped, when set). A session past its
// expiry or ended is refused with 409 session_ended: its leases are lost.
func (e *Engine) HeartbeatResourceSession(ctx context.Context, a Actor, id string, ttl time.Duration) (*ResourceSessionResult, error) {
	if ttl != 0 {
		var err error
		if ttl, err = e.resourceTTL(ttl); err != nil {
			return nil, err
		}
	}
	var out *ResourceSessionResult
	err := e.update(ctx, func(tx store.Tx) error {
		out = nil
		s, ls, now, err := e.sessionLeases(ctx, tx, a, id)
		if err != nil {
			return err
		}
		if s.Holder != a.Principal {
			// An admin may end another holder's session, never keep it
			// alive (heldByCaller).
			return host.Errorf(host.CodeForbidden, "resource session %s is held by %s: only its holder heartbeats it (an admin may end it)", id, s.Holder)
		}
		if !s.LiveAt(now) {
			return host.Errorf(host.CodeSessionEnded, "resource session %s is %s (server time %s, expires_at %s): its leases are no longer held; create a session and acquire again",
				id, s.StateAt(now), now.Format(time.RFC3339Nano), s.ExpiresAt.Format(time.RFC3339Nano)).At(now)
		}
		d := ttl
		if d == 0 {
			d = time.Duration(s.TTLMs) * time.Millisecond
		}
		next := now.Add(d)
		adds := map[holdKey]time.Duration{}
		for _, l := range ls {
			if l.LiveAt(now) && next.After(l.ExpiresAt) {
				adds[holdKey{l.Holder, l.Resource}] += next.Sub(l.ExpiresAt)
			}
		}
		if err := e.bookHold(ctx, tx, a.Tenant, adds, now); err != nil {
			return err
		}
		for _, l := range ls {
			if !l.LiveAt(now) {
				l.State = l.StateAt(now)
				continue
			}
			prev := l.ExpiresAt
			l.ExpiresAt, l.TTLMs = next, d.Milliseconds()
			if err := tx.UpdateResourceLease(ctx, l, store.ResourceLeaseFence{LiveAt: &now}); err != nil {
				return rlFenced(err, l, now)
			}
			if err := tx.AppendResourceLeaseEvent(ctx, leaseEvent(l, host.ResourceEventHeartbeat, now, &prev)); err != nil {
				return err
			}
		}
		s.ExpiresAt, s.TTLMs = next, d.Milliseconds()
		if err := tx.UpdateResourceSession(ctx, s); err != nil {
			return err
		}
		out = &ResourceSessionResult{Session: s, Leases: ls, ServerTime: now}
		return nil
	})
	return out, err
}

// EndResourceSession ends the session and releases every live lease granted
// in it (one past its expiry is recorded expired). It is idempotent: a
// session already ended or expired is answered with its state.
func (e *Engine) EndResourceSession(ctx context.Context, a Actor, id string) (*ResourceSessionResult, error) {
	var out *ResourceSessionResult
	var ended []*host.ResourceLease
	err := e.update(ctx, func(tx store.Tx) error {
		out, ended = nil, nil
		s, ls, now, err := e.sessionLeases(ctx, tx, a, id)
		if err != nil {
			return err
		}
		for _, l := range ls {
			if l.State != host.ResourceLeaseActive {
				continue
			}
			if l.LiveAt(now) {
				if err := e.releaseLive(ctx, tx, l, now, host.ResourceEventReleased); err != nil {
					return err
				}
			} else if err := expireLease(ctx, tx, l, now); err != nil && !errors.Is(err, store.ErrFenced) {
				return err
			}
			ended = append(ended, l)
		}
		if s.State == host.ResourceSessionActive {
			if s.LiveAt(now) {
				s.State, s.EndedAt = host.ResourceSessionEnded, ptr(now)
			} else {
				s.State, s.EndedAt = host.ResourceSessionExpired, ptr(s.ExpiresAt)
			}
			if err := tx.UpdateResourceSession(ctx, s); err != nil {
				return err
			}
		}
		out = &ResourceSessionResult{Session: s, Leases: ls, ServerTime: now}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(ended) > 0 {
		e.wakeEnded(ended)
		for range ended {
			e.emit(Event{Kind: EvResourceReleased, Tenant: a.Tenant})
		}
	}
	return out, nil
}

// GetResourceSession returns a session and its leases with their states by
// the server clock.
func (e *Engine) GetResourceSession(ctx context.Context, a Actor, id string) (*ResourceSessionResult, error) {
	var out *ResourceSessionResult
	err := e.update(ctx, func(tx store.Tx) error {
		s, ls, now, err := e.sessionLeases(ctx, tx, a, id)
		if err != nil {
			return err
		}
		s.State = s.StateAt(now)
		for _, l := range ls {
			l.State = l.StateAt(now)
		}
		out = &ResourceSessionResult{Session: s, Leases: ls, ServerTime: now}
		return nil
	})
	return out, err
}

// refuseSessionLeases refuses a heartbeat of single leases granted in a
// session: they follow the session's heartbeats.
func refuseSessionLeases(ctx context.Context, tx store.Tx, tenant string, ids []string, now time.Time) error {
	in, err := tx.ResourceSessionsOfLeases(ctx, tenant, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if s, ok := in[id]; ok {
			return host.Errorf(host.CodeConflict, "resource lease %s was granted in session %s: it follows the session; heartbeat the session", id, s).At(now)
		}
	}
	return nil
}

// revokedError is 409 lease_revoked when an operator revoked l, else nil.
func revokedError(ctx context.Context, tx store.Tx, l *host.ResourceLease, now time.Time) error {
	if l.State != host.ResourceLeaseReleased {
		return nil
	}
	evs, _, err := tx.ListResourceLeaseEvents(ctx, store.ResourceLeaseEventFilter{Tenant: l.Tenant, LeaseID: l.ID, Limit: 100})
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if ev.Kind == host.ResourceEventRevoked {
			return host.Errorf(host.CodeLeaseRevoked, "resource lease %s was revoked by an operator at %s: it is no longer held; stop changing %s",
				l.ID, ev.At.Format(time.RFC3339Nano), l.Resource).At(now)
		}
	}
	return nil
}

// RevokeResourceLease ends a lease of tenant at once, as an operator (a
// must be an admin; its tenant is replaced by tenant). The holder's next
// heartbeat of it is refused with 409 lease_revoked; waiters on its resource
// are woken. A lease that already ended is answered with its state. A lease
// held for a task follows the task's lease: cancel or release the task.
func (e *Engine) RevokeResourceLease(ctx context.Context, a Actor, tenant, id string) (*ResourceLeasesResult, error) {
	if a.Role != RoleAdmin {
		return nil, host.Errorf(host.CodeForbidden, "only an admin may revoke a resource lease")
	}
	if id == "" {
		return nil, host.Errorf(host.CodeBadRequest, "lease_id is required")
	}
	op := Actor{Tenant: tenant, Principal: a.Principal, Role: RoleAdmin}
	var out *ResourceLeasesResult
	var revoked *host.ResourceLease
	err := e.update(ctx, func(tx store.Tx) error {
		out, revoked = nil, nil
		ls, now, err := e.lockAndLoad(ctx, tx, op, []string{id})
		if err != nil {
			return err
		}
		l := ls[0]
		if l.LiveAt(now) {
			if err := e.releaseLive(ctx, tx, l, now, host.ResourceEventRevoked); err != nil {
				return err
			}
			revoked = l
		} else {
			l.State = l.StateAt(now)
		}
		out = &ResourceLeasesResult{Leases: ls, ServerTime: now}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if revoked != nil {
		e.wakeEnded([]*host.ResourceLease{revoked})
		e.emit(Event{Kind: EvResourceReleased, Tenant: tenant, Detail: "revoked"})
	}
	return out, nil
}

// sessionPurgePage is how many ended sessions one purge transaction deletes.
const sessionPurgePage = 1000

// sweepSessions purges sessions that ended or expired more than
// SessionRetention ago, with their lease lists, a page at a time.
func (e *Engine) sweepSessions(ctx context.Context) (int, error) {
	total := 0
	for {
		n := 0
		err := e.update(ctx, func(tx store.Tx) error {
			var err error
			n, err = tx.DeleteEndedResourceSessions(ctx, e.now().Add(-e.rl().cfg.SessionRetention), sessionPurgePage)
			return err
		})
		total += n
		if err != nil || n < sessionPurgePage {
			return total, err
		}
	}
}
