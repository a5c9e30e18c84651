package storetest

import (
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Sessions and revocation (issue 43 item 4): leases in a session follow its
// heartbeat and end with it; an operator's revocation ends a lease at once
// and the holder's next heartbeat says so.

func testRLSessions(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	h := rlActor("sess.holder")
	s, err := eng.CreateResourceSession(b.Ctx, h, 10*time.Second)
	if err != nil || s.Session.State != host.ResourceSessionActive || s.Session.TTLMs != 10000 || !s.Session.ExpiresAt.Equal(s.ServerTime.Add(10*time.Second)) {
		t.Fatalf("create: %+v, %v", s, err)
	}
	id := s.Session.ID
	b.Clock.Advance(time.Second)
	got, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: h.Principal, SessionID: id, TTL: time.Hour,
		Intents: intents("S:1", "MUTATES", "S:2", "READS")})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range got.Leases {
		if !l.ExpiresAt.Equal(s.Session.ExpiresAt) {
			t.Fatalf("lease %s expires %s, the session %s", l.ID, l.ExpiresAt, s.Session.ExpiresAt)
		}
	}
	ids := []string{got.Leases[0].ID, got.Leases[1].ID}
	_, err = eng.HeartbeatResources(b.Ctx, h, ids[:1], 0)
	WantCode(t, err, host.CodeConflict)

	// One heartbeat of the session extends every lease in it.
	b.Clock.Advance(5 * time.Second)
	hb, err := eng.HeartbeatResourceSession(b.Ctx, h, id, 0)
	if err != nil || len(hb.Leases) != 2 || !hb.Session.ExpiresAt.Equal(hb.ServerTime.Add(10*time.Second)) {
		t.Fatalf("session heartbeat: %+v, %v", hb, err)
	}
	for _, l := range hb.Leases {
		if !l.ExpiresAt.Equal(hb.Session.ExpiresAt) {
			t.Fatalf("after the heartbeat lease %s expires %s, the session %s", l.ID, l.ExpiresAt, hb.Session.ExpiresAt)
		}
	}
	// Hostile callers: another holder (told not_found, as for an unknown id), another tenant, unknown ids, bad TTLs.
	_, err = eng.HeartbeatResourceSession(b.Ctx, rlActor("intruder"), id, 0)
	WantCode(t, err, host.CodeNotFound)
	_, err = eng.EndResourceSession(b.Ctx, rlActor("intruder"), id)
	WantCode(t, err, host.CodeNotFound)
	_, err = eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: "intruder", SessionID: id, Intents: intents("S:3", "READS")})
	WantCode(t, err, host.CodeNotFound)
	_, err = eng.HeartbeatResourceSession(b.Ctx, engine.Actor{Tenant: "other", Principal: h.Principal, Role: engine.RoleAgent}, id, 0)
	WantCode(t, err, host.CodeNotFound)
	_, err = eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "other", Holder: h.Principal, SessionID: id, Intents: intents("S:3", "READS")})
	WantCode(t, err, host.CodeNotFound)
	_, err = eng.HeartbeatResourceSession(b.Ctx, h, "rsess-nope", 0)
	WantCode(t, err, host.CodeNotFound)
	_, err = eng.HeartbeatResourceSession(b.Ctx, h, "", 0)
	WantCode(t, err, host.CodeBadRequest)
	_, err = eng.HeartbeatResourceSession(b.Ctx, h, id, -time.Second)
	WantCode(t, err, host.CodeBadRequest)
	_, err = eng.CreateResourceSession(b.Ctx, h, -time.Second)
	WantCode(t, err, host.CodeBadRequest)

	// DIE_RESTART gives a session's leases no grace (they follow the
	// session), so losing the session still loses them at that instant.
	dr, err := eng.DieRestart(b.Ctx, h)
	if err != nil || len(dr.Leases) != 0 {
		t.Fatalf("die-restart of a holder whose leases are all in a session: %+v, %v", dr, err)
	}

	// Losing the session (no heartbeat before its expiry) loses its leases
	// at that instant.
	b.Clock.Advance(10 * time.Second)
	mustAcquire(t, eng, "next", time.Minute, "S:1", "MUTATES")
	_, err = eng.HeartbeatResourceSession(b.Ctx, h, id, 0)
	WantCode(t, err, host.CodeSessionEnded)
	if host.ErrorServerTime(err).IsZero() {
		t.Fatal("session_ended without the server time")
	}
	_, err = eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: h.Principal, SessionID: id, Intents: intents("S:4", "READS")})
	WantCode(t, err, host.CodeSessionEnded)
	end, err := eng.EndResourceSession(b.Ctx, h, id)
	if err != nil || end.Session.State != host.ResourceSessionExpired {
		t.Fatalf("ending a lost session: %+v, %v", end, err)
	}

	// Ending a session releases every lease in it, once.
	s2, err := eng.CreateResourceSession(b.Ctx, h, 0)
	if err != nil || s2.Session.TTLMs != eng.ResourceLeaseConfig().DefaultTTL.Milliseconds() {
		t.Fatalf("default TTL: %+v, %v", s2, err)
	}
	got2, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: h.Principal, SessionID: s2.Session.ID, Intents: intents("S:5", "MUTATES")})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		end, err := eng.EndResourceSession(b.Ctx, h, s2.Session.ID)
		if err != nil || end.Session.State != host.ResourceSessionEnded || len(end.Leases) != 1 || end.Leases[0].State != host.ResourceLeaseReleased {
			t.Fatalf("end #%d: %+v, %v", i+1, end, err)
		}
	}
	mustAcquire(t, eng, "next", time.Minute, "S:5", "MUTATES")
	_, err = eng.HeartbeatResources(b.Ctx, h, []string{got2.Leases[0].ID}, 0)
	if err == nil {
		t.Fatal("a lease of an ended session took a heartbeat")
	}
	_, err = eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: h.Principal, SessionID: s2.Session.ID, Intents: intents("S:6", "READS")})
	WantCode(t, err, host.CodeSessionEnded)
	if g, err := eng.GetResourceSession(b.Ctx, h, s2.Session.ID); err != nil || g.Session.State != host.ResourceSessionEnded || len(g.Leases) != 1 {
		t.Fatalf("get: %+v, %v", g, err)
	}
}

