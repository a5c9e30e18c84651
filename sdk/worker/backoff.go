package worker

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential backoff: Initial, doubled after every failure,
// capped at Max, with up to ±10% jitter. The zero value means the Lease
// Protocol's error backoff (5 s → 10 s → 20 s → 40 s, at most 60 s).
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// Delay returns the wait before retry number n (n ≥ 1).
func (b Backoff) Delay(n int) time.Duration {
	d, maxd := b.Initial, b.Max
	if d <= 0 {
		d = 5 * time.Second
	}
	if maxd <= 0 {
		maxd = 60 * time.Second
	}
	for i := 1; i < n && d < maxd; i++ {
		d *= 2
	}
	if d > maxd {
		d = maxd
	}
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}

// sleep waits d or until ctx is done; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
