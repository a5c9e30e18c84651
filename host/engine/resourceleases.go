package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Resource leases (seed 003, KLIS-3): leases on named resources, held by
// agents or workers, with strict expiry by the server clock, wait-die on an
// immutable priority timestamp, a one-time grace period for a holder that
// declared DIE_RESTART, and quotas against squatting.
//
// Every decision on a resource is made inside a write transaction that first
// locks the resource (store.Tx.LockResources), then reads the clock, then
// reads the leases: decisions on one resource are made one at a time, in
// server-time order, so two MUTATES leases never overlap by server time.

// ResourceLeaseConfig tunes resource leases. The zero value is the default.
type ResourceLeaseConfig struct {
	// DefaultTTL is the TTL of a lease whose request names none (default 60 s).
	DefaultTTL time.Duration
	// MaxTTL caps every TTL (default 5 min).
	MaxTTL time.Duration
	// MinTTL is the shortest TTL granted: a shorter one is raised to it
	// (default 100 ms; a lease that ends before its answer arrives protects
	// nothing).
	MinTTL time.Duration
	// Grace is how long past its expiry a holder in DIE_RESTART keeps its
	// leases, once per lease (default 15 s).
	Grace time.Duration
	// MaxIntents caps the resources of one manifest (default 64).
	MaxIntents int
	// MaxLeasesPerHolder caps a holder's live leases (default 256; negative: no cap).
	MaxLeasesPerHolder int
	// HoldQuota caps the total lease time one holder is granted on one
	// resource within QuotaWindow, counting up to each lease's expiry
	// (default 45 min; negative: no cap).
	HoldQuota time.Duration
	// QuotaWindow is the window of HoldQuota (default 1 h).
	QuotaWindow time.Duration
	// MaxSessionsPerHolder caps a holder's open sessions, active and
	// unexpired (default 16; negative: no cap).
	MaxSessionsPerHolder int
	// SessionRetention is how long after its end (or expiry) a session is
	// kept, answering 409 session_ended, before the sweep purges it and
	// its id answers 404 not_found (default 1 h).
	SessionRetention time.Duration
	// StepAside is how long at most a task whose intents could not be
	// granted steps aside (its available_at moves by it) so the tasks
	// behind it are offered meanwhile; a release of what blocked it, or
	// its expiry, makes it available sooner (default 1 s).
	StepAside time.Duration
}

func (c ResourceLeaseConfig) withDefaults() ResourceLeaseConfig {
	if c.DefaultTTL <= 0 {
		c.DefaultTTL = 60 * time.Second
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = 5 * time.Minute
	}
	if c.MinTTL <= 0 {
		c.MinTTL = 100 * time.Millisecond
	}
	if c.MinTTL > c.MaxTTL {
		c.MinTTL = c.MaxTTL
	}
	if c.DefaultTTL > c.MaxTTL {
		c.DefaultTTL = c.MaxTTL
	}
	if c.DefaultTTL < c.MinTTL {
		c.DefaultTTL = c.MinTTL
	}
	if c.Grace <= 0 {
		c.Grace = 15 * time.Second
	}
	if c.MaxIntents <= 0 {
		c.MaxIntents = 64
	}
	if c.MaxSessionsPerHolder == 0 {
		c.MaxSessionsPerHolder = 16
	}
	if c.SessionRetention <= 0 {
		c.SessionRetention = time.Hour
	}
	if c.StepAside <= 0 {
		c.StepAside = time.Second
	}
	if c.MaxLeasesPerHolder == 0 {
		c.MaxLeasesPerHolder = 256
	}
	if c.HoldQuota == 0 {
		c.HoldQuota = 45 * time.Minute
	}
	if c.QuotaWindow <= 0 {
		c.QuotaWindow = time.Hour
	}
	return c
}

// Event kinds of resource leases, reported to Config.OnEvent.
const (
	EvResourceGranted  EventKind = "resource_granted"  // one per lease granted
	EvResourceReleased EventKind = "resource_released" // one per lease released
	EvResourceExpired  EventKind = "resource_expired"  // one per lease recorded as expired
	EvResourceRefused  EventKind = "resource_refused"  // an acquire refused (conflict or quota)
	EvResourceWaiting  EventKind = "resource_waiting"  // an acquire started to wait (wait-die: older)
	EvResourceWaited   EventKind = "resource_waited"   // an acquire stopped waiting
)

// MaxResourceLeaseIDs caps the lease ids of one heartbeat, release or verify call.
const MaxResourceLeaseIDs = 100

// resourceLeases is the engine's resource lease state: its configuration,
// the waiters parked on resources and the tasks stepped aside for them
// (resourcewait.go, taskwake.go).
type resourceLeases struct {
	once sync.Once
	cfg  ResourceLeaseConfig
	e    *Engine
	w    resourceWatch
	// blocked are the tasks stepped aside on this host, by tenant NUL id,
	// each with the timer of its fallback wake-up (guarded by w.mu, as is
	// closed).
	blocked map[string]*blockedTask
	closed  bool
}

func (e *Engine) rl() *resourceLeases {
	e.rlState.once.Do(func() {
		e.rlState.cfg = e.cfg.ResourceLeases.withDefaults()
		e.rlState.e = e
	})
	return &e.rlState
}

// ResourceLeaseConfig returns the resource lease settings in force.
func (e *Engine) ResourceLeaseConfig() ResourceLeaseConfig { return e.rl().cfg }

// ResourceIntent is one (resource, predicate) pair of an intent manifest.
type ResourceIntent = host.ResourceIntent

// AcquireRequest asks for every intent of a manifest, all or nothing.
type AcquireRequest struct {
	Tenant string
	Holder string
	// Intents are the (resource, predicate) pairs; a resource named twice
	// is held once, MUTATES if either names it.
	Intents []ResourceIntent
	// TTL of the leases (0: the default; capped).
	TTL time.Duration
	// PriorityAt is the request's immutable wait-die timestamp (nil: the
	// holder's bound priority while it holds live leases, else the server's
	// now). An older request waits for younger holders; a younger one is
	// refused at once. A holder's priority is bound while it holds live
	// leases: a PriorityAt older than theirs is refused (409 conflict).
	PriorityAt *time.Time
	// Wait long-polls up to this long (capped by Config.MaxWait) while every
	// conflicting holder is younger than the request.
	Wait time.Duration
	// TaskID names the task the leases are held for (task integration).
	TaskID string
	// SessionID grants the leases in the holder's session
	// (resourcesessions.go): they expire with it and follow its heartbeats
	// instead of TTL.
	SessionID string
}

// AcquireResult is a granted manifest.
type AcquireResult struct {
	ManifestID string                `json:"manifest_id"`
	PriorityAt time.Time             `json:"priority_at"`
	Leases     []*host.ResourceLease `json:"leases"`
	ServerTime time.Time             `json:"server_time"`
}