func testRLRevoke(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	h := rlActor("rev.holder")
	got := mustAcquire(t, eng, h.Principal, time.Minute, "V:1", "MUTATES")
	id := got.Leases[0].ID
	_, err := eng.RevokeResourceLease(b.Ctx, rlActor("agent"), "acme", id)
	WantCode(t, err, host.CodeForbidden)
	op := engine.Actor{Tenant: "default", Principal: "ops", Role: engine.RoleAdmin}
	_, err = eng.RevokeResourceLease(b.Ctx, op, "other", id)
	WantCode(t, err, host.CodeNotFound)
	_, err = eng.RevokeResourceLease(b.Ctx, op, "acme", "")
	WantCode(t, err, host.CodeBadRequest)
	for i := 0; i < 2; i++ {
		res, err := eng.RevokeResourceLease(b.Ctx, op, "acme", id)
		if err != nil || len(res.Leases) != 1 || res.Leases[0].State != host.ResourceLeaseReleased {
			t.Fatalf("revoke #%d: %+v, %v", i+1, res, err)
		}
	}
	_, err = eng.HeartbeatResources(b.Ctx, h, []string{id}, 0)
	WantCode(t, err, host.CodeLeaseRevoked)
	if host.ErrorServerTime(err).IsZero() {
		t.Fatal("lease_revoked without the server time")
	}
	mustAcquire(t, eng, "next", time.Minute, "V:1", "MUTATES")
	// Releasing a revoked lease is still a no-op success.
	if rel, err := eng.ReleaseResources(b.Ctx, h, []string{id}); err != nil || rel.Leases[0].State != host.ResourceLeaseReleased {
		t.Fatalf("release after revocation: %+v, %v", rel, err)
	}
}

