package host

import (
	"sync"
	"time"
)

// Clock tells the time. The engine takes all time from one Clock so tests can
// move time exactly; the server clock is the source of truth for lease expiry.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real wall clock.
type SystemClock struct{}

// Now returns time.Now in UTC, truncated to microseconds (the stores' precision).
func (SystemClock) Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// ManualClock is a Clock that only moves when told to. It is safe for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock set to t.
func NewManualClock(t time.Time) *ManualClock {
	return &ManualClock{now: t.UTC().Truncate(time.Microsecond)}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d).Truncate(time.Microsecond)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t.UTC().Truncate(time.Microsecond)
	c.mu.Unlock()
}
