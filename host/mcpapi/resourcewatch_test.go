package mcpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestResourceLeaseSubscription: a session subscribed to a leased resource
// hears notifications/resources/updated when a lease on it ends, reads its
// holders at the URI, and list_resource_holders with wait_seconds waits for
// the release a refused acquire needs. Bad URIs and another tenant's
// resources are refused.
func TestResourceLeaseSubscription(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent, n := b.listen(t, b.agent)
	worker := b.connect(t, b.worker)
	const res = "FILE:/mcp/sub.go"
	uri := mcpapi.ResourceLeaseURIPrefix + url.PathEscape(res)
	rpcOK(t, agent, "resources/subscribe", map[string]any{"uri": uri}, nil)
	for _, bad := range []string{mcpapi.ResourceLeaseURIPrefix, mcpapi.ResourceLeaseURIPrefix + "%zz", mcpapi.ResourceLeaseURIPrefix + "FILE:"} {
		if _, e := rpc(t, agent, "resources/subscribe", map[string]any{"uri": bad}); e == nil || e.Code != -32602 {
			t.Fatalf("subscribe to %q: %+v", bad, e)
		}
	}

	var held mcpapi.AcquireToolResult
	ok(t, worker, "acquire_resource_leases", map[string]any{"intents": []any{map[string]any{"resource": res, "predicate": "MUTATES"}}}, &held)
	if !held.Granted {
		t.Fatalf("acquire: %+v", held)
	}
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = uri
	rd, err := agent.ReadResource(context.Background(), rr)
	if err != nil {
		t.Fatal(err)
	}
	var holders engine.ResourceLeasesResult
	if err := json.Unmarshal([]byte(rd.Contents[0].(mcp.TextResourceContents).Text), &holders); err != nil || len(holders.Leases) != 1 || holders.Leases[0].Holder != "echo.w1" {
		t.Fatalf("holders resource: %v %+v", err, holders)
	}
	other := b.connect(t, b.other)
	if rd, err := other.ReadResource(context.Background(), rr); err != nil || len(rd.Contents) != 1 {
		t.Fatalf("another tenant reads: %v", err)
	} else if json.Unmarshal([]byte(rd.Contents[0].(mcp.TextResourceContents).Text), &holders); len(holders.Leases) != 0 {
		t.Fatalf("another tenant sees this tenant's holders: %+v", holders)
	}

	// A refused acquire waits for the release without holding anything.
	var refused mcpapi.AcquireToolResult
	ok(t, agent, "acquire_resource_leases", map[string]any{"intents": []any{map[string]any{"resource": res, "predicate": "READS"}}}, &refused)
	if refused.Granted || refused.WaitDie != "die" {
		t.Fatalf("refusal: %+v", refused)
	}
	var short engine.ResourceLeasesResult
	ok(t, agent, "list_resource_holders", map[string]any{"resources": []any{res}, "wait_seconds": 0.05, "predicate": "READS"}, &short)
	if len(short.Leases) != 1 {
		t.Fatalf("a wait that ran out answers what is in the way: %+v", short)
	}
	type out struct {
		r   engine.ResourceLeasesResult
		at  time.Time
		err error
	}
	done := make(chan out, 1)
	go func() {
		var r engine.ResourceLeasesResult
		_, err := callErr(agent, "list_resource_holders", map[string]any{"resources": []any{res}, "wait_seconds": 15, "predicate": "READS"}, &r)
		done <- out{r, time.Now(), err}
	}()
	// The wait may begin before or after the release: either way it ends
	// with the resource free, long before its 15 s.
	var rel engine.ResourceLeasesResult
	ok(t, worker, "release_resource_leases", map[string]any{"lease_ids": []any{held.Leases[0].ID}}, &rel)
	released := time.Now()
	o := <-done
	if o.err != nil || len(o.r.Leases) != 0 || o.at.Sub(released) > 5*time.Second {
		t.Fatalf("wait for the release: %+v, %v, %s after it", o.r, o.err, o.at.Sub(released))
	}
	n.wait(t, "resources/updated for the leased resource", func(m mcp.JSONRPCNotification) bool {
		return m.Method == "notifications/resources/updated" && m.Params.AdditionalFields["uri"] == uri
	})

	fails(t, agent, "list_resource_holders", map[string]any{"resources": []any{res}, "wait_seconds": -1}, host.CodeBadRequest)
	fails(t, agent, "list_resource_holders", map[string]any{"resources": []any{res}, "predicate": "OWNS"}, host.CodeBadRequest)
	rpcOK(t, agent, "resources/unsubscribe", map[string]any{"uri": uri}, nil)
}

