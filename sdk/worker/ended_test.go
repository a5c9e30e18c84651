package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// syncLog is a log the test reads while the Runner writes it.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitLog waits until the log holds one of lines and returns it all.
func (l *syncLog) waitLog(t *testing.T, lines ...string) string {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		s := l.String()
		for _, line := range lines {
			if strings.Contains(s, line) {
				return s
			}
		}
	}
	t.Fatalf("none of %q logged:\n%s", lines, l.String())
	return ""
}

// endedGate is a gate that offers one task (a 3 s lease) and answers its
// heartbeats, once ended() says so, 409 lease_expired with task_status
// succeeded: what the gate tells the worker that held the lease of a task
// whose completion it took. Completions answer 503, as one whose answer
// was lost would be retried into a gate that is restarting.
type endedGate struct {
	*httptest.Server
	beats, completes, fails atomic.Int32
}

func newEndedGate(t *testing.T, ended func(g *endedGate) bool) *endedGate {
	g := &endedGate{}
	var offered atomic.Bool
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		now := time.Now().UTC()
		switch {
		case r.URL.Path == "/v1/leases":
			if offered.Swap(true) {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"leases": []any{map[string]any{
				"lease_id": "L1", "run_id": "L1", "attempt": 1, "server_time": now, "lease_expires_at": now.Add(3 * time.Second),
				"task": map[string]any{"task_id": "T1", "task_type": "ended", "params": map[string]any{}},
			}}})
		case r.URL.Path == "/v1/leases/L1/accept":
			w.Write([]byte(`{"status":"accepted","lease_id":"L1"}`))
		case r.URL.Path == "/v1/leases/L1/heartbeat":
			g.beats.Add(1)
			if ended(g) {
				w.WriteHeader(http.StatusConflict)
				w.Write([]byte(`{"error":"lease_expired","detail":"lease L1 is no longer held: the task is succeeded","task_status":"succeeded"}`))
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"status": "ok", "lease_id": "L1", "server_time": now, "lease_expires_at": now.Add(3 * time.Second)})
		case r.URL.Path == "/v1/leases/L1/complete":
			g.completes.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"database_unavailable","detail":"restarting"}`))
		case r.URL.Path == "/v1/leases/L1/fail":
			g.fails.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"database_unavailable","detail":"restarting"}`))
		default: // no batch route: single calls
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"not_found","detail":"no route"}`))
		}
	}))
	t.Cleanup(g.Close)
	return g
}

func endedConfig(t *testing.T, log *syncLog) worker.Config {
	cfg := testConfig(t)
	cfg.DisableSpool, cfg.SingleOutcomes = true, true
	cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return cfg
}

// TestWorkerTaskEndedWhileCompleting: the handler returned and its
// completion is being retried (its answer lost) when a heartbeat answers
// that the task already succeeded. The Runner says so at INFO, stops
// heartbeating and sending the completion, and never calls the lease lost.
func TestWorkerTaskEndedWhileCompleting(t *testing.T) {
	log := &syncLog{}
	g := newEndedGate(t, func(g *endedGate) bool { return g.completes.Load() > 0 })
	rr := start(t, g.URL, "key", endedConfig(t, log), map[string]worker.HandlerFunc{
		"ended": func(ctx context.Context, task *worker.Task) (any, error) { return "ok", nil },
	})
	out := log.waitLog(t, "the outcome is not sent again", "lease lost")
	if strings.Contains(out, "lease lost") || strings.Contains(out, "level=WARN msg=\"the lease was lost") {
		t.Fatalf("a task that already ended was reported as a lost lease:\n%s", out)
	}
	if !strings.Contains(out, `level=INFO msg="the task already ended at the gate; heartbeats stop"`) {
		t.Fatalf("the heartbeat's answer was not logged at INFO:\n%s", out)
	}
	beats, completes := g.beats.Load(), g.completes.Load()
	if err := rr.stop(t); err != nil {
		t.Fatal(err)
	}
	if g.beats.Load() != beats || g.completes.Load() != completes || g.fails.Load() != 0 {
		t.Fatalf("calls after the task ended: heartbeats %d→%d, completions %d→%d, failures %d",
			beats, g.beats.Load(), completes, g.completes.Load(), g.fails.Load())
	}
}

// TestWorkerTaskEndedWhileRunning: a heartbeat answers that the task
// already succeeded while the handler still runs: the handler is
// canceled, nothing is reported, and the log says the task ended (INFO),
// not that the lease was lost.
func TestWorkerTaskEndedWhileRunning(t *testing.T) {
	log := &syncLog{}
	g := newEndedGate(t, func(*endedGate) bool { return true })
	causes := make(chan error, 1)
	rr := start(t, g.URL, "key", endedConfig(t, log), map[string]worker.HandlerFunc{
		"ended": func(ctx context.Context, task *worker.Task) (any, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		},
	})
	select {
	case c := <-causes:
		if !errors.Is(c, worker.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler was not canceled")
	}
	out := log.waitLog(t, "task stopped")
	if strings.Contains(out, "lease lost") || !strings.Contains(out, `level=INFO msg="task stopped: it already ended at the gate`) {
		t.Fatalf("want the task's end logged at INFO, not a lost lease:\n%s", out)
	}
	if err := rr.stop(t); err != nil {
		t.Fatal(err)
	}
	if g.completes.Load() != 0 || g.fails.Load() != 0 || g.beats.Load() != 1 {
		t.Fatalf("heartbeats %d, completions %d, failures %d; want 1, 0, 0", g.beats.Load(), g.completes.Load(), g.fails.Load())
	}
}

func TestTaskFinished(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&worker.APIError{Status: 409, Code: "lease_expired", TaskStatus: "succeeded"}, "succeeded"},
		{&worker.APIError{Status: 409, Code: "lease_expired", TaskStatus: "leased"}, ""},
		{&worker.APIError{Status: 409, Code: "lease_expired"}, ""},
		{&worker.APIError{Status: 409, Code: "conflict", TaskStatus: "succeeded"}, ""},
		{errors.New("x"), ""},
	} {
		if got := worker.TaskFinished(c.err); got != c.want {
			t.Errorf("TaskFinished(%#v) = %q, want %q", c.err, got, c.want)
		}
	}
}
