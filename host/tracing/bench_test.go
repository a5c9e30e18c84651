package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkTaskSpans is the gate's tracing work for one task cycle: parse
// the producer's traceparent, the enqueue span, keep its context, the store
// batch span, the lease span and a worker call's request span. Off: the
// global no-op tracer; on: the SDK with a batch processor (to an exporter
// that drops the spans, so the collector's network is not measured).
func BenchmarkTaskSpans(b *testing.B) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cycle := func() {
		ctx := Parse(tp, "").Into(context.Background())
		ctx, enq := Tracer().Start(ctx, "asyncgate.enqueue")
		kept := FromContext(ctx)
		batch := StartBatch("sqlite", 1, func(int) context.Context { return ctx })
		batch.End()
		enq.End()
		_, lease := Tracer().Start(kept.Into(context.Background()), "asyncgate.lease")
		lease.End()
		_, call := Tracer().Start(Parse(kept.Traceparent, kept.Tracestate).Into(context.Background()), "POST /v1/leases/:lease_id/complete",
			trace.WithSpanKind(trace.SpanKindServer))
		call.End()
	}
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cycle()
		}
	})
	b.Run("on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		prev := otel.GetTracerProvider()
		otel.SetTracerProvider(tp)
		defer func() { otel.SetTracerProvider(prev); tp.Shutdown(context.Background()) }()
		b.ReportAllocs()
		for b.Loop() {
			cycle()
		}
	})
}
