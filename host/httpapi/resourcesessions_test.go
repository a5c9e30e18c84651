package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/engine"
)

// TestResourceSessionsHTTP walks sessions and revocation over HTTP: a
// session's leases follow its heartbeat and end with it; a foreign
// session answers like an unknown one, another tenant's lease and bad TTLs
// are refused with codes; an
// operator revokes a lease in another tenant and the holder's next
// heartbeat says lease_revoked.
func TestResourceSessionsHTTP(t *testing.T) {
	b := setup(t)
	code, body := b.do(t, "POST", "/v1/resource-sessions", b.agent, `{"ttl_ms":20000}`)
	sess, _ := body["session"].(map[string]any)
	if code != 201 || sess["state"] != "active" || sess["ttl_ms"] != float64(20000) || body["server_time"] == nil {
		t.Fatalf("create: %d %v", code, body)
	}
	sid := sess["session_id"].(string)
	code, body = b.do(t, "POST", "/v1/resource-leases", b.agent, `{"intents":[{"resource":"FILE:/s/a.go","predicate":"MUTATES"}],"session_id":"`+sid+`"}`)
	if code != 201 {
		t.Fatalf("acquire in the session: %d %v", code, body)
	}
	lid := body["leases"].([]any)[0].(map[string]any)["lease_id"].(string)
	if code, body = b.do(t, "POST", "/v1/resource-leases/"+lid+"/heartbeat", b.agent, `{}`); code != 409 || body["error"] != "conflict" {
		t.Fatalf("heartbeat of a session's lease alone: %d %v", code, body)
	}
	code, body = b.do(t, "POST", "/v1/resource-sessions/"+sid+"/heartbeat", b.agent, `{"ttl_ms":30000}`)
	if code != 200 || body["session"].(map[string]any)["ttl_ms"] != float64(30000) || len(body["leases"].([]any)) != 1 {
		t.Fatalf("session heartbeat: %d %v", code, body)
	}
	for _, c := range []struct {
		method, path, key, body, code string
		status                        int
	}{
		{"POST", "/v1/resource-sessions/" + sid + "/heartbeat", b.worker, `{}`, "not_found", 404},
		{"POST", "/v1/resource-sessions/" + sid + "/end", b.worker, `{}`, "not_found", 404},
		{"GET", "/v1/resource-sessions/" + sid, b.worker, ``, "not_found", 404},
		{"POST", "/v1/resource-leases", b.worker, `{"intents":[{"resource":"FILE:/s/b.go","predicate":"READS"}],"session_id":"` + sid + `"}`, "not_found", 404},
		{"POST", "/v1/resource-sessions/rsess-nope/heartbeat", b.agent, `{}`, "not_found", 404},
		{"POST", "/v1/resource-sessions", b.agent, `{"ttl_ms":-1}`, "bad_request", 400},
		{"POST", "/v1/resource-sessions", b.agent, `{"ttl":5}`, "bad_request", 400},
		{"POST", "/v1/resource-sessions/" + sid + "/heartbeat", b.agent, `{"ttl_ms":-5}`, "bad_request", 400},
		{"POST", "/v1/resource-sessions/" + sid + "/end", b.agent, `{"ttl_ms":5}`, "bad_request", 400},
		{"POST", "/v1/admin/resource-leases/" + lid + "/revoke", b.agent, ``, "forbidden", 403},
		{"POST", "/v1/admin/resource-leases/rlease-nope/revoke", b.admin, ``, "not_found", 404},
		{"POST", "/v1/admin/resource-leases/" + lid + "/revoke?tenant=bad%20name", b.admin, ``, "bad_request", 400},
	} {
		code, body := b.do(t, c.method, c.path, c.key, c.body)
		if code != c.status || body["error"] != c.code {
			t.Fatalf("%s %s: %d %v, want %d %s", c.method, c.path, code, body, c.status, c.code)
		}
		// Another holder's session id answers word for word like an
		// unknown one: it names no holder.
		if d, _ := body["detail"].(string); c.key == b.worker && strings.Contains(c.path+c.body, sid) && d != "no resource session "+sid {
			t.Fatalf("%s %s by another holder: detail %q, want that of an unknown session", c.method, c.path, d)
		}
	}
	// Ending the session releases its lease; again is a no-op.
	for i := 0; i < 2; i++ {
		code, body = b.do(t, "POST", "/v1/resource-sessions/"+sid+"/end", b.agent, ``)
		if code != 200 || body["session"].(map[string]any)["state"] != "ended" || body["leases"].([]any)[0].(map[string]any)["state"] != "released" {
			t.Fatalf("end #%d: %d %v", i+1, code, body)
		}
	}
	if code, body = b.do(t, "POST", "/v1/resource-sessions/"+sid+"/heartbeat", b.agent, `{}`); code != 409 || body["error"] != "session_ended" || body["server_time"] == nil {
		t.Fatalf("heartbeat of an ended session: %d %v", code, body)
	}

	// An operator of the default tenant revokes a lease in another tenant.
	other := engine.Actor{Tenant: "acme", Principal: "agent.x", Role: engine.RoleAgent}
	got, err := b.eng.AcquireResources(context.Background(), engine.AcquireRequest{Tenant: "acme", Holder: "agent.x", Intents: []engine.ResourceIntent{{Resource: "DB:t", Predicate: "MUTATES"}}})
	if err != nil {
		t.Fatal(err)
	}
	rid := got.Leases[0].ID
	if code, body = b.do(t, "POST", "/v1/admin/resource-leases/"+rid+"/revoke", b.admin, ``); code != 404 {
		t.Fatalf("revoke without naming its tenant: %d %v", code, body)
	}
	code, body = b.do(t, "POST", "/v1/admin/resource-leases/"+rid+"/revoke?tenant=acme", b.admin, ``)
	if code != 200 || body["leases"].([]any)[0].(map[string]any)["state"] != "released" {
		t.Fatalf("revoke: %d %v", code, body)
	}
	_, err = b.eng.HeartbeatResources(context.Background(), other, []string{rid}, 0)
	if err == nil || err.Error()[:len("lease_revoked")] != "lease_revoked" {
		t.Fatalf("the holder's next heartbeat: %v, want lease_revoked", err)
	}
	code, body = b.do(t, "GET", "/v1/admin/resource-leases/events?tenant=acme&lease_id="+rid, b.admin, ``)
	evs := body["events"].([]any)
	if code != 200 || evs[len(evs)-1].(map[string]any)["kind"] != "revoked" {
		t.Fatalf("audit trail: %d %v", code, body)
	}
}

