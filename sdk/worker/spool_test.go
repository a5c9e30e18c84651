package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const spoolHolderEnv = "ASYNCGATE_TEST_SPOOL_HOLD"

// TestDefaultSpoolPerWorker: workers without an explicit id get one spool
// per key (a worker key is its own worker id), never a shared default file.
func TestDefaultSpoolPerWorker(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	path := func(key, id string) string {
		return worker.NewRunner(worker.NewClient("http://127.0.0.1:1", key), worker.Config{WorkerID: id}).SpoolPath()
	}
	a, b := path("agw_keyA", ""), path("agw_keyB", "")
	if a == b {
		t.Fatalf("two keys without a worker id share the spool %s", a)
	}
	if a != path("agw_keyA", "") {
		t.Fatalf("the same key gets another spool on restart: %s vs %s", a, path("agw_keyA", ""))
	}
	if strings.Contains(a, "agw_keyA") {
		t.Fatalf("the spool name shows the key: %s", a)
	}
	if got := path("agw_keyA", "codegen.i-1"); filepath.Base(got) != "spool-codegen.i-1.jsonl" {
		t.Fatalf("explicit worker id: %s", got)
	}
	for _, p := range []string{a, b} {
		if !strings.HasPrefix(p, cache) {
			t.Fatalf("spool %s is not in the user cache folder %s", p, cache)
		}
	}
}

// TestSpoolLockedAgainstSecondProcess: while another process holds a spool,
// a Runner with the same spool refuses to run (and to replay it) with
// ErrSpoolLocked; so does a second Runner in this process; once the holder
// is gone the spool can be used.
func TestSpoolLockedAgainstSecondProcess(t *testing.T) {
	spoolPath := filepath.Join(t.TempDir(), "spool.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), spoolHolderEnv+"="+spoolPath)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		t.Fatalf("the holder process did not lock: %q %v", line, err)
	}

	newRunner := func() *worker.Runner {
		r := worker.NewRunner(worker.NewClient("http://127.0.0.1:1", "agw_x"), worker.Config{WorkerID: "w.1", SpoolPath: spoolPath, Logger: testLogger(t)})
		r.Handle("t", func(ctx context.Context, task *worker.Task) (any, error) { return nil, nil })
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = newRunner().Run(ctx)
	if !errors.Is(err, worker.ErrSpoolLocked) || !strings.Contains(err.Error(), spoolPath) {
		t.Fatalf("Run with a spool another process holds = %v, want ErrSpoolLocked naming %s", err, spoolPath)
	}
	if _, _, err := newRunner().FlushSpool(ctx); !errors.Is(err, worker.ErrSpoolLocked) {
		t.Fatalf("FlushSpool with a spool another process holds = %v", err)
	}

	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	// Free now: one Runner runs, a second one in this process is refused.
	logs := &syncBuffer{}
	first := worker.NewRunner(worker.NewClient("http://127.0.0.1:1", "agw_x"), worker.Config{WorkerID: "w.1", SpoolPath: spoolPath,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	first.Handle("t", func(ctx context.Context, task *worker.Task) (any, error) { return nil, nil })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- first.Run(runCtx) }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(logs.String(), "worker starting") {
		select {
		case err := <-done:
			t.Fatalf("the first Runner stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first Runner did not start: %s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, _, err := newRunner().FlushSpool(ctx); !errors.Is(err, worker.ErrSpoolLocked) {
		t.Fatalf("a second Runner could use the spool while the first runs: %v", err)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("first Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the first Runner did not stop")
	}
	if _, _, err := newRunner().FlushSpool(ctx); err != nil {
		t.Fatalf("FlushSpool after the holder stopped: %v", err)
	}
}

// writeSpool writes a spool file of completions, one per lease id, in the
// spool's format (JSON lines).
func writeSpool(t *testing.T, path string, leaseIDs ...string) {
	t.Helper()
	var b bytes.Buffer
	for _, id := range leaseIDs {
		line, err := json.Marshal(map[string]any{"kind": "complete", "lease_id": id, "task_id": "T-" + id, "task_type": "spooled",
			"body": map[string]any{"task_id": "T-" + id, "result": map[string]string{"lease": id}}, "spooled_at": time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// spooledLeases returns the lease ids in the spool file and each entry's
// body, in order.
func spooledLeases(t *testing.T, path string) (ids []string, bodies []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		var e struct {
			LeaseID string          `json:"lease_id"`
			Body    json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("spool line %q: %v", line, err)
		}
		ids, bodies = append(ids, e.LeaseID), append(bodies, string(e.Body))
	}
	return ids, bodies
}

// TestFlushSpoolStopsAtTemporaryFailure: a spool pass stops at the first
// outcome the gate answers with a temporary error (a 503 with Retry-After,
// a dropped connection): the outcomes after it are not sent in that pass
// and stay spooled as they were, with the one that failed. An outcome the
// gate refused for good before it is dropped. The next pass delivers the
// rest.
func TestFlushSpoolStopsAtTemporaryFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refuse  func(w http.ResponseWriter) // the answer to lease L-busy
		spooled []string
		sent    []string // the completions the first pass sends, in order
		kept    []string // the spool after it
	}{
		{"503 Retry-After", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"database_unavailable","detail":"refused by the test"}`))
		}, []string{"L-gone", "L-busy", "L-3", "L-4"}, []string{"L-gone", "L-busy"}, []string{"L-busy", "L-3", "L-4"}},
		{"429 Retry-After", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":"quota_exceeded","detail":"refused by the test"}`))
		}, []string{"L-busy", "L-2", "L-3"}, []string{"L-busy"}, []string{"L-busy", "L-2", "L-3"}},
		{"network error", func(w http.ResponseWriter) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // no answer at all
			}
		}, []string{"L-busy", "L-2", "L-gone"}, []string{"L-busy"}, []string{"L-busy", "L-2", "L-gone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu    sync.Mutex
				sent  []string
				ready bool // the gate has room again: everything is taken
			)
			fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/leases/"), "/complete")
				mu.Lock()
				sent = append(sent, id)
				busy := !ready
				mu.Unlock()
				switch {
				case id == "L-gone":
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusConflict)
					_, _ = w.Write([]byte(`{"error":"lease_expired","detail":"refused by the test"}`))
				case id == "L-busy" && busy:
					tc.refuse(w)
				default:
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(`{"status":"succeeded","task_id":"T-` + id + `","receipt_id":"R-` + id + `"}`))
				}
			}))
			defer fake.Close()
			path := filepath.Join(t.TempDir(), "spool.jsonl")
			writeSpool(t, path, tc.spooled...)
			_, bodies := spooledLeases(t, path)
			body := map[string]string{}
			for i, id := range tc.spooled {
				body[id] = bodies[i]
			}
			r := worker.NewRunner(worker.NewClient(fake.URL, "agw_x"), worker.Config{WorkerID: "w.1", SpoolPath: path, Logger: testLogger(t)})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			delivered, remaining, err := r.FlushSpool(ctx)
			mu.Lock()
			got := append([]string(nil), sent...)
			sent = nil
			ready = true
			mu.Unlock()
			if err != nil {
				t.Fatalf("FlushSpool: %v", err)
			}
			if strings.Join(got, ",") != strings.Join(tc.sent, ",") {
				t.Fatalf("a pass against a busy gate sent %v, want %v (none after the first temporary failure)", got, tc.sent)
			}
			if delivered != 0 || remaining != len(tc.kept) {
				t.Fatalf("FlushSpool = %d delivered, %d remaining; want 0, %d", delivered, remaining, len(tc.kept))
			}
			ids, after := spooledLeases(t, path)
			if strings.Join(ids, ",") != strings.Join(tc.kept, ",") {
				t.Fatalf("spool after the pass: %v, want %v", ids, tc.kept)
			}
			for i, id := range ids {
				if after[i] != body[id] {
					t.Fatalf("spooled %s changed: %s, was %s", id, after[i], body[id])
				}
			}

			// The gate has room again: the next pass delivers the rest.
			delivered, remaining, err = r.FlushSpool(ctx)
			want := 0
			for _, id := range tc.kept {
				if id != "L-gone" {
					want++
				}
			}
			if err != nil || delivered != want || remaining != 0 {
				t.Fatalf("the next pass: %d delivered, %d remaining, %v; want %d, 0", delivered, remaining, err, want)
			}
			if ids, _ := spooledLeases(t, path); len(ids) != 0 {
				t.Fatalf("spool after the next pass: %v, want it empty", ids)
			}
		})
	}
}

