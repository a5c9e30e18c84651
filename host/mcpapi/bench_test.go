package mcpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// BenchmarkTaskAugmentedCall is the round trip of a task-augmented tools/call
// of a task-type tool over streamable HTTP: the answer comes once the gate
// task is queued (enqueue with its receipt, one SQLite transaction).
func BenchmarkTaskAugmentedCall(b *testing.B) {
	tb := setup(b, mcpapi.Config{})
	c := tb.connectAt(b, tb.agent, mcp.ProtocolVersion20251125) // the session era of today's clients
	params := map[string]any{"name": "echo", "arguments": map[string]any{"n": 1}, "task": map[string]any{}}
	b.ResetTimer()
	for b.Loop() {
		var ct createTask
		rpcOK(b, c, "tools/call", params, &ct)
		if ct.Task.Status != mcp.TaskStatusWorking {
			b.Fatalf("created %+v", ct)
		}
	}
}

// BenchmarkToolsList200Types is tools/list over streamable HTTP for an agent
// whose tenant has 200 task types (each a tool with its params schema), on
// top of the built-in tools. Goal: under 50 ms.
func BenchmarkToolsList200Types(b *testing.B) {
	tb := setup(b, mcpapi.Config{})
	ctx := context.Background()
	for i := range 199 { // echo is the 200th
		tt := host.NewTaskType(fmt.Sprintf("type-%03d", i))
		tt.Tenant = "default"
		tt.Description = "A benchmark task type with a params schema of a few fields."
		tt.ParamsSchema = json.RawMessage(`{"type":"object","properties":{"doc":{"type":"string"},"pages":{"type":"integer","minimum":1},"lang":{"enum":["en","de","fr"]}},"required":["doc"]}`)
		if _, err := tb.eng.PutTaskType(ctx, tt); err != nil {
			b.Fatal(err)
		}
	}
	c := tb.connectAt(b, tb.agent, mcp.ProtocolVersion20251125) // the session era of today's clients
	// The answer is counted, not decoded into mcp-go's Tool values: the
	// client's schema decoding costs more than the gate's whole answer.
	var res struct {
		Tools []json.RawMessage `json:"tools"`
	}
	rpcOK(b, c, "tools/list", map[string]any{}, &res)
	want := len(res.Tools) // the agent's tools and its 200 task types
	if want < 200 {
		b.Fatalf("%d tools before timing, want the 200 task types and the agent's own", want)
	}
	b.ResetTimer()
	for b.Loop() {
		res.Tools = nil
		rpcOK(b, c, "tools/list", map[string]any{}, &res)
		if len(res.Tools) != want {
			b.Fatalf("%d tools, want %d", len(res.Tools), want)
		}
	}
}
