package mcpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
	"github.com/asyncgate/asyncgate/host/store"
)

// send is one raw request on /mcp with key and session id sid (none if
// empty): its status, headers and body.
func (b *testBundle) send(t *testing.T, method, key, sid, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, b.ts.URL+mcpapi.Path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16)) // a GET stream ends with ctx
	return resp.StatusCode, resp.Header, string(out)
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// openRaw sends initialize with key and returns the session id issued.
func (b *testBundle) openRaw(t *testing.T, key string) string {
	t.Helper()
	code, h, body := b.send(t, http.MethodPost, key, "", initBody)
	sid := h.Get("Mcp-Session-Id")
	if code != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %q %.300s", code, sid, body)
	}
	return sid
}

// wantSessionNotFound checks the gate's answer to a request on a session
// the caller may not use: 404, JSON-RPC -32001.
func wantSessionNotFound(t *testing.T, what string, code int, h http.Header, body string) {
	t.Helper()
	var e struct {
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if code != http.StatusNotFound || !strings.HasPrefix(h.Get("Content-Type"), "application/json") ||
		json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != -32001 {
		t.Fatalf("%s: want 404 JSON-RPC -32001, got %d %q %.300s", what, code, h.Get("Content-Type"), body)
	}
}

// TestSessionBoundAtInitialize: a session is its opener's from initialize
// on; another principal using the id first neither gets it nor locks the
// opener out, and cannot end it.
func TestSessionBoundAtInitialize(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	const list = `{"jsonrpc":"2.0","id":2,"method":"tasks/list","params":{}}`
	sid := b.openRaw(t, b.agent)
	for _, key := range []string{b.admin, b.other, b.worker} {
		code, h, body := b.send(t, http.MethodPost, key, sid, list)
		wantSessionNotFound(t, "another principal's first request on a fresh session", code, h, body)
		code, h, body = b.send(t, http.MethodDelete, key, sid, "")
		wantSessionNotFound(t, "another principal's DELETE of a fresh session", code, h, body)
	}
	if code, _, body := b.send(t, http.MethodPost, b.agent, sid, list); code != http.StatusOK || !strings.Contains(body, `"tasks"`) {
		t.Fatalf("the opener on its session: %d %.300s", code, body)
	}
	if code, _, _ := b.send(t, http.MethodDelete, b.agent, sid, ""); code != http.StatusOK {
		t.Fatalf("the opener's DELETE: %d", code)
	}
	code, h, body := b.send(t, http.MethodPost, b.agent, sid, list)
	wantSessionNotFound(t, "a request on an ended session", code, h, body)
}

// TestUnknownSessionIDRefused: an id the gate never issued is 404 for every
// method, runs nothing and leaves no session behind.
func TestUnknownSessionIDRefused(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	before := b.mcp.Sessions()
	for _, sid := range []string{"foo", "mcp-session-0b0e5c1e-7f4a-4a8e-9d3c-2a1f6e8b9c01"} {
		for _, m := range []string{
			`{"jsonrpc":"2.0","id":2,"method":"tasks/list","params":{}}`,
			`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{}}`,
			`{"jsonrpc":"2.0","id":4,"method":"ping"}`,
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"n":1},"task":{}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		} {
			code, h, body := b.send(t, http.MethodPost, b.agent, sid, m)
			wantSessionNotFound(t, "POST "+m+" on "+sid, code, h, body)
		}
		code, h, body := b.send(t, http.MethodGet, b.agent, sid, "")
		wantSessionNotFound(t, "GET on "+sid, code, h, body)
		code, h, body = b.send(t, http.MethodDelete, b.agent, sid, "")
		wantSessionNotFound(t, "DELETE of "+sid, code, h, body)
	}
	if n := b.mcp.Sessions(); n != before {
		t.Fatalf("made-up session ids left %d sessions behind", n-before)
	}
	ts, _, err := b.eng.ListTasks(context.Background(), engine.Actor{Tenant: "default", Role: engine.RoleAdmin}, store.TaskFilter{Limit: 10})
	if err != nil || len(ts) != 0 {
		t.Fatalf("a task was queued on a made-up session: %d %v", len(ts), err)
	}
	// The official client on a session the gate issued is served.
	c := b.connect(t, b.agent)
	if _, e := rpc(t, c, "tasks/list", map[string]any{}); e != nil {
		t.Fatalf("tasks/list on an issued session: %+v", e)
	}
}

