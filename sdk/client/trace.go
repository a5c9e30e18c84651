package client

import (
	"context"
	"net/http"
)

// traceKey keys the W3C trace context a context carries for the gate.
type traceKey struct{}

type traceContext struct{ parent, state string }

// WithTrace returns ctx carrying a W3C Trace Context: traceparent (and
// tracestate, which may be empty). Every request made with that ctx sends
// them as the traceparent and tracestate headers, so the gate's spans join
// the caller's trace and an enqueued task keeps it for its worker. A program
// that uses OpenTelemetry passes its current span's context, or sets
// WithTracePropagator once instead.
func WithTrace(ctx context.Context, traceparent, tracestate string) context.Context {
	return context.WithValue(ctx, traceKey{}, traceContext{traceparent, tracestate})
}

// Trace returns the traceparent and tracestate ctx carries (WithTrace), or
// empty strings.
func Trace(ctx context.Context) (traceparent, tracestate string) {
	tc, _ := ctx.Value(traceKey{}).(traceContext)
	return tc.parent, tc.state
}

// setTraceHeaders writes the trace context of ctx onto h: the one WithTrace
// put there, else what the propagator (WithTracePropagator) injects.
func setTraceHeaders(ctx context.Context, h http.Header, inject func(context.Context, http.Header)) {
	if tp, ts := Trace(ctx); tp != "" {
		h.Set("traceparent", tp)
		if ts != "" {
			h.Set("tracestate", ts)
		}
		return
	}
	if inject != nil {
		inject(ctx, h)
	}
}
