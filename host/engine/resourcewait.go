package engine

import (
	"context"
	"sync"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Wake-ups of resource leases (issue 43 item 2). Whatever waits for a
// resource to be released — an acquire waiting under wait-die, a request
// waiting for a resource to be free (AwaitResources), an MCP subscriber, a
// task stepped aside because its intents could not be granted — registers on
// the (tenant, resource) pairs it waits for before it looks at them, so a
// release between its look and its park still wakes it. A lease that ends
// wakes the waiters of its resource on this host when its transaction has
// committed, and, on a store whose write transactions implement
// store.ResourceNotifyTx (PostgreSQL), the waiters on every other host
// through the store's Notifier. An expiry needs no wake-up: a waiter parks
// until the earliest expiry among the leases it waits for, at most.

// A waiter parks at most Config.FallbackPoll without a wake-up: the
// wake-ups are hints (a notification may be lost with its connection), so
// a waiter looks again at least this often.

// rwKey names one resource of one tenant.
type rwKey struct{ tenant, resource string }

// rwaiter is one parked waiter; ch is closed once to wake it.
type rwaiter struct {
	ch   chan struct{}
	once sync.Once
	keys []rwKey
}

func (w *rwaiter) wake() { w.once.Do(func() { close(w.ch) }) }

// resourceWatch parks waiters by (tenant, resource).
type resourceWatch struct {
	mu sync.Mutex
	by map[rwKey]map[*rwaiter]struct{}
}

// watch registers a waiter on the resources of tenant.
func (r *resourceLeases) watch(tenant string, resources []string) *rwaiter {
	w := &rwaiter{ch: make(chan struct{}), keys: make([]rwKey, 0, len(resources))}
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.w.by == nil {
		r.w.by = map[rwKey]map[*rwaiter]struct{}{}
	}
	for _, res := range resources {
		k := rwKey{tenant, res}
		m := r.w.by[k]
		if m == nil {
			m = map[*rwaiter]struct{}{}
			r.w.by[k] = m
		}
		m[w] = struct{}{}
		w.keys = append(w.keys, k)
	}
	return w
}

// unwatch removes a waiter.
func (r *resourceLeases) unwatch(w *rwaiter) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	r.drop(w)
}

func (r *resourceLeases) drop(w *rwaiter) {
	for _, k := range w.keys {
		if m := r.w.by[k]; m != nil {
			delete(m, w)
			if len(m) == 0 {
				delete(r.w.by, k)
			}
		}
	}
}

// wakeResources wakes the waiters of the resources of tenant.
func (r *resourceLeases) wakeResources(tenant string, resources []string) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	for _, res := range resources {
		for w := range r.w.by[rwKey{tenant, res}] {
			w.wake()
			r.drop(w)
		}
	}
}

// wakeTenant wakes every waiter of tenant ("" : of every tenant).
func (r *resourceLeases) wakeTenant(tenant string) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	for k, m := range r.w.by {
		if tenant != "" && k.tenant != tenant {
			continue
		}
		for w := range m {
			w.wake()
			r.drop(w)
		}
	}
}

// wake wakes every waiter of every tenant.
func (r *resourceLeases) wake() { r.wakeTenant("") }

// WatchResources returns a channel closed at the next end of a lease on one
// of the resources of tenant (a release, an expiry recorded, a session ended
// or a revocation, on this host or, with PostgreSQL, another), and a function
// that stops watching. Wake-ups are hints: the resource may have been taken
// again by the time the watcher looks. The names must be normalized
// (host.NormalizeResource).
func (e *Engine) WatchResources(tenant string, resources []string) (<-chan struct{}, func()) {
	w := e.rl().watch(tenant, resources)
	return w.ch, func() { e.rl().unwatch(w) }
}

