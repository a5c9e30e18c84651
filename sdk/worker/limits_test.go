package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

// The gate's limits the Runner keeps to: progress_message at most 4096
// bytes of UTF-8 without NUL, snooze_seconds 1..31622400, and at most 50
// task types per lease call.

// refusingProxy forwards to the gate, except the calls refuse picks out:
// those it answers itself with the status, code and detail it returns.
type refusingProxy struct {
	*httptest.Server
	refused atomic.Int64
}

func newRefusingProxy(t *testing.T, target string, refuse func(path string, body []byte) (status int, code, detail string)) *refusingProxy {
	u, _ := url.Parse(target)
	p := &refusingProxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if st, code, detail := refuse(r.URL.Path, body); st != 0 {
			p.refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(st)
			fmt.Fprintf(w, `{"error":%q,"detail":%q}`, code, detail)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// TestWorkerProgressKeptToTheGatesLimits: a progress message longer than
// 4096 bytes is cut on a character boundary (never mid-character, which
// would come out as U+FFFD and take it past the limit), and one holding NUL
// has it written U+FFFD: the gate takes both and the lease is kept.
func TestWorkerProgressKeptToTheGatesLimits(t *testing.T) {
	g := sharedGate(t)
	g.putType("lim-progress", 10, nil)
	long := strings.Repeat("€", 2000) // 6000 bytes; 4096 falls inside a character
	next := make(chan struct{})
	causes := make(chan error, 1)
	start(t, g.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{
		"lim-progress": func(ctx context.Context, task *worker.Task) (any, error) {
			for _, msg := range []string{long, "before\x00after"} {
				if err := worker.Progress(ctx, 50, msg); err != nil {
					return nil, err
				}
				select {
				case <-next:
				case <-ctx.Done():
					causes <- context.Cause(ctx)
					return nil, ctx.Err()
				}
			}
			return "ok", nil
		},
	})
	id := g.enqueue("lim-progress", map[string]any{}, nil)
	stopped := func() {
		select {
		case c := <-causes:
			t.Fatalf("the handler was stopped (%v) after reporting progress", c)
		default:
		}
	}
	want := strings.Repeat("€", 4096/len("€"))
	g.waitTask(id, "the long progress message, cut", func(tv taskView) bool {
		stopped()
		return tv.ProgressMessage == want
	})
	next <- struct{}{}
	g.waitTask(id, "the progress message with NUL", func(tv taskView) bool {
		stopped()
		return tv.ProgressMessage == "before\uFFFDafter"
	})
	next <- struct{}{}
	tv := g.waitTask(id, "succeeded", status("succeeded"))
	if tv.LeaseCount != 1 || tv.LeaseExpiries != 0 {
		t.Fatalf("the lease was not kept: %+v", tv)
	}
}

// TestWorkerProgressRefusedKeepsTheLease: a progress report the gate
// refuses (400, 413) is dropped, the heartbeat goes again without it, and
// the lease is kept; later progress still reaches the gate.
func TestWorkerProgressRefusedKeepsTheLease(t *testing.T) {
	g := sharedGate(t)
	g.putType("lim-refused", 10, nil)
	px := newRefusingProxy(t, g.URL, func(path string, body []byte) (int, string, string) {
		if strings.HasSuffix(path, "/heartbeat") && bytes.Contains(body, []byte("refuse me")) {
			return http.StatusRequestEntityTooLarge, "too_large", "progress_message is longer than 4096 bytes"
		}
		return 0, "", ""
	})
	causes := make(chan error, 1)
	release := make(chan struct{})
	start(t, px.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{
		"lim-refused": func(ctx context.Context, task *worker.Task) (any, error) {
			worker.Progress(ctx, 10, "refuse me")
			for px.refused.Load() == 0 && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond) // until the gate (the proxy) refused it
			}
			worker.Progress(ctx, 20, "accepted")
			select {
			case <-release:
				return "ok", nil
			case <-ctx.Done():
				causes <- context.Cause(ctx)
				return nil, ctx.Err()
			}
		},
	})
	id := g.enqueue("lim-refused", map[string]any{}, nil)
	g.waitTask(id, "the later progress", func(tv taskView) bool {
		select {
		case c := <-causes:
			t.Fatalf("the handler was stopped (%v) after the gate refused a progress report", c)
		default:
		}
		return tv.ProgressMessage == "accepted"
	})
	close(release)
	tv := g.waitTask(id, "succeeded", status("succeeded"))
	if tv.LeaseExpiries != 0 || tv.LeaseCount != 1 {
		t.Fatalf("the lease was not kept: %+v", tv)
	}
}

