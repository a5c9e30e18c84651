package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
	"github.com/asyncgate/asyncgate/sdk/worker"
)

// TestE2ETracingJaeger proves tracing end to end against a real collector:
// a producer enqueues with its own W3C traceparent through the Go client
// SDK, a Runner of the Go worker SDK leases, reports progress (a heartbeat)
// and completes, the producer fetches the result, and the trace read back
// from Jaeger's query API holds the gate's spans of all of it, parented as
// docs/tracing.md says, on both stores (their store spans differ).
func TestE2ETracingJaeger(t *testing.T) {
	j := startJaeger(t)
	stores := []struct {
		name, system string // system: the store spans' db.system.name
		args         func(t *testing.T) []string
	}{
		{"sqlite", "sqlite", func(*testing.T) []string { return nil }},
		{"postgres", "postgresql", func(t *testing.T) []string { return []string{"--db", postgresSchema(t)} }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			args := append(st.args(t), "--otlp-endpoint", j.otlp)
			g := startGate(t, t.TempDir(), args...)
			g.putType(t, "trace", map[string]any{}, "")
			agent, wkey := g.newKey(t, "agent", "agent.trace", ""), g.newKey(t, "worker", "trace.w1", "")

			traceID, producerSpan := randHex(t, 16), randHex(t, 8)
			tp := "00-" + traceID + "-" + producerSpan + "-01"
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			pctx := client.WithTrace(ctx, tp, "")
			c := client.New(g.URL, agent)
			ack, err := c.Enqueue(pctx, "trace", map[string]any{"n": 1}, nil)
			if err != nil {
				t.Fatal(err)
			}

			// The worker gets the trace with its lease; a handler's context
			// carries it.
			var (
				mu       sync.Mutex
				handedTP string
			)
			wc := worker.NewClient(g.URL, wkey)
			r := worker.NewRunner(wc, worker.Config{PollWait: 2 * time.Second, SpoolPath: filepath.Join(t.TempDir(), "spool.jsonl")})
			r.Handle("trace", func(ctx context.Context, task *worker.Task) (any, error) {
				got, _ := worker.Trace(ctx)
				mu.Lock()
				handedTP = got
				mu.Unlock()
				if got != task.Traceparent {
					return nil, worker.Fatal(fmt.Errorf("handler context carries %q, the task %q", got, task.Traceparent))
				}
				if err := worker.Progress(ctx, 50, "half"); err != nil {
					return nil, err
				}
				return map[string]any{"ok": true}, nil
			})
			rctx, stopRunner := context.WithCancel(ctx)
			runErr := make(chan error, 1)
			go func() { runErr <- r.Run(rctx) }()
			task, err := c.Wait(pctx, ack.TaskID, &client.WaitOptions{})
			stopRunner()
			if err != nil {
				t.Fatal(err)
			}
			if err := <-runErr; err != nil {
				t.Fatalf("runner: %v", err)
			}
			if task.Status != "succeeded" {
				t.Fatalf("task %s ended %s", task.TaskID, task.Status)
			}
			if _, err := c.Result(pctx, ack.TaskID); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			if !strings.HasPrefix(handedTP, "00-"+traceID+"-") {
				t.Errorf("the worker was handed traceparent %q, want one in trace %s", handedTP, traceID)
			}
			mu.Unlock()

			// The gate exports in batches (every second): wait until Jaeger
			// holds every span this trace should have.
			want := []string{"POST /v1/tasks", "asyncgate.enqueue", "asyncgate.lease", "POST /v1/leases/:lease_id/accept",
				"POST /v1/leases/:lease_id/heartbeat", "POST /v1/leases/:lease_id/complete", "GET /v1/tasks/:id/result", "store.batch"}
			var spans map[string][]jaegerSpan
			deadline := time.Now().Add(60 * time.Second)
			for {
				spans = j.trace(t, traceID)
				missing := ""
				for _, n := range want {
					if len(spans[n]) == 0 {
						missing += " " + n
					}
				}
				if missing == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("trace %s lacks spans:%s; it has %v", traceID, missing, names(spans))
				}
				time.Sleep(200 * time.Millisecond)
			}
			one := func(name string) jaegerSpan {
				t.Helper()
				if len(spans[name]) != 1 {
					t.Fatalf("%d spans %q, want 1", len(spans[name]), name)
				}
				return spans[name][0]
			}
			enq, enqHTTP := one("asyncgate.enqueue"), one("POST /v1/tasks")
			parentIs := func(s jaegerSpan, parent string, what string) {
				t.Helper()
				if s.parent() != parent {
					t.Errorf("%s (%s) has parent %q, want %q (%s)", s.OperationName, s.SpanID, s.parent(), parent, what)
				}
			}
			parentIs(enqHTTP, producerSpan, "the producer's span")
			parentIs(enq, enqHTTP.SpanID, "the enqueue request")
			parentIs(one("asyncgate.lease"), enq.SpanID, "the task's enqueue")
			parentIs(one("POST /v1/leases/:lease_id/accept"), enq.SpanID, "the task's enqueue, handed to the worker")
			for _, hb := range spans["POST /v1/leases/:lease_id/heartbeat"] {
				parentIs(hb, enq.SpanID, "the task's enqueue, handed to the worker")
			}
			parentIs(one("POST /v1/leases/:lease_id/complete"), enq.SpanID, "the task's enqueue, handed to the worker")
			parentIs(one("GET /v1/tasks/:id/result"), producerSpan, "the producer's span")
			// The enqueue's commit is a store batch under it, named by the driver.
			var batchUnderEnqueue bool
			for _, b := range spans["store.batch"] {
				if b.parent() == enq.SpanID && b.tag("db.system.name") == st.system {
					batchUnderEnqueue = true
				}
			}
			if !batchUnderEnqueue {
				t.Errorf("no store.batch span (db.system.name=%s) under the enqueue; store.batch spans: %+v", st.system, spans["store.batch"])
			}
			// The completion stores its result through the inline channel
			// plugin: that call is a span under the completion request.
			complete := one("POST /v1/leases/:lease_id/complete")
			var pluginUnderComplete bool
			for name, ss := range spans {
				for _, s := range ss {
					if strings.HasPrefix(name, "plugin inline.") && s.parent() == complete.SpanID {
						pluginUnderComplete = true
					}
				}
			}
			if !pluginUnderComplete {
				t.Errorf("no plugin inline.* span under the completion; spans: %v", names(spans))
			}
			for _, s := range spans["asyncgate.lease"] {
				if s.tag("asyncgate.task_id") != ack.TaskID || s.tag("asyncgate.worker_id") != "trace.w1" {
					t.Errorf("lease span tags %+v", s.Tags)
				}
			}
		})
	}
}

