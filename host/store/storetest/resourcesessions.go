package storetest

import (
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
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
