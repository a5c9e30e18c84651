package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// A context's trace (WithTrace) goes with every request as W3C headers; a
// propagator set with WithTracePropagator is used when it has none.
func TestTraceHeaders(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var mu sync.Mutex
	var got []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent")+"|"+r.Header.Get("tracestate"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"task_id":"T1","status":"queued"}`))
	}))
	defer ts.Close()
	c := New(ts.URL, "k", WithTracePropagator(func(ctx context.Context, h http.Header) { h.Set("traceparent", "from-propagator") }))
	if _, err := c.Enqueue(WithTrace(context.Background(), tp, "v=1"), "x", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(context.Background(), "T1"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ts.URL, "k").Status(context.Background(), "T1"); err != nil {
		t.Fatal(err)
	}
	want := []string{tp + "|v=1", "from-propagator|", "|"}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("headers %q, want %q", got, want)
	}
	if p, s := Trace(WithTrace(context.Background(), tp, "v=1")); p != tp || s != "v=1" {
		t.Fatalf("Trace = %q %q", p, s)
	}
}
