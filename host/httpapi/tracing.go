package httpapi

import (
	"errors"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/tracing"
)

// traceRequest continues the caller's trace: a request with a valid W3C
// traceparent header gets a server span named by its route
// ("POST /v1/leases/:lease_id/heartbeat"), under which the engine's spans
// (an enqueue, a store batch) nest, and an enqueue keeps that trace with its
// task. Requests without one get no span: polls, dashboards and scrapes
// would otherwise each start a trace of their own. With tracing off the
// header is still carried through ctx, so a task keeps its producer's trace.
func traceRequest(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		tp := r.Header.Get(tracing.TraceparentHeader)
		if tp == "" {
			return next(c)
		}
		tc := tracing.Parse(tp, r.Header.Get(tracing.TracestateHeader))
		if tc.IsZero() {
			return next(c) // not W3C: ignored, as the spec says
		}
		ctx, span := tracing.Tracer().Start(tc.Into(r.Context()), r.Method+" "+c.Path(), trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		c.SetRequest(r.WithContext(ctx))
		err := next(c)
		if span.IsRecording() {
			status := c.Response().Status
			if err != nil {
				code, detail := classify(err)
				status = host.HTTPStatus(code)
				var he *echo.HTTPError
				if errors.As(err, &he) && code == host.CodeInternal {
					status = he.Code
				}
				span.SetAttributes(attribute.String("asyncgate.error", code))
				if status >= 500 {
					span.SetStatus(codes.Error, detail)
				}
			}
			span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", c.Path()),
				attribute.Int("http.response.status_code", status))
		}
		return err
	}
}
