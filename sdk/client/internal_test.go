package client

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	date := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
		ok   bool // the header could be read
	}{
		{"", 0, false},
		{"2", 2 * time.Second, true},
		{"0", 0, true}, // try again now
		{"-1", 0, false},
		{"later", 0, false},
		{"99999999999", 24 * time.Hour, true},
		{"99999999999999999999", 24 * time.Hour, true}, // past int64: still the bound, not 0
		{"+5", 0, false},                               // delay-seconds is digits only
		{"0x10", 0, false},
		{"Sat, 01 Mar 2025 12:00:30 GMT", 30 * time.Second, true},
		{"Sat, 01 Mar 2025 11:00:00 GMT", 0, true},              // already past: try again now
		{"Mon, 03 Mar 2025 12:00:00 GMT", 24 * time.Hour, true}, // bounded as delay-seconds is
		{"Fri, 31 Dec 9999 23:59:59 GMT", 24 * time.Hour, true},
	} {
		if got, ok := parseRetryAfter(tc.v, date); got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v, want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRetryAfterCapped(t *testing.T) {
	// Capped first, then jittered: a poll told 60 s (the gate's 429
	// quota_exceeded) or more does not come back at the same instant as
	// every other poll told the same.
	for _, ra := range []time.Duration{MaxRetryAfter, time.Hour} {
		seen := map[time.Duration]bool{}
		for range 100 {
			d, _ := retryAfter(&APIError{Status: http.StatusTooManyRequests, RetryAfter: ra, HasRetryAfter: true})
			if d < MaxRetryAfter || d > MaxRetryAfter+MaxRetryAfter/10 {
				t.Fatalf("a Retry-After of %v: %v, want %v plus at most 10%%", ra, d, MaxRetryAfter)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Fatalf("a Retry-After of %v: every wait was %v, want jitter", ra, MaxRetryAfter)
		}
	}
	if d, ok := retryAfter(&APIError{Status: http.StatusServiceUnavailable, RetryAfter: 2 * time.Second, HasRetryAfter: true}); !ok || d < 2*time.Second || d > 2200*time.Millisecond {
		t.Fatalf("a Retry-After of 2 s: %v, %v, want 2 s plus at most 10%%", d, ok)
	}
	if d, ok := retryAfter(&APIError{Status: http.StatusServiceUnavailable, HasRetryAfter: true}); !ok || d != 0 {
		t.Fatalf("a Retry-After of 0: %v, %v, want 0, true (try again now)", d, ok)
	}
	if d, ok := retryAfter(&APIError{Status: http.StatusServiceUnavailable}); ok || d != 0 {
		t.Fatalf("a 503 without Retry-After: %v, %v, want 0, false (not retried)", d, ok)
	}
	if d, ok := retryAfter(&APIError{Status: http.StatusNotFound, RetryAfter: 2 * time.Second, HasRetryAfter: true}); ok || d != 0 {
		t.Fatalf("a 404 with Retry-After: %v, %v, want 0, false (not retried)", d, ok)
	}
	if d, ok := retryAfter(errors.New("network")); ok || d != 0 {
		t.Fatalf("a network error: %v, %v", d, ok)
	}
}

// TestTerminal: a task archived by retention is finished too, so Wait ends
// on it instead of polling until its timeout; unfinished states are not.
func TestTerminal(t *testing.T) {
	for _, s := range []string{StateSucceeded, StateCanceled, StateDeadLetter, StateArchived} {
		if !Terminal(s) {
			t.Errorf("Terminal(%q) = false", s)
		}
	}
	for _, s := range []string{StateWaiting, StateQueued, StateScheduled, StateLeased, ""} {
		if Terminal(s) {
			t.Errorf("Terminal(%q) = true", s)
		}
	}
}
