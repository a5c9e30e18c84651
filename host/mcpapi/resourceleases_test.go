package mcpapi_test

import (
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestResourceLeaseTools drives the four resource lease tools through an MCP
// client over streamable HTTP: acquire, a refusal naming the holder, heartbeat,
// verify, release (twice), and bad input as tool errors with their codes.
func TestResourceLeaseTools(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent, worker := b.connect(t, b.agent), b.connect(t, b.worker)
	var got mcpapi.AcquireToolResult
	ok(t, agent, "acquire_resource_leases", map[string]any{"intents": []any{
		map[string]any{"resource": "FILE:/repo/x.go", "predicate": "MUTATES"}}, "ttl_ms": 20000}, &got)
	if !got.Granted || got.AcquireResult == nil || len(got.Leases) != 1 || got.Leases[0].Holder != "agent.a" || got.Leases[0].TTLMs != 20000 {
		t.Fatalf("acquire: %+v", got)
	}
	id := got.Leases[0].ID
	var refused mcpapi.AcquireToolResult
	ok(t, worker, "acquire_resource_leases", map[string]any{"intents": []any{
		map[string]any{"resource": "file:/repo/x.go", "predicate": "READS"}}}, &refused)
	if refused.Granted || refused.Error != host.CodeResourceConflict || refused.Conflict == nil || refused.Conflict.ID != id ||
		refused.WaitDie != "die" || refused.PriorityAt == nil {
		t.Fatalf("refusal: %+v", refused)
	}
	var hb engine.ResourceLeasesResult
	ok(t, agent, "heartbeat_resource_leases", map[string]any{"lease_ids": []any{id}}, &hb)
	if len(hb.Leases) != 1 || hb.ServerTime.IsZero() || !hb.Leases[0].ExpiresAt.Equal(hb.ServerTime.Add(20e9)) {
		t.Fatalf("heartbeat: %+v", hb)
	}
	fails(t, worker, "heartbeat_resource_leases", map[string]any{"lease_ids": []any{id}}, host.CodeForbidden)
	var v engine.ResourceLeasesResult
	ok(t, agent, "verify_resource_leases", map[string]any{}, &v)
	if len(v.Leases) != 1 || v.Leases[0].State != host.ResourceLeaseActive {
		t.Fatalf("verify: %+v", v)
	}
	for i := 0; i < 2; i++ {
		var rel engine.ResourceLeasesResult
		ok(t, agent, "release_resource_leases", map[string]any{"lease_ids": []any{id}}, &rel)
		if rel.Leases[0].State != host.ResourceLeaseReleased {
			t.Fatalf("release #%d: %+v", i+1, rel)
		}
	}
	fails(t, agent, "heartbeat_resource_leases", map[string]any{"lease_ids": []any{id}}, host.CodeLeaseExpired)
	fails(t, agent, "acquire_resource_leases", map[string]any{"intents": []any{map[string]any{"resource": "", "predicate": "READS"}}}, host.CodeInvalidResource)
	fails(t, agent, "acquire_resource_leases", map[string]any{"intents": []any{map[string]any{"resource": "a", "predicate": "OWNS"}}}, host.CodeBadRequest)
	fails(t, agent, "acquire_resource_leases", map[string]any{"intents": []any{}, "bogus": 1}, host.CodeBadRequest)
	fails(t, agent, "release_resource_leases", map[string]any{"lease_ids": []any{"rlease-nope"}}, host.CodeNotFound)
}