// park waits for w to be woken, for until (the earliest expiry of what
// blocks the waiter; zero: none known), for the fallback poll, or for stop;
// it returns the error that stop carries, or nil to look again.
func (e *Engine) park(ctx context.Context, w *rwaiter, until time.Time, deadline <-chan time.Time) (timedOut bool, err error) {
	d := e.cfg.FallbackPoll
	if !until.IsZero() {
		// The waiter looks again just after the expiry: a lease is not
		// honoured at its expires_at (strict expiry).
		if left := until.Sub(e.now()) + time.Millisecond; left < d {
			d = max(left, time.Millisecond)
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.ch:
	case <-t.C:
	case <-deadline:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-e.stop:
		return true, nil
	}
	return false, nil
}

// leaseEnded runs in the transaction that ends the lease l, which holds
// its resource's lock (resourcesFreed). This host's waiters are woken by
// the caller after the commit.
func leaseEnded(ctx context.Context, tx store.Tx, l *host.ResourceLease, now time.Time) error {
	return resourcesFreed(ctx, tx, l.Tenant, []string{l.Resource}, now)
}

// forwardResourceNotice wakes this host's waiters for a notification of
// another host's ended lease; it reports whether payload was one.
func (e *Engine) forwardResourceNotice(payload string) bool {
	tenant, resource, ok := store.ParseResourceNotice(payload)
	if !ok {
		return false
	}
	if resource == "" {
		e.rl().wakeTenant(tenant)
	} else {
		e.rl().wakeResources(tenant, []string{resource})
	}
	return true
}

// ended lists the (tenant, resource) pairs of leases that ended.
func endedResources(ls []*host.ResourceLease) map[string][]string {
	out := map[string][]string{}
	for _, l := range ls {
		out[l.Tenant] = append(out[l.Tenant], l.Resource)
	}
	return out
}

// wakeEnded wakes the waiters of the leases' resources.
func (e *Engine) wakeEnded(ls []*host.ResourceLease) {
	for tenant, rs := range endedResources(ls) {
		e.rl().wakeResources(tenant, rs)
	}
}

// AwaitRequest waits for resources to be free to take.
type AwaitRequest struct {
	// Resources are the names (at most MaxIntents; normalized).
	Resources []string
	// Predicate is what the caller means to take: MUTATES (the default)
	// waits for every lease to end, READS for the MUTATES leases only.
	Predicate host.LeasePredicate
	// Wait long-polls up to this long (capped by Config.MaxWait).
	Wait time.Duration
}

// AwaitResources waits, without taking anything and so without the risk of a
// deadlock, until no lease honoured now on the resources conflicts with
// req.Predicate, or until req.Wait passes: the way for a request refused by
// wait-die to wait for the release it needs before it acquires again (with
// its priority_at). It answers the leases still in the way (none: the
// resources were free when it looked; an acquire a moment later may still
// find them taken). It is woken by a release (on any host) and by the expiry
// of what it waits for.
func (e *Engine) AwaitResources(ctx context.Context, a Actor, req AwaitRequest) (*ResourceLeasesResult, error) {
	names, err := e.holderNames(req.Resources)
	if err != nil {
		return nil, err
	}
	p := req.Predicate
	if p == "" {
		p = host.PredicateMutates
	}
	if p != host.PredicateMutates && p != host.PredicateReads {
		return nil, host.Errorf(host.CodeBadRequest, "predicate: READS or MUTATES")
	}
	if req.Wait < 0 {
		return nil, host.Errorf(host.CodeBadRequest, "wait_seconds: must not be negative")
	}
	if req.Wait > e.cfg.MaxWait {
		req.Wait = e.cfg.MaxWait
	}
	var deadline <-chan time.Time
	if req.Wait > 0 {
		t := time.NewTimer(req.Wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		w := e.rl().watch(a.Tenant, names)
		res, err := e.holders(ctx, a, names, p)
		if err != nil || len(res.Leases) == 0 || req.Wait <= 0 {
			e.rl().unwatch(w)
			return res, err
		}
		until := res.Leases[0].ExpiresAt
		for _, l := range res.Leases[1:] {
			if l.ExpiresAt.Before(until) {
				until = l.ExpiresAt
			}
		}
		timedOut, err := e.park(ctx, w, until, deadline)
		e.rl().unwatch(w)
		if err != nil {
			return nil, err
		}
		if timedOut {
			return e.holders(ctx, a, names, p)
		}
	}
}