// TestFlushSpoolCutShortKeepsTheOutcome: a pass whose context ends while an
// outcome is on its way (Run's shutdown stops the spool loop so) keeps that
// outcome and the rest spooled: the gate never answered, so nothing says it
// was delivered or refused.
func TestFlushSpoolCutShortKeepsTheOutcome(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release // no answer while the pass runs
	}))
	defer fake.Close()
	defer close(release) // before Close, which waits for the handler
	path := filepath.Join(t.TempDir(), "spool.jsonl")
	writeSpool(t, path, "L-1", "L-2")
	r := worker.NewRunner(worker.NewClient(fake.URL, "agw_x"), worker.Config{WorkerID: "w.1", SpoolPath: path, Logger: testLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	delivered, remaining, err := r.FlushSpool(ctx)
	if err != nil {
		t.Fatalf("FlushSpool: %v", err)
	}
	if ids, _ := spooledLeases(t, path); strings.Join(ids, ",") != "L-1,L-2" || delivered != 0 || remaining != 2 {
		t.Fatalf("a pass cut short: spool %v, %d delivered, %d remaining; want [L-1 L-2], 0, 2", ids, delivered, remaining)
	}
}

// TestFlushSpoolGoesOnPastAnOutcomesOwnFailure: a 5xx about one outcome (its
// result channel down: 502 channel_error) keeps that outcome spooled but
// does not hold back the ones after it, as a busy or unreachable gate does.
func TestFlushSpoolGoesOnPastAnOutcomesOwnFailure(t *testing.T) {
	var (
		mu   sync.Mutex
		sent []string
	)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/leases/"), "/complete")
		mu.Lock()
		sent = append(sent, id)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if id == "L-stuck" {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(`{"error":"channel_error","detail":"refused by the test"}`))
			return
		}
		_, _ = w.Write([]byte(`{"status":"succeeded","task_id":"T-` + id + `","receipt_id":"R-` + id + `"}`))
	}))
	defer fake.Close()
	path := filepath.Join(t.TempDir(), "spool.jsonl")
	writeSpool(t, path, "L-stuck", "L-2", "L-3")
	r := worker.NewRunner(worker.NewClient(fake.URL, "agw_x"), worker.Config{WorkerID: "w.1", SpoolPath: path, Logger: testLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	delivered, remaining, err := r.FlushSpool(ctx)
	mu.Lock()
	got := strings.Join(sent, ",")
	mu.Unlock()
	ids, _ := spooledLeases(t, path)
	if err != nil || got != "L-stuck,L-2,L-3" || delivered != 2 || remaining != 1 || strings.Join(ids, ",") != "L-stuck" {
		t.Fatalf("a pass past a 502: sent %s, %d delivered, %d remaining, spool %v, %v; want L-stuck,L-2,L-3, 2, 1, [L-stuck], <nil>",
			got, delivered, remaining, ids, err)
	}
}
