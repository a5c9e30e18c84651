package mcpapi

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/asyncgate/asyncgate/host/tracing"
)

// traceCall continues the caller's trace for one tool call: MCP carries W3C
// trace context in the request's _meta (_meta.traceparent,
// _meta.tracestate). A call with a valid traceparent gets a server span
// named "tools/call NAME" under which the engine's spans nest, and a
// queue_task keeps the trace with its task; a call without one gets none.
func traceCall(ctx context.Context, tool string, req mcp.CallToolRequest) (context.Context, trace.Span) {
	m := req.Params.Meta
	if m == nil || m.AdditionalFields == nil {
		return ctx, trace.SpanFromContext(context.Background()) // a no-op span: ending it ends nothing
	}
	tp, _ := m.AdditionalFields[tracing.TraceparentHeader].(string)
	ts, _ := m.AdditionalFields[tracing.TracestateHeader].(string)
	tc := tracing.Parse(tp, ts)
	if tc.IsZero() {
		return ctx, trace.SpanFromContext(context.Background()) // a no-op span: ending it ends nothing
	}
	ctx, span := tracing.Tracer().Start(tc.Into(ctx), "tools/call "+tool, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", tool)))
	return ctx, span
}
