// Package groupcommit is the queue between a store's Update calls and its
// writer: a caller queues its request and waits, and the writer takes the
// requests in batches, each batch one transaction (group commit). Both SQL
// drivers (host/sqlite, host/postgres) use it; what a request holds and how
// a batch runs stay theirs.
//
// Requests come in two classes. Prompt requests (completions, failures,
// heartbeats, lease calls: everything not marked otherwise) move work
// already in the queue towards its end; bulk requests (enqueues) add work.
// A batch takes the prompt requests first and limits the bulk ones, so
// that under overload a backlog drains at the workers' pace instead of the
// producers' (RATIONALE.md, "Completions first under overload"), while
// every bulk request is still served within a bounded number of batches.
// Over time, an enqueue budget (budget.go) holds bulk requests to the pace
// of the prompt ones while a backlog exists, each at most MaxHold.
package groupcommit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// ErrClosed is the answer to an update or view of a store that is closed.
var ErrClosed = host.Errorf(host.CodeDatabaseUnavailable, "the store is closed")

// Class is a request's class: which requests a batch serves first.
type Class uint8

const (
	// Prompt requests are served first: the default.
	Prompt Class = iota
	// Bulk requests (new work) share each batch with the prompt ones: a
	// batch takes at most as many bulk requests as prompt ones, and never
	// fewer than MinBulk while any wait.
	Bulk
)

// MinBulk is the fewest bulk requests a batch takes while that many wait,
// however many prompt requests it holds: a bulk request waits at most
// about (queued bulk requests / MinBulk) batches.
const MinBulk = 8

// Queue holds the requests (of type R) waiting for a writer.
type Queue[R any] struct {
	reqs   chan R // prompt
	bulk   chan R
	closed chan struct{}

	mu       sync.RWMutex
	isClosed bool

	budget *budget
	now    func() time.Time

	// What the enqueue budget held: requests that waited, their summed
	// wait, and those that waited the whole MaxHold (HoldStats).
	holds, holdNanos, holdsExpired atomic.Int64
}

// HoldStats is what the enqueue budget has held since the queue was made.
type HoldStats struct {
	// Held counts bulk requests that waited for a token (granted, let go
	// after MaxHold, refused by their context or by Close alike).
	Held int64
	// Waited is their summed wait.
	Waited time.Duration
	// Expired counts those queued only because MaxHold passed.
	Expired int64
	// Waiting is how many wait now.
	Waiting int
}

// HoldStats reports what the enqueue budget has held; it is safe to call
// while requests are put.
func (q *Queue[R]) HoldStats() HoldStats {
	return HoldStats{Held: q.holds.Load(), Waited: time.Duration(q.holdNanos.Load()), Expired: q.holdsExpired.Load(),
		Waiting: q.budget.held()}
}

// New returns a queue that holds up to size requests of each class before
// Put waits.
func New[R any](size int) *Queue[R] {
	return &Queue[R]{reqs: make(chan R, size), bulk: make(chan R, size), closed: make(chan struct{}),
		budget: newBudget(), now: time.Now}
}

// Claimed tells the queue how a claim of ready tasks (a lease call) went
// for keys (Key of the tenant and each type it named, or the tenant's own
// key when it named none): backlog is whether it took all it asked for. A
// driver calls it from its claim; the enqueue budget holds a key's bulk
// requests only while that key's claims find a backlog.
func (q *Queue[R]) Claimed(keys []string, backlog bool) { q.budget.claimed(q.now(), keys, backlog) }

// Held is how many bulk requests wait for the enqueue budget now (they are
// not queued yet: Len does not count them).
func (q *Queue[R]) Held() int { return q.budget.held() }

