package worker_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// refuser forwards to the gate, except that it answers the first request
// whose path ends in suffix itself: status, a JSON error and Retry-After,
// as a gate whose database is away (503) or a rate limit in front of it
// (429) would. It records when it began that answer and when the next
// request for suffix arrived; the difference is a lower bound of the
// client's wait, whatever the machine's load.
type refuser struct {
	*httptest.Server
	suffix string

	mu        sync.Mutex
	seen      int
	refusedAt time.Time
	retriedAt time.Time
}

// newRefuser starts a refuser in front of target. retryAfter returns the
// Retry-After header for an answer whose Date header is now.
func newRefuser(t *testing.T, target, suffix string, status int, retryAfter func(now time.Time) string) *refuser {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rf := &refuser{suffix: suffix}
	rp := httputil.NewSingleHostReverseProxy(u)
	rf.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, suffix) {
			now := time.Now()
			rf.mu.Lock()
			rf.seen++
			n := rf.seen
			switch n {
			case 1:
				rf.refusedAt = now
			case 2:
				rf.retriedAt = now
			}
			rf.mu.Unlock()
			if n == 1 {
				code := "database_unavailable"
				if status == http.StatusTooManyRequests {
					code = "quota_exceeded"
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
				w.Header().Set("Retry-After", retryAfter(now))
				w.WriteHeader(status)
				_, _ = w.Write([]byte(`{"error":"` + code + `","detail":"refused by the test"}`))
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(rf.Close)
	return rf
}

// retried reports whether the refused request was sent again.
func (rf *refuser) retried() bool {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	return !rf.retriedAt.IsZero()
}

// waited returns the time between the refusal and the retry (the retry
// must have arrived).
func (rf *refuser) waited(t *testing.T) time.Duration {
	t.Helper()
	eventually(t, "the refused "+rf.suffix+" to be retried", rf.retried)
	rf.mu.Lock()
	defer rf.mu.Unlock()
	return rf.retriedAt.Sub(rf.refusedAt)
}

// seconds is a Retry-After of n seconds.
func seconds(n string) func(time.Time) string { return func(time.Time) string { return n } }

// httpDate is a Retry-After that names the instant d after the answer's
// Date.
func httpDate(d time.Duration) func(time.Time) string {
	return func(now time.Time) string { return now.Add(d).UTC().Format(http.TimeFormat) }
}

// TestRunnerWaitsForRetryAfter: every call the Runner retries (lease,
// accept, heartbeat, complete, fail, release) waits at least the
// Retry-After of a 503 or 429 answer before it tries again, though its own
// backoff (testConfig: 100 ms) is shorter. Only the lower bound is checked.
func TestRunnerWaitsForRetryAfter(t *testing.T) {
	g := sharedGate(t)
	for _, tc := range []struct {
		name, suffix string
		status       int
		retryAfter   func(time.Time) string
		want         time.Duration
		lease        int
	}{
		{"lease", "/v1/leases", http.StatusServiceUnavailable, seconds("1"), time.Second, 10},
		{"accept", "/accept", http.StatusServiceUnavailable, seconds("1"), time.Second, 10},
		// A 9 s lease: heartbeats every 3 s, and half the lease left at the
		// first one (the bound of a heartbeat retry) is well over 1 s.
		{"heartbeat", "/heartbeat", http.StatusServiceUnavailable, seconds("1"), time.Second, 9},
		{"complete", "/complete", http.StatusTooManyRequests, httpDate(2 * time.Second), 2 * time.Second, 10},
		{"fail", "/fail", http.StatusServiceUnavailable, seconds("1"), time.Second, 10},
		{"release", "/release", http.StatusTooManyRequests, seconds("1"), time.Second, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := *g
			g.t = t
			tt := "ra-" + tc.name
			g.putType(tt, tc.lease, nil)
			rf := newRefuser(t, g.URL, tc.suffix, tc.status, tc.retryAfter)
			cfg := testConfig(t)
			cfg.PollWait = -1 // no long-poll: lease calls follow one another quickly
			start(t, rf.URL, g.Worker, cfg, map[string]worker.HandlerFunc{
				tt: func(ctx context.Context, task *worker.Task) (any, error) {
					switch tc.name {
					case "heartbeat":
						// Run until the refused heartbeat was retried.
						for !rf.retried() && ctx.Err() == nil {
							time.Sleep(10 * time.Millisecond)
						}
					case "release":
						<-ctx.Done() // the test cancels the task
						return nil, ctx.Err()
					case "fail":
						return nil, errors.New("a retryable failure")
					}
					return map[string]string{"ok": tc.name}, nil
				},
			})
			if tc.name == "lease" {
				if w := rf.waited(t); w < tc.want {
					t.Fatalf("the lease call was retried %v after a Retry-After of %v", w, tc.want)
				}
				return
			}
			id := g.enqueue(tt, map[string]any{}, map[string]any{"max_retries": 0})
			switch tc.name {
			case "release":
				g.waitTask(id, "leased", status("leased"))
				if st := g.call("POST", "/v1/tasks/"+id+"/cancel", g.Agent, map[string]string{"reason": "test"}, nil); st != 200 {
					t.Fatalf("cancel: %d", st)
				}
				g.waitTask(id, "canceled", status("canceled"))
			case "fail":
				g.waitTask(id, "dead letter", status("dead_letter"))
			default:
				g.waitTask(id, "succeeded", status("succeeded"))
			}
			if w := rf.waited(t); w < tc.want {
				t.Fatalf("%s was retried %v after a Retry-After of %v", tc.suffix, w, tc.want)
			}
		})
	}
}

// TestHolderWaitsForRetryAfter: a Holder whose heartbeat is answered 503
// with Retry-After waits at least that long before it tries again (its own
// retry is a quarter of the heartbeat period), and keeps its leases.
func TestHolderWaitsForRetryAfter(t *testing.T) {
	t.Parallel()
	g := sharedGate(t)
	rf := newRefuser(t, g.URL, "/v1/resource-leases/heartbeat", http.StatusServiceUnavailable, seconds("1"))
	c := worker.NewClient(rf.URL, g.Agent)
	ctx := context.Background()
	// A 9 s TTL: heartbeats every 3 s, and half the TTL left at the first
	// one (the bound of a retry) is well over 1 s.
	h, err := c.Hold(ctx, worker.AcquireRequest{TTL: 9 * time.Second,
		Intents: []worker.ResourceIntent{{Resource: "FILE:/sdk/retry-after.go", Predicate: worker.Mutates}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if w := rf.waited(t); w < time.Second {
		t.Fatalf("the holder's heartbeat was retried %v after a Retry-After of 1 s", w)
	}
	if h.Context().Err() != nil {
		t.Fatalf("the holder lost its leases: %v", context.Cause(h.Context()))
	}
}

// TestShutdownEndsAnAcceptsRetryWait: an accept waiting out a long
// Retry-After does not hold the Runner's shutdown past its grace: the offer
// is left unaccepted and Run returns.
func TestShutdownEndsAnAcceptsRetryWait(t *testing.T) {
	t.Parallel()
	g := sharedGate(t)
	tt := "ra-shutdown"
	g.putType(tt, 120, nil)
	rf := newRefuser(t, g.URL, "/accept", http.StatusServiceUnavailable, seconds("50"))
	cfg := testConfig(t)
	cfg.ShutdownTimeout = 100 * time.Millisecond
	ran := make(chan struct{}, 1)
	rr := start(t, rf.URL, g.Worker, cfg, map[string]worker.HandlerFunc{
		tt: func(ctx context.Context, task *worker.Task) (any, error) { ran <- struct{}{}; return nil, nil },
	})
	g.enqueue(tt, map[string]any{}, nil)
	eventually(t, "the accept to be refused", func() bool {
		rf.mu.Lock()
		defer rf.mu.Unlock()
		return rf.seen > 0
	})
	rr.cancel()
	// A hang bound far below the 50 s asked for; the shutdown itself takes
	// the 100 ms grace and a lease call's return.
	select {
	case <-rr.done:
	case <-time.After(25 * time.Second):
		t.Fatal("Run did not return within 25 s of its shutdown: an accept is waiting out its Retry-After")
	}
	select {
	case <-ran:
		t.Fatal("the handler ran for an offer never accepted")
	default:
	}
}

// TestSpoolRetryWaitsForRetryAfter: after a spool pass the gate answered 503
// with Retry-After, the spool is not retried before that long, though the
// SpoolInterval (testConfig: 200 ms) is shorter. Only the lower bound is
// checked.
func TestSpoolRetryWaitsForRetryAfter(t *testing.T) {
	t.Parallel()
	g := sharedGate(t)
	tt := "ra-spool"
	g.putType(tt, 10, nil)
	rf := newRefuser(t, g.URL, "/complete", http.StatusServiceUnavailable, seconds("1"))
	cfg := testConfig(t)
	// An outcome spooled for a lease the gate no longer knows: the retry
	// is refused for good and dropped, which does not matter here.
	writeSpool(t, cfg.SpoolPath, "L-spooled")
	start(t, rf.URL, g.Worker, cfg, map[string]worker.HandlerFunc{
		tt: func(ctx context.Context, task *worker.Task) (any, error) { return nil, nil },
	})
	if w := rf.waited(t); w < time.Second {
		t.Fatalf("the spool was retried %v after a Retry-After of 1 s", w)
	}
}
