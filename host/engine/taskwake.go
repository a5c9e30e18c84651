package engine

import (
	"context"
	"slices"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Tasks stepped aside for their resources (issue 43 item 2). A task whose
// intents cannot be granted at a claim goes back to the queue, available
// again after ResourceLeaseConfig.StepAside at most, and no later than the earliest
// expiry among the leases that blocked it, and is registered as a waiter on
// its intents (resourcefair.go). The transaction that ends a lease on one of
// them (or removes a waiter ahead of it), holding the resource's lock, makes
// it available at once (resourcesFreed): on every host, ordered with the
// claims by that lock, and without a second transaction that could hold the
// task's row while a claim looks for it. This host also remembers the tasks
// it stepped aside, to wake a long-polling worker of their type when the
// delay or that expiry comes.

// blockedTask is a task stepped aside on this host.
type blockedTask struct {
	tenant, id, typ string
	keys            []rwKey
	timer           *time.Timer
}

// taskBlock is what kept a task's intents from being granted.
type taskBlock struct {
	// resources are the resources held against the task (or wanted by an
	// older waiter).
	resources []string
	// until is the earliest expiry among the leases that blocked it (zero:
	// none, only waiters).
	until time.Time
}

// stepAside puts the task t, leased in tx by a claim whose intents could
// not be granted, back in the queue as snap (its state before the claim),
// and remembers it on the resources that blocked it.
func (e *Engine) stepAside(ctx context.Context, tx store.Tx, snap host.Task, leaseID string, b *taskBlock, now time.Time) error {
	at := now.Add(e.rl().cfg.StepAside)
	if !b.until.IsZero() && b.until.Before(at) {
		at = b.until
	}
	if !at.After(now) {
		at = now.Add(time.Millisecond)
	}
	snap.AvailableAt, snap.UpdatedAt = at, now
	if err := tx.UpdateTask(ctx, &snap, store.Fence{State: host.StateLeased, LeaseID: leaseID}); err != nil {
		return err
	}
	if err := e.putTaskWaiter(ctx, tx, &snap, now); err != nil {
		return err
	}
	e.rl().block(e, &snap, b.resources, at.Sub(now))
	return nil
}

// block remembers a stepped-aside task on its blocking resources, and arms a
// timer that re-offers it after wait.
func (r *resourceLeases) block(e *Engine, t *host.Task, resources []string, wait time.Duration) {
	bt := &blockedTask{tenant: t.Tenant, id: t.ID, typ: t.Type}
	for _, res := range resources {
		bt.keys = append(bt.keys, rwKey{t.Tenant, res})
	}
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.closed {
		return
	}
	if r.blocked == nil {
		r.blocked = map[string]*blockedTask{}
	}
	k := t.Tenant + "\x00" + t.ID
	if old := r.blocked[k]; old != nil && old.timer != nil {
		old.timer.Stop()
	}
	r.blocked[k] = bt
	bt.timer = time.AfterFunc(wait, func() {
		r.w.mu.Lock()
		if r.blocked[k] != bt {
			r.w.mu.Unlock()
			return
		}
		delete(r.blocked, k)
		r.w.mu.Unlock()
		// The task is available now by its available_at: wake a worker.
		e.waiters.wake(bt.tenant, bt.typ, 1)
	})
}

// shutdown stops the fallback wake-ups.
func (r *resourceLeases) shutdown() {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	r.closed = true
	for k, bt := range r.blocked {
		bt.timer.Stop()
		delete(r.blocked, k)
	}
}

// taskWake names the long-polling workers to wake once an update commits:
// one of tenant's, for a task of type typ made available.
type taskWake struct{ tenant, typ string }

// resourcesFreed runs in the transaction that ends a lease on resources of
// tenant, or a waiter's registration on them, while it holds their locks:
// the tasks stepped aside waiting for them are made available at now in
// the same transaction (store: ReofferWaitingTasks), so whichever host
// stepped them aside, they are offered at the next claim that follows the
// commit; other hosts' waiters hear of the resources at the commit
// (store.ResourceNotifyTx), and this host's long-polling workers of the
// tasks' types are woken after it (Engine.update).
func resourcesFreed(ctx context.Context, tx store.Tx, tenant string, resources []string, now time.Time) error {
	resources = slices.Compact(slices.Sorted(slices.Values(resources)))
	d, _ := tx.(*deliveryTx)
	inner := tx
	if d != nil {
		inner = d.Tx
	}
	if n, ok := inner.(store.ResourceNotifyTx); ok {
		for _, r := range resources {
			n.NotifyResourceEnded(tenant, r)
		}
	}
	types, err := tx.ReofferWaitingTasks(ctx, tenant, resources, now)
	if err != nil {
		return err
	}
	if d == nil {
		return nil
	}
	if _, ok := inner.(store.DeferredReofferTx); ok {
		// The store learns the tasks only at the commit: wake a worker
		// of each task this host stepped aside for the resources (the
		// store's notice wakes the other hosts' and, when the engine
		// listens, this host's of tasks stepped aside elsewhere).
		types = d.e.rl().blockedTypes(tenant, resources)
	}
	for _, typ := range types {
		d.reoffered = append(d.reoffered, taskWake{tenant, typ})
	}
	return nil
}

// blockedTypes returns the type of each task this host stepped aside for
// one of the resources of tenant, once per task.
func (r *resourceLeases) blockedTypes(tenant string, resources []string) []string {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	var out []string
	for _, bt := range r.blocked {
		if bt.tenant != tenant {
			continue
		}
		for _, k := range bt.keys {
			if slices.Contains(resources, k.resource) {
				out = append(out, bt.typ)
				break
			}
		}
	}
	return out
}
