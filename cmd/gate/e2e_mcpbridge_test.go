package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestE2EMCPBridgeSpeaksEveryVersion: `gate mcp --url --key`, the stdio
// bridge to a running `gate serve`, carries a client of every protocol
// version the gate serves — 2026-07-28 (sessionless: each POST must carry
// Mcp-Protocol-Version, Mcp-Method and Mcp-Name matching its body) as well
// as the versions with an initialize handshake (whose POSTs after it carry
// the agreed Mcp-Protocol-Version) — through a tool call, a resource read
// and a refused call.
func TestE2EMCPBridgeSpeaksEveryVersion(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	g.putType(t, "job", map[string]any{}, "tb")
	agent := g.newKey(t, "agent", "agent.b", "tb")
	id := g.enqueue(t, agent, "job", nil)
	for _, v := range []string{mcp.LATEST_PROTOCOL_VERSION, mcp.ProtocolVersion20251125, "2025-06-18", "2025-03-26"} {
		t.Run(v, func(t *testing.T) {
			c := stdioClientAt(t, v, nil, "mcp", "--url", g.URL, "--key", agent)
			// The client asks for v; the bridge must not make it fall back
			// to an older version the server would not have chosen.
			if got := c.ProtocolVersion(); got != v {
				t.Fatalf("a client asking for %s through the bridge speaks %s", v, got)
			}
			out, isErr := callTool(t, c, "check_task_status", map[string]any{"task_id": id})
			if isErr || out["task_id"] != id {
				t.Fatalf("check_task_status through the bridge at %s: %v (tool error %v)", v, out, isErr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			read := func(uri string) (*mcp.ReadResourceResult, error) {
				req := mcp.ReadResourceRequest{}
				req.Params.URI = uri
				return c.ReadResource(ctx, req)
			}
			if res, err := read("asyncgate://tasks/" + id); err != nil || len(res.Contents) == 0 {
				t.Fatalf("resources/read through the bridge at %s: %v %v", v, res, err)
			}
			if _, err := read("asyncgate://tasks/T-nope"); err == nil || !strings.Contains(err.Error(), "not_found") {
				t.Fatalf("resources/read of no task through the bridge at %s: %v, want not_found", v, err)
			}
		})
	}
}
