package mcpapi_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestQueueTaskKeepsMetaTraceparent: an agent's queue_task with
// _meta.traceparent (the MCP convention for W3C trace context) enqueues a
// task that keeps the trace for its worker.
func TestQueueTaskKeepsMetaTraceparent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	req := mcp.CallToolRequest{}
	req.Params.Name = "queue_task"
	req.Params.Arguments = map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}}
	req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": tp, "tracestate": "v=1"}}
	res, err := agent.CallTool(context.Background(), req)
	if err != nil || res.IsError {
		t.Fatalf("queue_task: %v %+v", err, res)
	}
	var ack struct {
		TaskID string `json:"task_id"`
	}
	if err := json.Unmarshal(structured(t, res), &ack); err != nil {
		t.Fatal(err)
	}
	tk, err := b.eng.GetTask(context.Background(), engine.Actor{Tenant: "default", Principal: "root", Role: engine.RoleAdmin}, ack.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Traceparent != tp || tk.Tracestate != "v=1" {
		t.Fatalf("task keeps %q %q, want %q v=1", tk.Traceparent, tk.Tracestate, tp)
	}
}
