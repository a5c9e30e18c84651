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
	}{
		{"", 0},
		{"2", 2 * time.Second},
		{"0", 0},
		{"-1", 0},
		{"later", 0},
		{"99999999999", 24 * time.Hour},
		{"99999999999999999999", 24 * time.Hour}, // past int64: still the bound, not 0
		{"+5", 0},                                // delay-seconds is digits only
		{"0x10", 0},
		{"Sat, 01 Mar 2025 12:00:30 GMT", 30 * time.Second},
		{"Sat, 01 Mar 2025 11:00:00 GMT", 0},
		{"Mon, 03 Mar 2025 12:00:00 GMT", 24 * time.Hour}, // bounded as delay-seconds is
		{"Fri, 31 Dec 9999 23:59:59 GMT", 24 * time.Hour},
	} {
		if got := parseRetryAfter(tc.v, date); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.v, got, tc.want)
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
			d := retryAfter(&APIError{Status: http.StatusTooManyRequests, RetryAfter: ra})
			if d < MaxRetryAfter || d > MaxRetryAfter+MaxRetryAfter/10 {
				t.Fatalf("a Retry-After of %v: %v, want %v plus at most 10%%", ra, d, MaxRetryAfter)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Fatalf("a Retry-After of %v: every wait was %v, want jitter", ra, MaxRetryAfter)
		}
	}
	if d := retryAfter(&APIError{Status: http.StatusServiceUnavailable, RetryAfter: 2 * time.Second}); d < 2*time.Second || d > 2200*time.Millisecond {
		t.Fatalf("a Retry-After of 2 s: %v, want 2 s plus at most 10%%", d)
	}
	if d := retryAfter(&APIError{Status: http.StatusNotFound, RetryAfter: 2 * time.Second}); d != 0 {
		t.Fatalf("a 404 with Retry-After: %v, want 0 (not retried)", d)
	}
	if d := retryAfter(errors.New("network")); d != 0 {
		t.Fatalf("a network error: %v", d)
	}
}
