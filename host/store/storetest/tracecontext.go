package storetest

import (
	"encoding/json"
	"testing"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/tracing"
)

// testTraceContext: a task keeps the W3C trace context it was enqueued in
// and its worker gets it with the lease; a duplicate enqueue in another
// trace does not change it; a task enqueued without one has none.
func testTraceContext(t *testing.T, b *Bundle) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := tracing.Parse(tp, "vendor=1").Into(b.Ctx)
	req := engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{"n":1}`), IdempotencyKey: "traced"}
	res, err := b.Engine.Enqueue(ctx, b.Agent, req)
	if err != nil {
		t.Fatal(err)
	}
	if tk := b.Task(t, res.TaskID); tk.Traceparent != tp || tk.Tracestate != "vendor=1" {
		t.Fatalf("stored trace context %q %q, want %q vendor=1", tk.Traceparent, tk.Tracestate, tp)
	}
	other := tracing.Parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "").Into(b.Ctx)
	if dup, err := b.Engine.Enqueue(other, b.Agent, req); err != nil || !dup.IsDuplicate {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
	plain := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "work.w1", "work")
	if o.Task.ID != res.TaskID || o.Task.Traceparent != tp || o.Task.Tracestate != "vendor=1" {
		t.Fatalf("offer of %s hands over %q %q, want the task's %q", o.Task.ID, o.Task.Traceparent, o.Task.Tracestate, tp)
	}
	if tk := b.Task(t, plain.TaskID); tk.Traceparent != "" || tk.Tracestate != "" {
		t.Fatalf("a task enqueued outside any trace has %q %q", tk.Traceparent, tk.Tracestate)
	}
}
