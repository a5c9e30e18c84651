package engine

import (
	"context"
	"errors"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Task integration of resource leases (KLIS-3): a task type and an enqueue
// may name resource intents, fixed on the task at enqueue. Such a task is
// offered only when every intent can be granted; its resource leases are granted in the claim's
// transaction, held by the worker for the task (task_id set), expire with
// the task's lease, are extended by the task's heartbeats and end in the
// transaction that ends the task's lease. Two tasks that MUTATE one
// resource are therefore never leased at once, and an agent's MUTATES lease
// on a resource keeps such tasks waiting until it ends.

// claimRounds bounds how many times one claim looks further down the queue
// after tasks stepped aside for their resources.
const claimRounds = 4

func intentResources(in []host.ResourceIntent) []string {
	out := make([]string, len(in))
	for i, it := range in {
		out[i] = it.Resource
	}
	return out
}

// grantTaskResources grants the intents of t, a task just leased in tx, all
// or nothing: it locks the resources, reads the clock, then the live leases.
// It returns the leases granted, or what blocked them when a live lease (an
// agent's, or another task's) conflicts.
func (e *Engine) grantTaskResources(ctx context.Context, tx store.Tx, t *host.Task, intents []host.ResourceIntent) ([]*host.ResourceLease, *taskBlock, error) {
	resources := intentResources(intents)
	if _, err := tx.LockResources(ctx, t.Tenant, resources); err != nil {
		return nil, nil, err
	}
	now := e.now()
	if !now.Before(*t.LeaseExpiresAt) {
		return nil, &taskBlock{resources: resources}, nil
	}
	live, _, err := tx.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: t.Tenant, Resources: resources, LiveAt: &now, Limit: 100000})
	if err != nil {
		return nil, nil, err
	}
	want := make(map[string]host.LeasePredicate, len(intents))
	for _, it := range intents {
		want[it.Resource] = it.Predicate
	}
	var block *taskBlock
	ws, err := tx.ListResourceWaiters(ctx, t.Tenant, resources, now)
	if err != nil {
		return nil, nil, err
	}
	if w := aheadOf(ws, want, taskPriority(ws, t.ID, now), t.ID, ""); w != nil {
		// An older waiter is ahead (resourcefair.go): the task waits for
		// it to be granted and release, or to give up.
		block = &taskBlock{resources: []string{w.Resource}}
	}
	for _, l := range live {
		if p, ok := want[l.Resource]; ok && p.Conflicts(l.Predicate) {
			if block == nil {
				block = &taskBlock{until: l.ExpiresAt}
			}
			block.resources = append(block.resources, l.Resource)
			if block.until.IsZero() || l.ExpiresAt.Before(block.until) {
				block.until = l.ExpiresAt
			}
		}
	}
	if block != nil {
		return nil, block, nil
	}
	if err := tx.DeleteResourceWaiter(ctx, t.Tenant, t.ID); err != nil {
		return nil, nil, err
	}
	manifest := host.NewID(host.PrefixManifest)
	out := make([]*host.ResourceLease, 0, len(intents))
	for _, it := range intents {
		l := &host.ResourceLease{ID: host.NewID(host.PrefixResourceLease), Tenant: t.Tenant, Resource: it.Resource,
			Predicate: it.Predicate, Holder: t.WorkerID, State: host.ResourceLeaseActive, ManifestID: manifest,
			PriorityAt: now, AcquiredAt: now, ExpiresAt: *t.LeaseExpiresAt, TTLMs: int64(t.LeaseSeconds) * 1000, TaskID: t.ID}
		if err := tx.InsertResourceLease(ctx, l); err != nil {
			return nil, nil, err
		}
		if err := tx.AppendResourceLeaseEvent(ctx, leaseEvent(l, host.ResourceEventGranted, now, nil)); err != nil {
			return nil, nil, err
		}
		out = append(out, l)
	}
	return out, nil, nil
}

// taskLeaseRef names the lease of a task whose resource leases are looked
// up: the fields clearLease wipes, saved before it does.
type taskLeaseRef struct {
	Tenant, TaskID, WorkerID string
	// Intents is set when the task runs under resource intents.
	Intents bool
}

func refOf(t *host.Task) taskLeaseRef {
	return taskLeaseRef{Tenant: t.Tenant, TaskID: t.ID, WorkerID: t.WorkerID, Intents: len(t.ResourceIntents) > 0}
}