// jaegerProc is a Jaeger all-in-one (in-memory storage) on free ports.
type jaegerProc struct {
	otlp  string // OTLP/HTTP receiver base URL
	query string // query API base URL
}

// jaegerSpan is a span as Jaeger's /api/traces answers it.
type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

// parent is the span's CHILD_OF reference ("" for a root).
func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

func (s jaegerSpan) tag(k string) string {
	for _, tg := range s.Tags {
		if tg.Key == k {
			return fmt.Sprint(tg.Value)
		}
	}
	return ""
}

func names(spans map[string][]jaegerSpan) []string {
	var out []string
	for n, ss := range spans {
		out = append(out, fmt.Sprintf("%s×%d", n, len(ss)))
	}
	return out
}

// trace reads a trace from Jaeger's query API, spans by operation name
// (none yet: an empty map).
func (j *jaegerProc) trace(t *testing.T, traceID string) map[string][]jaegerSpan {
	t.Helper()
	res, err := http.Get(j.query + "/api/traces/" + traceID)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	out := map[string][]jaegerSpan{}
	if res.StatusCode == http.StatusNotFound {
		return out
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("jaeger /api/traces/%s: %d %s", traceID, res.StatusCode, body)
	}
	var doc struct {
		Data []struct {
			Spans []jaegerSpan `json:"spans"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("jaeger answer: %v: %s", err, body)
	}
	for _, tr := range doc.Data {
		for _, s := range tr.Spans {
			out[s.OperationName] = append(out[s.OperationName], s)
		}
	}
	return out
}

// startJaeger builds Jaeger from tools/jaeger (a module of its own, so its
// dependencies stay out of the gate's) once per machine and runs it with
// in-memory storage, an OTLP/HTTP receiver and the query API on free ports.
func startJaeger(t *testing.T) *jaegerProc {
	t.Helper()
	bin := jaegerBinary(t)
	ports := freePorts(t, 3)
	j := &jaegerProc{otlp: "http://" + ports[0], query: "http://" + ports[1]}
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    traces:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: %q
    grpc:
      endpoint: %q
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: %q
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`, ports[1], ports[2], ports[0])
	path := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", path)
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_SDK_DISABLED=true") // Jaeger's own spans: none
	var log lockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("jaeger log:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get(j.query + "/api/services")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return j
			}
		}
		select {
		case <-done:
			t.Fatalf("jaeger exited: %s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger's query API did not answer: %v\n%s", err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// jaegerBinary builds tools/jaeger into the user's cache folder, keyed by
// its go.sum, and returns the path; $ASYNCGATE_TEST_JAEGER names a binary
// to use instead.
func jaegerBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ASYNCGATE_TEST_JAEGER"); p != "" {
		return p
	}
	sum, err := os.ReadFile("../../tools/jaeger/go.sum")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(sum)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "asyncgate-test", "jaeger-"+hex.EncodeToString(h[:8]))
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	tmp := bin + ".part" + randHex(t, 4)
	build := exec.Command("go", "build", "-o", tmp, "github.com/jaegertracing/jaeger/cmd/jaeger")
	build.Dir = "../../tools/jaeger"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building jaeger (tools/jaeger): %v\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// freePorts returns n distinct free loopback addresses.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// lockedBuffer is a bytes buffer safe for a process's output and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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
