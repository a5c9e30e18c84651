package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Fairness (issue 43 item 3). Requests that wait for a resource are
// registered as waiters (store: resource_waiters): an acquire when it parks
// under wait-die, a task when it steps aside because its intents could not
// be granted. A request is granted only when no live lease conflicts with
// it and no registered waiter is ahead of it. A waiter is ahead of a request
// when it waits on a resource the request wants, their predicates conflict,
// and it is strictly older (wait-die priority); a holder's own waiters and a
// task's own registration are never ahead of it. So:
//
//   - a writer waiting blocks new readers: readers overlapping without end
//     no longer starve it (it is granted once the readers it waits for
//     release);
//   - a queued task's intent counts as a waiter, senior from the first time
//     it stepped aside: an agent releasing and re-acquiring in a loop is
//     younger each time and waits behind it.
//
// A request behind an older waiter may wait (wait_seconds) only when its
// holder holds no live lease, which no one can be waiting for: every wait
// is then either for a younger holder (wait-die) or by a request that
// blocks nobody, so no cycle of waiters can form. Otherwise it is refused at
// once, naming the waiter ahead.

// waiterSlack is how long an acquire's registration outlives its wait.
const waiterSlack = 2 * time.Second

// acquireWaiterTTL is how long an acquire's registration lasts unless the
// waiting request renews it; it renews it while it waits, each time less
// than half of it is left (waiterRenewal), so a host that dies mid-wait
// (SIGKILL, a lost machine) blocks the requests behind its waiter for at
// most this long, not for the rest of a wait of up to MaxWait.
const acquireWaiterTTL = 5 * time.Second

// waiterExpiry is when an acquire's registration, written at now, lapses:
// acquireWaiterTTL later, but never later than its wait's end (until) and
// waiterSlack.
func waiterExpiry(now, until time.Time) time.Time {
	return minTime(now.Add(acquireWaiterTTL), until.Add(waiterSlack))
}

// waiterRenewal is when a registration that lapses at expires is renewed:
// when half of acquireWaiterTTL is left. A registration that already lasts
// to its wait's end (until) needs none: the zero time.
func waiterRenewal(expires, until time.Time) time.Time {
	if !expires.Before(until.Add(waiterSlack)) {
		return time.Time{}
	}
	return expires.Add(-acquireWaiterTTL / 2)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// taskWaiterTTL is how long a stepped-aside task's registration lasts unless
// it steps aside again: a task no worker asks for stops counting.
const taskWaiterTTL = 5 * time.Second

// aheadOf returns the first waiter ahead of a request that wants the
// predicates of want with priority prio, or nil. self is the request's own
// waiter id, holder its holder ("" for a task).
func aheadOf(ws []host.ResourceWaiter, want map[string]host.LeasePredicate, prio time.Time, self, holder string) *host.ResourceWaiter {
	for i := range ws {
		w := &ws[i]
		if w.WaiterID == self || (holder != "" && w.Holder == holder) {
			continue
		}
		p, ok := want[w.Resource]
		if !ok || !p.Conflicts(w.Predicate) || !w.PriorityAt.Before(prio) {
			continue
		}
		return w
	}
	return nil
}

// behindWaiter refuses a request a waiter is ahead of; it may wait when its
// holder holds nothing.
func behindWaiter(w *host.ResourceWaiter, prio, now time.Time, holdsNothing bool) *ResourceConflictError {
	// A task that waits is not named: the refused caller may not read it
	// (ResourceWaiter.SeenBy); Ahead names it to those who may.
	who := "holder " + w.Holder
	if w.TaskID != "" {
		who = "a queued task"
	}
	detail := fmt.Sprintf("%s waits for %s (%s, priority %s), older than this request's %s: waiters are served oldest first",
		who, w.Resource, w.Predicate, w.PriorityAt.Format(time.RFC3339Nano), prio.Format(time.RFC3339Nano))
	if holdsNothing {
		detail += "; this holder holds no lease, so it may wait (wait_seconds)"
	} else {
		detail += "; this holder holds leases, so wait-die refuses it at once"
	}
	return &ResourceConflictError{Err: host.Errorf(host.CodeResourceConflict, "%s", detail).At(now), Ahead: w, MayWait: holdsNothing,
		ServerTime: now, PriorityAt: prio}
}

// registerWaiter registers (or renews) an acquire that is about to park as
// a waiter on each of its resources, until expires (waiterExpiry).
func (e *Engine) registerWaiter(ctx context.Context, req AcquireRequest, self string, intents []ResourceIntent, prio time.Time, expires time.Time) error {
	return e.update(ctx, func(tx store.Tx) error {
		for _, it := range intents {
			if err := tx.PutResourceWaiter(ctx, host.ResourceWaiter{Tenant: req.Tenant, Resource: it.Resource, WaiterID: self, Holder: req.Holder,
				Predicate: it.Predicate, PriorityAt: prio, ExpiresAt: expires}); err != nil {
				return err
			}
		}
		return nil
	})
}

// unregisterWaiter removes an acquire's registration when it stops waiting
// without a grant, and, holding the resources' locks, re-offers the tasks
// that stepped aside behind it (resourcesFreed); the acquires parked behind
// it are woken after the commit.
func (e *Engine) unregisterWaiter(tenant, self string, resources []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.update(ctx, func(tx store.Tx) error {
		if _, err := tx.LockResources(ctx, tenant, resources); err != nil {
			return err
		}
		if err := tx.DeleteResourceWaiter(ctx, tenant, self); err != nil {
			return err
		}
		return resourcesFreed(ctx, tx, tenant, resources, e.now())
	})
	if err != nil {
		e.log.Debug("could not remove a resource waiter; it lapses", "waiter", self, "err", err)
	}
	e.rl().wakeResources(tenant, resources)
}

// putTaskWaiter registers (or renews) a stepped-aside task as a waiter on
// each of its intents.
func (e *Engine) putTaskWaiter(ctx context.Context, tx store.Tx, t *host.Task, now time.Time) error {
	for _, it := range t.ResourceIntents {
		if err := tx.PutResourceWaiter(ctx, host.ResourceWaiter{Tenant: t.Tenant, Resource: it.Resource, WaiterID: t.ID, Predicate: it.Predicate,
			PriorityAt: now, TaskID: t.ID, ExpiresAt: now.Add(taskWaiterTTL)}); err != nil {
			return err
		}
	}
	return nil
}

// taskPriority is a task's seniority among waiters: its registration's
// priority, or now when it has none.
func taskPriority(ws []host.ResourceWaiter, taskID string, now time.Time) time.Time {
	prio := now
	for _, w := range ws {
		if w.WaiterID == taskID && w.PriorityAt.Before(prio) {
			prio = w.PriorityAt
		}
	}
	return prio
}

// sweepWaiters removes lapsed registrations.
func (e *Engine) sweepWaiters(ctx context.Context) (int, error) {
	n := 0
	err := e.update(ctx, func(tx store.Tx) error {
		var err error
		n, err = tx.DeleteLapsedResourceWaiters(ctx, e.now(), 1000)
		return err
	})
	return n, err
}
