package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store/faultstore"
)

// TestServeHealthAndShutdown runs the server on a real listener: /healthz
// answers while the process runs, /readyz follows the store (503
// database_unavailable while it fails), and Shutdown ends a parked long-poll
// with 204, makes Serve return nil and stops accepting connections.
func TestServeHealthAndShutdown(t *testing.T) {
	g := serveOnListener(t, 0)
	fs, eng, wk, url := g.fs, g.eng, g.worker, g.url
	ctx := context.Background()

	get := func(path string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	if code, m := get("/healthz"); code != 200 || m["status"] != "ok" {
		t.Fatalf("healthz: %d %v", code, m)
	}
	if code, m := get("/readyz"); code != 200 || m["status"] != "ready" || m["database"] != "sqlite" {
		t.Fatalf("readyz: %d %v", code, m)
	}
	fs.SetPlan(func(op faultstore.Op) faultstore.Fault {
		if op.Step == faultstore.Ping {
			return faultstore.Fault{Step: faultstore.Ping}
		}
		return faultstore.Fault{}
	})
	// /readyz reuses a probe's verdict for up to a second (a probe commits a
	// write): wait for the next probe, bounded.
	for deadline := time.Now().Add(15 * time.Second); ; {
		code, m := get("/readyz")
		if code == 503 && m["error"] == host.CodeDatabaseUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz with a failing store: still %d %v after 15 s", code, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthz with a failing store: %d, want 200 (the process runs)", code)
	}
	fs.SetPlan(nil)

	// A long-poll parks (the worker is recorded before it waits)...
	polled := longPoll(url, wk.APIKey, 600)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, err := eng.Workers(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the long-poll did not reach the engine within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// ...and Shutdown ends it long before its 600 s wait.
	g.shutdownEndsPoll(t, polled)
	if resp, err := http.Get(url + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("a request after Shutdown was answered %d", resp.StatusCode)
	}
}

// TestShutdownDuringClaimEndsLongPollEmpty: when shutdown begins while a
// long-poll's claim is inside the store (not parked between claims), the poll
// still answers 204, not an error: the store did not commit the cut claim, so
// there is nothing to offer and nothing the worker did wrong.
func TestShutdownDuringClaimEndsLongPollEmpty(t *testing.T) {
	// No sweeps during the test: the plan below holds every write in the
	// store until its context ends, and a sweep's context never does.
	g := serveOnListener(t, time.Hour)
	fs, wk, url := g.fs, g.worker, g.url
	// From now on every write waits inside the store until its caller's
	// context ends; the first one to arrive says so.
	inStore := make(chan struct{})
	var once sync.Once
	fs.SetPlan(func(op faultstore.Op) faultstore.Fault {
		if op.Step != faultstore.Begin {
			return faultstore.Fault{}
		}
		once.Do(func() { close(inStore) })
		return faultstore.Fault{Latency: time.Hour}
	})
	polled := longPoll(url, wk.APIKey, 30)
	select {
	case <-inStore:
	case <-time.After(30 * time.Second):
		t.Fatal("the long-poll did not reach the store within 30 s")
	}
	g.shutdownEndsPoll(t, polled)
}

// servedFixture is a Server answering on a real listener over a SQLite store
// wrapped in a fault store, with a worker key (echo.w1) and the echo type.
type servedFixture struct {
	fs     *faultstore.Store
	eng    *engine.Engine
	srv    *Server
	worker *auth.CreatedKey
	url    string
	served chan error // Serve's return
	logs   *lockedBuffer
}

// lockedBuffer is a log's text, written by concurrent requests.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBatchEntry5xxIsLogged: an entry of a batch answered 503 (the
// database unavailable) is logged as its single call's answer would be
// ("request failed", naming the entry), and an entry's internal error
// keeps its text in the log, not in the answer.
func TestBatchEntry5xxIsLogged(t *testing.T) {
	g := serveOnListener(t, time.Hour)
	ctx := context.Background()
	agent := engine.Actor{Tenant: g.worker.Tenant, Principal: "agent.a", Role: engine.RoleAgent}
	tt := host.NewTaskType("echo")
	tt.Tenant = agent.Tenant
	if _, err := g.eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := g.eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "echo"}); err != nil {
			t.Fatal(err)
		}
	}
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, g.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+g.worker.APIKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	code, m := post("/v1/leases", `{"worker_id":"echo.w1","max_tasks":2}`)
	offers, _ := m["leases"].([]any)
	if code != 200 || len(offers) != 2 {
		t.Fatalf("lease: %d %v", code, m)
	}
	var leases []string
	for _, o := range offers {
		leases = append(leases, o.(map[string]any)["lease_id"].(string))
	}
	g.fs.SetPlan(func(op faultstore.Op) faultstore.Fault {
		if op.Step != faultstore.Begin {
			return faultstore.Fault{}
		}
		return faultstore.Fault{Step: faultstore.Begin, Err: host.Errorf(host.CodeDatabaseUnavailable, "the database is unavailable")}
	})
	code, m = post("/v1/leases/batch", `{"entries":[{"lease_id":"`+leases[0]+`","heartbeat":{}},{"lease_id":"`+leases[1]+`","complete":{"result_pointer":"s3://b/k"}}]}`)
	g.fs.SetPlan(nil)
	results, _ := m["results"].([]any)
	if code != 200 || len(results) != 2 {
		t.Fatalf("batch: %d %v", code, m)
	}
	for i, r := range results {
		if e := r.(map[string]any); e["http_status"] != float64(503) || e["error"] != host.CodeDatabaseUnavailable {
			t.Fatalf("entry %d: %v, want 503 database_unavailable", i, e)
		}
	}
	var logged []string
	for _, l := range strings.Split(g.logs.String(), "\n") {
		if strings.Contains(l, `msg="request failed"`) && strings.Contains(l, "error=database_unavailable") && strings.Contains(l, "path=/v1/leases/batch") {
			logged = append(logged, l)
		}
	}
	if len(logged) != 2 || !strings.Contains(strings.Join(logged, "\n"), "entry=0") || !strings.Contains(strings.Join(logged, "\n"), "entry=1") {
		t.Fatalf("the entries' 503s logged as %q, want one line each, naming entries 0 and 1", logged)
	}
}

