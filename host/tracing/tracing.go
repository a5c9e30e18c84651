// Package tracing is the gate's OpenTelemetry seam: it installs an OTLP/HTTP
// exporter when tracing is configured, and carries W3C trace context
// (traceparent, tracestate) between HTTP headers, MCP _meta, stored tasks and
// leases.
//
// Tracing is off unless configured. Off, Tracer returns OpenTelemetry's
// no-op tracer: starting a span costs an interface call and allocates
// nothing, and the gate still keeps a producer's traceparent with its task
// and hands it to the worker, so the producer's and worker's own spans join
// one trace even when the gate records none.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope names the gate's instrumentation scope in exported spans.
const Scope = "github.com/asyncgate/asyncgate"

// Header names of W3C Trace Context, as HTTP headers and MCP _meta keys.
const (
	TraceparentHeader = "traceparent"
	TracestateHeader  = "tracestate"
)

// Config says whether and where the gate exports spans.
type Config struct {
	// Endpoint is the base URL of an OTLP/HTTP collector
	// (http://127.0.0.1:4318); spans go to Endpoint/v1/traces. Empty: the
	// standard OTEL_* variables decide (Enabled).
	Endpoint string
	// ServiceName names the gate in traces; OTEL_SERVICE_NAME wins when set.
	ServiceName string
	// Version is the gate's version, recorded as service.version.
	Version string
	// Getenv reads the environment (os.Getenv; a map in tests).
	Getenv func(string) string
}

// Enabled reports whether cfg turns tracing on, and why not when it is off:
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off;
// otherwise an Endpoint, OTEL_TRACES_EXPORTER=otlp, or an
// OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT turn it on. Any other exporter name
// is an error: the gate exports OTLP over HTTP only.
func (cfg Config) Enabled() (bool, error) {
	env := cfg.getenv
	if strings.EqualFold(strings.TrimSpace(env("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	if p := strings.TrimSpace(env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")); p == "" {
		p = strings.TrimSpace(env("OTEL_EXPORTER_OTLP_PROTOCOL"))
		if p != "" && p != "http/protobuf" && p != "http/json" {
			return false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: the gate exports http/protobuf", p)
		}
	} else if p != "http/protobuf" && p != "http/json" {
		return false, fmt.Errorf("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=%q: the gate exports http/protobuf", p)
	}
	switch exp := strings.TrimSpace(env("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: the gate exports otlp (over HTTP) or none", exp)
	}
	return cfg.Endpoint != "" || env("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
}

func (cfg Config) getenv(k string) string {
	if cfg.Getenv == nil {
		return ""
	}
	return cfg.Getenv(k)
}

// Start installs the global tracer provider and W3C propagator when cfg
// turns tracing on (Enabled), and returns the function that flushes and
// stops it. Off, it installs nothing and returns a no-op stop. Spans are
// exported in batches in the background; an unreachable collector costs
// dropped spans, never a slower request.
func Start(ctx context.Context, cfg Config) (stop func(context.Context) error, on bool, err error) {
	off := func(context.Context) error { return nil }
	on, err = cfg.Enabled()
	if err != nil || !on {
		return off, false, err
	}
	var opts []otlptracehttp.Option
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return off, false, fmt.Errorf("otlp_endpoint %q: want http://host:port or https://host:port", cfg.Endpoint)
		}
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return off, false, fmt.Errorf("tracing: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "asyncgate"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(name), semconv.ServiceVersion(cfg.Version)))
	if err != nil {
		return off, false, fmt.Errorf("tracing: %w", err)
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the defaults.
	if envRes, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, envRes); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithResource(res),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return func(ctx context.Context) error {
		err := tp.Shutdown(ctx)
		otel.SetTracerProvider(noop.NewTracerProvider())
		return err
	}, true, nil
}

// Tracer is the gate's tracer: the exporting one after Start turned
// tracing on, a no-op one otherwise.
func Tracer() trace.Tracer { return otel.Tracer(Scope) }

// Context is W3C trace context as text: what a task keeps and a lease hands
// on. The zero value carries no trace.
type Context struct {
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// IsZero reports whether c carries no trace.
func (c Context) IsZero() bool { return c.Traceparent == "" }

var w3c = propagation.TraceContext{}

// Parse checks c and returns it normalized: a traceparent that is not valid
// W3C (version 00 form, non-zero ids) is dropped with its tracestate, as the
// W3C spec tells a receiver to; a tracestate is kept only beside a valid
// traceparent and within 512 bytes.
func Parse(traceparent, tracestate string) Context {
	sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), &carrier{traceparent, tracestate}))
	if !sc.IsValid() {
		return Context{}
	}
	return FromSpanContext(sc)
}