// ConflictSeenBy returns ce's conflicting lease and waiter ahead as a sees
// them (leaseSeenBy, waiterSeenBy): what a door answers the refused caller.
func (e *Engine) ConflictSeenBy(ctx context.Context, a Actor, ce *ResourceConflictError) (*host.ResourceLease, *host.ResourceWaiter) {
	return e.leaseSeenBy(ctx, a, ce.Holder), e.waiterSeenBy(ctx, a, ce.Ahead)
}

// leaseSeenBy is l as a sees it: the task it is held for is named to its
// holder, an admin, and whoever may see the task (visible: the agent that
// queued it, its recipient); to anyone else the lease shows without it, as
// the task answers them like an unknown one everywhere else.
func (e *Engine) leaseSeenBy(ctx context.Context, a Actor, l *host.ResourceLease) *host.ResourceLease {
	if s := l.SeenBy(a.Principal, a.Role == RoleAdmin); s != l && !e.taskVisible(ctx, a, l.TaskID) {
		return s
	}
	return l
}

// waiterSeenBy is w as a sees it (leaseSeenBy's rule for a waiting task).
func (e *Engine) waiterSeenBy(ctx context.Context, a Actor, w *host.ResourceWaiter) *host.ResourceWaiter {
	if s := w.SeenBy(a.Principal, a.Role == RoleAdmin); s != w && !e.taskVisible(ctx, a, w.TaskID) {
		return s
	}
	return w
}

// taskVisible reports whether a may see task id (a store error: no).
func (e *Engine) taskVisible(ctx context.Context, a Actor, id string) bool {
	_, err := e.PeekTask(ctx, a, id)
	return err == nil
}

// ResourceConflictError refuses an acquire: Holder's lease conflicts with it.
// It unwraps to a host.Error with code resource_conflict.
type ResourceConflictError struct {
	Err *host.Error
	// Holder is the conflicting lease the refusal names (nil when a waiter
	// ahead refused it).
	Holder *host.ResourceLease
	// Ahead is the older waiter the request is behind (fairness), when no
	// live lease conflicts.
	Ahead *host.ResourceWaiter
	// MayWait is true when wait-die lets the request wait for Holder (the
	// request is older than every conflicting holder).
	MayWait bool
	// ServerTime is when the conflict was seen.
	ServerTime time.Time
	// PriorityAt is the priority the request ran with: send it again to
	// keep the request's seniority.
	PriorityAt time.Time
	// until is the earliest expiry among the conflicting leases.
	until time.Time
}

func (c *ResourceConflictError) Error() string { return c.Err.Error() }

// Unwrap returns the host.Error.
func (c *ResourceConflictError) Unwrap() error { return c.Err }

// normalizeIntents validates and normalizes a manifest: resources normalized,
// one intent per resource (MUTATES wins), sorted by resource.
func (e *Engine) normalizeIntents(in []ResourceIntent) ([]ResourceIntent, error) {
	cfg := e.rl().cfg
	if len(in) == 0 {
		return nil, host.Errorf(host.CodeBadRequest, "intents: at least one (resource, predicate) pair is required")
	}
	if len(in) > cfg.MaxIntents {
		return nil, host.Errorf(host.CodeTooLarge, "intents: at most %d per manifest (this one has %d)", cfg.MaxIntents, len(in))
	}
	return host.NormalizeIntents("intents", in)
}

func (e *Engine) resourceTTL(d time.Duration) (time.Duration, error) {
	cfg := e.rl().cfg
	switch {
	case d < 0:
		return 0, host.Errorf(host.CodeBadRequest, "ttl_ms: must not be negative")
	case d == 0:
		return cfg.DefaultTTL, nil
	case d < cfg.MinTTL:
		return cfg.MinTTL, nil
	case d > cfg.MaxTTL:
		return cfg.MaxTTL, nil
	}
	return d.Truncate(time.Millisecond), nil
}

func validHolder(h string) error {
	if h == "" || len(h) > 256 {
		return host.Errorf(host.CodeBadRequest, "holder: 1..256 bytes")
	}
	return nil
}

// AcquireResources grants every intent of the manifest at once, or none. A
// conflict with a live lease is a *ResourceConflictError naming the holder's
// lease; while wait-die lets the request wait and Wait allows, it waits for
// the conflicting leases to end.
func (e *Engine) AcquireResources(ctx context.Context, req AcquireRequest) (*AcquireResult, error) {
	if err := validHolder(req.Holder); err != nil {
		return nil, err
	}
	intents, err := e.normalizeIntents(req.Intents)
	if err != nil {
		return nil, err
	}
	ttl, err := e.resourceTTL(req.TTL)
	if err != nil {
		return nil, err
	}
	var prio time.Time
	explicit := req.PriorityAt != nil
	if explicit {
		if req.PriorityAt.IsZero() {
			return nil, host.Errorf(host.CodeBadRequest, "priority_at: must be a timestamp")
		}
		prio = req.PriorityAt.UTC().Truncate(time.Microsecond)
	}
	// floor is the oldest priority a holder that holds nothing may run
	// with: the request's start less the longest wait (boundPriority). The
	// start is the first decision's time, read under the resources' lock
	// (tryAcquire), and is kept for the request's later tries, so a wait
	// never moves it.
	var floor time.Time
	if req.Wait > e.cfg.MaxWait {
		req.Wait = e.cfg.MaxWait
	}
	var deadline <-chan time.Time
	if req.Wait > 0 {
		t := time.NewTimer(req.Wait)
		defer t.Stop()
		deadline = t.C
	}
	waiting := false
	defer func() {
		if waiting {
			e.emit(Event{Kind: EvResourceWaited, Tenant: req.Tenant, WorkerID: req.Holder})
		}
	}()
	// self names the request as a waiter once it parks (resourcefair.go).
	self, registered := host.NewID(host.PrefixResourceWaiter), false
	defer func() {
		if registered {
			e.unregisterWaiter(req.Tenant, self, intentResources(intents))
		}
	}()
	// The registration lasts until the wait ends, counted from the first
	// decision's time (read under the resources' lock: a clock reading
	// before the lock would order nothing).
	var waitUntil, regExpires, renewAt time.Time
	for {
		w := e.rl().watch(req.Tenant, intentResources(intents))
		res, err := e.tryAcquire(ctx, req, intents, ttl, &prio, &floor, explicit, self)
		if err == nil {
			registered = false // the grant removed the registration
		}
		var ce *ResourceConflictError
		if err == nil || !errors.As(err, &ce) || !ce.MayWait || req.Wait <= 0 {
			e.rl().unwatch(w)
			if err != nil && (ce != nil || host.IsCode(err, host.CodeQuotaExceeded)) {
				e.emit(Event{Kind: EvResourceRefused, Tenant: req.Tenant, WorkerID: req.Holder, Detail: host.ErrorCode(err)})
			}
			return res, err
		}
		if waitUntil.IsZero() {
			waitUntil = ce.ServerTime.Add(req.Wait)
		}
		if !registered || (!renewAt.IsZero() && !ce.ServerTime.Before(renewAt)) {
			// Registered before it parks: from now on younger conflicting
			// requests queue behind it. The priority is the one it ran with.
			// The registration lasts acquireWaiterTTL and is renewed
			// while the request waits, so a waiter whose host died stops
			// blocking others soon after (resourcefair.go).
			regExpires = waiterExpiry(ce.ServerTime, waitUntil)
			if err := e.registerWaiter(ctx, req, self, intents, ce.PriorityAt, regExpires); err != nil {
				e.rl().unwatch(w)
				return nil, err
			}
			registered, renewAt = true, waiterRenewal(regExpires, waitUntil)
		}
		if !waiting {
			waiting = true
			e.emit(Event{Kind: EvResourceWaiting, Tenant: req.Tenant, WorkerID: req.Holder})
		}
		// Woken when a lease on one of the resources ends, on this host or
		// another; an expiry needs no wake-up (park wakes at the earliest).
		wake := ce.until
		if !renewAt.IsZero() {
			// Look again in time to renew the registration: a renewal
			// after its lapse would let younger requests pass meanwhile.
			if wake.IsZero() || renewAt.Before(wake) {
				wake = renewAt
			}
		}
		timedOut, stop := e.park(ctx, w, wake, deadline)
		e.rl().unwatch(w)
		if stop != nil {
			return nil, stop
		}
		if timedOut {
			ce.Err.Detail += fmt.Sprintf("; waited %s without the conflict ending", req.Wait)
			e.emit(Event{Kind: EvResourceRefused, Tenant: req.Tenant, WorkerID: req.Holder, Detail: host.CodeResourceConflict})
			return nil, ce
		}
	}
}