// TestSessionsCappedPerKey: one key initializing over and over keeps at
// most MaxSessionsPerKey live sessions — each past the cap ends that key's
// least recently used one (its next request is 404), never another key's —
// so the session table, and the gate's memory, stay bounded (20,000
// initializes used to leave 20,000 sessions for an hour).
func TestSessionsCappedPerKey(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	const list = `{"jsonrpc":"2.0","id":2,"method":"tasks/list","params":{}}`
	otherSid := b.openRaw(t, b.other)
	before := b.mcp.Sessions()
	const extra = 10
	sids := make([]string, mcpapi.MaxSessionsPerKey+extra)
	for i := range sids {
		sids[i] = b.openRaw(t, b.agent)
		if i == 0 {
			// The first is used last of the early ones: the cap ends the
			// least recently used, not the oldest.
			continue
		}
		if i < extra+1 {
			if code, _, body := b.send(t, http.MethodPost, b.agent, sids[0], list); code != http.StatusOK {
				t.Fatalf("the first session while under the cap: %d %.300s", code, body)
			}
		}
	}
	if n := b.mcp.Sessions(); n != before+mcpapi.MaxSessionsPerKey {
		t.Fatalf("%d initializes of one key left %d sessions, want the cap %d", len(sids), n-before, mcpapi.MaxSessionsPerKey)
	}
	// Ended: sessions 1..extra, the least recently used (session 0 was
	// used after session extra opened, so it outlived them).
	for _, sid := range sids[1 : extra+1] {
		code, h, body := b.send(t, http.MethodPost, b.agent, sid, list)
		wantSessionNotFound(t, "a session the cap ended", code, h, body)
	}
	for _, sid := range append([]string{sids[0], otherSid}, sids[extra+1:extra+3]...) {
		key := b.agent
		if sid == otherSid {
			key = b.other
		}
		if code, _, body := b.send(t, http.MethodPost, key, sid, list); code != http.StatusOK || !strings.Contains(body, `"tasks"`) {
			t.Fatalf("a live session after the cap: %d %.300s", code, body)
		}
	}
}

// TestTaskIDOfAnotherTypeAndOtherMethods: a taskId that is not a string is
// refused as such (it was "taskId is required"), and a method the
// transport does not have (PUT) is a JSON-RPC answer with 405 and Allow,
// not the router's plain-text 404.
func TestTaskIDOfAnotherTypeAndOtherMethods(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	sid := b.openRaw(t, b.agent)
	for _, m := range []string{"tasks/get", "tasks/cancel", "tasks/result"} {
		code, _, body := b.send(t, http.MethodPost, b.agent, sid, `{"jsonrpc":"2.0","id":2,"method":"`+m+`","params":{"taskId":5}}`)
		if code != http.StatusOK || !strings.Contains(body, "taskId must be a string") || !strings.Contains(body, "-32602") {
			t.Fatalf("%s with taskId 5: %d %.300s", m, code, body)
		}
	}
	code, h, body := b.send(t, http.MethodPut, b.agent, sid, `{}`)
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if code != http.StatusMethodNotAllowed || h.Get("Allow") != "GET, POST, DELETE" || json.Unmarshal([]byte(body), &e) != nil ||
		e.Error.Code != -32600 || !strings.Contains(e.Error.Message, "PUT") {
		t.Fatalf("PUT /mcp: %d Allow %q %.300s", code, h.Get("Allow"), body)
	}
}
