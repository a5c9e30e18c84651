package plugin

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/asyncgate/asyncgate/host/tracing"
)

// startCallSpan starts the span of one plugin call ("plugin NAME.OP") under
// ctx's span, when that span records: a call made for a traced request or
// task (a validator at enqueue, a channel at completion, a policy at
// failure). Other calls get a no-op span, so untraced work starts no trace.
func (p *Plugin) startCallSpan(ctx context.Context, op string) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return tracing.Tracer().Start(ctx, "plugin "+p.Manifest.Name+"."+op, trace.WithAttributes(
		attribute.String("asyncgate.plugin", p.Manifest.Name), attribute.String("asyncgate.plugin.version", p.Manifest.Version),
		attribute.String("asyncgate.plugin.op", op), attribute.String("asyncgate.plugin.kind", string(p.Manifest.Kind))))
}

// endCallSpan ends a plugin call's span with its fault, if any.
func endCallSpan(span trace.Span, f *Fault) {
	if f != nil && span.IsRecording() {
		span.SetAttributes(attribute.String("asyncgate.plugin.fault", string(f.Kind)))
		span.SetStatus(codes.Error, f.Error())
	}
	span.End()
}
