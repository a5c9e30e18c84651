package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// TestRetryAfterOnQuotaExceeded: a real gate's 429 quota_exceeded (a
// holder over its lease quota) is an *APIError with the answer's
// Retry-After, as a 503 is.
func TestRetryAfterOnQuotaExceeded(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gate.json")
	if err := os.WriteFile(cfg, []byte(`{"resource_leases": {"max_leases_per_holder": 1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGate(t, "--config", cfg)
	c := client.New(g.URL, g.key(t, "agent", "agent.quota"))
	ctx := context.Background()
	acquire := func(res string) error {
		_, err := c.Do(ctx, "POST", "/v1/resource-leases", map[string]any{
			"intents": []client.ResourceIntent{{Resource: res, Predicate: client.Mutates}}}, nil)
		return err
	}
	if err := acquire("FILE:/quota/a.go"); err != nil {
		t.Fatalf("first acquire: %v", err)
	}
	err := acquire("FILE:/quota/b.go")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests || ae.Code != "quota_exceeded" {
		t.Fatalf("second acquire over a quota of 1: %v, want 429 quota_exceeded", err)
	}
	if ae.RetryAfter != 60*time.Second {
		t.Fatalf("429 quota_exceeded: RetryAfter %v, want the gate's 60 s", ae.RetryAfter)
	}
}

// refusingGate answers the first GET of a task 503 database_unavailable
// with the Retry-After retryAfter(now) (none when it is "") and Date now,
// then the task as succeeded. It records when it began the refusal and when the next poll
// arrived: the difference is a lower bound of the client's wait.
type refusingGate struct {
	*httptest.Server
	mu                   sync.Mutex
	polls                int
	refusedAt, retriedAt time.Time
}

func newRefusingGate(t *testing.T, retryAfter func(now time.Time) string) *refusingGate {
	rg := &refusingGate{}
	rg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		rg.mu.Lock()
		rg.polls++
		n := rg.polls
		switch n {
		case 1:
			rg.refusedAt = now
		case 2:
			rg.retriedAt = now
		}
		rg.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
			if ra := retryAfter(now); ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"database_unavailable","detail":"refused by the test"}`))
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"task_id": "T-1", "status": client.StateSucceeded})
	}))
	t.Cleanup(rg.Close)
	return rg
}

// TestRetryAfterHTTPDate: a Retry-After given as an HTTP-date is the time
// from the answer's Date to it.
func TestRetryAfterHTTPDate(t *testing.T) {
	rg := newRefusingGate(t, func(now time.Time) string { return now.Add(3 * time.Second).UTC().Format(http.TimeFormat) })
	_, err := client.New(rg.URL, "k").Status(context.Background(), "T-1")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("status: %v, want a 503 APIError", err)
	}
	if ae.RetryAfter != 3*time.Second || !ae.HasRetryAfter {
		t.Fatalf("RetryAfter %v (HasRetryAfter %v), want 3 s (an HTTP-date 3 s after the answer's Date)", ae.RetryAfter, ae.HasRetryAfter)
	}
}

// TestWaitHonoursRetryAfter: a poll answered 503 with Retry-After does not
// end the wait; the next poll comes no sooner than the Retry-After, though
// the interval is shorter. Only the lower bound is checked.
func TestWaitHonoursRetryAfter(t *testing.T) {
	rg := newRefusingGate(t, func(time.Time) string { return "1" })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tk, err := client.New(rg.URL, "k").Wait(ctx, "T-1", &client.WaitOptions{Interval: 10 * time.Millisecond})
	if err != nil || tk.Status != client.StateSucceeded {
		t.Fatalf("wait through a 503 with Retry-After: %+v %v", tk, err)
	}
	rg.mu.Lock()
	waited := rg.retriedAt.Sub(rg.refusedAt)
	rg.mu.Unlock()
	if waited < time.Second {
		t.Fatalf("the poll after a Retry-After of 1 s came %v later", waited)
	}
}

// TestWaitRetryAfterPastDeadline: when the caller's context ends before the
// Retry-After, Wait returns the refusal at once instead of polling again.
func TestWaitRetryAfterPastDeadline(t *testing.T) {
	rg := newRefusingGate(t, func(time.Time) string { return "30" })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := client.New(rg.URL, "k").Wait(ctx, "T-1", nil)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.RetryAfter != 30*time.Second {
		t.Fatalf("wait with 10 s left and a Retry-After of 30 s: %v, want the 503 APIError", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Wait held on until the context ended")
	}
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if rg.polls != 1 {
		t.Fatalf("%d polls, want 1", rg.polls)
	}
}

// TestRetryAfterZero: an answer with Retry-After: 0 ("try again now") has
// HasRetryAfter set, though its RetryAfter is 0 as for no header.
func TestRetryAfterZero(t *testing.T) {
	rg := newRefusingGate(t, func(time.Time) string { return "0" })
	_, err := client.New(rg.URL, "k").Status(context.Background(), "T-1")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("status: %v, want a 503 APIError", err)
	}
	if ae.RetryAfter != 0 || !ae.HasRetryAfter {
		t.Fatalf("Retry-After: 0 read as RetryAfter %v, HasRetryAfter %v; want 0, true", ae.RetryAfter, ae.HasRetryAfter)
	}
}

// TestWaitRetryAfterZero: a poll answered 503 with Retry-After: 0, or with
// an HTTP-date already past, is asked to be tried again now: Wait polls
// again after its interval instead of returning the refusal.
func TestWaitRetryAfterZero(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryAfter func(time.Time) string
	}{
		{"zero", func(time.Time) string { return "0" }},
		{"past date", func(now time.Time) string { return now.Add(-time.Minute).UTC().Format(http.TimeFormat) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRefusingGate(t, tc.retryAfter)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tk, err := client.New(rg.URL, "k").Wait(ctx, "T-1", &client.WaitOptions{Interval: 10 * time.Millisecond})
			if err != nil || tk.Status != client.StateSucceeded {
				t.Fatalf("wait through a 503 with Retry-After %s: %+v %v, want the task succeeded", tc.name, tk, err)
			}
			rg.mu.Lock()
			defer rg.mu.Unlock()
			if rg.polls != 2 {
				t.Fatalf("%d polls, want 2", rg.polls)
			}
		})
	}
}

// TestWaitEndsWithoutRetryAfter: a poll answered 503 without a Retry-After,
// or with one that cannot be read, ends the wait with the refusal.
func TestWaitEndsWithoutRetryAfter(t *testing.T) {
	for _, tc := range []struct{ name, retryAfter string }{
		{"absent", ""},
		{"unreadable", "soon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRefusingGate(t, func(time.Time) string { return tc.retryAfter })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := client.New(rg.URL, "k").Wait(ctx, "T-1", &client.WaitOptions{Interval: 10 * time.Millisecond})
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.HasRetryAfter {
				t.Fatalf("wait through a 503 with Retry-After %s: %v, want the 503 APIError without a Retry-After", tc.name, err)
			}
			rg.mu.Lock()
			defer rg.mu.Unlock()
			if rg.polls != 1 {
				t.Fatalf("%d polls, want 1", rg.polls)
			}
		})
	}
}
