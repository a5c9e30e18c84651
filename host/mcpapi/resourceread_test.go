package mcpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestResourceReadErrors checks that resources/read answers a caller's
// error as tasks/get does: -32602 with the gate's code in data.error, the
// same for a task that does not exist and one of another tenant, on both
// protocol eras; a read that works still answers the contents.
func TestResourceReadErrors(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	for _, version := range []string{mcp.LATEST_PROTOCOL_VERSION, mcp.ProtocolVersion20251125} {
		t.Run(version, func(t *testing.T) {
			agent := b.connectAt(t, b.agent, version)
			other := b.connectAt(t, b.other, version)
			var ct createTask
			rpcOK(t, agent, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"n": 1}, "task": map[string]any{}}, &ct)
			mine := mcpapi.TaskURIPrefix + ct.Task.TaskId

			rr := mcp.ReadResourceRequest{}
			rr.Params.URI = mine
			if res, err := agent.ReadResource(context.Background(), rr); err != nil || len(res.Contents) != 1 ||
				!strings.Contains(res.Contents[0].(mcp.TextResourceContents).Text, ct.Task.TaskId) {
				t.Fatalf("read own task: %v %+v", err, res)
			}

			// On 2026-07-28 a read result carries what mcp-go's own answers
			// carry: its type, the server's identity and cache hints.
			if version == mcp.LATEST_PROTOCOL_VERSION {
				raw, e := rpc(t, agent, "resources/read", map[string]any{"uri": mine,
					"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": version}})
				var got struct {
					ResultType string          `json:"resultType"`
					TTL        *int64          `json:"ttlMs"`
					Scope      string          `json:"cacheScope"`
					Meta       map[string]any  `json:"_meta"`
					Contents   json.RawMessage `json:"contents"`
				}
				if e != nil || json.Unmarshal(raw, &got) != nil || got.ResultType != "complete" || got.TTL == nil ||
					got.Scope != "private" || got.Meta["io.modelcontextprotocol/serverInfo"] == nil || len(got.Contents) == 0 {
					t.Errorf("read own task on %s: %+v %s", version, e, raw)
				}
			}

			_, want := rpc(t, agent, "tasks/get", map[string]any{"taskId": "T-nope"})
			for _, c := range []struct {
				who       string
				uri, code string
			}{
				{"agent", mcpapi.TaskURIPrefix + "T-nope", host.CodeNotFound},
				{"other", mine, host.CodeNotFound},
				{"agent", mcpapi.ReceiptURIPrefix + "R-nope/chain", host.CodeNotFound},
				{"agent", mcpapi.ReceiptURIPrefix + "R-nope", host.CodeBadRequest},
				{"agent", mcpapi.TaskTypeURIPrefix + "nope", host.CodeNotFound},
				{"agent", mcpapi.ResourceLeaseURIPrefix, host.CodeBadRequest},
				{"agent", mcpapi.ResourceLeaseURIPrefix + "FILE:/p%D0%B0ypal.go", host.CodeInvalidResource},
				// A control character, escaped or not, is refused before any
				// lookup (both stores: TestE2EMCPResourceURIControlCharactersRefusedAlike).
				{"agent", mcpapi.TaskURIPrefix + "%00", host.CodeBadRequest},
				{"agent", mcpapi.TaskTypeURIPrefix + "echo%0A", host.CodeBadRequest},
				{"agent", mcpapi.ResourceLeaseURIPrefix + "FILE:/a\x01", host.CodeBadRequest},
				{"agent", mcpapi.TaskURIPrefix + "T-%FF", host.CodeBadRequest},
			} {
				c := c
				cl := agent
				if c.who == "other" {
					cl = other
				}
				_, e := rpc(t, cl, "resources/read", map[string]any{"uri": c.uri})
				if e == nil || e.Code != mcp.INVALID_PARAMS {
					t.Errorf("read %s as %s: %+v", c.uri, c.who, e)
					continue
				}
				var body mcpapi.ErrorBody
				raw, _ := json.Marshal(e.Data)
				if err := json.Unmarshal(raw, &body); err != nil || body.Error != c.code || body.Detail == "" ||
					e.Message != body.Error+": "+body.Detail {
					t.Errorf("read %s as %s: %d %q %s", c.uri, c.who, e.Code, e.Message, raw)
				}
				if c.uri == mcpapi.TaskURIPrefix+"T-nope" && (want == nil || e.Code != want.Code || e.Message != want.Message) {
					t.Errorf("read %s: %+v, tasks/get: %+v", c.uri, e, want)
				}
			}
			// Not yours and does not exist read alike.
			_, foreign := rpc(t, other, "resources/read", map[string]any{"uri": mine})
			_, missing := rpc(t, other, "resources/read", map[string]any{"uri": mcpapi.TaskURIPrefix + "T-nope"})
			if foreign == nil || missing == nil || foreign.Code != missing.Code ||
				strings.Replace(foreign.Message, ct.Task.TaskId, "T-nope", 1) != missing.Message {
				t.Errorf("foreign %+v, missing %+v", foreign, missing)
			}
		})
	}
}
