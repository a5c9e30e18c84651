package worker

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Resource leases (KLIS-3): lock the resources you are about to change. The
// Client has the raw calls; Hold acquires a manifest and keeps it alive,
// heartbeating at TTL/3 and cancelling a context the moment the leases may be
// lost, so work tied to that context stops before another holder can start.

// Lease predicates.
const (
	Reads   = "READS"
	Mutates = "MUTATES"
)

// ResourceIntent is one (resource, predicate) pair of a manifest.
type ResourceIntent struct {
	Resource  string `json:"resource"`
	Predicate string `json:"predicate"` // Reads or Mutates
}

// ResourceLease is a lease on a resource, as the gate reports it.
type ResourceLease struct {
	ID         string     `json:"lease_id"`
	Resource   string     `json:"resource"`
	Predicate  string     `json:"predicate"`
	Holder     string     `json:"holder"`
	State      string     `json:"state"` // active, released or expired
	ManifestID string     `json:"manifest_id"`
	PriorityAt time.Time  `json:"priority_at"`
	AcquiredAt time.Time  `json:"acquired_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	TTLMs      int64      `json:"ttl_ms"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	Restarting bool       `json:"restarting,omitempty"`
	// TaskID names the task the lease is held for (a task's resource intents).
	TaskID string `json:"task_id,omitempty"`
	// FencingToken is the grant's number on its resource, larger than every
	// earlier grant's of that resource. Pass it with every change to the
	// resource; the system that holds the resource refuses a change whose
	// token is lower than the highest it has seen, so a holder that stalled
	// past its expiry cannot overwrite the next holder's work.
	FencingToken int64 `json:"fencing_token"`
}

// AcquireRequest asks for a manifest: every intent, or none.
type AcquireRequest struct {
	Intents []ResourceIntent
	// TTL of the leases (0: the gate's default, 60 s; capped by the gate).
	TTL time.Duration
	// PriorityAt is the wait-die timestamp; nil lets the gate use its now.
	// Send the same one again when retrying to keep your seniority.
	PriorityAt *time.Time
	// Wait long-polls while the request is older than every conflicting holder.
	Wait time.Duration
	// SessionID acquires in a session (CreateSession): the leases follow
	// its heartbeats and end with it.
	SessionID string
}

// Manifest is a granted acquire.
type Manifest struct {
	ID         string          `json:"manifest_id"`
	PriorityAt time.Time       `json:"priority_at"`
	Leases     []ResourceLease `json:"leases"`
	ServerTime time.Time       `json:"server_time"`
}

// ResourceLeases is the answer of a heartbeat, release or verify.
type ResourceLeases struct {
	Leases     []ResourceLease `json:"leases"`
	ServerTime time.Time       `json:"server_time"`
}