// callErr calls a tool from any goroutine, decoding its structured answer.
func callErr(c *client.Client, name string, args map[string]any, out any) (*mcp.CallToolResult, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		return nil, err
	}
	if res.IsError {
		return res, fmt.Errorf("%s: %s", name, text(res))
	}
	raw := []byte(res.RawStructuredContent)
	if len(raw) == 0 {
		if raw, err = json.Marshal(res.StructuredContent); err != nil {
			return res, err
		}
	}
	return res, json.Unmarshal(raw, out)
}

// TestResourceSessionTools: a session over MCP groups leases under one
// heartbeat and ends them together; a foreign session and bad TTLs are tool
// errors with codes; an admin revokes a lease and the holder's next
// heartbeat says lease_revoked; other roles do not see the revoke tool.
func TestResourceSessionTools(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent, worker, admin := b.connect(t, b.agent), b.connect(t, b.worker), b.connect(t, b.admin)
	var s engine.ResourceSessionResult
	ok(t, agent, "create_resource_session", map[string]any{"ttl_ms": 20000}, &s)
	if s.Session == nil || s.Session.State != host.ResourceSessionActive || s.Session.TTLMs != 20000 {
		t.Fatalf("create: %+v", s)
	}
	var got mcpapi.AcquireToolResult
	ok(t, agent, "acquire_resource_leases", map[string]any{"intents": []any{map[string]any{"resource": "FILE:/m/s.go", "predicate": "MUTATES"}},
		"session_id": s.Session.ID}, &got)
	if !got.Granted || !got.Leases[0].ExpiresAt.Equal(s.Session.ExpiresAt) {
		t.Fatalf("acquire in the session: %+v", got)
	}
	fails(t, agent, "heartbeat_resource_leases", map[string]any{"lease_ids": []any{got.Leases[0].ID}}, host.CodeConflict)
	var hb engine.ResourceSessionResult
	ok(t, agent, "heartbeat_resource_session", map[string]any{"session_id": s.Session.ID}, &hb)
	if len(hb.Leases) != 1 || !hb.Leases[0].ExpiresAt.Equal(hb.Session.ExpiresAt) {
		t.Fatalf("session heartbeat: %+v", hb)
	}
	fails(t, worker, "heartbeat_resource_session", map[string]any{"session_id": s.Session.ID}, host.CodeNotFound)
	fails(t, worker, "end_resource_session", map[string]any{"session_id": s.Session.ID}, host.CodeNotFound)
	fails(t, agent, "heartbeat_resource_session", map[string]any{"session_id": "rsess-nope"}, host.CodeNotFound)
	fails(t, agent, "heartbeat_resource_session", map[string]any{"session_id": s.Session.ID, "ttl_ms": -1}, host.CodeBadRequest)
	fails(t, agent, "create_resource_session", map[string]any{"session_id": "mine"}, host.CodeBadRequest)
	if _, err := callErr(worker, "revoke_resource_lease", map[string]any{"lease_id": got.Leases[0].ID}, &struct{}{}); err == nil {
		t.Fatal("a worker revoked a lease")
	}
	var end engine.ResourceSessionResult
	ok(t, agent, "end_resource_session", map[string]any{"session_id": s.Session.ID}, &end)
	if end.Session.State != host.ResourceSessionEnded || end.Leases[0].State != host.ResourceLeaseReleased {
		t.Fatalf("end: %+v", end)
	}
	fails(t, agent, "heartbeat_resource_session", map[string]any{"session_id": s.Session.ID}, host.CodeSessionEnded)

	var held mcpapi.AcquireToolResult
	ok(t, agent, "acquire_resource_leases", map[string]any{"intents": []any{map[string]any{"resource": "FILE:/m/r.go", "predicate": "MUTATES"}}}, &held)
	var rev engine.ResourceLeasesResult
	ok(t, admin, "revoke_resource_lease", map[string]any{"lease_id": held.Leases[0].ID}, &rev)
	if rev.Leases[0].State != host.ResourceLeaseReleased {
		t.Fatalf("revoke: %+v", rev)
	}
	fails(t, agent, "heartbeat_resource_leases", map[string]any{"lease_ids": []any{held.Leases[0].ID}}, host.CodeLeaseRevoked)
	fails(t, admin, "revoke_resource_lease", map[string]any{"lease_id": held.Leases[0].ID, "tenant": "other"}, host.CodeNotFound)
}