// FromSpanContext is the trace context that names sc as the parent.
func FromSpanContext(sc trace.SpanContext) Context {
	if !sc.IsValid() {
		return Context{}
	}
	var c carrier
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), &c)
	if len(c.ts) > 512 {
		c.ts = ""
	}
	return Context{Traceparent: c.tp, Tracestate: c.ts}
}

// FromContext is the trace context of ctx's current span (or remote
// parent); zero when ctx carries none.
func FromContext(ctx context.Context) Context {
	return FromSpanContext(trace.SpanContextFromContext(ctx))
}

// SpanContext is c as a remote span context (invalid for the zero Context).
func (c Context) SpanContext() trace.SpanContext {
	if c.IsZero() {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), &carrier{c.Traceparent, c.Tracestate}))
}

// Into returns ctx with c as its remote parent; ctx unchanged when c is
// zero or invalid.
func (c Context) Into(ctx context.Context) context.Context {
	sc := c.SpanContext()
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Carried returns the trace context ctx carries: its span's if it has a
// valid one, else the parent named by fallback.
func Carried(ctx context.Context, fallback Context) Context {
	if c := FromContext(ctx); !c.IsZero() {
		return c
	}
	return fallback
}

// RecordError marks span as failed with err (nothing when err is nil).
func RecordError(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// Attr shortens attribute construction for callers outside this package.
func Attr(k, v string) attribute.KeyValue { return attribute.String(k, v) }

// carrier is a TextMapCarrier of the two W3C fields.
type carrier struct{ tp, ts string }

func (c carrier) Get(k string) string {
	switch k {
	case TraceparentHeader:
		return c.tp
	case TracestateHeader:
		return c.ts
	}
	return ""
}

func (c *carrier) Set(k, v string) {
	switch k {
	case TraceparentHeader:
		c.tp = v
	case TracestateHeader:
		c.ts = v
	}
}

func (c carrier) Keys() []string { return []string{TraceparentHeader, TracestateHeader} }

// maxBatchLinks bounds the links a batch span keeps to the requests it
// carried besides its parent.
const maxBatchLinks = 32

// StartBatch starts the span of one store batch (a writer's group commit)
// of n updates, where ctxOf(i) is the context of update i: a child of the
// first update's span that records, with links to the others'. Updates
// outside any recorded trace get no span: with none in the batch (and
// always with tracing off) it returns a no-op span after n context lookups.
// system names the database ("sqlite", "postgresql").
func StartBatch(system string, n int, ctxOf func(int) context.Context) trace.Span {
	var parent context.Context
	var links []trace.Link
	for i := range n {
		ctx := ctxOf(i)
		if !trace.SpanFromContext(ctx).IsRecording() {
			continue
		}
		if parent == nil {
			parent = ctx
			continue
		}
		if len(links) < maxBatchLinks {
			links = append(links, trace.Link{SpanContext: trace.SpanContextFromContext(ctx)})
		}
	}
	if parent == nil {
		return trace.SpanFromContext(context.Background())
	}
	_, span := Tracer().Start(parent, "store.batch", trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("db.system.name", system), attribute.Int("asyncgate.batch.updates", n)))
	return span
}
