package mcpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
	"github.com/asyncgate/asyncgate/host/store"
)

// answer is an HTTP answer of /mcp: its status, and the JSON-RPC error code
// of a JSON body (0: none), or the text of a plain one.
type answer struct {
	status int
	code   int
	text   string
	allow  string
	ctype  string
}

// do sends req with key and reads its answer; a stream (an event stream
// that stays open) is read no further than its headers.
func do(t *testing.T, req *http.Request, key string) answer {
	t.Helper()
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, allow: resp.Header.Get("Allow"), ctype: resp.Header.Get("Content-Type")}
	if strings.HasPrefix(a.ctype, "text/event-stream") {
		return a
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var m struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if strings.HasPrefix(a.ctype, "application/json") && json.Unmarshal(body, &m) == nil && m.Error != nil {
		a.code, a.text = m.Error.Code, m.Error.Message
	} else {
		a.text = strings.TrimSpace(string(body))
	}
	if len(a.text) > 300 {
		a.text = a.text[:300] + "…"
	}
	return a
}

// TestGetWithoutSessionRefused: GET /mcp opens a session's event stream; one
// without an Mcp-Session-Id header names no session, and nothing would ever
// be sent on it. It is answered at once with 405 Method Not Allowed (the
// transport spec: a GET is answered with an event stream or 405; 405 is
// what clients that probe for a stream before initialize take as "none"),
// with Allow and a JSON-RPC error saying what to send; a GET of protocol
// 2026-07-28 is mcp-go's 405 (that version has no GET stream); a GET with
// the session's id opens its stream; without a key, 401.
func TestGetWithoutSessionRefused(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	get := func(h map[string]string) *http.Request {
		req, _ := http.NewRequest(http.MethodGet, b.ts.URL+mcpapi.Path, nil)
		req.Header.Set("Accept", "text/event-stream")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		return req
	}
	start := time.Now()
	for _, h := range []map[string]string{nil, {"Mcp-Protocol-Version": mcp.ProtocolVersion20251125}, {"Accept": "*/*"}} {
		a := do(t, get(h), b.agent)
		if a.status != http.StatusMethodNotAllowed || a.allow == "" || a.code != -32000 || !strings.Contains(a.text, "Mcp-Session-Id") {
			t.Errorf("GET without a session (%v): %+v, want 405 with Allow and a JSON-RPC error naming Mcp-Session-Id", h, a)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the refusals took %s: a stream was opened", took)
	}
	if a := do(t, get(map[string]string{"Mcp-Protocol-Version": mcp.ProtocolVersion20260728}), b.agent); a.status != http.StatusMethodNotAllowed {
		t.Errorf("GET of protocol 2026-07-28: %+v, want 405", a)
	}
	if a := do(t, get(nil), ""); a.status != http.StatusUnauthorized {
		t.Errorf("GET without a key: %+v, want 401", a)
	}
	c := b.connectAt(t, b.agent, mcp.ProtocolVersion20251125)
	if a := do(t, get(map[string]string{"Mcp-Session-Id": c.GetSessionId(), "Mcp-Protocol-Version": mcp.ProtocolVersion20251125}), b.agent); a.status != http.StatusOK || !strings.HasPrefix(a.ctype, "text/event-stream") {
		t.Errorf("GET with the session's id: %+v, want its event stream", a)
	}
}

// modernBody is a JSON-RPC request of protocol 2026-07-28: meta is its
// _meta (nil: the version and empty client capabilities).
func modernBody(method string, params map[string]any, meta map[string]any) string {
	if meta == nil {
		meta = map[string]any{mcp.MetaKeyProtocolVersion: mcp.ProtocolVersion20260728, mcp.MetaKeyClientCapabilities: map[string]any{}}
	}
	p := map[string]any{}
	for k, v := range params {
		p[k] = v
	}
	if len(meta) > 0 {
		p["_meta"] = meta
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": p})
	return string(b)
}

// TestGateAnswersPassMCPGoChecks: a request the gate answers itself (a
// task-type tool called as a task, tasks/get, resources/read of a task) is
// held to the checks mcp-go makes of the requests it serves, and refused
// alike — same HTTP status, same JSON-RPC code or the same text — as the
// same fault on a request mcp-go serves (tools/call of a built-in tool,
// tools/list): on protocol 2026-07-28 the Mcp-Protocol-Version header and
// the _meta version present and equal, no Last-Event-ID, the client's
// capabilities in _meta, Mcp-Method and Mcp-Name matching the message, a
// version the gate serves; on a session of an older version an
// Mcp-Protocol-Version header naming a known version; on either, Content-Type
// application/json and jsonrpc "2.0". Nothing refused is queued.
func TestGateAnswersPassMCPGoChecks(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	legacy := b.connectAt(t, b.agent, mcp.ProtocolVersion20251125)
	sid := legacy.GetSessionId()
	var q mcpapi.QueueTaskResult
	ok(t, legacy, "queue_task", map[string]any{"task_type": "echo"}, &q)

	type call struct {
		method, name string
		params       map[string]any
	}
	gate := []call{
		{"tools/call", "echo", map[string]any{"name": "echo", "arguments": map[string]any{"n": 1}, "task": map[string]any{}}},
		{"tasks/get", "", map[string]any{"taskId": q.TaskID}},
		{"resources/read", mcpapi.TaskURIPrefix + q.TaskID, map[string]any{"uri": mcpapi.TaskURIPrefix + q.TaskID}},
	}
	mcpgo := []call{
		{"tools/call", "list_task_types", map[string]any{"name": "list_task_types", "arguments": map[string]any{}}},
		{"tools/list", "", map[string]any{}},
	}
	send := func(c call, body string, h map[string]string) answer {
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+mcpapi.Path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range h {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, strings.ReplaceAll(v, "$method", c.method))
			}
		}
		if c.name != "" && h["Mcp-Name"] == "" && h["Mcp-Protocol-Version"] == mcp.ProtocolVersion20260728 {
			req.Header.Set("Mcp-Name", c.name)
		}
		return do(t, req, b.agent)
	}
	modern := map[string]string{"Mcp-Protocol-Version": mcp.ProtocolVersion20260728, "Mcp-Method": "$method"}
	with := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	version := func(v string) map[string]any {
		return map[string]any{mcp.MetaKeyProtocolVersion: v, mcp.MetaKeyClientCapabilities: map[string]any{}}
	}
	for _, tc := range []struct {
		name   string
		meta   map[string]any // nil: the 2026-07-28 _meta; empty: none
		header map[string]string
		legacy bool // a request of the 2025-11-25 session
		named  bool // only methods that name something (tools/call, resources/read) carry Mcp-Name
		body   func(string) string
	}{
		{name: "no Mcp-Protocol-Version header", header: with(modern, "Mcp-Protocol-Version", "")},
		{name: "no _meta version", meta: map[string]any{}, header: modern},
		{name: "header and _meta differ", meta: version(mcp.ProtocolVersion20251125), header: modern},
		{name: "Last-Event-ID", header: with(modern, "Last-Event-ID", "42")},
		{name: "no client capabilities", meta: map[string]any{mcp.MetaKeyProtocolVersion: mcp.ProtocolVersion20260728}, header: modern},
		{name: "no Mcp-Method header", header: with(modern, "Mcp-Method", "")},
		{name: "another Mcp-Method", header: with(modern, "Mcp-Method", "ping")},
		{name: "another Mcp-Name", header: with(modern, "Mcp-Name", "nope"), named: true},
		{name: "a version the gate does not serve", meta: version("2099-01-01"), header: with(modern, "Mcp-Protocol-Version", "2099-01-01")},
		{name: "Content-Type text/plain (2026-07-28)", header: with(modern, "Content-Type", "text/plain")},
		{name: "unknown Mcp-Protocol-Version on a session", legacy: true, header: map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "1999-01-01"}},
		{name: "Content-Type text/plain on a session", legacy: true, header: map[string]string{"Mcp-Session-Id": sid, "Content-Type": "text/plain"}},
		{name: "jsonrpc 1.0 on a session", legacy: true, header: map[string]string{"Mcp-Session-Id": sid},
			body: func(s string) string { return strings.Replace(s, `"jsonrpc":"2.0"`, `"jsonrpc":"1.0"`, 1) }},
	} {
		bodyOf := func(c call) string {
			var s string
			if tc.legacy {
				b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": c.method, "params": c.params})
				s = string(b)
			} else {
				s = modernBody(c.method, c.params, tc.meta)
			}
			if tc.body != nil {
				s = tc.body(s)
			}
			return s
		}
		want := send(mcpgo[0], bodyOf(mcpgo[0]), tc.header)
		if want.status == http.StatusOK && want.code == 0 {
			t.Errorf("%s: mcp-go serves %s: %+v", tc.name, mcpgo[0].method, want)
			continue
		}
		if got := send(mcpgo[1], bodyOf(mcpgo[1]), tc.header); !tc.named && (got.status != want.status || got.code != want.code) {
			t.Errorf("%s: mcp-go answers tools/list %+v but tools/call %+v", tc.name, got, want)
		}
		for _, c := range gate {
			if tc.named && c.name == "" {
				continue
			}
			got := send(c, bodyOf(c), tc.header)
			if got.status != want.status || got.code != want.code || (want.code == 0 && got.text != want.text) {
				t.Errorf("%s: the gate answers %s with %+v; mcp-go answers a request it serves with %+v", tc.name, c.method, got, want)
			}
		}
	}
	me := engine.Actor{Tenant: "default", Principal: "agent.a", Role: engine.RoleAgent}
	if ts, _, err := b.eng.ListTasks(t.Context(), me, store.TaskFilter{Limit: 100}); err != nil || len(ts) != 1 {
		t.Errorf("after the refused calls: %d tasks, want the one queued first (%v)", len(ts), err)
	}

	// Stamped as the version asks, the same requests are served; the
	// Mcp-Session-Id header is ignored on 2026-07-28, as mcp-go ignores it
	// (even another key's session id).
	other := b.connectAt(t, b.other, mcp.ProtocolVersion20251125)
	for _, c := range append(gate[1:], mcpgo...) {
		for _, h := range []map[string]string{modern, with(modern, "Mcp-Session-Id", other.GetSessionId())} {
			if got := send(c, modernBody(c.method, c.params, nil), h); got.status != http.StatusOK || got.code != 0 {
				t.Errorf("%s stamped for 2026-07-28 (%v): %+v", c.method, h, got)
			}
		}
	}
}

