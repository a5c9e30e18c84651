package worker

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter caps the Retry-After the Runner and Holder wait for: a gate,
// or a proxy in front of it, that asks for longer is tried again after
// MaxRetryAfter plus up to 10% jitter.
const MaxRetryAfter = 60 * time.Second

// retryAfterBound bounds the Retry-After parseRetryAfter reads, in both of
// its forms: a larger delay-seconds (even one past int64) or an HTTP-date
// further away reads as retryAfterBound.
const retryAfterBound = 24 * time.Hour

// parseRetryAfter reads a Retry-After header: delay-seconds, or an
// HTTP-date measured against the answer's Date (serverDate; the local clock
// when it is zero), at most retryAfterBound. It returns 0 for an absent or
// unreadable header and for a date already past.
func parseRetryAfter(v string, serverDate time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if isDelaySeconds(v) {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s > int64(retryAfterBound/time.Second) {
			return retryAfterBound // all digits, so err is only ever out of range
		}
		return time.Duration(s) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	now := serverDate
	if now.IsZero() {
		now = time.Now()
	}
	return min(max(at.Sub(now), 0), retryAfterBound)
}

// isDelaySeconds reports whether v is a Retry-After's delay-seconds: one or
// more ASCII digits, no sign (RFC 9110 §10.2.3).
func isDelaySeconds(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

// retryAfter returns how long a temporary answer asks to wait before the
// next attempt: its Retry-After, at most MaxRetryAfter, plus up to 10%
// jitter (so that workers told the same do not come back at the same
// instant; the cap comes first, so a Retry-After at or past it is jittered
// too). It is 0 for other errors.
func retryAfter(err error) time.Duration {
	var ae *APIError
	if !errors.As(err, &ae) || ae.RetryAfter <= 0 || !Temporary(err) {
		return 0
	}
	d := min(ae.RetryAfter, MaxRetryAfter)
	return d + time.Duration(rand.Float64()*0.1*float64(d))
}

// retryWait is the wait before the next attempt after err: backoff, or the
// answer's Retry-After when that is longer (see retryAfter).
func retryWait(err error, backoff time.Duration) time.Duration {
	return max(backoff, retryAfter(err))
}