// TestWorkerSnoozeBeyondTheGatesBound: a snooze longer than the gate's
// bound (366 days) is clamped to it: the task is scheduled a year out
// instead of its lease running out again and again.
func TestWorkerSnoozeBeyondTheGatesBound(t *testing.T) {
	g := sharedGate(t)
	g.putType("lim-snooze-long", 3, nil)
	start(t, g.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{
		"lim-snooze-long": func(ctx context.Context, task *worker.Task) (any, error) {
			return nil, worker.Snooze(400 * 24 * time.Hour)
		},
	})
	id := g.enqueue("lim-snooze-long", map[string]any{}, nil)
	var tv struct {
		Status        string    `json:"status"`
		AvailableAt   time.Time `json:"available_at"`
		LeaseExpiries int       `json:"lease_expiries"`
	}
	eventually(t, "the task scheduled by the snooze", func() bool {
		if st := g.call("GET", "/v1/tasks/"+id, g.Agent, nil, &tv); st != 200 {
			t.Fatalf("get task: %d", st)
		}
		if tv.LeaseExpiries > 0 {
			t.Fatalf("the lease ran out instead of the task being snoozed: %+v", tv)
		}
		return tv.Status == "scheduled"
	})
	if until := time.Until(tv.AvailableAt); until < 365*24*time.Hour || until > 367*24*time.Hour {
		t.Fatalf("available_at %v: %v from now, want 366 days", tv.AvailableAt, until)
	}
}

// TestWorkerSnoozeRefusedFailsTheTask: a snooze the gate refuses with 400
// fails the task for good, with the refusal as its error, instead of leaving
// the lease to run out with no trace of why.
func TestWorkerSnoozeRefusedFailsTheTask(t *testing.T) {
	g := sharedGate(t)
	g.putType("lim-snooze-refused", 3, nil)
	px := newRefusingProxy(t, g.URL, func(path string, body []byte) (int, string, string) {
		if strings.HasSuffix(path, "/snooze") {
			return http.StatusBadRequest, "bad_request", "snooze refused by the test"
		}
		return 0, "", ""
	})
	start(t, px.URL, g.Worker, testConfig(t), map[string]worker.HandlerFunc{
		"lim-snooze-refused": func(ctx context.Context, task *worker.Task) (any, error) {
			return nil, worker.Snooze(time.Minute)
		},
	})
	id := g.enqueue("lim-snooze-refused", map[string]any{}, nil)
	tv := g.waitTask(id, "dead_letter", func(tv taskView) bool {
		if tv.LeaseExpiries > 0 {
			t.Fatalf("the lease ran out instead of the task failing: %+v", tv)
		}
		return tv.Status == "dead_letter"
	})
	if tv.DeadReason != "fatal_error" || !strings.Contains(tv.ErrorMessage, "snooze refused by the test") {
		t.Fatalf("dead task %+v, want fatal_error with the refusal's message", tv)
	}
}

// TestWorkerServesMoreThan50Types: a Runner with more handlers than one
// lease call may name (50) splits its types across lease calls and serves
// every one of them.
func TestWorkerServesMoreThan50Types(t *testing.T) {
	g := sharedGate(t)
	handlers := map[string]worker.HandlerFunc{}
	for i := range 120 {
		handlers[fmt.Sprintf("lim-many-%03d", i)] = func(ctx context.Context, task *worker.Task) (any, error) {
			return task.Type, nil
		}
	}
	rr := start(t, g.URL, g.Worker, testConfig(t), handlers)
	var ids []string
	for _, i := range []int{0, 49, 50, 99, 100, 119} {
		tt := fmt.Sprintf("lim-many-%03d", i)
		g.putType(tt, 10, nil)
		ids = append(ids, g.enqueue(tt, map[string]any{}, nil))
	}
	for _, id := range ids {
		g.waitTask(id, "succeeded", func(tv taskView) bool {
			select {
			case <-rr.done:
				t.Fatalf("Run returned: %v", rr.err)
			default:
			}
			return tv.Status == "succeeded"
		})
	}
	if err := rr.stop(t); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
}
