package mcpapi_test

import (
	"testing"
	"time"

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

// TestResourceLeaseToolsFencingAndHolders: a grant carries its fencing token
// (the next grant of the resource a larger one), list_resource_holders names
// the holder without taking anything, and a refusal that judges a lease by
// the gate's clock (lease_expired) carries server_time in the tool error.
func TestResourceLeaseToolsFencingAndHolders(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent, worker := b.connect(t, b.agent), b.connect(t, b.worker)
	in := map[string]any{"intents": []any{map[string]any{"resource": "FILE:/repo/f.go", "predicate": "MUTATES"}}}
	var first mcpapi.AcquireToolResult
	ok(t, agent, "acquire_resource_leases", in, &first)
	if !first.Granted || first.Leases[0].FencingToken != 1 {
		t.Fatalf("first grant: %+v", first)
	}
	var held engine.ResourceLeasesResult
	ok(t, worker, "list_resource_holders", map[string]any{"resources": []any{"file:/repo/f.go"}}, &held)
	if len(held.Leases) != 1 || held.Leases[0].Holder != "agent.a" || held.Leases[0].FencingToken != 1 || held.ServerTime.IsZero() {
		t.Fatalf("holders: %+v", held)
	}
	var rel engine.ResourceLeasesResult
	ok(t, agent, "release_resource_leases", map[string]any{"lease_ids": []any{first.Leases[0].ID}}, &rel)
	var second mcpapi.AcquireToolResult
	ok(t, worker, "acquire_resource_leases", in, &second)
	if !second.Granted || second.Leases[0].FencingToken != 2 {
		t.Fatalf("second grant: %+v", second)
	}
	var body mcpapi.ErrorBody
	res := call(t, agent, "heartbeat_resource_leases", map[string]any{"lease_ids": []any{first.Leases[0].ID}}, &body)
	if !res.IsError || body.Error != host.CodeLeaseExpired || body.ServerTime == nil || body.ServerTime.IsZero() {
		t.Fatalf("heartbeat of a released lease: %s", text(res))
	}
	fails(t, agent, "list_resource_holders", map[string]any{"resources": []any{"FILE:"}}, host.CodeInvalidResource)
	fails(t, agent, "list_resource_holders", map[string]any{"resources": []any{}}, host.CodeBadRequest)
}

// TestHugeWaitIsCapped: a wait_seconds beyond any bound waits the gate's
// cap, not nothing (a huge float once overflowed to a negative duration): a
// worker's lease call with no task ready, and an acquire whose caller is
// older than the holder in its way (wait-die: it waits).
func TestHugeWaitIsCapped(t *testing.T) {
	const limit = 300 * time.Millisecond
	b := setup(t, mcpapi.Config{MaxLeaseWait: limit})
	agent, worker := b.connect(t, b.agent), b.connect(t, b.worker)

	start := time.Now()
	var lease mcpapi.LeaseResult
	ok(t, worker, "worker_lease_task", map[string]any{"task_types": []string{"echo"}, "wait_seconds": 1e10}, &lease)
	if took := time.Since(start); lease.TaskID != nil || took < limit {
		t.Fatalf("a lease call with wait_seconds 1e10 answered %+v after %s, want no task after the %s cap", lease, took, limit)
	}

	in := []any{map[string]any{"resource": "FILE:/repo/wait.go", "predicate": "MUTATES"}}
	var held mcpapi.AcquireToolResult
	ok(t, worker, "acquire_resource_leases", map[string]any{"intents": in, "ttl_ms": 60000}, &held)
	if !held.Granted {
		t.Fatalf("first acquire: %+v", held)
	}
	start = time.Now()
	var waited mcpapi.AcquireToolResult
	ok(t, agent, "acquire_resource_leases", map[string]any{"intents": in, "wait_seconds": 1e10,
		"priority_at": time.Now().Add(-10 * time.Second).Format(time.RFC3339Nano)}, &waited)
	if took := time.Since(start); waited.Granted || waited.WaitDie != "wait" || took < limit {
		t.Fatalf("an older caller's acquire with wait_seconds 1e10 answered %+v after %s, want a wait of the %s cap", waited, took, limit)
	}
}
