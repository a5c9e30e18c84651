package ai_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/asyncgate/asyncgate/worker/ai"
	"github.com/asyncgate/asyncgate/worker/ai/aitest"
)

// retryLog is a slog.Handler that sends the retry_in of every "retrying"
// record the Provider logs: the wait it chose before its next attempt.
type retryLog chan time.Duration

func (retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (h retryLog) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h retryLog) WithGroup(string) slog.Handler          { return h }
func (h retryLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry_in" {
			select {
			case h <- a.Value.Duration():
			default:
			}
			return false
		}
		return true
	})
	return nil
}

// firstRetryWait runs a chat completion against a server that answers every
// request with rep, and returns the wait the Provider logs before its second
// attempt; it then cancels the call, which must not have tried again
// meanwhile. The backoff is 10 ms (±10%) up to backoffMax.
func firstRetryWait(t *testing.T, rep aitest.Reply, backoffMax float64) time.Duration {
	t.Helper()
	prov := aitest.NewServer(func(aitest.Request) aitest.Reply { return rep })
	defer prov.Close()
	waits := make(retryLog, 4)
	p := ai.NewProvider(ai.ProviderConfig{BaseURL: prov.URL, Model: "m", MaxAttempts: 2,
		BackoffInitialSeconds: 0.01, BackoffMaxSeconds: backoffMax}, slog.New(waits))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.Complete(ctx, openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		done <- err
	}()
	var d time.Duration
	select {
	case d = <-waits:
	case err := <-done:
		t.Fatalf("the call ended (%v) without logging a retry", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no retry logged within 30 s")
	}
	cancel()
	<-done
	if n := len(prov.Requests()); d >= time.Second && n != 1 {
		t.Fatalf("%d requests before a wait of %v was up, want 1", n, d)
	}
	return d
}

// TestProviderHonoursRetryAfterDate: a 429 whose Retry-After is an
// HTTP-date is retried after the time from the answer's Date to that date.
// The Date is years past, so the date is measured against it, not against
// the local clock (which would make it a date already past: no wait).
func TestProviderHonoursRetryAfterDate(t *testing.T) {
	date := time.Date(2001, time.February, 3, 4, 5, 6, 0, time.UTC)
	at := func(d time.Duration) aitest.Reply {
		return aitest.Reply{Status: http.StatusTooManyRequests, RetryAfter: date.Add(d).Format(http.TimeFormat),
			Header: http.Header{"Date": {date.Format(http.TimeFormat)}}}
	}
	if d := firstRetryWait(t, at(7*time.Second), 60); d != 7*time.Second {
		t.Fatalf("a 429 with Retry-After 7 s after its Date: retry_in %v, want 7s", d)
	}
	// A date further away than the backoff's maximum waits the maximum.
	if d := firstRetryWait(t, at(time.Hour), 5); d != 5*time.Second {
		t.Fatalf("a 429 with Retry-After an hour after its Date: retry_in %v, want the maximum 5s", d)
	}
	// A date already past is no reason to wait: the plain backoff.
	if d := firstRetryWait(t, at(-time.Minute), 60); d < 9*time.Millisecond || d > 11*time.Millisecond {
		t.Fatalf("a 429 with Retry-After a minute before its Date: retry_in %v, want the backoff, 10ms ±10%%", d)
	}
}

// TestProviderHonoursRetryAfterSeconds: delay-seconds, fractional ones too,
// set the wait before the next attempt.
func TestProviderHonoursRetryAfterSeconds(t *testing.T) {
	for ra, want := range map[string]time.Duration{"3": 3 * time.Second, "1.5": 1500 * time.Millisecond} {
		if d := firstRetryWait(t, aitest.Reply{Status: http.StatusServiceUnavailable, RetryAfter: ra}, 60); d != want {
			t.Errorf("a 503 with Retry-After %q: retry_in %v, want %v", ra, d, want)
		}
	}
}

// TestProviderHonoursRetryAfterMs: OpenAI's Retry-After-Ms, in
// milliseconds, sets the wait, and is preferred to a Retry-After (as
// openai-go's own retries prefer it); one that does not read leaves it to
// Retry-After.
func TestProviderHonoursRetryAfterMs(t *testing.T) {
	for _, tc := range []struct {
		ms, ra string
		want   time.Duration
	}{
		{"2500", "", 2500 * time.Millisecond},
		{"1250", "2", 1250 * time.Millisecond},
		{"soon", "3", 3 * time.Second},
	} {
		rep := aitest.Reply{Status: http.StatusTooManyRequests, RetryAfter: tc.ra, Header: http.Header{"Retry-After-Ms": {tc.ms}}}
		if d := firstRetryWait(t, rep, 60); d != tc.want {
			t.Errorf("a 429 with Retry-After-Ms %q and Retry-After %q: retry_in %v, want %v", tc.ms, tc.ra, d, tc.want)
		}
	}
}
