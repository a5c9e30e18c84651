package worker_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// testConfig is a Runner config with short waits for tests.
func testConfig(t *testing.T) worker.Config {
	return worker.Config{
		WorkerID:         workerID,
		PollWait:         2 * time.Second,
		IdleWait:         100 * time.Millisecond,
		PollBackoff:      worker.Backoff{Initial: 100 * time.Millisecond, Max: time.Second},
		DeliveryAttempts: 50,
		DeliveryBackoff:  worker.Backoff{Initial: 100 * time.Millisecond, Max: time.Second},
		SpoolPath:        filepath.Join(t.TempDir(), "spool.jsonl"),
		SpoolInterval:    200 * time.Millisecond,
		ShutdownTimeout:  10 * time.Second,
		DataURIFallback:  true,
		Logger:           testLogger(t),
	}
}

// running is a Runner started in the background.
type running struct {
	r      *worker.Runner
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // Run's answer, once done is closed
}

// stop shuts the Runner down and returns Run's error.
func (rr *running) stop(t *testing.T) error {
	t.Helper()
	rr.cancel()
	select {
	case <-rr.done:
		return rr.err
	case <-time.After(90 * time.Second):
		t.Fatal("Run did not return after shutdown")
		return nil
	}
}

func start(t *testing.T, baseURL, key string, cfg worker.Config, handlers map[string]worker.HandlerFunc) *running {
	t.Helper()
	r := worker.NewRunner(worker.NewClient(baseURL, key), cfg)
	for tt, h := range handlers {
		r.Handle(tt, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rr := &running{r: r, cancel: cancel, done: make(chan struct{})}
	go func() {
		rr.err = r.Run(ctx)
		close(rr.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rr.done:
		case <-time.After(90 * time.Second):
		}
	})
	return rr
}

// resultContent returns a succeeded task's inline result: fetched through
// the gate's channel, or decoded from a data: URI pointer.
func resultContent(t *testing.T, g *gate, tv taskView) string {
	t.Helper()
	if tv.Result == nil {
		t.Fatalf("task %s has no result", tv.ID)
	}
	if p, ok := strings.CutPrefix(tv.Result.Pointer, "data:application/json;base64,"); ok {
		b, err := base64.StdEncoding.DecodeString(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var out struct {
		Content json.RawMessage `json:"content"`
	}
	if st := g.call("GET", "/v1/tasks/"+tv.ID+"/result", g.Agent, nil, &out); st != 200 {
		t.Fatalf("result of %s: %d", tv.ID, st)
	}
	return string(out.Content)
}

func TestWorkerSuccessInlinePointerProgress(t *testing.T) {
	g := sharedGate(t)
	g.putType("s-echo", 10, nil)
	g.putType("s-store", 10, nil)
	release := make(chan struct{})
	rr := start(t, g.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{
		"s-echo": func(ctx context.Context, task *worker.Task) (any, error) {
			if err := worker.Progress(ctx, 50, "halfway"); err != nil {
				return nil, err
			}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return task.Params, nil
		},
		"s-store": func(ctx context.Context, task *worker.Task) (any, error) {
			return worker.Pointer{Channel: "s3", Pointer: "s3://bucket/" + task.ID, Summary: "stored it", Metadata: map[string]int{"bytes": 3}}, nil
		},
	})
	id := g.enqueue("s-echo", map[string]any{"hello": "world"}, nil)
	g.waitTask(id, "progress halfway", func(tv taskView) bool {
		return tv.ProgressMessage == "halfway" && tv.ProgressPercent != nil && *tv.ProgressPercent == 50
	})
	close(release)
	tv := g.waitTask(id, "succeeded", status("succeeded"))
	if got := resultContent(t, g, tv); got != `{"hello":"world"}` {
		t.Fatalf("result %s", got)
	}

	id2 := g.enqueue("s-store", map[string]any{}, nil)
	tv = g.waitTask(id2, "succeeded", status("succeeded"))
	if tv.Result.Channel != "s3" || tv.Result.Pointer != "s3://bucket/"+id2 || tv.Result.Summary != "stored it" || string(tv.Result.Metadata) != `{"bytes":3}` {
		t.Fatalf("pointer result %+v", tv.Result)
	}
	if err := rr.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestWorkerRetryableThenSuccess(t *testing.T) {
	g := sharedGate(t)
	g.putType("r-flaky", 10, nil)
	var mu sync.Mutex
	calls := map[string]int{}
	flaky := func(ctx context.Context, task *worker.Task) (any, error) {
		mu.Lock()
		calls[task.ID]++
		n := calls[task.ID]
		mu.Unlock()
		if n == 1 {
			return nil, errors.New("upstream timeout") // a plain error: retryable
		}
		return map[string]int{"call": n}, nil
	}
	start(t, g.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{"r-flaky": flaky, "r-flaky-fast": flaky})
	// With a retry policy without delay, the second attempt follows at once.
	g.putType("r-flaky-fast", 10, map[string]any{"policy": map[string]any{"name": "backoff", "config": map[string]any{"base_seconds": 0, "jitter": 0}}})
	idFast := g.enqueue("r-flaky-fast", map[string]any{}, nil)
	tv := g.waitTask(idFast, "succeeded", status("succeeded"))
	if tv.Attempts != 1 || resultContent(t, g, tv) != `{"call":2}` {
		t.Fatalf("flaky-fast: %+v", tv)
	}

	// With the default policy the gate schedules a retry after its backoff.
	id := g.enqueue("r-flaky", map[string]any{}, map[string]any{"max_retries": 2})
	tv = g.waitTask(id, "a retry scheduled", func(tv taskView) bool { return tv.Attempts == 1 && tv.Status == "scheduled" })
	if tv.ErrorMessage != "upstream timeout" {
		t.Fatalf("error_message %q", tv.ErrorMessage)
	}
	// Without retries left a retryable failure dead-letters as
	// max_retries_exceeded (a fatal one as fatal_error); redriven, the second
	// attempt succeeds.
	id2 := g.enqueue("r-flaky", map[string]any{}, map[string]any{"max_retries": 0})
	tv = g.waitTask(id2, "dead letter", status("dead_letter"))
	if tv.DeadReason != "max_retries_exceeded" {
		t.Fatalf("dead_reason %q, want max_retries_exceeded (retryable)", tv.DeadReason)
	}
	if st := g.call("POST", "/v1/admin/dead-letters/"+id2+"/redrive", g.Admin, nil, nil); st != 200 {
		t.Fatalf("redrive: %d", st)
	}
	tv = g.waitTask(id2, "succeeded", status("succeeded"))
	if got := resultContent(t, g, tv); got != `{"call":2}` {
		t.Fatalf("result %s", got)
	}
}

func TestWorkerFatalAndPanic(t *testing.T) {
	g := sharedGate(t)
	g.putType("f-bad", 10, nil)
	g.putType("f-boom", 10, nil)
	g.putType("f-echo", 10, nil)
	start(t, g.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{
		"f-bad": func(ctx context.Context, task *worker.Task) (any, error) {
			return nil, worker.Fatalf("params are unusable: %s", task.Params)
		},
		"f-boom": func(ctx context.Context, task *worker.Task) (any, error) {
			var m map[string]int
			//lint:ignore SA5000 the handler panics on purpose
			m["x"] = 1 // nil map write: a panic
			return nil, nil
		},
		"f-echo": func(ctx context.Context, task *worker.Task) (any, error) { return task.Params, nil },
	})
	id := g.enqueue("f-bad", map[string]any{"n": 1}, map[string]any{"max_retries": 3})
	tv := g.waitTask(id, "dead letter", status("dead_letter"))
	if tv.DeadReason != "fatal_error" || tv.Attempts != 1 || !strings.Contains(tv.ErrorMessage, "params are unusable") {
		t.Fatalf("fatal: %+v", tv)
	}
	id = g.enqueue("f-boom", map[string]any{}, map[string]any{"max_retries": 0})
	tv = g.waitTask(id, "dead letter", status("dead_letter"))
	if tv.DeadReason != "max_retries_exceeded" || !strings.Contains(tv.ErrorMessage, "handler panic") {
		t.Fatalf("panic: %+v", tv)
	}
	// The Runner survived the panic.
	id = g.enqueue("f-echo", map[string]any{"still": "alive"}, nil)
	g.waitTask(id, "succeeded", status("succeeded"))
}

// proxy forwards to the gate and can drop heartbeats (503), as a network
// partition between the worker and the gate would. beats counts the
// heartbeats that reached it.
type proxy struct {
	*httptest.Server
	drop  atomic.Bool
	beats atomic.Int64
}

func newProxy(t *testing.T, target string) *proxy {
	u, _ := url.Parse(target)
	p := &proxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/heartbeat") {
			p.beats.Add(1)
		}
		if p.drop.Load() && strings.HasSuffix(r.URL.Path, "/heartbeat") {
			http.Error(w, "dropped", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func TestWorkerLeaseLostWhenHeartbeatsFail(t *testing.T) {
	g := sharedGate(t)
	g.putType("l-long", 3, nil)
	px := newProxy(t, g.URL)
	px.drop.Store(true)
	causes := make(chan error, 4)
	var calls atomic.Int32
	start(t, px.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{
		"l-long": func(ctx context.Context, task *worker.Task) (any, error) {
			if calls.Add(1) > 1 {
				return "second time", nil
			}
			<-ctx.Done() // only a lost lease ends this
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		},
	})
	id := g.enqueue("l-long", map[string]any{}, nil)
	select {
	case c := <-causes:
		if !errors.Is(c, worker.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", c)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the handler was not cancelled when heartbeats could not get through")
	}
	px.drop.Store(false)
	// The gate expires the lease and the task is leased again: never lost.
	tv := g.waitTask(id, "succeeded", status("succeeded"))
	if tv.LeaseExpiries < 1 || tv.Attempts != 0 {
		t.Fatalf("lease_expiries %d attempts %d", tv.LeaseExpiries, tv.Attempts)
	}
}

// TestWorkerProgressDoesNotFloodTheGate: a handler that reports progress in
// a tight loop for a second sends a handful of heartbeats, not one per
// report (early heartbeats are at least max(1 s, lease/10) apart), and the
// last progress it reported still reaches the gate before the outcome.
func TestWorkerProgressDoesNotFloodTheGate(t *testing.T) {
	g := sharedGate(t)
	g.putType("p-busy", 30, nil)
	px := newProxy(t, g.URL)
	reports := make(chan int, 1)
	start(t, px.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{
		"p-busy": func(ctx context.Context, task *worker.Task) (any, error) {
			n := 0
			for end := time.Now().Add(time.Second); time.Now().Before(end); n++ {
				if err := worker.Progress(ctx, float64(n%100), "step"); err != nil {
					return nil, err
				}
			}
			worker.Progress(ctx, 100, "all done")
			reports <- n + 1
			return "ok", nil
		},
	})
	id := g.enqueue("p-busy", map[string]any{}, nil)
	tv := g.waitTask(id, "succeeded", status("succeeded"))
	n := <-reports
	// A 30 s lease: a 3 s gap. The first report goes at once, the last one
	// before the completion; at most one regular heartbeat besides.
	if beats := px.beats.Load(); beats > 3 {
		t.Fatalf("%d progress reports in a second sent %d heartbeats", n, beats)
	}
	if tv.ProgressMessage != "all done" || tv.ProgressPercent == nil || *tv.ProgressPercent != 100 {
		t.Fatalf("the last progress did not reach the gate: %q %v", tv.ProgressMessage, tv.ProgressPercent)
	}
}

func TestWorkerLeaseLostOn409(t *testing.T) {
	g := sharedGate(t)
	g.putType("c-long", 6, nil)
	started := make(chan string, 4)
	causes := make(chan error, 4)
	var calls atomic.Int32
	start(t, g.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{
		"c-long": func(ctx context.Context, task *worker.Task) (any, error) {
			if calls.Add(1) > 1 {
				return "second time", nil
			}
			o, _ := worker.Lease(ctx)
			started <- o.LeaseID
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		},
	})
	id := g.enqueue("c-long", map[string]any{}, nil)
	leaseID := <-started
	// An operator takes the lease away; the next heartbeat answers 409.
	if st := g.call("POST", "/v1/leases/"+leaseID+"/release", g.Admin, map[string]any{"reason": "test"}, nil); st != 200 {
		t.Fatalf("release: %d", st)
	}
	select {
	case c := <-causes:
		if !errors.Is(c, worker.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", c)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the handler was not cancelled after a 409")
	}
	g.waitTask(id, "succeeded", status("succeeded"))
}

func TestWorkerCancelMidTask(t *testing.T) {
	g := sharedGate(t)
	// A 6 s lease: the cancel arrives with a heartbeat (every 2 s), each
	// with seconds to spare on a busy machine.
	g.putType("x-long", 6, nil)
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	start(t, g.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{
		"x-long": func(ctx context.Context, task *worker.Task) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		},
	})
	id := g.enqueue("x-long", map[string]any{}, nil)
	<-started
	if st := g.call("POST", "/v1/tasks/"+id+"/cancel", g.Agent, map[string]any{"reason": "changed my mind"}, nil); st != 200 {
		t.Fatalf("cancel: %d", st)
	}
	select {
	case c := <-causes:
		if !errors.Is(c, worker.ErrTaskCanceled) {
			t.Fatalf("cause %v, want ErrTaskCanceled", c)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the handler was not cancelled")
	}
	g.waitTask(id, "canceled", status("canceled"))
}

func TestWorkerGateRestartMidTask(t *testing.T) {
	g := newGate(t)
	g.putType("long", 30, nil)
	started := make(chan struct{}, 4)
	proceed := make(chan struct{})
	returned := make(chan struct{}, 4)
	start(t, g.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{
		"long": func(ctx context.Context, task *worker.Task) (any, error) {
			started <- struct{}{}
			<-proceed
			returned <- struct{}{}
			return map[string]string{"done": "yes"}, nil
		},
	})
	id := g.enqueue("long", map[string]any{}, nil)
	<-started
	g.stop()
	close(proceed)
	<-returned // the completion is now being retried against a gate that is down
	g.restart()
	tv := g.waitTask(id, "succeeded", status("succeeded"))
	if got := resultContent(t, g, tv); got != `{"done":"yes"}` {
		t.Fatalf("result %s", got)
	}
}

func TestWorkerSpoolDeliveredAfterGateReturns(t *testing.T) {
	g := newGate(t)
	g.putType("long", 60, nil)
	cfg := testConfig(t)
	cfg.DeliveryAttempts = 1
	started := make(chan struct{}, 4)
	proceed := make(chan struct{})
	rr := start(t, g.URL, g.Worker, cfg, map[string]worker.HandlerFunc{
		"long": func(ctx context.Context, task *worker.Task) (any, error) {
			started <- struct{}{}
			<-proceed
			return worker.Pointer{Channel: "s3", Pointer: "s3://bucket/" + task.ID}, nil
		},
	})
	id := g.enqueue("long", map[string]any{}, nil)
	<-started
	g.stop()
	close(proceed)
	eventually(t, "the completion in the spool", func() bool {
		b, _ := os.ReadFile(cfg.SpoolPath)
		return strings.Contains(string(b), `"task_id":"`+id+`"`)
	})
	// This worker stops while the gate is down; the next one to start with
	// the same spool delivers it.
	if err := rr.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	g.restart()
	if tv := g.task(id); tv.Status != "leased" {
		t.Fatalf("status %s before the spool is replayed", tv.Status)
	}
	start(t, g.URL, g.Worker, cfg, map[string]worker.HandlerFunc{
		"long": func(ctx context.Context, task *worker.Task) (any, error) {
			return nil, worker.Fatalf("must not run again")
		},
	})
	tv := g.waitTask(id, "succeeded", status("succeeded"))
	if tv.Result.Pointer != "s3://bucket/"+id {
		t.Fatalf("result %+v", tv.Result)
	}
	eventually(t, "an empty spool", func() bool {
		_, err := os.Stat(cfg.SpoolPath)
		return os.IsNotExist(err)
	})
}

func TestWorkerGracefulShutdown(t *testing.T) {
	g := sharedGate(t)
	// A type of its own each run: B and C stay queued at the end, and with
	// -count a later run on the shared gate must not lease them.
	typ := "g-job-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	g.putType(typ, 30, nil)
	cfg := testConfig(t)
	cfg.Concurrency = 2
	cfg.ShutdownTimeout = 2 * time.Second
	started := make(chan string, 4)
	finishA := make(chan struct{})
	causeB := make(chan error, 1)
	rr := start(t, g.URL, g.Worker, cfg, map[string]worker.HandlerFunc{
		typ: func(ctx context.Context, task *worker.Task) (any, error) {
			var p struct{ Name string }
			if err := task.Bind(&p); err != nil {
				return nil, worker.Fatal(err)
			}
			started <- p.Name
			if p.Name == "A" {
				<-finishA // finishes inside the grace period
				return "A done", nil
			}
			<-ctx.Done() // B outlives the grace period
			causeB <- context.Cause(ctx)
			return nil, ctx.Err()
		},
	})
	a := g.enqueue(typ, map[string]any{"name": "A"}, nil)
	b := g.enqueue(typ, map[string]any{"name": "B"}, nil)
	<-started
	<-started
	rr.cancel()
	close(finishA)
	if err := rr.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if c := <-causeB; !errors.Is(c, worker.ErrShutdown) {
		t.Fatalf("cause %v, want ErrShutdown", c)
	}
	if tv := g.task(a); tv.Status != "succeeded" {
		t.Fatalf("A: %+v", tv)
	}
	// B went back to the queue at once, without using an attempt.
	if tv := g.task(b); tv.Status != "queued" || tv.Attempts != 0 || tv.LeaseCount != 1 {
		t.Fatalf("B: %+v", tv)
	}
	// No leasing after shutdown.
	c := g.enqueue(typ, map[string]any{"name": "C"}, nil)
	time.Sleep(300 * time.Millisecond)
	if tv := g.task(c); tv.Status != "queued" {
		t.Fatalf("C: %+v", tv)
	}
}

// TestOfferTTLIsTheGatesLease: an offer's TTL is the lease length the gate
// granted, measured by the gate's server_time (to the microsecond), not
// shortened by a second for the Date header's whole seconds; a heartbeat's
// likewise.
func TestOfferTTLIsTheGatesLease(t *testing.T) {
	t.Parallel()
	g := sharedGate(t)
	g.putType("x-clock", 7, nil)
	g.enqueue("x-clock", map[string]any{}, nil)
	c := worker.NewClient(g.URL, g.Worker)
	ctx := context.Background()
	var offers []worker.Offer
	eventually(t, "an offer", func() bool {
		o, err := c.Lease(ctx, worker.LeaseRequest{TaskTypes: []string{"x-clock"}, MaxTasks: 1})
		offers = o
		return err == nil && len(o) == 1
	})
	o := offers[0]
	if o.ServerTime.IsZero() || o.TTL() != 7*time.Second || o.LeaseExpiresAt.Sub(o.ServerTime) != 7*time.Second {
		t.Fatalf("offer: server_time %v, TTL %v, expires %v", o.ServerTime, o.TTL(), o.LeaseExpiresAt)
	}
	if !o.LocalDeadline().Before(time.Now().Add(7 * time.Second)) {
		t.Fatalf("local deadline %v is not before now + the lease", time.Until(o.LocalDeadline()))
	}
	hb, err := c.Heartbeat(ctx, o.LeaseID, worker.HeartbeatRequest{TaskID: o.Task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if hb.ServerTime.IsZero() || hb.LeaseExpiresAt.Sub(hb.ServerTime) != 7*time.Second {
		t.Fatalf("heartbeat: server_time %v, expires %v", hb.ServerTime, hb.LeaseExpiresAt)
	}
	if _, err := c.Complete(ctx, o.LeaseID, worker.Completion{ResultPointer: "s3://bucket/clock"}); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerSnooze: a handler that returns worker.Snooze gives its task back
// until later without using an attempt; the task is scheduled meanwhile and
// runs again after the snooze.
func TestWorkerSnooze(t *testing.T) {
	g := sharedGate(t)
	g.putType("r-snooze", 30, nil)
	var mu sync.Mutex
	var runs []time.Time
	start(t, g.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{"r-snooze": func(ctx context.Context, task *worker.Task) (any, error) {
		mu.Lock()
		runs = append(runs, time.Now())
		n := len(runs)
		mu.Unlock()
		if n == 1 {
			return nil, worker.SnoozeFor(2*time.Second, "upstream not ready")
		}
		return map[string]int{"run": n}, nil
	}})
	id := g.enqueue("r-snooze", map[string]any{}, map[string]any{"max_retries": 0})
	g.waitTask(id, "scheduled by the snooze", status("scheduled"))
	tv := g.waitTask(id, "succeeded", status("succeeded"))
	if tv.Attempts != 0 || tv.LeaseCount != 2 || resultContent(t, g, tv) != `{"run":2}` {
		t.Fatalf("after a snooze: %+v, want 0 failed attempts, 2 leases, the second run's result", tv)
	}
	mu.Lock()
	gap := runs[1].Sub(runs[0])
	mu.Unlock()
	if gap < time.Second { // the gate's clock rounds nothing below a second away
		t.Fatalf("the task ran again %v after it snoozed for 2 s", gap)
	}
	var tl struct {
		Events []struct {
			Type    string          `json:"event_type"`
			Details json.RawMessage `json:"details"`
		} `json:"events"`
	}
	if st := g.call("GET", "/v1/tasks/"+id+"/timeline", g.Agent, nil, &tl); st != 200 {
		t.Fatalf("timeline: %d", st)
	}
	found := false
	for _, ev := range tl.Events {
		found = found || ev.Type == "task.snoozed" && strings.Contains(string(ev.Details), "upstream not ready")
	}
	if !found {
		t.Fatalf("no task.snoozed with its reason in the timeline: %+v", tl.Events)
	}
}

// A fan-in's handler reads the result of what its task waited on, a
// payload too large to be inline (the gate stores it in its file channel),
// through its lease; outside a handler DependencyResult refuses.
func TestWorkerReadsDependencyResult(t *testing.T) {
	g := sharedGate(t)
	g.putType("s-dep-big", 10, nil)
	g.putType("s-dep-fanin", 10, nil)
	big := strings.Repeat("a long answer ", 300<<10/14)
	dep := g.enqueue("s-dep-big", map[string]any{}, nil)
	fanIn := g.enqueue("s-dep-fanin", map[string]any{}, map[string]any{"after": []string{dep}})
	read := make(chan string, 1)
	start(t, g.URL, g.Worker, worker.Config{WorkerID: workerID}, map[string]worker.HandlerFunc{
		"s-dep-big": func(ctx context.Context, _ *worker.Task) (any, error) {
			return map[string]string{"text": big}, nil
		},
		"s-dep-fanin": func(ctx context.Context, tk *worker.Task) (any, error) {
			if len(tk.Dependencies) != 1 || tk.Dependencies[0].TaskID != dep {
				return nil, worker.Fatalf("dependencies %+v", tk.Dependencies)
			}
			raw, err := worker.DependencyResult(ctx, dep)
			if err != nil {
				return nil, worker.Fatal(err)
			}
			var v struct{ Text string }
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, worker.Fatal(err)
			}
			read <- v.Text
			return map[string]int{"read": len(v.Text)}, nil
		},
	})
	tv := g.waitTask(fanIn, "succeeded", func(tv taskView) bool { return tv.Status == "succeeded" || tv.Status == "dead_letter" })
	if tv.Status != "succeeded" {
		t.Fatalf("the fan-in ended %s: %s", tv.Status, tv.ErrorMessage)
	}
	if p := g.task(dep).Result.Pointer; !strings.HasPrefix(p, "file:") {
		t.Fatalf("the dependency's result is at %q, want the file channel", p)
	}
	if got := <-read; got != big {
		t.Fatalf("the fan-in read %d bytes of text, want %d", len(got), len(big))
	}
	if _, err := worker.DependencyResult(context.Background(), dep); err == nil {
		t.Fatal("DependencyResult outside a handler did not refuse")
	}
}
