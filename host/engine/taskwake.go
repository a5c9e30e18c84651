package engine

import (
	"context"
	"errors"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Tasks stepped aside for their resources (issue 43 item 2). A task whose
// intents cannot be granted at a claim goes back to the queue, available
// again after resourceRetryDelay at most, and no later than the earliest
// expiry among the leases that blocked it. This host remembers it on the
// resources that blocked it: when a lease on one of them ends (here, or on
// another PostgreSQL host) or that expiry comes, the task is made available
// at once and a long-polling worker of its type is woken. The delay stays as
// the fallback should the wake-up be lost.

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
	at := now.Add(resourceRetryDelay)
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

// reoffer makes the blocked tasks with a key that matches available now, in
// the background.
func (r *resourceLeases) reoffer(match func(rwKey) bool) {
	var due []*blockedTask
	r.w.mu.Lock()
	for k, bt := range r.blocked {
		for _, key := range bt.keys {
			if match(key) {
				due = append(due, bt)
				bt.timer.Stop()
				delete(r.blocked, k)
				break
			}
		}
	}
	if len(due) == 0 || r.closed {
		r.w.mu.Unlock()
		return
	}
	r.jobs.Add(1)
	r.w.mu.Unlock()
	go func() {
		defer r.jobs.Done()
		for _, bt := range due {
			r.reofferSoon(bt, 0)
		}
	}()
}

// reofferSoon re-offers bt; while the claim that stepped it aside has not
// committed yet (the task still reads leased), it tries again a few times,
// then leaves it to the fallback delay.
func (r *resourceLeases) reofferSoon(bt *blockedTask, attempt int) {
	if !r.e.reofferTask(bt) || attempt >= 5 {
		return
	}
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.closed {
		return
	}
	r.jobs.Add(1)
	time.AfterFunc(time.Duration(attempt+1)*20*time.Millisecond, func() {
		defer r.jobs.Done()
		r.reofferSoon(bt, attempt+1)
	})
}

// shutdown stops re-offers and waits for those under way.
func (r *resourceLeases) shutdown() {
	r.w.mu.Lock()
	r.closed = true
	for k, bt := range r.blocked {
		bt.timer.Stop()
		delete(r.blocked, k)
	}
	r.w.mu.Unlock()
	r.jobs.Wait()
}

// reofferTask makes a queued task available now, if it is not yet, and wakes
// a long-polling worker of its type. It reports whether the task still read
// leased: the claim that stepped it aside may not have committed yet.
func (e *Engine) reofferTask(bt *blockedTask) (leased bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.update(ctx, func(tx store.Tx) error {
		leased = false
		t, err := tx.GetTask(ctx, bt.tenant, bt.id)
		if err != nil {
			return err
		}
		now := e.now()
		leased = t.State == host.StateLeased
		if t.State != host.StateQueued || !t.AvailableAt.After(now) {
			return nil
		}
		v := t.Version
		t.AvailableAt, t.UpdatedAt = now, now
		return tx.UpdateTask(ctx, t, store.Fence{State: host.StateQueued, Version: v})
	})
	if err != nil && !errors.Is(err, store.ErrFenced) && !host.IsCode(err, host.CodeNotFound) {
		e.log.Debug("could not re-offer a task stepped aside for its resources", "task_id", bt.id, "err", err)
	}
	e.waiters.wake(bt.tenant, bt.typ, 1)
	return leased && err == nil
}
