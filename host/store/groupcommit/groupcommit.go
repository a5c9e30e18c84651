// Package groupcommit is the queue between a store's Update calls and its
// writer: a caller queues its request and waits, and the writer takes the
// requests in batches, each batch one transaction (group commit). Both SQL
// drivers (host/sqlite, host/postgres) use it; what a request holds and how
// a batch runs stay theirs.
package groupcommit

import (
	"context"
	"sync"

	"github.com/asyncgate/asyncgate/host"
)

// ErrClosed is the answer to an update or view of a store that is closed.
var ErrClosed = host.Errorf(host.CodeDatabaseUnavailable, "the store is closed")

// Queue holds the requests (of type R) waiting for a writer.
type Queue[R any] struct {
	reqs   chan R
	closed chan struct{}

	mu       sync.RWMutex
	isClosed bool
}

// New returns a queue that holds up to size requests before Put waits.
func New[R any](size int) *Queue[R] {
	return &Queue[R]{reqs: make(chan R, size), closed: make(chan struct{})}
}

// Put queues r for the writer. It fails with ErrClosed once Close has been
// called, and with ctx's error if ctx ends while the queue is full. Once
// Put has queued r, the caller must wait for r's outcome: it may be
// committed whatever the caller's context does.
func (q *Queue[R]) Put(ctx context.Context, r R) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.isClosed {
		return ErrClosed
	}
	select {
	case q.reqs <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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

// Next waits for the next batch, appended to batch[:0]: the first request
// queued and as many more (up to max in all) as are queued already, so a
// batch is whatever arrived while the previous one ran. After Close it
// returns what was queued before, one request a batch, then ok false.
func (q *Queue[R]) Next(batch []R, max int) (_ []R, ok bool) {
	batch = batch[:0]
	select {
	case <-q.closed:
		return q.one(batch)
	default:
	}
	select {
	case r := <-q.reqs:
		batch = append(batch, r)
	case <-q.closed:
		return q.one(batch)
	}
	for len(batch) < max {
		select {
		case r := <-q.reqs:
			batch = append(batch, r)
		default:
			return batch, true
		}
	}
	return batch, true
}

// one is a batch of the next queued request alone, or none (ok false).
func (q *Queue[R]) one(batch []R) ([]R, bool) {
	select {
	case r := <-q.reqs:
		return append(batch, r), true
	default:
		return batch, false
	}
}

// Closing is closed when Close is called.
func (q *Queue[R]) Closing() <-chan struct{} { return q.closed }

// Len is how many requests wait for a writer now.
func (q *Queue[R]) Len() int { return len(q.reqs) }