// testRLSessionBounds: a holder's open sessions are capped (429
// quota_exceeded with the server time; another holder's, or the same name in
// another tenant, do not count; an ended or expired one frees its place), a
// lease released on its own leaves its session's list, and sessions that
// ended more than SessionRetention (1 h) ago are purged by the sweep with
// their lists (their ids then answer 404 not_found), recent ones kept.
func testRLSessionBounds(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	cfg := eng.ResourceLeaseConfig()
	if cfg.MaxSessionsPerHolder != 16 || cfg.SessionRetention != time.Hour {
		t.Fatalf("defaults: %d sessions, retention %s", cfg.MaxSessionsPerHolder, cfg.SessionRetention)
	}
	h := rlActor("bound.holder")
	var open []string
	for i := 0; i < cfg.MaxSessionsPerHolder; i++ {
		s, err := eng.CreateResourceSession(b.Ctx, h, time.Minute)
		if err != nil {
			t.Fatalf("session %d: %v", i+1, err)
		}
		open = append(open, s.Session.ID)
	}
	_, err := eng.CreateResourceSession(b.Ctx, h, time.Minute)
	WantCode(t, err, host.CodeQuotaExceeded)
	if host.ErrorServerTime(err).IsZero() {
		t.Fatal("quota_exceeded without the server time")
	}
	// Another holder, and the same holder name in another tenant, have
	// quotas of their own.
	if _, err := eng.CreateResourceSession(b.Ctx, rlActor("bound.other"), time.Minute); err != nil {
		t.Fatalf("another holder: %v", err)
	}
	if _, err := eng.CreateResourceSession(b.Ctx, engine.Actor{Tenant: "globex", Principal: h.Principal, Role: engine.RoleAgent}, time.Minute); err != nil {
		t.Fatalf("the same name in another tenant: %v", err)
	}
	// Ending one frees its place.
	if _, err := eng.EndResourceSession(b.Ctx, h, open[0]); err != nil {
		t.Fatal(err)
	}
	s, err := eng.CreateResourceSession(b.Ctx, h, 10*time.Second)
	if err != nil {
		t.Fatalf("after ending one: %v", err)
	}
	_, err = eng.CreateResourceSession(b.Ctx, h, time.Minute)
	WantCode(t, err, host.CodeQuotaExceeded)

	// Leases released on their own leave the session's list; the live one
	// stays.
	id := s.Session.ID
	for i := 0; i < 5; i++ {
		got, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: h.Principal, SessionID: id, Intents: intents("B:1", "MUTATES")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eng.ReleaseResources(b.Ctx, h, []string{got.Leases[0].ID}); err != nil {
			t.Fatal(err)
		}
	}
	live, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: h.Principal, SessionID: id, Intents: intents("B:2", "READS")})
	if err != nil {
		t.Fatal(err)
	}
	g, err := eng.GetResourceSession(b.Ctx, h, id)
	if err != nil || len(g.Leases) != 1 || g.Leases[0].ID != live.Leases[0].ID {
		t.Fatalf("session after 5 leases released on their own and one held: %+v, %v; want the held one only", g, err)
	}

	// The session expires (10 s), freeing its place; its held lease ended
	// with it and stays listed until the purge.
	b.Clock.Advance(11 * time.Second)
	if _, err := eng.CreateResourceSession(b.Ctx, h, time.Minute); err != nil {
		t.Fatalf("after one expired: %v", err)
	}
	if g, err := eng.GetResourceSession(b.Ctx, h, id); err != nil || g.Session.State != host.ResourceSessionExpired || len(g.Leases) != 1 {
		t.Fatalf("an expired session: %+v, %v", g, err)
	}
	// An hour after their end the ended and the expired session are purged;
	// the others, unexpired until then, are not.
	b.Clock.Advance(time.Hour - 5*time.Second)
	if _, err := eng.SweepResourceLeases(b.Ctx); err != nil {
		t.Fatal(err)
	}
	if g, err := eng.GetResourceSession(b.Ctx, h, id); err != nil || g.Session.State != host.ResourceSessionExpired {
		t.Fatalf("a session expired 55 min ago: %+v, %v; want kept", g, err)
	}
	b.Clock.Advance(10 * time.Second)
	if _, err := eng.SweepResourceLeases(b.Ctx); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{open[0], id} {
		_, err := eng.GetResourceSession(b.Ctx, h, gone)
		WantCode(t, err, host.CodeNotFound)
	}
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		ids, err := tx.ListResourceSessionLeases(b.Ctx, "acme", id)
		if err == nil && len(ids) != 0 {
			t.Errorf("a purged session's lease list: %v", ids)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The first sessions (1 min TTL, never heartbeated) are kept until an
	// hour after their expiry, then purged too.
	if _, err := eng.GetResourceSession(b.Ctx, h, open[1]); err != nil {
		t.Fatalf("a session expired 59 min ago: %v; want kept", err)
	}
	b.Clock.Advance(time.Minute)
	if _, err := eng.SweepResourceLeases(b.Ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.GetResourceSession(b.Ctx, h, open[1]); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("a session expired over an hour ago: %v; want purged", err)
	}
}