// tryAcquire decides an acquire once. prio is the request's priority and
// floor the oldest it may be when the holder holds nothing, both set by the
// request's first decision (floor zero until then); explicit says the
// caller named the priority (otherwise a holder with live leases acquires
// with its bound priority). self is the request's waiter id.
func (e *Engine) tryAcquire(ctx context.Context, req AcquireRequest, intents []ResourceIntent, ttl time.Duration, prio, floor *time.Time, explicit bool, self string) (*AcquireResult, error) {
	cfg := e.rl().cfg
	resources := make([]string, len(intents))
	for i, it := range intents {
		resources[i] = it.Resource
	}
	// The holder's live leases bind its priority and count against its
	// cap; its acquires of other resources change them too, so those
	// decisions are made one at a time, on every host, as decisions on one
	// resource are.
	lock := append(slices.Clone(resources), holderLockName(req.Holder))
	if req.SessionID != "" {
		lock = append(lock, sessionLockName(req.SessionID))
	}
	var out *AcquireResult
	err := e.update(ctx, func(tx store.Tx) error {
		out = nil
		if _, err := tx.LockResources(ctx, req.Tenant, lock); err != nil {
			return err
		}
		now := e.now()
		if floor.IsZero() {
			// The request's first decision: its start. A priority from
			// the future is younger than any request can be: it runs as
			// one sent now; none given runs as now.
			*floor = now.Add(-e.cfg.MaxWait)
			if !explicit || prio.After(now) {
				*prio = now
			}
		}
		ttl, expires := ttl, now.Add(ttl)
		if req.SessionID != "" {
			sess, err := sessionOf(ctx, tx, Actor{Tenant: req.Tenant, Principal: req.Holder}, req.SessionID, now)
			if err != nil {
				return err
			}
			ttl, expires = time.Duration(sess.TTLMs)*time.Millisecond, sess.ExpiresAt
		}
		view, err := acquireView(ctx, tx, req.Tenant, req.Holder, resources, now)
		if err != nil {
			return err
		}
		mine, live, ws := view.Mine, view.Live, view.Waiters
		prio, err := boundPriority(mine, *prio, *floor, explicit, now)
		if err != nil {
			return err
		}
		want := map[string]host.LeasePredicate{}
		for _, it := range intents {
			want[it.Resource] = it.Predicate
		}
		var conflicts []*host.ResourceLease
		for _, l := range live {
			if p, ok := want[l.Resource]; ok && p.Conflicts(l.Predicate) {
				conflicts = append(conflicts, l)
			}
		}
		ahead := aheadOf(ws, want, prio, self, req.Holder)
		if len(conflicts) > 0 {
			ce := e.conflict(conflicts, prio, now)
			if ahead != nil && len(mine) > 0 {
				// An older waiter is ahead and this holder holds leases:
				// it may not wait (resourcefair.go).
				ce.MayWait = false
			}
			return ce
		}
		if ahead != nil {
			return behindWaiter(ahead, prio, now, len(mine) == 0)
		}
		if cfg.MaxLeasesPerHolder > 0 && len(mine)+len(intents) > cfg.MaxLeasesPerHolder {
			return host.Errorf(host.CodeQuotaExceeded, "holder %s holds %d live leases; with %d more it would pass its quota of %d concurrent leases",
				req.Holder, len(mine), len(intents), cfg.MaxLeasesPerHolder).At(now)
		}
		adds := map[holdKey]time.Duration{}
		for _, r := range resources {
			adds[holdKey{req.Holder, r}] = expires.Sub(now)
		}
		var pre map[holdKey]store.ResourceHold
		if view.HoldsRead {
			pre = map[holdKey]store.ResourceHold{}
			for _, r := range resources {
				pre[holdKey{req.Holder, r}] = store.ResourceHold{Tenant: req.Tenant, Holder: req.Holder, Resource: r}
			}
			for _, h := range view.Holds {
				pre[holdKey{h.Holder, h.Resource}] = h
			}
		}
		if err := e.bookHoldRead(ctx, tx, req.Tenant, adds, pre, now); err != nil {
			return err
		}
		if self != "" {
			if err := tx.DeleteResourceWaiter(ctx, req.Tenant, self); err != nil {
				return err
			}
		}
		manifest := host.NewID(host.PrefixManifest)
		res := &AcquireResult{ManifestID: manifest, PriorityAt: prio, ServerTime: now}
		for _, it := range intents {
			l := &host.ResourceLease{ID: host.NewID(host.PrefixResourceLease), Tenant: req.Tenant, Resource: it.Resource,
				Predicate: it.Predicate, Holder: req.Holder, State: host.ResourceLeaseActive, ManifestID: manifest,
				PriorityAt: prio, AcquiredAt: now, ExpiresAt: expires, TTLMs: ttl.Milliseconds(), TaskID: req.TaskID}
			if err := tx.InsertResourceLease(ctx, l); err != nil {
				return err
			}
			if req.SessionID != "" {
				if err := tx.AddResourceSessionLease(ctx, req.Tenant, req.SessionID, l.ID); err != nil {
					return err
				}
			}
			if err := tx.AppendResourceLeaseEvent(ctx, leaseEvent(l, host.ResourceEventGranted, now, nil)); err != nil {
				return err
			}
			res.Leases = append(res.Leases, l)
		}
		out = res
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, l := range out.Leases {
		e.emit(Event{Kind: EvResourceGranted, Tenant: req.Tenant, WorkerID: req.Holder, Detail: string(l.Predicate)})
	}
	return out, nil
}

// acquireView reads, under an acquire's locks, the holder's live leases,
// the live leases on the resources and the waiters registered on them: in
// one round trip where the store can (store.ResourceAcquireViewTx).
func acquireView(ctx context.Context, tx store.Tx, tenant, holder string, resources []string, now time.Time) (*store.ResourceAcquireView, error) {
	inner := tx
	if d, ok := tx.(*deliveryTx); ok {
		inner = d.Tx
	}
	if v, ok := inner.(store.ResourceAcquireViewTx); ok {
		return v.ResourceAcquireView(ctx, tenant, holder, resources, now)
	}
	mine, _, err := tx.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: tenant, Holder: holder, LiveAt: &now, Limit: 100000})
	if err != nil {
		return nil, err
	}
	live, _, err := tx.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: tenant, Resources: resources, LiveAt: &now, Limit: 100000})
	if err != nil {
		return nil, err
	}
	ws, err := tx.ListResourceWaiters(ctx, tenant, resources, now)
	if err != nil {
		return nil, err
	}
	return &store.ResourceAcquireView{Mine: mine, Live: live, Waiters: ws}, nil
}