// Put queues r for the writer in class c. A bulk request first waits for
// the enqueue budget of its keys (Key of its tenant and each task type it
// adds, or its tenant's own key when those are unknown; Claimed), at most
// MaxHold; a bulk request of no key is never held, and keys mean nothing
// to a prompt request. Put fails with ErrClosed once Close
// has been called, and with ctx's error if ctx ends while r is held or the
// queue of c is full. Once Put has queued r, the caller waits for r's
// outcome, or stops waiting and settles with r's Claim whether r will
// still run: taken by the writer, it may be committed whatever the
// caller's context does.
func (q *Queue[R]) Put(ctx context.Context, r R, c Class, keys ...string) error {
	if c == Bulk {
		if err := q.hold(ctx, keys); err != nil {
			return err
		}
	} else {
		q.budget.prompt(q.now())
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.isClosed {
		return ErrClosed
	}
	ch := q.reqs
	if c == Bulk {
		ch = q.bulk
	}
	select {
	case ch <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hold waits until the enqueue budget lets a bulk request for keys be
// queued, or MaxHold has passed, or Close is called; it fails only when ctx
// ends.
func (q *Queue[R]) hold(ctx context.Context, keys []string) error {
	ch := q.budget.admit(q.now(), keys)
	if ch == nil {
		return nil
	}
	start := time.Now()
	q.holds.Add(1)
	defer func() { q.holdNanos.Add(int64(time.Since(start))) }()
	t := time.NewTimer(MaxHold)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		q.holdsExpired.Add(1)
	case <-q.closed:
	case <-ctx.Done():
		q.budget.cancel(ch)
		return ctx.Err()
	}
	q.budget.cancel(ch)
	return nil
}

// IsClosed reports whether Close has been called.
func (q *Queue[R]) IsClosed() bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.isClosed
}

// Close refuses every later Put and tells the writers to stop once they
// have taken what was queued before. It reports whether this call closed the
// queue (false: it was closed already).
func (q *Queue[R]) Close() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.isClosed {
		return false
	}
	q.isClosed = true
	close(q.closed)
	return true
}

// Next waits for the next batch, appended to batch[:0]: what is queued
// already, up to limit in all, so a batch is whatever arrived while the
// previous one ran. Prompt requests come first; bulk requests fill the
// rest, at most as many as the batch's prompt requests or MinBulk,
// whichever is more (up to limit when no prompt request waits). Within a
// class, requests are taken in the order they were queued. After Close it
// returns what was queued before, one request a batch, then ok false.
func (q *Queue[R]) Next(batch []R, limit int) (_ []R, ok bool) {
	batch = batch[:0]
	select {
	case <-q.closed:
		return q.one(batch)
	default:
	}
	// Wait for the first request of either class, a prompt one if one
	// waits; a bulk one found first keeps its place in this batch. A batch
	// of one cannot share, so then the classes are taken as they come
	// (select chooses among ready cases at random).
	bulk := 0
	if limit > 1 {
		select {
		case r := <-q.reqs:
			batch = append(batch, r)
		default:
		}
	}
	if len(batch) == 0 {
		select {
		case r := <-q.reqs:
			batch = append(batch, r)
		case r := <-q.bulk:
			batch = append(batch, r)
			bulk = 1
		case <-q.closed:
			return q.one(batch)
		}
	}
	take := func(ch chan R, n int) {
		for ; n > 0; n-- {
			select {
			case r := <-ch:
				batch = append(batch, r)
			default:
				return
			}
		}
	}
	// Room for MinBulk bulk requests, or as many as wait, is kept
	// however many prompt requests wait.
	reserve := max(min(MinBulk, limit/2, len(q.bulk)+bulk)-bulk, 0)
	take(q.reqs, limit-len(batch)-reserve)
	prompt := len(batch) - bulk
	room := limit - len(batch)
	if prompt > 0 {
		room = min(room, max(prompt, MinBulk)-bulk)
	}
	take(q.bulk, room)
	return batch, true
}

// one is a batch of the next queued request alone, or none (ok false).
func (q *Queue[R]) one(batch []R) ([]R, bool) {
	select {
	case r := <-q.reqs:
		return append(batch, r), true
	default:
	}
	select {
	case r := <-q.bulk:
		return append(batch, r), true
	default:
		return batch, false
	}
}

// Closing is closed when Close is called.
func (q *Queue[R]) Closing() <-chan struct{} { return q.closed }

// Len is how many requests of both classes wait for a writer now.
func (q *Queue[R]) Len() int { return len(q.reqs) + len(q.bulk) }

// Claim settles, once, whether the writer runs a queued request or its
// caller has given up on it: the writer Takes it right before it runs it,
// the caller Abandons it when it stops waiting, and whichever comes first
// wins. A request abandoned before it was taken never runs (nothing of it
// is written); one taken before its caller gave up may still commit, so
// its outcome is unknown to the caller (store.UpdateAbandoned). The zero
// value is a queued request's.
type Claim struct{ state atomic.Uint32 }

const (
	claimQueued uint32 = iota
	claimTaken
	claimAbandoned
)

// Take reports whether the writer may run the request: it takes it now, or
// took it before (a batch run again); false when its caller abandoned it.
func (c *Claim) Take() bool {
	return c.state.CompareAndSwap(claimQueued, claimTaken) || c.state.Load() == claimTaken
}

// Abandon reports whether the caller gave the request up before the writer
// took it: then it never runs. False when the writer took it first.
func (c *Claim) Abandon() bool {
	return c.state.CompareAndSwap(claimQueued, claimAbandoned) || c.state.Load() == claimAbandoned
}