// serveOnListener builds a servedFixture; sweep is the engine's lease sweep
// interval (0: the default).
func serveOnListener(t *testing.T, sweep time.Duration) servedFixture {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fs := faultstore.New(st, nil)
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	eng, err := engine.New(engine.Config{Store: fs, Logger: log, MaxWait: 10 * time.Minute, SweepInterval: sweep})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(); st.Close() })
	srv, err := New(Config{Engine: eng, Logger: log, AuthCacheTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	wk, err := auth.CreateKey(ctx, st, auth.NewKeyRequest{Role: engine.RoleWorker, Principal: "echo.w1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.PutTaskType(ctx, host.NewTaskType("echo")); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := servedFixture{fs: fs, eng: eng, srv: srv, worker: wk, url: "http://" + ln.Addr().String(), served: make(chan error, 1), logs: logs}
	go func() { g.served <- srv.Serve(ln) }()
	return g
}

// longPoll sends echo.w1's lease call with wait_seconds in the background; the
// channel gets the answer's status line and body, or the transport error.
func longPoll(url, key string, wait int) <-chan string {
	out := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/leases",
			strings.NewReader(`{"worker_id":"echo.w1","wait_seconds":`+strconv.Itoa(wait)+`}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- strings.TrimSpace(resp.Status + " " + string(b))
	}()
	return out
}

// shutdownEndsPoll shuts the server down and checks that the long-poll on
// polled answers 204 and that Serve returns nil, each within 30 s.
func (g servedFixture) shutdownEndsPoll(t *testing.T, polled <-chan string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.srv.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case got := <-polled:
		if got != "204 No Content" {
			t.Fatalf("long-poll during shutdown answered %q, want 204 No Content", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the long-poll was still open 30 s after Shutdown returned")
	}
	select {
	case err := <-g.served:
		if err != nil {
			t.Fatalf("Serve after Shutdown: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30 s of Shutdown")
	}
}
