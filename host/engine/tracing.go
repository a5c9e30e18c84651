package engine

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/tracing"
)

// Spans of a task's life (docs/tracing.md). A task keeps the trace context
// it was enqueued in (host.Task.Traceparent): the enqueue span's when the
// gate records spans, else the producer's as it came. Its lease span joins
// that trace, and the worker gets it with the offer and sends it with its
// heartbeats and outcome, whose request spans join it too. With tracing off
// the tracer is a no-op and these cost a context lookup each.

// startEnqueueSpan starts the span of one enqueue under ctx's trace.
func startEnqueueSpan(ctx context.Context, actor Actor, taskType string) (context.Context, trace.Span) {
	ctx, span := tracing.Tracer().Start(ctx, "asyncgate.enqueue", trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("asyncgate.tenant", actor.Tenant), attribute.String("asyncgate.task_type", taskType),
			attribute.String("asyncgate.producer", actor.Principal))
	}
	return ctx, span
}

// keepTrace records ctx's trace context on t, for its lease and worker.
func keepTrace(ctx context.Context, t *host.Task) {
	tc := tracing.FromContext(ctx)
	t.Traceparent, t.Tracestate = tc.Traceparent, tc.Tracestate
}

// traceLeases records one span per granted lease in its task's trace
// (nothing for tasks enqueued without one, or with tracing off).
func traceLeases(ctx context.Context, workerID string, offers []host.Offer) {
	for _, o := range offers {
		t := o.Task
		if t == nil || t.Traceparent == "" {
			continue
		}
		parent := tracing.Context{Traceparent: t.Traceparent, Tracestate: t.Tracestate}.Into(context.Background())
		// The worker's long-poll is not part of the task's story: link it.
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
		_, span := tracing.Tracer().Start(parent, "asyncgate.lease", opts...)
		if span.IsRecording() {
			span.SetAttributes(attribute.String("asyncgate.task_id", t.ID), attribute.String("asyncgate.task_type", t.Type),
				attribute.String("asyncgate.lease_id", o.LeaseID), attribute.String("asyncgate.worker_id", workerID),
				attribute.Int("asyncgate.attempt", o.Attempt))
		}
		span.End()
	}
}
