package groupcommit

import (
	"sync"
	"time"
)

// The enqueue budget: the share rule over time (RATIONALE.md, "Completions
// first under overload"). The per-batch rule of Next bounds the bulk share
// of one batch, but serial workers keep few prompt requests in flight, so
// most batches find none waiting and fill with bulk ones. The budget holds
// bulk requests back before they are queued instead: while it is in force,
// each prompt request queued earns Ratio bulk tokens (up to Burst), and a
// bulk request waits for a token, in order, at most MaxHold.
//
// It is in force only while a backlog exists and completions arrive: the
// store's last claim of ready tasks (a lease call) took all it asked for,
// within Window, and a prompt request was queued within Window. Otherwise a
// bulk request passes at once, so a queue that only fills, or whose workers
// keep up, enqueues at full speed.

// Budget constants. A bulk request waits at most MaxHold for a token; it
// is then queued as it would have been without the budget, and served by
// Next's per-batch rule.
const (
	// Ratio is the bulk tokens one prompt request earns.
	Ratio = 1.0
	// Burst is the most tokens saved; the budget starts full.
	Burst = 64
	// Window is how recent the backlog and the last prompt request must be
	// for the budget to be in force.
	Window = time.Second
	// MaxHold is the longest a bulk request waits for a token.
	MaxHold = 500 * time.Millisecond
)

// budget is the enqueue budget's state. Its methods take the time, so the
// rule is tested on a clock of the test's own.
type budget struct {
	mu         sync.Mutex
	tokens     float64
	lastPrompt time.Time // when a prompt request was last queued
	backlogAt  time.Time // when the last claim found a backlog; zero: it found none
	// waiting are the held bulk requests in arrival order; a grant closes
	// the head's channel.
	waiting []chan struct{}
}

func newBudget() *budget { return &budget{tokens: Burst} }

// activeLocked reports whether the budget is in force at now; when it is
// not, the tokens are refilled and every held request is let go.
func (b *budget) activeLocked(now time.Time) bool {
	on := !b.backlogAt.IsZero() && now.Sub(b.backlogAt) < Window && now.Sub(b.lastPrompt) < Window
	if !on {
		b.tokens = Burst
		b.releaseLocked()
	}
	return on
}

func (b *budget) releaseLocked() {
	for _, ch := range b.waiting {
		close(ch)
	}
	b.waiting = b.waiting[:0]
}

// prompt records a prompt request queued at now: it earns Ratio tokens,
// which go to the held bulk requests first, oldest first.
func (b *budget) prompt(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastPrompt = now
	if !b.activeLocked(now) {
		return
	}
	b.tokens = min(b.tokens+Ratio, Burst)
	for len(b.waiting) > 0 && b.tokens >= 1 {
		b.tokens--
		close(b.waiting[0])
		b.waiting = b.waiting[1:]
	}
}

// claimed records a claim of ready tasks at now: backlog is whether it
// took all it asked for (more may be ready). A claim that took fewer ends
// the backlog and lets every held request go.
func (b *budget) claimed(now time.Time, backlog bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if backlog {
		b.backlogAt = now
		return
	}
	b.backlogAt = time.Time{}
	b.activeLocked(now)
}

// admit is a bulk request's arrival at now. It returns nil when the
// request may be queued at once, else a channel closed when it is granted a
// token or let go; the caller stops waiting after MaxHold and then
// calls cancel.
func (b *budget) admit(now time.Time) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.activeLocked(now) {
		return nil
	}
	if len(b.waiting) == 0 && b.tokens >= 1 {
		b.tokens--
		return nil
	}
	ch := make(chan struct{})
	b.waiting = append(b.waiting, ch)
	return ch
}

// cancel withdraws a held request that stopped waiting (its hold passed or
// its context ended); one granted already keeps its token.
func (b *budget) cancel(ch <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, w := range b.waiting {
		if w == ch {
			b.waiting = append(b.waiting[:i], b.waiting[i+1:]...)
			return
		}
	}
}

// held is how many bulk requests wait for a token.
func (b *budget) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiting)
}
