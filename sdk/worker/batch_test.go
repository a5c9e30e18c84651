package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// TestClientOutcomes: Client.Outcomes completes, fails and heartbeats in one
// call, each entry answered on its own; an unknown lease's entry carries an
// error for which errors.Is(err, ErrLeaseLost) holds, as the single call's.
func TestClientOutcomes(t *testing.T) {
	g := sharedGate(t)
	g.putType("o-batch", 30, nil)
	for range 3 {
		g.enqueue("o-batch", map[string]any{}, nil)
	}
	c := worker.NewClient(g.URL, g.Worker)
	ctx := context.Background()
	var offers []worker.Offer
	for len(offers) < 3 {
		o, err := c.Lease(ctx, worker.LeaseRequest{TaskTypes: []string{"o-batch"}, MaxTasks: 3 - len(offers), WaitSeconds: 2})
		if err != nil {
			t.Fatal(err)
		}
		offers = append(offers, o...)
	}
	res, err := c.Outcomes(ctx, []worker.OutcomeEntry{
		{ID: "c", LeaseID: offers[0].LeaseID, Complete: &worker.Completion{Result: []byte(`{"ok":true}`)}},
		{ID: "f", LeaseID: offers[1].LeaseID, Fail: &worker.Failure{ErrorMessage: "no", Retryable: false}},
		{ID: "h", LeaseID: offers[2].LeaseID, Heartbeat: &worker.HeartbeatRequest{ProgressMessage: "on it"}},
		{ID: "x", LeaseID: "lease-01M8GME6G9P78S4Y21S82KRJ2A", Complete: &worker.Completion{Result: []byte(`1`)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Err != nil || r.Complete == nil || r.Complete.TaskID != offers[0].Task.ID || r.ID != "c" {
		t.Fatalf("complete: %+v", r)
	}
	if r := res[1]; r.Err != nil || r.Fail == nil || r.Fail.WillRetry || r.Fail.Status != "dead_letter" {
		t.Fatalf("fail: %+v %+v", r, r.Fail)
	}
	if r := res[2]; r.Err != nil || r.Heartbeat == nil || !r.Heartbeat.LeaseExpiresAt.After(offers[2].LeaseExpiresAt.Add(-time.Second)) || r.Heartbeat.ServerTime.IsZero() {
		t.Fatalf("heartbeat: %+v", r)
	}
	var ae *worker.APIError
	if r := res[3]; !errors.Is(r.Err, worker.ErrLeaseLost) || !errors.As(r.Err, &ae) || ae.Status != 409 {
		t.Fatalf("unknown lease: %+v", r)
	}
	g.waitTask(offers[0].Task.ID, "succeeded", status("succeeded"))
	g.waitTask(offers[2].Task.ID, "progress", func(tv taskView) bool { return tv.Status == "leased" && tv.ProgressMessage == "on it" })
}

// countingProxy forwards to the gate and counts outcome calls; with old set
// it answers POST /v1/leases/batch 404 as a gate without the route does.
type countingProxy struct {
	*httptest.Server
	old                  bool
	batches, tooBig, one atomic.Int64
}

func newCountingProxy(t *testing.T, target string, old bool) *countingProxy {
	u, _ := url.Parse(target)
	p := &countingProxy{old: old}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/leases/batch":
			p.batches.Add(1)
			if r.ContentLength > 1<<20 {
				p.tooBig.Add(1)
			}
			if p.old {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprint(w, `{"error":"not_found","detail":"no route POST /v1/leases/batch"}`)
				return
			}
		case strings.HasSuffix(r.URL.Path, "/complete") || strings.HasSuffix(r.URL.Path, "/fail"):
			p.one.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// runTogether runs n tasks of taskType (every third one failing for good)
// on a Runner of n slots whose handlers all finish at the same moment, and
// waits for every task to end as its handler said.
func runTogether(t *testing.T, g *gate, base, taskType string, n int) {
	t.Helper()
	runTogetherSized(t, g, base, taskType, n, 0)
}

// runTogetherSized is runTogether with results of size bytes each (0: a
// small JSON object).
func runTogetherSized(t *testing.T, g *gate, base, taskType string, n, size int) {
	t.Helper()
	ids := runReleased(t, g, base, taskType, n, func(i int) (any, error) {
		if i%3 == 0 {
			return nil, worker.Fatal(errors.New("three"))
		}
		if size > 0 {
			return []byte(strings.Repeat("x", size)), nil
		}
		return map[string]int{"i": i}, nil
	})
	for i, id := range ids {
		want := "succeeded"
		if i%3 == 0 {
			want = "dead_letter"
		}
		g.waitTask(id, want, status(want))
	}
}

// runReleased enqueues n tasks of taskType (params {"i": i}) for a Runner
// of n slots whose handlers, once all n are running, return outcome(i) at
// the same moment. It returns the tasks' ids in order, without waiting for
// them to end.
func runReleased(t *testing.T, g *gate, base, taskType string, n int, outcome func(i int) (any, error)) []string {
	t.Helper()
	g.putType(taskType, 30, nil)
	var started atomic.Int64
	release := make(chan struct{})
	cfg := testConfig(t)
	cfg.Concurrency = n
	start(t, base, g.Worker, cfg, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task *worker.Task) (any, error) {
			started.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			var p struct{ I int }
			if err := task.Bind(&p); err != nil {
				return nil, err
			}
			return outcome(p.I)
		},
	})
	ids := make([]string, n)
	for i := range n {
		ids[i] = g.enqueue(taskType, map[string]any{"i": i}, nil)
	}
	eventually(t, "every handler running", func() bool { return started.Load() == int64(n) })
	close(release)
	return ids
}

// TestRunnerBatchesOutcomes: outcomes ready at once go to the gate in batch
// calls, fewer calls than outcomes, and every task ends as its handler said.
func TestRunnerBatchesOutcomes(t *testing.T) {
	g := sharedGate(t)
	px := newCountingProxy(t, g.URL, false)
	const n = 24
	runTogether(t, g, px.URL, "o-together", n)
	if b, one := px.batches.Load(), px.one.Load(); b == 0 || b+one >= n {
		t.Fatalf("%d outcomes took %d batch calls and %d single calls", n, b, one)
	}
}

// TestRunnerOutcomesOnOlderGate: a gate without the batch route (404) gets
// every outcome by its single call, and is not asked again after its first
// answers.
func TestRunnerOutcomesOnOlderGate(t *testing.T) {
	g := sharedGate(t)
	px := newCountingProxy(t, g.URL, true)
	const n = 24
	runTogether(t, g, px.URL, "o-older", n)
	if b, one := px.batches.Load(), px.one.Load(); b == 0 || b > 2 || one != n {
		t.Fatalf("%d outcomes took %d batch calls and %d single calls", n, b, one)
	}
}

// TestRunnerOutcomesOverTheBodyLimit: completions whose inline results
// together exceed the gate's body limit (1 MiB; 413 for the batch) are sent
// one by one instead, and every task succeeds.
func TestRunnerOutcomesOverTheBodyLimit(t *testing.T) {
	g := sharedGate(t)
	px := newCountingProxy(t, g.URL, false)
	const n = 15 // every third fails: ten results of 300 KB, 4 MB in base64
	runTogetherSized(t, g, px.URL, "o-big", n, 300<<10)
	if px.tooBig.Load() == 0 {
		t.Fatalf("no batch over the limit was tried (%d batches, %d single calls)", px.batches.Load(), px.one.Load())
	}
}

// TestRunnerFailureHoldingNULReachesTheGate: a handler's error whose text
// holds a NUL character (the gate refuses one in any string) still reaches
// the gate, the NUL written U+FFFD, in a batch beside other outcomes, and
// every task ends as its handler said.
func TestRunnerFailureHoldingNULReachesTheGate(t *testing.T) {
	g := sharedGate(t)
	const n = 6
	ids := runReleased(t, g, g.URL, "o-nul", n, func(i int) (any, error) {
		if i%2 == 0 {
			return nil, worker.Fatal(errors.New("bad\x00byte"))
		}
		return map[string]int{"i": i}, nil
	})
	for i, id := range ids {
		if i%2 == 1 {
			g.waitTask(id, "succeeded", status("succeeded"))
			continue
		}
		if tv := g.waitTask(id, "dead_letter", status("dead_letter")); !strings.Contains(tv.ErrorMessage, "bad\uFFFDbyte") {
			t.Fatalf("task %d's error reached the gate as %q", i, tv.ErrorMessage)
		}
	}
}