// waitWatches waits until the server runs want resource watches; the bound
// is there for a hang, not a timing.
func waitWatches(t *testing.T, b *testBundle, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for b.mcp.ResourceWatches() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d resource watches run, want %d", what, b.mcp.ResourceWatches(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestResourceSubscriptionsEndTheirWatch: subscribing and unsubscribing in
// a loop leaves one watch, not one per subscribe, and one notification per
// lease end; a session subscribes to at most MaxSubscriptions resources
// (the next is refused with quota_exceeded until it unsubscribes from one).
func TestResourceSubscriptionsEndTheirWatch(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent, n := b.listen(t, b.agent)
	worker := b.connect(t, b.worker)
	const res = "FILE:/mcp/loop.go"
	uri := mcpapi.ResourceLeaseURIPrefix + url.PathEscape(res)
	for range 40 {
		rpcOK(t, agent, "resources/subscribe", map[string]any{"uri": uri}, nil)
		rpcOK(t, agent, "resources/unsubscribe", map[string]any{"uri": uri}, nil)
	}
	waitWatches(t, b, 0, "after 40 subscribe/unsubscribe pairs")
	rpcOK(t, agent, "resources/subscribe", map[string]any{"uri": uri}, nil)
	rpcOK(t, agent, "resources/subscribe", map[string]any{"uri": uri}, nil)
	waitWatches(t, b, 1, "subscribed twice")

	// One lease end, one notification: a second sign that no stale watch
	// survives to send its own.
	for i := range 2 {
		var held mcpapi.AcquireToolResult
		ok(t, worker, "acquire_resource_leases", map[string]any{"intents": []any{map[string]any{"resource": res, "predicate": "MUTATES"}}}, &held)
		if !held.Granted {
			t.Fatalf("acquire: %+v", held)
		}
		var rel engine.ResourceLeasesResult
		ok(t, worker, "release_resource_leases", map[string]any{"lease_ids": []any{held.Leases[0].ID}}, &rel)
		count := func() int {
			n.mu.Lock()
			defer n.mu.Unlock()
			c := 0
			for _, m := range n.got {
				if m.Method == "notifications/resources/updated" && m.Params.AdditionalFields["uri"] == uri {
					c++
				}
			}
			return c
		}
		for deadline := time.Now().Add(20 * time.Second); count() <= i; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("release #%d: no resources/updated", i+1)
			}
		}
		// A marker sent after the release arrives after any duplicate.
		marker := fmt.Sprintf("FILE:/mcp/marker%d.go", i)
		rpcOK(t, agent, "resources/subscribe", map[string]any{"uri": mcpapi.ResourceLeaseURIPrefix + url.PathEscape(marker)}, nil)
		ok(t, worker, "acquire_resource_leases", map[string]any{"intents": []any{map[string]any{"resource": marker, "predicate": "MUTATES"}}}, &held)
		ok(t, worker, "release_resource_leases", map[string]any{"lease_ids": []any{held.Leases[0].ID}}, &rel)
		n.wait(t, "resources/updated for the marker", func(m mcp.JSONRPCNotification) bool {
			return m.Params.AdditionalFields["uri"] == mcpapi.ResourceLeaseURIPrefix+url.PathEscape(marker)
		})
		if c := count(); c != i+1 {
			t.Fatalf("release #%d: %d notifications for %s, want %d", i+1, c, uri, i+1)
		}
	}

	// The cap.
	have := 3 // uri and the two markers
	for i := have; i < mcpapi.MaxSubscriptions; i++ {
		rpcOK(t, agent, "resources/subscribe", map[string]any{"uri": mcpapi.ResourceLeaseURIPrefix + fmt.Sprintf("FILE:%%2Fcap%%2F%d", i)}, nil)
	}
	waitWatches(t, b, mcpapi.MaxSubscriptions, "at the cap")
	over := mcpapi.ResourceLeaseURIPrefix + "FILE:%2Fcap%2Fover"
	_, e := rpc(t, agent, "resources/subscribe", map[string]any{"uri": over})
	if e == nil || !strings.Contains(e.Message, host.CodeQuotaExceeded) {
		t.Fatalf("subscription over the cap: %+v", e)
	}
	rpcOK(t, agent, "resources/subscribe", map[string]any{"uri": uri}, nil) // already subscribed: not a new one
	rpcOK(t, agent, "resources/unsubscribe", map[string]any{"uri": uri}, nil)
	rpcOK(t, agent, "resources/subscribe", map[string]any{"uri": over}, nil)
	waitWatches(t, b, mcpapi.MaxSubscriptions, "after trading one for another")
}
