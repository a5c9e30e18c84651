package worker_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// TestResourceSessions: leases acquired in a session follow its heartbeat
// and end with it; an operator's revocation reaches the holder as
// IsLeaseRevoked; a lost or ended session as IsSessionEnded; another key
// cannot heartbeat the session.
func TestResourceSessions(t *testing.T) {
	g := sharedGate(t)
	c := worker.NewClient(g.URL, g.Agent)
	other := worker.NewClient(g.URL, g.Worker)
	admin := worker.NewClient(g.URL, g.Admin)
	ctx := context.Background()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	s, err := c.CreateSession(ctx, 10*time.Second)
	if err != nil || s.Session.State != "active" || s.Session.TTLMs != 10000 {
		t.Fatalf("create: %+v, %v", s, err)
	}
	m, err := c.AcquireResources(ctx, worker.AcquireRequest{SessionID: s.Session.ID,
		Intents: []worker.ResourceIntent{{Resource: "FILE:/sdk/sess-" + run + ".go", Predicate: worker.Mutates}, {Resource: "DB:sess-" + run, Predicate: worker.Reads}}})
	if err != nil || len(m.Leases) != 2 || !m.Leases[0].ExpiresAt.Equal(s.Session.ExpiresAt) {
		t.Fatalf("acquire in the session: %+v, %v", m, err)
	}
	hb, err := c.HeartbeatSession(ctx, s.Session.ID, 0)
	if err != nil || len(hb.Leases) != 2 || !hb.Leases[1].ExpiresAt.Equal(hb.Session.ExpiresAt) {
		t.Fatalf("heartbeat: %+v, %v", hb, err)
	}
	if _, err := other.HeartbeatSession(ctx, s.Session.ID, 0); !isCode(err, "not_found") {
		t.Fatalf("another key heartbeats the session: %v", err)
	}
	// The operator revokes one lease; the other stays with the session.
	if _, err := admin.RevokeResourceLease(ctx, "", m.Leases[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.HeartbeatResources(ctx, []string{m.Leases[1].ID}); !worker.IsLeaseRevoked(err) {
		t.Fatalf("heartbeat of a revoked lease: %v", err)
	}
	if _, err := c.RevokeResourceLease(ctx, "", m.Leases[0].ID); !isCode(err, "forbidden") {
		t.Fatalf("an agent revokes: %v", err)
	}
	end, err := c.EndSession(ctx, s.Session.ID)
	if err != nil || end.Session.State != "ended" {
		t.Fatalf("end: %+v, %v", end, err)
	}
	if _, err := c.HeartbeatSession(ctx, s.Session.ID, 0); !worker.IsSessionEnded(err) {
		t.Fatalf("heartbeat of an ended session: %v", err)
	}
	held, err := other.ResourceHolders(ctx, "FILE:/sdk/sess-"+run+".go")
	if err != nil || len(held.Leases) != 0 {
		t.Fatalf("after the end: %+v, %v", held, err)
	}
}