// boundPriority is the priority an acquire runs with, given the holder's
// live leases (mine). Wait-die is deadlock-free only when every request of a
// holder is at least as young as every lease it holds: a cycle of waiters
// would need some request older than a lease its own holder holds (KLIS-3
// §3.1: the timestamp is immutable). So while a holder holds live leases its
// priority is bound to the youngest of theirs: a request naming none runs
// with it, one naming an older timestamp is refused, and a younger one (the
// holder giving up seniority) is accepted.
//
// A holder that holds nothing has no bound yet, so its priority is bounded
// from below instead: one older than floor (the request's start less
// Config.MaxWait) runs as floor. Without it, a priority of 1970 would jump
// every younger waiter and every stepped-aside task until its wait ends
// (resourcefair.go); with it, a request is at most as senior as one that
// has waited the longest wait a call may make, and a requester that
// resends the priority_at of a refusal keeps all of it for a full wait.
// (A priority later than the request's start was already clamped to it.)
func boundPriority(mine []*host.ResourceLease, prio, floor time.Time, explicit bool, now time.Time) (time.Time, error) {
	if len(mine) == 0 {
		if prio.Before(floor) {
			return floor, nil
		}
		return prio, nil
	}
	bound := mine[0].PriorityAt
	for _, l := range mine[1:] {
		if l.PriorityAt.After(bound) {
			bound = l.PriorityAt
		}
	}
	if !explicit {
		return bound, nil
	}
	if prio.Before(bound) {
		return prio, host.Errorf(host.CodeConflict, "priority_at %s is older than %s, the priority this holder's live leases were acquired with: a holder's wait-die timestamp is bound while it holds leases; send that one (or none), a younger one, or release them first",
			prio.Format(time.RFC3339Nano), bound.Format(time.RFC3339Nano)).At(now)
	}
	return prio, nil
}

// conflict applies wait-die: the request may wait only when it is strictly
// older than every conflicting holder; the refusal names the youngest
// holder it would wait for, or the first holder at least as old as it.
func (e *Engine) conflict(conflicts []*host.ResourceLease, prio, now time.Time) *ResourceConflictError {
	mayWait := true
	named := conflicts[0]
	for _, l := range conflicts {
		if !prio.Before(l.PriorityAt) {
			if mayWait {
				named = l
			}
			mayWait = false
		}
	}
	var detail string
	if mayWait {
		detail = fmt.Sprintf("%s is held by lease %s; this request (priority %s) is older than every holder, so it may wait (wait_seconds)",
			named.Resource, named, prio.Format(time.RFC3339Nano))
	} else {
		detail = fmt.Sprintf("%s is held by lease %s, whose priority %s is not younger than this request's %s: wait-die refuses it at once",
			named.Resource, named, named.PriorityAt.Format(time.RFC3339Nano), prio.Format(time.RFC3339Nano))
	}
	until := conflicts[0].ExpiresAt
	for _, l := range conflicts[1:] {
		if l.ExpiresAt.Before(until) {
			until = l.ExpiresAt
		}
	}
	return &ResourceConflictError{Err: host.Errorf(host.CodeResourceConflict, "%s", detail).At(now), Holder: named, MayWait: mayWait, ServerTime: now, PriorityAt: prio, until: until}
}

// holdKey names a holder's quota window on a resource.
type holdKey struct{ holder, resource string }

// bookHold checks and books lease time against the squatting quota: no
// holder may be granted more than HoldQuota on one resource within a
// QuotaWindow (fixed windows, one row per holder and resource). Every
// addition is checked before any is booked, so a refusal books nothing.
// Callers hold the resources' locks.
func (e *Engine) bookHold(ctx context.Context, tx store.Tx, tenant string, adds map[holdKey]time.Duration, now time.Time) error {
	return e.bookHoldRead(ctx, tx, tenant, adds, nil, now)
}