// taskResources locks and loads the active resource leases held for the
// task, then reads the clock. Nothing is read when the task runs under no
// intents.
func (e *Engine) taskResources(ctx context.Context, tx store.Tx, ref taskLeaseRef) ([]*host.ResourceLease, time.Time, error) {
	if ref.WorkerID == "" || !ref.Intents {
		return nil, time.Time{}, nil
	}
	load := func() ([]*host.ResourceLease, error) {
		ls, _, err := tx.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: ref.Tenant, Holder: ref.WorkerID,
			States: []host.ResourceLeaseState{host.ResourceLeaseActive}, Limit: 1000})
		if err != nil {
			return nil, err
		}
		mine := ls[:0]
		for _, l := range ls {
			if l.TaskID == ref.TaskID {
				mine = append(mine, l)
			}
		}
		return mine, nil
	}
	ls, err := load()
	if err != nil || len(ls) == 0 {
		return nil, time.Time{}, err
	}
	locked, err := tx.LockResources(ctx, ref.Tenant, resourcesOf(ls))
	if err != nil {
		return nil, time.Time{}, err
	}
	if locked {
		if ls, err = load(); err != nil {
			return nil, time.Time{}, err
		}
	}
	return ls, e.now(), nil
}

// extendTaskResources moves the expiry of the task's resource leases to the
// task lease's new expiry, inside the heartbeat's transaction. A resource
// lease already past its expiry refuses the heartbeat: the resource may have
// been granted to someone else since.
func (e *Engine) extendTaskResources(ctx context.Context, tx store.Tx, t *host.Task) error {
	ls, now, err := e.taskResources(ctx, tx, refOf(t))
	if err != nil {
		return err
	}
	// Every intent was granted with the task's lease; one whose lease is no
	// longer active (the resource sweeper recorded its expiry while this
	// heartbeat waited for the writer, or it was released) is no longer the
	// task's, and may be someone else's by now.
	held := make(map[string]bool, len(ls))
	for _, l := range ls {
		// As the intents are read (normalized again): a lease granted by a
		// gate whose names were not yet in NFC is still the task's.
		name := l.Resource
		if n, err := host.NormalizeResource(name); err == nil {
			name = n
		}
		held[name] = true
	}
	for _, it := range t.ResourceIntents {
		if !held[it.Resource] {
			return host.Errorf(host.CodeLeaseExpired, "lease %s: the resource lease on %s held for task %s has ended (expired or released): the task no longer holds the resource",
				t.LeaseID, it.Resource, t.ID)
		}
	}
	for _, l := range ls {
		if !l.LiveAt(now) {
			return host.Errorf(host.CodeLeaseExpired, "lease %s: resource lease %s held for task %s expired at %s (server time %s)",
				t.LeaseID, l.ID, t.ID, l.ExpiresAt.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
		}
		if !t.LeaseExpiresAt.After(l.ExpiresAt) {
			continue
		}
		prev := l.ExpiresAt
		l.ExpiresAt = *t.LeaseExpiresAt
		if err := tx.UpdateResourceLease(ctx, l, store.ResourceLeaseFence{LiveAt: &now}); err != nil {
			return rlFenced(err, l, now)
		}
		if err := tx.AppendResourceLeaseEvent(ctx, leaseEvent(l, host.ResourceEventHeartbeat, now, &prev)); err != nil {
			return err
		}
	}
	return nil
}

// endTaskResources ends the resource leases held for a task's lease, inside
// the transaction that ends the lease (complete, fail, release, expiry): a
// live one is released, one past its expiry recorded as expired. It returns
// how many it released and how many it recorded expired.
func (e *Engine) endTaskResources(ctx context.Context, tx store.Tx, ref taskLeaseRef) (released, expired int, err error) {
	ls, now, err := e.taskResources(ctx, tx, ref)
	if err != nil || len(ls) == 0 {
		return 0, 0, err
	}
	for _, l := range ls {
		if l.LiveAt(now) {
			l.State, l.EndedAt = host.ResourceLeaseReleased, ptr(now)
			if err := tx.UpdateResourceLease(ctx, l, store.ResourceLeaseFence{LiveAt: &now}); err != nil {
				if errors.Is(err, store.ErrFenced) {
					continue
				}
				return 0, 0, err
			}
			if err := tx.AppendResourceLeaseEvent(ctx, leaseEvent(l, host.ResourceEventReleased, now, nil)); err != nil {
				return 0, 0, err
			}
			if err := leaseEnded(ctx, tx, l, now); err != nil {
				return 0, 0, err
			}
			released++
			continue
		}
		if err := expireLease(ctx, tx, l, now); err != nil {
			if errors.Is(err, store.ErrFenced) {
				continue // another host's sweeper recorded it
			}
			return 0, 0, err
		}
		expired++
	}
	return released, expired, nil
}

// emitTaskResources reports resource leases ended with a task's lease.
func (e *Engine) emitTaskResources(tenant string, released, expired int) {
	for i := 0; i < released; i++ {
		e.emit(Event{Kind: EvResourceReleased, Tenant: tenant})
	}
	for i := 0; i < expired; i++ {
		e.emit(Event{Kind: EvResourceExpired, Tenant: tenant})
	}
	if released+expired > 0 {
		e.rl().wakeTenant(tenant)
	}
}