// TestModernAnswersMapStatus: the gate's own answers to a request of
// protocol 2026-07-28 carry the HTTP status mcp-go gives its answers of that
// version: 400 for an error the client made (-32602), 404 for -32601 (a
// task on a tool that is not task-capable: mcp-go's answer too), 200 for a
// result; older versions' errors stay 200.
func TestModernAnswersMapStatus(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	post := func(method string, params map[string]any) answer {
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+mcpapi.Path, strings.NewReader(modernBody(method, params, nil)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", mcp.ProtocolVersion20260728)
		req.Header.Set("Mcp-Method", method)
		if name, _ := params["name"].(string); name != "" {
			req.Header.Set("Mcp-Name", name)
		}
		return do(t, req, b.agent)
	}
	if a := post("tasks/get", map[string]any{"taskId": "T-nope"}); a.status != http.StatusBadRequest || a.code != mcp.INVALID_PARAMS || !strings.Contains(a.text, host.CodeNotFound) {
		t.Errorf("tasks/get of no task: %+v, want 400 -32602 not_found", a)
	}
	if a := post("tools/call", map[string]any{"name": "check_task_status", "arguments": map[string]any{"task_id": "T-nope"}, "task": map[string]any{}}); a.status != http.StatusNotFound || a.code != mcp.METHOD_NOT_FOUND {
		t.Errorf("a task on a tool that is not task-capable: %+v, want 404 -32601", a)
	}
	if a := post("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"n": 1}, "task": map[string]any{}}); a.status != http.StatusOK || a.code != 0 {
		t.Errorf("a task-type tool called as a task: %+v, want 200", a)
	}
	legacy := b.connectAt(t, b.agent, mcp.ProtocolVersion20251125)
	req, _ := http.NewRequest(http.MethodPost, b.ts.URL+mcpapi.Path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"T-nope"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Mcp-Session-Id", legacy.GetSessionId())
	if a := do(t, req, b.agent); a.status != http.StatusOK || a.code != mcp.INVALID_PARAMS {
		t.Errorf("tasks/get of no task on 2025-11-25: %+v, want 200 -32602", a)
	}
}
