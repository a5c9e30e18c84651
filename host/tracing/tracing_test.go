package tracing

import (
	"context"
	"strings"
	"testing"
)

func TestEnabled(t *testing.T) {
	cases := []struct {
		endpoint string
		env      map[string]string
		on       bool
		err      string
	}{
		{on: false},
		{endpoint: "http://127.0.0.1:4318", on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, on: true},
		{endpoint: "http://127.0.0.1:4318", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, on: false},
		{endpoint: "http://127.0.0.1:4318", env: map[string]string{"OTEL_SDK_DISABLED": "true"}, on: false},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "otlp"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "http/protobuf"},
	}
	for _, c := range cases {
		cfg := Config{Endpoint: c.endpoint, Getenv: func(k string) string { return c.env[k] }}
		on, err := cfg.Enabled()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: err %v, want one naming %q", c, err, c.err)
			}
			continue
		}
		if err != nil || on != c.on {
			t.Errorf("%+v: on=%v err=%v, want on=%v", c, on, err, c.on)
		}
	}
}

func TestStartRefusesABadEndpoint(t *testing.T) {
	for _, ep := range []string{"127.0.0.1:4318", "ftp://x", "http://"} {
		if _, on, err := Start(context.Background(), Config{Endpoint: ep}); err == nil || on {
			t.Errorf("endpoint %q: on=%v err=%v, want an error", ep, on, err)
		}
	}
}

func TestParse(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if c := Parse(tp, "a=1,b=2"); c.Traceparent != tp || c.Tracestate != "a=1,b=2" {
		t.Errorf("valid: %+v", c)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"} {
		if c := Parse(bad, "a=1"); !c.IsZero() || c.Tracestate != "" {
			t.Errorf("Parse(%q) = %+v, want dropped", bad, c)
		}
	}
	if c := Parse(tp, strings.Repeat("k=v,", 200)); c.Traceparent != tp || len(c.Tracestate) > 512 {
		t.Errorf("an oversized tracestate is dropped, the traceparent kept: %+v", c)
	}
}

// With tracing off, a task still keeps its producer's trace context: the
// no-op tracer's span carries the remote parent through.
func TestOffCarriesTheParent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := Parse(tp, "").Into(context.Background())
	ctx, span := Tracer().Start(ctx, "x")
	defer span.End()
	if span.IsRecording() {
		t.Fatal("a span records with tracing off")
	}
	if got := FromContext(ctx); got.Traceparent != tp {
		t.Fatalf("FromContext = %+v, want the parent %s", got, tp)
	}
	if s := StartBatch("sqlite", 2, func(int) context.Context { return ctx }); s.IsRecording() || s.SpanContext().IsValid() {
		t.Fatal("a batch of untraced updates got a span")
	}
	if FromContext(context.Background()) != (Context{}) || (Context{}).Into(context.Background()) != context.Background() {
		t.Fatal("the zero context carries something")
	}
}