// bookHoldRead is bookHold with the quota rows already read (pre, when it
// has every key of adds: GetResourceHold's answers).
func (e *Engine) bookHoldRead(ctx context.Context, tx store.Tx, tenant string, adds map[holdKey]time.Duration, pre map[holdKey]store.ResourceHold, now time.Time) error {
	cfg := e.rl().cfg
	if cfg.HoldQuota < 0 {
		return nil
	}
	keys := make([]holdKey, 0, len(adds))
	for k := range adds {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].holder < keys[j].holder || keys[i].holder == keys[j].holder && keys[i].resource < keys[j].resource
	})
	hs := make([]store.ResourceHold, 0, len(keys))
	for _, k := range keys {
		h, ok := pre[k]
		if !ok {
			var err error
			if h, err = tx.GetResourceHold(ctx, tenant, k.holder, k.resource); err != nil {
				return err
			}
		}
		if h.WindowStart.IsZero() || !now.Before(h.WindowStart.Add(cfg.QuotaWindow)) {
			h = store.ResourceHold{Tenant: tenant, Holder: k.holder, Resource: k.resource, WindowStart: now}
		}
		add := adds[k]
		if h.Held+add > cfg.HoldQuota {
			err := host.Errorf(host.CodeQuotaExceeded, "holder %s was granted %s of lease time on %s in the window from %s; %s more would pass its quota of %s per %s",
				k.holder, h.Held.Round(time.Millisecond), k.resource, h.WindowStart.Format(time.RFC3339), add.Round(time.Millisecond), cfg.HoldQuota, cfg.QuotaWindow).At(now)
			if h.Held > 0 && add <= cfg.HoldQuota {
				// The window's bookings are in the way: its end frees them.
				// (A request past the quota by itself waits in vain.)
				err.Wait(h.WindowStart.Add(cfg.QuotaWindow).Sub(now))
			}
			return err
		}
		h.Held += add
		hs = append(hs, h)
	}
	for _, h := range hs {
		if err := tx.PutResourceHold(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

// refundHold gives back the unused part of a released lease's time, when
// every booking of that time fell in the current quota window: the lease was
// acquired in it (its heartbeats came later). A lease acquired in an earlier
// window gets nothing back, since the current window never counted the time
// booked before it; nor does a DIE_RESTART grace period, which was never
// booked.
func (e *Engine) refundHold(ctx context.Context, tx store.Tx, l *host.ResourceLease, now time.Time) error {
	cfg := e.rl().cfg
	unused := l.ExpiresAt.Sub(now)
	if l.GraceUsed {
		unused -= cfg.Grace
	}
	if cfg.HoldQuota < 0 || unused <= 0 {
		return nil
	}
	inner := tx
	if d, ok := tx.(*deliveryTx); ok {
		inner = d.Tx
	}
	if r, ok := inner.(store.ResourceHoldRefundTx); ok {
		return r.RefundResourceHold(ctx, l.Tenant, l.Holder, l.Resource, unused, l.AcquiredAt, now, cfg.QuotaWindow)
	}
	h, err := tx.GetResourceHold(ctx, l.Tenant, l.Holder, l.Resource)
	if err != nil || h.WindowStart.IsZero() || !now.Before(h.WindowStart.Add(cfg.QuotaWindow)) || l.AcquiredAt.Before(h.WindowStart) {
		return err
	}
	h.Held -= min(unused, h.Held)
	return tx.PutResourceHold(ctx, h)
}

// holderLockName is the name under which acquires by holder lock each other
// (LockResources) while the concurrent-lease cap is counted. A resource name
// cannot hold a NUL, so it names no resource.
func holderLockName(holder string) string { return "\x00holder\x00" + holder }

func leaseEvent(l *host.ResourceLease, kind host.ResourceLeaseEventKind, at time.Time, prev *time.Time) *host.ResourceLeaseEvent {
	return &host.ResourceLeaseEvent{Tenant: l.Tenant, LeaseID: l.ID, Resource: l.Resource, Predicate: l.Predicate,
		Holder: l.Holder, Kind: kind, At: at, PrevExpiresAt: prev, ExpiresAt: l.ExpiresAt}
}

func checkIDs(ids []string) error {
	if len(ids) == 0 {
		return host.Errorf(host.CodeBadRequest, "lease_ids: at least one is required")
	}
	if len(ids) > MaxResourceLeaseIDs {
		return host.Errorf(host.CodeTooLarge, "lease_ids: at most %d per call", MaxResourceLeaseIDs)
	}
	for i, id := range ids {
		if id == "" {
			// It names no lease: not a lookup that failed (404).
			return host.Errorf(host.CodeBadRequest, "lease_ids[%d] is empty", i)
		}
	}
	return nil
}

func dedupe(ids []string) []string {
	seen := map[string]bool{}
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// loadOwned reads the leases by id inside tx, refusing unknown ids (404) and
// leases of another holder (403; an admin may act on any).
func loadOwned(ctx context.Context, tx store.Reader, a Actor, ids []string) ([]*host.ResourceLease, error) {
	ls, _, err := tx.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: a.Tenant, IDs: ids, Limit: len(ids)})
	if err != nil {
		return nil, err
	}
	by := map[string]*host.ResourceLease{}
	for _, l := range ls {
		by[l.ID] = l
	}
	out := make([]*host.ResourceLease, 0, len(ids))
	for _, id := range ids {
		l := by[id]
		if l == nil {
			return nil, host.Errorf(host.CodeNotFound, "no resource lease %.80q", id)
		}
		if l.Holder != a.Principal && a.Role != RoleAdmin {
			return nil, host.Errorf(host.CodeForbidden, "resource lease %s is held by %s, not by %s", id, l.Holder, a.Principal)
		}
		if l.TaskID != "" && l.State == host.ResourceLeaseActive {
			return nil, host.Errorf(host.CodeConflict, "resource lease %s is held for task %s: it follows the task's lease (heartbeat, complete, fail or release the task)", id, l.TaskID)
		}
		out = append(out, l)
	}
	return out, nil
}

// heldByCaller refuses a heartbeat of leases the caller does not hold: an
// admin may release or revoke another holder's lease, never keep it alive
// (RATIONALE.md, "A resource lease's holder is the caller, an admin's
// too").
func heldByCaller(a Actor, ls []*host.ResourceLease) error {
	for _, l := range ls {
		if l.Holder != a.Principal {
			return host.Errorf(host.CodeForbidden, "resource lease %s is held by %s: only its holder heartbeats it (an admin may release or revoke it)", l.ID, l.Holder)
		}
	}
	return nil
}

func resourcesOf(ls []*host.ResourceLease) []string {
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.Resource)
	}
	return out
}

// lockAndLoad reads the leases, locks their resources, and reads them again
// under the lock when the lock was real (another writer may have changed them
// in between), then reads the clock.
func (e *Engine) lockAndLoad(ctx context.Context, tx store.Tx, a Actor, ids []string) ([]*host.ResourceLease, time.Time, error) {
	ls, err := loadOwned(ctx, tx, a, ids)
	if err != nil {
		return nil, time.Time{}, err
	}
	locked, err := tx.LockResources(ctx, a.Tenant, resourcesOf(ls))
	if err != nil {
		return nil, time.Time{}, err
	}
	if locked {
		if ls, err = loadOwned(ctx, tx, a, ids); err != nil {
			return nil, time.Time{}, err
		}
	}
	return ls, e.now(), nil
}

// ResourceLeasesResult answers a heartbeat, release, verify or DIE_RESTART.
type ResourceLeasesResult struct {
	Leases     []*host.ResourceLease `json:"leases"`
	ServerTime time.Time             `json:"server_time"`
}