// ResourceHolders answers who holds a resource now, without taking it: the
// leases honoured at the gate's now on it, in this key's tenant.
func (c *Client) ResourceHolders(ctx context.Context, resource string) (*ResourceLeases, error) {
	var out ResourceLeases
	if _, _, err := c.do(ctx, http.MethodGet, "/v1/resource-leases?resource="+url.QueryEscape(resource), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AwaitResourceFree waits up to wait (the gate caps it at 30 s), taking
// nothing, until nothing in the way of taking resource with predicate
// (Reads or Mutates; "" is Mutates) is held, and answers what is still in
// the way when the wait ran out (no leases: free when the gate looked). It
// is the wait of an acquire refused with wait-die "die": wait here, then
// acquire again with the same PriorityAt. The gate answers at the release
// or expiry, on whichever of its hosts it happens, not at a poll.
func (c *Client) AwaitResourceFree(ctx context.Context, resource, predicate string, wait time.Duration) (*ResourceLeases, error) {
	q := url.Values{"resource": {resource}, "wait_seconds": {strconv.FormatFloat(wait.Seconds(), 'f', -1, 64)}}
	if predicate != "" {
		q.Set("predicate", predicate)
	}
	var out ResourceLeases
	if _, _, err := c.do(ctx, http.MethodGet, "/v1/resource-leases?"+q.Encode(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// IsResourceConflict reports whether err is a refused acquire (409
// resource_conflict); its detail names the lease in the way.
func IsResourceConflict(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == "resource_conflict"
}

func isQuota(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == "quota_exceeded"
}

// AcquireResources acquires a manifest.
func (c *Client) AcquireResources(ctx context.Context, req AcquireRequest) (*Manifest, error) {
	body := map[string]any{"intents": req.Intents}
	if req.TTL > 0 {
		body["ttl_ms"] = req.TTL.Milliseconds()
	}
	if req.PriorityAt != nil {
		body["priority_at"] = req.PriorityAt.UTC().Format(time.RFC3339Nano)
	}
	if req.Wait > 0 {
		body["wait_seconds"] = req.Wait.Seconds()
	}
	if req.SessionID != "" {
		body["session_id"] = req.SessionID
	}
	var m Manifest
	if _, _, err := c.do(ctx, http.MethodPost, "/v1/resource-leases", body, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// HeartbeatResources extends the leases by their TTL from the gate's now,
// all or none; a lost lease is an error that errors.Is ErrLeaseLost.
func (c *Client) HeartbeatResources(ctx context.Context, ids []string) (*ResourceLeases, error) {
	var out ResourceLeases
	if _, _, err := c.do(ctx, http.MethodPost, "/v1/resource-leases/heartbeat", map[string]any{"lease_ids": ids}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReleaseResources releases the leases (idempotent).
func (c *Client) ReleaseResources(ctx context.Context, ids []string) (*ResourceLeases, error) {
	var out ResourceLeases
	if _, _, err := c.do(ctx, http.MethodPost, "/v1/resource-leases/release", map[string]any{"lease_ids": ids}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// VerifyResources is VERIFY_ALL: the leases' state by the gate's clock (no
// ids: every lease this key holds). It also resumes heartbeats after
// DieRestart.
func (c *Client) VerifyResources(ctx context.Context, ids []string) (*ResourceLeases, error) {
	var out ResourceLeases
	body := map[string]any{}
	if len(ids) > 0 {
		body["lease_ids"] = ids
	}
	if _, _, err := c.do(ctx, http.MethodPost, "/v1/resource-leases/verify", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DieRestart declares that this holder's process is restarting: its live
// leases get their one grace period and wait for VerifyResources.
func (c *Client) DieRestart(ctx context.Context) (*ResourceLeases, error) {
	var out ResourceLeases
	if _, _, err := c.do(ctx, http.MethodPost, "/v1/resource-leases/die-restart", map[string]any{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetResourceLease returns one lease of the tenant with its state by the
// gate's clock (a VERIFY_ALL of one id).
func (c *Client) GetResourceLease(ctx context.Context, id string) (*ResourceLease, error) {
	out, err := c.VerifyResources(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	if len(out.Leases) != 1 {
		return nil, &APIError{Status: http.StatusNotFound, Code: "not_found", Detail: "no resource lease " + id}
	}
	return &out.Leases[0], nil
}

// Holder keeps a granted manifest alive until Release or until the leases
// may be lost. Its Context is cancelled the moment the holder can no longer
// be sure it holds every lease: a heartbeat refused (context.Cause is
// ErrLeaseLost), or no heartbeat answered before the conservative local
// deadline (the gate's expiry, measured on the gate's clock from when the
// last successful heartbeat was sent). Do the guarded work under Context.
type Holder struct {
	c        *Client
	ids      []string
	ctx      context.Context
	cancel   context.CancelCauseFunc
	done     chan struct{}
	mu       sync.Mutex
	leases   []ResourceLease
	deadline time.Time
	stopOnce sync.Once
	stop     chan struct{}
}

// Hold acquires the manifest and heartbeats it every TTL/3 in the
// background. ctx bounds the acquire and is the parent of Holder.Context.
func (c *Client) Hold(ctx context.Context, req AcquireRequest) (*Holder, error) {
	sent := time.Now()
	m, err := c.AcquireResources(ctx, req)
	if err != nil {
		return nil, err
	}
	h := &Holder{c: c, leases: m.Leases, done: make(chan struct{}), stop: make(chan struct{})}
	for _, l := range m.Leases {
		h.ids = append(h.ids, l.ID)
	}
	h.deadline = localDeadline(sent, m.ServerTime, m.Leases)
	h.ctx, h.cancel = context.WithCancelCause(ctx)
	go h.run(time.Duration(m.Leases[0].TTLMs) * time.Millisecond)
	return h, nil
}

// localDeadline is the earliest expiry of the leases, moved onto the local
// clock: the time left by the gate's clock, counted from when the request
// was sent, so network latency only makes it earlier (KLIS-3 §6.2).
func localDeadline(sent, serverTime time.Time, ls []ResourceLease) time.Time {
	var left time.Duration = -1
	for _, l := range ls {
		if d := l.ExpiresAt.Sub(serverTime); left < 0 || d < left {
			left = d
		}
	}
	if left < 0 {
		left = 0
	}
	return sent.Add(left)
}

// Context is cancelled when the leases are lost or released.
func (h *Holder) Context() context.Context { return h.ctx }

// Leases returns the leases as of the last heartbeat.
func (h *Holder) Leases() []ResourceLease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]ResourceLease(nil), h.leases...)
}

// FencingToken returns the fencing token of the held lease on resource (as
// the gate normalized its name: the Resource of Leases), or 0 when the
// manifest holds no lease on it. The token never changes while the lease is
// held.
func (h *Holder) FencingToken(resource string) int64 {
	for _, l := range h.Leases() {
		if l.Resource == resource {
			return l.FencingToken
		}
	}
	return 0
}

// IDs returns the lease ids.
func (h *Holder) IDs() []string { return append([]string(nil), h.ids...) }

// Release stops the heartbeats, cancels Context and releases the leases.
func (h *Holder) Release(ctx context.Context) error {
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.done
	h.cancel(context.Canceled)
	_, err := h.c.ReleaseResources(ctx, h.ids)
	return err
}

// errLeaseTimeout is the cause when no heartbeat was answered in time.
var errLeaseTimeout = errors.New("no heartbeat was answered before the lease's expiry: assuming it lost")

func (h *Holder) run(ttl time.Duration) {
	defer close(h.done)
	every := ttl / 3
	if every < 10*time.Millisecond {
		every = 10 * time.Millisecond
	}
	next := time.NewTimer(every)
	defer next.Stop()
	for {
		h.mu.Lock()
		deadline := h.deadline
		h.mu.Unlock()
		expiry := time.NewTimer(time.Until(deadline))
		select {
		case <-h.stop:
			expiry.Stop()
			return
		case <-h.ctx.Done():
			expiry.Stop()
			return
		case <-expiry.C:
			h.cancel(errLeaseTimeout)
			return
		case <-next.C:
		}
		expiry.Stop()
		sent := time.Now()
		hctx, cancel := context.WithDeadline(h.ctx, deadline)
		res, err := h.c.HeartbeatResources(hctx, h.ids)
		cancel()
		switch {
		case err == nil:
			h.mu.Lock()
			h.leases, h.deadline = res.Leases, localDeadline(sent, res.ServerTime, res.Leases)
			h.mu.Unlock()
			next.Reset(every)
		case errors.Is(err, ErrLeaseLost):
			h.cancel(ErrLeaseLost)
			return
		case isQuota(err):
			h.cancel(err) // 429 quota_exceeded is final for these leases, not a busy gate
			return
		case Temporary(err):
			// Try again soon, or after the answer's Retry-After; the
			// deadline still bounds how long: at most half the time left,
			// so that the retry has time to get through.
			next.Reset(holderRetry(every, time.Until(deadline), retryAfter(err)))
		default:
			h.cancel(err) // a refusal such as verify_required or a quota: the leases cannot be kept
			return
		}
	}
}

// holderRetry is the wait before retrying a Holder's failed heartbeat: a
// quarter of the heartbeat period (at most 1 s), or the failed answer's
// Retry-After (hint) when that is longer, but never more than half the time
// left before the leases' expiry.
func holderRetry(every, untilDeadline, hint time.Duration) time.Duration {
	d := min(every/4+time.Millisecond, time.Second)
	if hint > d {
		d = max(min(hint, untilDeadline/2), d)
	}
	return d
}
