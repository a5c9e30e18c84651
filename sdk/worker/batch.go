package worker

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// MaxOutcomeBatch is the most entries one POST /v1/leases/batch may carry.
const MaxOutcomeBatch = 100

// OutcomeEntry is one entry of a batch of lease outcomes: a lease and
// exactly one of Complete, Fail or Heartbeat.
type OutcomeEntry struct {
	// ID is the caller's name for the entry, echoed in its result.
	ID        string            `json:"id,omitempty"`
	LeaseID   string            `json:"lease_id"`
	Complete  *Completion       `json:"complete,omitempty"`
	Fail      *Failure          `json:"fail,omitempty"`
	Heartbeat *HeartbeatRequest `json:"heartbeat,omitempty"`
}

// OutcomeResult is one entry's answer: the verb's answer, or Err (an
// *APIError with the code and status its single call would have answered,
// so errors.Is(Err, ErrLeaseLost) works as for the single call).
type OutcomeResult struct {
	ID        string
	LeaseID   string
	Complete  *CompleteResult
	Fail      *FailResult
	Heartbeat *HeartbeatResult
	Err       error
}

// ErrBatchUnsupported is returned by Outcomes when the gate has no batch
// route (an older gate answers 404 or 405): send the outcomes one by one.
var ErrBatchUnsupported = errors.New("worker: the gate has no POST /v1/leases/batch")

// Outcomes completes, fails and heartbeats up to MaxOutcomeBatch leases in
// one call. Each entry is answered on its own, in the entries' order; the
// error is for the call as a whole (the gate unreachable, the call refused,
// ErrBatchUnsupported). A heartbeat result's lease clock is measured as
// Heartbeat measures it.
func (c *Client) Outcomes(ctx context.Context, entries []OutcomeEntry) ([]OutcomeResult, error) {
	var out struct {
		Results []struct {
			ID         string           `json:"id"`
			LeaseID    string           `json:"lease_id"`
			OK         bool             `json:"ok"`
			HTTPStatus int              `json:"http_status"`
			Error      string           `json:"error"`
			Detail     string           `json:"detail"`
			TaskStatus string           `json:"task_status"`
			Complete   *CompleteResult  `json:"complete"`
			Fail       *FailResult      `json:"fail"`
			Heartbeat  *HeartbeatResult `json:"heartbeat"`
		} `json:"results"`
	}
	sent := time.Now()
	status, date, err := c.do(ctx, http.MethodPost, "/v1/leases/batch", map[string]any{"entries": entries}, &out)
	if err != nil {
		if status == http.StatusNotFound || status == http.StatusMethodNotAllowed {
			return nil, errors.Join(ErrBatchUnsupported, err)
		}
		return nil, err
	}
	if len(out.Results) != len(entries) {
		return nil, errors.New("worker: the gate answered a batch of outcomes with the wrong number of results")
	}
	received := time.Now()
	res := make([]OutcomeResult, len(entries))
	for i, r := range out.Results {
		res[i] = OutcomeResult{ID: r.ID, LeaseID: r.LeaseID, Complete: r.Complete, Fail: r.Fail, Heartbeat: r.Heartbeat}
		if !r.OK {
			res[i] = OutcomeResult{ID: r.ID, LeaseID: r.LeaseID, Err: &APIError{Status: r.HTTPStatus, Code: r.Error, Detail: r.Detail, TaskStatus: r.TaskStatus}}
			continue
		}
		if h := r.Heartbeat; h != nil {
			h.ttl, h.deadline = leaseClock(sent, received, h.ServerTime, date, h.LeaseExpiresAt)
		}
	}
	return res, nil
}

// outcomeBatcher sends the Runner's completions and failures. An outcome
// that finds no call in flight is sent at once on its own; outcomes that
// become ready while calls are in flight wait for one to end and then go
// together in one batch call (group commit: a lone outcome is never held
// back, several ready at once share a call). An older gate without the
// batch route gets single calls from then on.
type outcomeBatcher struct {
	c           *Client
	maxInFlight int
	unsupported atomic.Bool

	mu       sync.Mutex
	pending  []*pendingOutcome
	inFlight int
}

type pendingOutcome struct {
	ctx  context.Context
	e    OutcomeEntry
	res  OutcomeResult
	done chan struct{}
}

func newOutcomeBatcher(c *Client) *outcomeBatcher { return &outcomeBatcher{c: c, maxInFlight: 2} }

// send delivers one outcome and returns its answer; it returns early with
// ctx's error when ctx ends first (the outcome may still be delivered: a
// repeated completion or failure of the same lease answers duplicate).
func (b *outcomeBatcher) send(ctx context.Context, e OutcomeEntry) OutcomeResult {
	if b.unsupported.Load() {
		return b.single(ctx, e)
	}
	p := &pendingOutcome{ctx: ctx, e: e, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, p)
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		go b.flush()
	}
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.res
	case <-ctx.Done():
		return OutcomeResult{LeaseID: e.LeaseID, Err: ctx.Err()}
	}
}

// flush sends what is pending, batch after batch, until nothing is.
func (b *outcomeBatcher) flush() {
	for {
		b.mu.Lock()
		n := min(len(b.pending), MaxOutcomeBatch)
		if n == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		batch := append([]*pendingOutcome(nil), b.pending[:n]...)
		b.pending = b.pending[n:]
		b.mu.Unlock()
		b.deliver(batch)
	}
}

func (b *outcomeBatcher) deliver(batch []*pendingOutcome) {
	if len(batch) == 1 || b.unsupported.Load() {
		var wg sync.WaitGroup
		for _, p := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.res = b.single(p.ctx, p.e)
				close(p.done)
			}()
		}
		wg.Wait()
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), 30*time.Second)
	defer cancel()
	entries := make([]OutcomeEntry, len(batch))
	for i, p := range batch {
		entries[i] = p.e
	}
	res, err := b.c.Outcomes(ctx, entries)
	if errors.Is(err, ErrBatchUnsupported) {
		b.unsupported.Store(true)
		b.deliver(batch)
		return
	}
	var ae *APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusRequestEntityTooLarge || ae.Status == http.StatusBadRequest && len(batch) > 1) {
		// Together over the gate's body limit (large inline results), or
		// one entry's value refused for the whole body (the gate checks a
		// body's strings before its entries): each on its own, as it would
		// have gone without batching, so that only that one fails.
		for _, p := range batch {
			b.deliver([]*pendingOutcome{p})
		}
		return
	}
	for i, p := range batch {
		if err != nil {
			p.res = OutcomeResult{LeaseID: p.e.LeaseID, Err: err}
		} else {
			p.res = res[i]
		}
		close(p.done)
	}
}

// single sends one outcome by its own route.
func (b *outcomeBatcher) single(ctx context.Context, e OutcomeEntry) OutcomeResult {
	r := OutcomeResult{ID: e.ID, LeaseID: e.LeaseID}
	switch {
	case e.Complete != nil:
		r.Complete, r.Err = b.c.Complete(ctx, e.LeaseID, *e.Complete)
	case e.Fail != nil:
		r.Fail, r.Err = b.c.Fail(ctx, e.LeaseID, *e.Fail)
	case e.Heartbeat != nil:
		r.Heartbeat, r.Err = b.c.Heartbeat(ctx, e.LeaseID, *e.Heartbeat)
	}
	return r
}