// HeartbeatResources extends every lease by its TTL (or ttl, capped, when
// set) from the server's now: all of them, or none. A lease that is expired
// or released by the server clock is refused with 409 lease_expired naming
// it; a lease whose holder declared DIE_RESTART is refused with 409
// verify_required until the holder runs VERIFY_ALL.
func (e *Engine) HeartbeatResources(ctx context.Context, a Actor, ids []string, ttl time.Duration) (*ResourceLeasesResult, error) {
	if err := checkIDs(ids); err != nil {
		return nil, err
	}
	ids = dedupe(ids)
	if ttl != 0 {
		var err error
		if ttl, err = e.resourceTTL(ttl); err != nil {
			return nil, err
		}
	}
	var out *ResourceLeasesResult
	err := e.update(ctx, func(tx store.Tx) error {
		out = nil
		ls, now, err := e.lockAndLoad(ctx, tx, a, ids)
		if err != nil {
			return err
		}
		if err := heldByCaller(a, ls); err != nil {
			return err
		}
		for _, l := range ls {
			if !l.LiveAt(now) {
				if err := revokedError(ctx, tx, l, now); err != nil {
					return err
				}
				return host.Errorf(host.CodeLeaseExpired, "resource lease %s is %s (server time %s, expires_at %s): it is no longer held; acquire again",
					l.ID, l.StateAt(now), now.Format(time.RFC3339Nano), l.ExpiresAt.Format(time.RFC3339Nano)).At(now)
			}
			if l.Restarting {
				return host.Errorf(host.CodeVerifyRequired, "resource lease %s: the holder declared DIE_RESTART; run VERIFY_ALL before heartbeats resume", l.ID).At(now)
			}
		}
		if err := refuseSessionLeases(ctx, tx, a.Tenant, ids, now); err != nil {
			return err
		}
		// The quota is per holder; an admin heartbeat counts against the lease's holder.
		adds := map[holdKey]time.Duration{}
		for _, l := range ls {
			d := ttl
			if d == 0 {
				d = time.Duration(l.TTLMs) * time.Millisecond
			}
			if next := now.Add(d); next.After(l.ExpiresAt) {
				adds[holdKey{l.Holder, l.Resource}] += next.Sub(l.ExpiresAt)
			}
		}
		if err := e.bookHold(ctx, tx, a.Tenant, adds, now); err != nil {
			return err
		}
		for _, l := range ls {
			d := ttl
			if d == 0 {
				d = time.Duration(l.TTLMs) * time.Millisecond
			} else {
				l.TTLMs = d.Milliseconds()
			}
			// The expiry is now + TTL, as KLIS-3 §3.2 has it: a shorter
			// ttl_ms shortens the lease, so the answer's expires_at and
			// ttl_ms always agree.
			prev := l.ExpiresAt
			l.ExpiresAt = now.Add(d)
			if err := tx.UpdateResourceLease(ctx, l, store.ResourceLeaseFence{LiveAt: &now}); err != nil {
				return rlFenced(err, l, now)
			}
			if err := tx.AppendResourceLeaseEvent(ctx, leaseEvent(l, host.ResourceEventHeartbeat, now, &prev)); err != nil {
				return err
			}
		}
		out = &ResourceLeasesResult{Leases: ls, ServerTime: now}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func rlFenced(err error, l *host.ResourceLease, now time.Time) error {
	if errors.Is(err, store.ErrFenced) {
		return host.Errorf(host.CodeLeaseExpired, "resource lease %s changed under this call: it is no longer held", l.ID).At(now)
	}
	return err
}

// ReleaseResources ends the leases. It is idempotent: a lease already
// released or expired is answered with its state, 200.
func (e *Engine) ReleaseResources(ctx context.Context, a Actor, ids []string) (*ResourceLeasesResult, error) {
	if err := checkIDs(ids); err != nil {
		return nil, err
	}
	ids = dedupe(ids)
	var out *ResourceLeasesResult
	var released, expired int
	err := e.update(ctx, func(tx store.Tx) error {
		out, released, expired = nil, 0, 0
		ls, now, err := e.lockAndLoad(ctx, tx, a, ids)
		if err != nil {
			return err
		}
		for _, l := range ls {
			if l.State != host.ResourceLeaseActive {
				continue
			}
			if l.LiveAt(now) {
				if err := e.releaseLive(ctx, tx, l, now, host.ResourceEventReleased); err != nil {
					return err
				}
				released++
				continue
			}
			if err := expireLease(ctx, tx, l, now); err != nil {
				if !errors.Is(err, store.ErrFenced) {
					return err
				}
				// Another host's sweeper recorded the expiry first: the
				// release is a no-op; answer with the stored state.
				cur, err := tx.GetResourceLease(ctx, l.Tenant, l.ID)
				if err != nil {
					return err
				}
				*l = *cur
				continue
			}
			expired++
		}
		// A lease released on its own leaves its session's list, so the
		// list holds at most the session's live leases and those that
		// ended with it (or were revoked).
		if err := tx.RemoveResourceSessionLeases(ctx, a.Tenant, ids); err != nil {
			return err
		}
		out = &ResourceLeasesResult{Leases: ls, ServerTime: now}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if released+expired > 0 {
		e.wakeEnded(out.Leases)
	}
	for i := 0; i < released; i++ {
		e.emit(Event{Kind: EvResourceReleased, Tenant: a.Tenant})
	}
	for i := 0; i < expired; i++ {
		e.emit(Event{Kind: EvResourceExpired, Tenant: a.Tenant})
	}
	return out, nil
}

// releaseLive releases l, live at now, in tx: the unused part of its time
// goes back to the holder's quota, the audit trail gets an entry of kind
// (released, or revoked), and other hosts hear of it at the commit.
func (e *Engine) releaseLive(ctx context.Context, tx store.Tx, l *host.ResourceLease, now time.Time, kind host.ResourceLeaseEventKind) error {
	if err := e.refundHold(ctx, tx, l, now); err != nil {
		return err
	}
	l.State, l.EndedAt = host.ResourceLeaseReleased, ptr(now)
	if err := tx.UpdateResourceLease(ctx, l, store.ResourceLeaseFence{LiveAt: &now}); err != nil {
		return rlFenced(err, l, now)
	}
	if err := tx.AppendResourceLeaseEvent(ctx, leaseEvent(l, kind, now, nil)); err != nil {
		return err
	}
	return leaseEnded(ctx, tx, l, now)
}

// expireLease records an active lease past its expiry as expired, ended at
// its expiry.
func expireLease(ctx context.Context, tx store.Tx, l *host.ResourceLease, now time.Time) error {
	if err := recordExpiry(ctx, tx, l, now); err != nil {
		return err
	}
	return leaseEnded(ctx, tx, l, now)
}

// recordExpiry is expireLease without what follows a lease's end
// (leaseEnded): the sweep does that once for a page of leases.
func recordExpiry(ctx context.Context, tx store.Tx, l *host.ResourceLease, now time.Time) error {
	l.State, l.EndedAt, l.Restarting = host.ResourceLeaseExpired, ptr(l.ExpiresAt), false
	if err := tx.UpdateResourceLease(ctx, l, store.ResourceLeaseFence{ExpiredAt: &now}); err != nil {
		return err
	}
	return tx.AppendResourceLeaseEvent(ctx, leaseEvent(l, host.ResourceEventExpired, now, nil))
}

// VerifyRequest names the leases of a VERIFY_ALL: by id, or every lease a
// holder has active.
type VerifyRequest struct {
	IDs    []string
	Holder string
}

// VerifyResources is VERIFY_ALL (KLIS-3 §3.4): the current state of the
// leases by the server clock (an active lease past its expiry is reported
// expired). When the caller holds leases it declared DIE_RESTART for, the
// live ones resume: heartbeats are accepted again.
func (e *Engine) VerifyResources(ctx context.Context, a Actor, req VerifyRequest) (*ResourceLeasesResult, error) {
	if len(req.IDs) > 0 && req.Holder != "" {
		return nil, host.Errorf(host.CodeBadRequest, "name lease_ids or a holder, not both")
	}
	if len(req.IDs) == 0 {
		if req.Holder == "" {
			req.Holder = a.Principal
		}
	} else if err := checkIDs(req.IDs); err != nil {
		return nil, err
	}
	if req.Holder != "" && req.Holder != a.Principal && a.Role != RoleAdmin {
		return nil, host.Errorf(host.CodeForbidden, "only %s or an admin may verify the leases of %s", req.Holder, req.Holder)
	}
	f := store.ResourceLeaseFilter{Tenant: a.Tenant, IDs: dedupe(req.IDs), Holder: req.Holder, Limit: 1000}
	if req.Holder != "" {
		f.States = []host.ResourceLeaseState{host.ResourceLeaseActive}
	}
	var ls []*host.ResourceLease
	var now time.Time
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		ls, _, err = r.ListResourceLeases(ctx, f)
		now = e.now()
		return err
	}); err != nil {
		return nil, err
	}
	if len(req.IDs) > 0 {
		by := map[string]bool{}
		for _, l := range ls {
			by[l.ID] = true
		}
		for _, id := range f.IDs {
			if !by[id] {
				return nil, host.Errorf(host.CodeNotFound, "no resource lease %.80q", id)
			}
		}
	}
	var resume []string
	for _, l := range ls {
		if l.Restarting && l.Holder == a.Principal && l.LiveAt(now) {
			resume = append(resume, l.ID)
		}
	}
	if len(resume) > 0 {
		err := e.update(ctx, func(tx store.Tx) error {
			rs, at, err := e.lockAndLoad(ctx, tx, a, resume)
			if err != nil {
				return err
			}
			for _, l := range rs {
				if !l.Restarting || !l.LiveAt(at) {
					continue
				}
				l.Restarting = false
				if err := tx.UpdateResourceLease(ctx, l, store.ResourceLeaseFence{LiveAt: &at}); err != nil {
					if errors.Is(err, store.ErrFenced) {
						continue // it ended meanwhile: nothing to resume
					}
					return err
				}
				if err := tx.AppendResourceLeaseEvent(ctx, leaseEvent(l, host.ResourceEventVerified, at, &l.ExpiresAt)); err != nil {
					return err
				}
			}
			now = at
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, l := range ls {
			for _, id := range resume {
				if l.ID == id {
					l.Restarting = false
				}
			}
		}
	}
	for i, l := range ls {
		l.State = l.StateAt(now)
		ls[i] = e.leaseSeenBy(ctx, a, l)
	}
	return &ResourceLeasesResult{Leases: ls, ServerTime: now}, nil
}

// DieRestart records that the caller's process is restarting (KLIS-3 §3.1,
// the resurrection window): each of its live leases that has not had one gets
// a grace period (its expiry moves Grace later), and every live lease of the
// holder refuses heartbeats until the holder runs VERIFY_ALL.
func (e *Engine) DieRestart(ctx context.Context, a Actor) (*ResourceLeasesResult, error) {
	var out *ResourceLeasesResult
	err := e.update(ctx, func(tx store.Tx) error {
		out = nil
		start := e.now()
		ls, _, err := tx.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: a.Tenant, Holder: a.Principal, LiveAt: &start, Limit: 1000})
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(ls))
		for _, l := range ls {
			if l.TaskID == "" { // a task's leases follow the task's lease
				ids = append(ids, l.ID)
			}
		}
		if len(ids) > 0 {
			// A session's leases follow the session: losing it loses them
			// at that instant, so no grace outlives it.
			in, err := tx.ResourceSessionsOfLeases(ctx, a.Tenant, ids)
			if err != nil {
				return err
			}
			ids = slices.DeleteFunc(ids, func(id string) bool { _, ok := in[id]; return ok })
		}
		if len(ids) == 0 {
			out = &ResourceLeasesResult{Leases: []*host.ResourceLease{}, ServerTime: start}
			return nil
		}
		ls, now, err := e.lockAndLoad(ctx, tx, a, ids)
		if err != nil {
			return err
		}
		kept := ls[:0]
		for _, l := range ls {
			if !l.LiveAt(now) {
				continue
			}
			prev := l.ExpiresAt
			if !l.GraceUsed {
				l.ExpiresAt, l.GraceUsed = l.ExpiresAt.Add(e.rl().cfg.Grace), true
			}
			l.Restarting = true
			if err := tx.UpdateResourceLease(ctx, l, store.ResourceLeaseFence{LiveAt: &now}); err != nil {
				return rlFenced(err, l, now)
			}
			if err := tx.AppendResourceLeaseEvent(ctx, leaseEvent(l, host.ResourceEventGrace, now, &prev)); err != nil {
				return err
			}
			kept = append(kept, l)
		}
		out = &ResourceLeasesResult{Leases: kept, ServerTime: now}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetResourceLease returns one lease of the tenant with its state by the
// server clock.
func (e *Engine) GetResourceLease(ctx context.Context, a Actor, id string) (*host.ResourceLease, time.Time, error) {
	var l *host.ResourceLease
	var now time.Time
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		l, err = r.GetResourceLease(ctx, a.Tenant, id)
		now = e.now()
		return err
	})
	if err != nil {
		return nil, now, err
	}
	l.State = l.StateAt(now)
	return l, now, nil
}

// ListResourceLeases lists leases (operators: any tenant with f.Tenant ""),
// with their state by the server clock.
func (e *Engine) ListResourceLeases(ctx context.Context, f store.ResourceLeaseFilter) ([]*host.ResourceLease, string, time.Time, error) {
	var err error
	if f.Limit, err = pageSize(f.Limit, MaxLongPage); err != nil {
		return nil, "", time.Time{}, err
	}
	var ls []*host.ResourceLease
	var cur string
	var now time.Time
	err = e.view(ctx, func(r store.Reader) error {
		var err error
		ls, cur, err = r.ListResourceLeases(ctx, f)
		now = e.now()
		return err
	})
	for _, l := range ls {
		l.State = l.StateAt(now)
	}
	return ls, cur, now, err
}

// ResourceLeaseEvents returns the audit trail.
func (e *Engine) ResourceLeaseEvents(ctx context.Context, f store.ResourceLeaseEventFilter) ([]host.ResourceLeaseEvent, string, error) {
	var err error
	if f.Limit, err = pageSize(f.Limit, MaxLongPage); err != nil {
		return nil, "", err
	}
	var evs []host.ResourceLeaseEvent
	var cur string
	err = e.view(ctx, func(r store.Reader) error {
		var err error
		evs, cur, err = r.ListResourceLeaseEvents(ctx, f)
		return err
	})
	return evs, cur, err
}

// CountLiveResourceLeases counts the leases honoured now, by predicate.
func (e *Engine) CountLiveResourceLeases(ctx context.Context, tenant string) (map[host.LeasePredicate]int64, error) {
	var out map[host.LeasePredicate]int64
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		out, err = r.CountLiveResourceLeases(ctx, tenant, e.now())
		return err
	})
	return out, err
}

// SweepResourceLeases records active leases past their expiry as expired
// (the audit trail's expiry entries) and wakes waiting acquires. Expiry does
// not wait for it: every decision reads expires_at against the clock.
//
// Like every other change to a lease, the record is made under the locks of
// the leases' resources, with the clock read after them. Another host may be
// deciding an acquire of the resource at a time just before the expiry; an
// expiry recorded between its reading of the clock and its reading of the
// leases would hide a lease that was live at the acquire's time, and grant a
// conflicting lease overlapping it.
func (e *Engine) SweepResourceLeases(ctx context.Context) (int, error) {
	const page = 200
	total := 0
	for {
		n, more := 0, false
		var tenant string
		var ended []*host.ResourceLease
		err := e.update(ctx, func(tx store.Tx) error {
			n, more, tenant, ended = 0, false, "", nil
			now := e.now()
			ls, _, err := tx.ListResourceLeases(ctx, store.ResourceLeaseFilter{ExpiredAt: &now, Limit: page})
			if err != nil || len(ls) == 0 {
				return err
			}
			// One tenant a transaction: a tenant's resources are locked in
			// one call, in key order.
			more = len(ls) == page
			tenant = ls[0].Tenant
			var ids, resources []string
			for _, l := range ls {
				if l.Tenant != tenant {
					more = true
					continue
				}
				ids, resources = append(ids, l.ID), append(resources, l.Resource)
			}
			locked, err := tx.LockResources(ctx, tenant, resources)
			if err != nil {
				return err
			}
			if locked {
				now = e.now()
				if ls, _, err = tx.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: tenant, IDs: ids, ExpiredAt: &now, Limit: page}); err != nil {
					return err
				}
			}
			for _, l := range ls {
				if l.Tenant != tenant {
					continue
				}
				if err := recordExpiry(ctx, tx, l, now); err != nil {
					if errors.Is(err, store.ErrFenced) {
						continue // ended by another host meanwhile
					}
					return err
				}
				ended = append(ended, l)
				n++
			}
			if n == 0 {
				return nil
			}
			return resourcesFreed(ctx, tx, tenant, endedResources(ended)[tenant], now)
		})
		if err != nil {
			return total, err
		}
		total += n
		for i := 0; i < n; i++ {
			e.emit(Event{Kind: EvResourceExpired, Tenant: tenant})
		}
		if n > 0 {
			e.wakeEnded(ended)
		}
		if !more {
			if _, err := e.sweepWaiters(ctx); err != nil {
				return total, err
			}
			if _, err := e.sweepSessions(ctx); err != nil {
				return total, err
			}
			return total, nil
		}
	}
}

