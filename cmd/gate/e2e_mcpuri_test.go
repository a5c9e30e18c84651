package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// TestE2EMCPResourceURIControlCharactersRefusedAlike: an MCP resource URI
// whose id or name holds a NUL or another control character — written as
// a percent-escape (%00, %01, %7F, %C2%85) or as it is — is refused with
// -32602 bad_request before either store sees it, on resources/read of
// every resource of the gate and on resources/subscribe, through the real
// binary (`gate mcp --url --key`, the stdio bridge, to `gate serve`) on
// SQLite and PostgreSQL alike. PostgreSQL refused U+0000 in text ("the
// database refused a value") where SQLite looked it up (not_found): one
// request, two answers. So are escapes that decode to bytes that are not
// UTF-8 (PostgreSQL refused them too). An id without either still reads as
// before.
func TestE2EMCPResourceURIControlCharactersRefusedAlike(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "ta")
			agent := g.newKey(t, "agent", "agent.a", "ta")
			id := g.enqueue(t, agent, "job", nil)
			c := stdioClientAt(t, mcp.ProtocolVersion20251125, nil, "mcp", "--url", g.URL, "--key", agent)

			// The task's own URI reads; one that names no task is not_found.
			if res, e := mcpRPC(t, c, "resources/read", map[string]any{"uri": "asyncgate://tasks/" + id}); e != nil || !strings.Contains(string(res), id) {
				t.Fatalf("read own task: %+v %s", e, res)
			}
			mcpRefused(t, c, "resources/read", "asyncgate://tasks/T-nope", "not_found", "")
			// A receipt id is path-unescaped as a task id is: an escaped
			// letter names the same receipt, an escaped slash none.
			rid := assignReceiptOf(t, c, id)
			esc := fmt.Sprintf("asyncgate://receipts/%%%02X%s/chain", rid[0], rid[1:])
			if res, e := mcpRPC(t, c, "resources/read", map[string]any{"uri": esc}); e != nil || !strings.Contains(string(res), "task.assigned") {
				t.Fatalf("read %s: %+v %s", esc, e, res)
			}
			mcpRefused(t, c, "resources/read", "asyncgate://receipts/"+rid+"%2Fx/chain", "bad_request", "receipt_id")

			for _, uri := range []string{
				"asyncgate://tasks/%00",
				"asyncgate://tasks/" + id + "%00",
				"asyncgate://tasks/T-%01",
				"asyncgate://tasks/T-%7F",
				"asyncgate://tasks/T-%C2%85",
				"asyncgate://tasks/T-\x01",
				"asyncgate://task-types/job%00",
				"asyncgate://task-types/%0A",
				"asyncgate://receipts/R-%00/chain",
				"asyncgate://resource-leases/FILE:%2Fa%00",
				"asyncgate://resource-leases/%00",
			} {
				mcpRefused(t, c, "resources/read", uri, "bad_request", "control character")
			}
			// Escapes that decode to bytes no UTF-8 text holds: PostgreSQL
			// refused them ("invalid byte sequence") where SQLite looked
			// them up.
			for _, uri := range []string{
				"asyncgate://tasks/%FF",
				"asyncgate://tasks/T-%C0%80",
				"asyncgate://task-types/%ED%A0%80",
				"asyncgate://resource-leases/FILE:%2F%FF",
			} {
				mcpRefused(t, c, "resources/read", uri, "bad_request", "not UTF-8")
			}
			mcpRefused(t, c, "resources/subscribe", "asyncgate://tasks/%FF", "bad_request", "not UTF-8")
			for _, uri := range []string{
				"asyncgate://tasks/%00",
				"asyncgate://tasks/" + id + "%00",
				"asyncgate://resource-leases/FILE:%2Fa%00",
			} {
				mcpRefused(t, c, "resources/subscribe", uri, "bad_request", "control character")
			}
			// A subscription that works still works.
			if _, e := mcpRPC(t, c, "resources/subscribe", map[string]any{"uri": "asyncgate://tasks/" + id}); e != nil {
				t.Fatalf("subscribe to own task: %+v", e)
			}
		})
	}
}

// assignReceiptOf reads the task resource of id and answers its
// task.assigned receipt's id.
func assignReceiptOf(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	res, e := mcpRPC(t, c, "resources/read", map[string]any{"uri": "asyncgate://tasks/" + id})
	if e != nil {
		t.Fatalf("read task %s: %+v", id, e)
	}
	var read struct {
		Contents []struct {
			Text string `json:"text"`
		} `json:"contents"`
	}
	var st struct {
		AssignReceipt string `json:"assign_receipt_id"`
	}
	if err := json.Unmarshal(res, &read); err != nil || len(read.Contents) != 1 {
		t.Fatalf("task resource %s: %v %s", id, err, res)
	}
	if err := json.Unmarshal([]byte(read.Contents[0].Text), &st); err != nil || st.AssignReceipt == "" {
		t.Fatalf("task resource %s names no task.assigned receipt: %v %s", id, err, read.Contents[0].Text)
	}
	return st.AssignReceipt
}

// mcpRPCID numbers mcpRPC's requests, small enough to come back through
// any JSON reader unchanged.
var mcpRPCID atomic.Int64

// mcpRPC sends a raw JSON-RPC request on c and returns its result, or its error.
func mcpRPC(t *testing.T, c *client.Client, method string, params any) (json.RawMessage, *mcp.JSONRPCErrorDetails) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: "2.0",
		ID: mcp.NewRequestId(1000 + mcpRPCID.Add(1)), Method: method, Params: params})
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return res.Result, res.Error
}

// mcpRefused checks that method of uri is -32602 with the gate's code in
// data and, when what is not empty, a detail that says it.
func mcpRefused(t *testing.T, c *client.Client, method, uri, code, what string) {
	t.Helper()
	res, e := mcpRPC(t, c, method, map[string]any{"uri": uri})
	if e == nil {
		t.Errorf("%s %q: answered %s, want -32602 %s", method, uri, res, code)
		return
	}
	var body struct {
		Error  string `json:"error"`
		Detail string `json:"detail"`
	}
	raw, _ := json.Marshal(e.Data)
	if e.Code != mcp.INVALID_PARAMS || json.Unmarshal(raw, &body) != nil || body.Error != code || !strings.Contains(body.Detail, what) ||
		e.Message != body.Error+": "+body.Detail {
		t.Errorf("%s %q: %d %q data %s; want -32602 %s saying %q", method, uri, e.Code, e.Message, raw, code, what)
	}
}