// TestResourceSessionQuotaHTTP: a holder's 17th open session is 429
// quota_exceeded with server_time, and another holder may still open one.
func TestResourceSessionQuotaHTTP(t *testing.T) {
	b := setup(t)
	var sid string
	for i := 0; i < 16; i++ {
		code, body := b.do(t, "POST", "/v1/resource-sessions", b.agent, `{"ttl_ms":60000}`)
		if code != 201 {
			t.Fatalf("session %d: %d %v", i+1, code, body)
		}
		sid = body["session"].(map[string]any)["session_id"].(string)
	}
	code, body := b.do(t, "POST", "/v1/resource-sessions", b.agent, `{"ttl_ms":60000}`)
	if code != 429 || body["error"] != "quota_exceeded" || body["server_time"] == nil {
		t.Fatalf("17th session: %d %v", code, body)
	}
	if code, body := b.do(t, "POST", "/v1/resource-sessions", b.worker, `{"ttl_ms":60000}`); code != 201 {
		t.Fatalf("another holder's session: %d %v", code, body)
	}
	if code, body := b.do(t, "POST", "/v1/resource-sessions/"+sid+"/end", b.agent, `{}`); code != 200 {
		t.Fatalf("end: %d %v", code, body)
	}
	if code, body := b.do(t, "POST", "/v1/resource-sessions", b.agent, `{"ttl_ms":60000}`); code != 201 {
		t.Fatalf("after ending one: %d %v", code, body)
	}
}