// ResourceHolders answers who holds the named resources now, without taking
// them: every lease honoured at the server's now on each resource of the
// caller's tenant (at most MaxIntents names, normalized as an acquire
// normalizes them). It shows what a conflicting acquire would name, and
// nothing more.
func (e *Engine) ResourceHolders(ctx context.Context, a Actor, resources []string) (*ResourceLeasesResult, error) {
	names, err := e.holderNames(resources)
	if err != nil {
		return nil, err
	}
	return e.holders(ctx, a, names, "")
}

// holderNames validates and normalizes the resource names of a holders
// query, sorted, each once.
func (e *Engine) holderNames(resources []string) ([]string, error) {
	cfg := e.rl().cfg
	if len(resources) == 0 {
		return nil, host.Errorf(host.CodeBadRequest, "resource: name at least one")
	}
	if len(resources) > cfg.MaxIntents {
		return nil, host.Errorf(host.CodeTooLarge, "resource: at most %d per call (this one has %d)", cfg.MaxIntents, len(resources))
	}
	names := make([]string, 0, len(resources))
	for i, r := range resources {
		n, err := host.NormalizeResource(r)
		if err != nil {
			return nil, host.Errorf(host.CodeInvalidResource, "resource[%d]: %s", i, host.ErrorDetail(err))
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// holders reads the leases honoured now on the resources of a's tenant,
// as a sees them (leaseSeenBy); with a predicate, only those that
// conflict with it.
func (e *Engine) holders(ctx context.Context, a Actor, names []string, p host.LeasePredicate) (*ResourceLeasesResult, error) {
	tenant := a.Tenant
	var ls []*host.ResourceLease
	var now time.Time
	err := e.view(ctx, func(r store.Reader) error {
		now = e.now()
		var err error
		ls, _, err = r.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: tenant, Resources: names, LiveAt: &now, Limit: 1000})
		return err
	})
	if err != nil {
		return nil, err
	}
	if p != "" {
		kept := ls[:0]
		for _, l := range ls {
			if p.Conflicts(l.Predicate) {
				kept = append(kept, l)
			}
		}
		ls = kept
	}
	if ls == nil {
		ls = []*host.ResourceLease{}
	}
	for i, l := range ls {
		ls[i] = e.leaseSeenBy(ctx, a, l)
	}
	return &ResourceLeasesResult{Leases: ls, ServerTime: now}, nil
}
