package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// LeaseRequest asks for up to MaxTasks offers.
type LeaseRequest struct {
	Tenant       string
	WorkerID     string
	Capabilities []string
	// Types restricts the offers to these task types (the spec's task_types,
	// the Lease Protocol's preferred_kinds). Empty: any type.
	Types    []string
	MaxTasks int // default 1, at most 100
	// LeaseSeconds overrides the task type's lease length (capped by
	// Config.MaxLeaseSeconds).
	LeaseSeconds int
	// Wait long-polls up to this long (capped by Config.MaxWait) when no task is ready.
	Wait time.Duration
}

// MaxBatch is the most offers one lease call returns.
const MaxBatch = 100

// Lease grants up to MaxTasks offers, priority 10→1 then oldest first. With Wait
// it parks until a matching task is queued or Wait passes. No offer: an empty
// slice and no error.
func (e *Engine) Lease(ctx context.Context, req LeaseRequest) ([]host.Offer, error) {
	if !host.ValidWorkerID(req.WorkerID) {
		return nil, host.Errorf(host.CodeInvalidWorkerID, "must match pattern {type}.{instance}")
	}
	if req.MaxTasks == 0 {
		req.MaxTasks = 1
	}
	if req.MaxTasks < 1 || req.MaxTasks > MaxBatch {
		return nil, host.Errorf(host.CodeBadRequest, "max_tasks must be 1..%d", MaxBatch)
	}
	if req.LeaseSeconds < 0 {
		return nil, host.Errorf(host.CodeBadRequest, "lease_seconds must not be negative")
	}
	if len(req.Types) > 50 {
		return nil, host.Errorf(host.CodeBadRequest, "at most 50 task types per lease call")
	}
	for _, t := range req.Types {
		// A name no type can have matches no task: refused rather than
		// left to wait for work that never comes.
		if !host.ValidTaskTypeName(t) {
			return nil, host.Errorf(host.CodeBadRequest, "task type %q in a lease call is not a task type name (must match %s)", t, host.TaskTypeNamePattern())
		}
	}
	if req.Wait > e.cfg.MaxWait {
		req.Wait = e.cfg.MaxWait
	}
	e.sawWorker(ctx, req.Tenant, req.WorkerID, req.Capabilities)
	var deadline <-chan time.Time
	if req.Wait > 0 {
		t := time.NewTimer(req.Wait)
		defer t.Stop()
		deadline = t.C
	}
	key := lookKey(req.Tenant, req.Types)
	arriving := true
	for {
		var w *waiter
		var offers []host.Offer
		var err error
		if req.Wait > 0 {
			w = e.waiters.add(req.Tenant, req.Types, req.MaxTasks)
		}
		// Look again at least every FallbackPoll: delayed tasks become
		// ready without a wake-up.
		next, skip := e.cfg.FallbackPoll, false
		if arriving && w != nil {
			// A look of the same kind found the queue short of ready
			// tasks and no task has been made ready since that no woken
			// waiter stands for: park at once (registered above, so
			// none is missed), and look once the mark lapses at the
			// latest (a task may become ready by time alone).
			if left, ok := e.waiters.drained(key, req.Tenant, time.Now()); ok {
				next, skip = left, true
				e.waiters.skips.Add(1)
			}
		}
		if !skip {
			mark := e.waiters.mark(req.Tenant)
			offers, err = e.claim(ctx, req)
			if err == nil && len(offers) < req.MaxTasks {
				e.waiters.markDrained(key, mark, time.Now())
			}
		}
		arriving = false
		if err != nil && req.Wait > 0 && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// The long-poll's caller stopped waiting (it went away, or the
			// server began shutting down) while a claim ran. A store reports
			// the context's error only for work it did not commit, so nothing
			// was offered: the poll ends empty, as it does when ctx ends
			// while parked below.
			offers, err = nil, nil
		}
		if err != nil || len(offers) > 0 || req.Wait <= 0 {
			if w != nil {
				e.waiters.leave(req.Tenant, w)
			}
			traceLeases(ctx, req.WorkerID, offers)
			return offers, err
		}
		poll := time.NewTimer(next)
		select {
		case <-w.ch:
		case <-poll.C:
		case <-deadline:
			poll.Stop()
			e.waiters.leave(req.Tenant, w)
			return nil, nil
		case <-ctx.Done():
			poll.Stop()
			e.waiters.leave(req.Tenant, w)
			return nil, nil
		case <-e.stop:
			poll.Stop()
			e.waiters.leave(req.Tenant, w)
			return nil, nil
		}
		poll.Stop()
		e.waiters.remove(req.Tenant, w)
	}
}

func (e *Engine) claim(ctx context.Context, req LeaseRequest) ([]host.Offer, error) {
	now := e.now()
	var tasks []*host.Task
	var typeErr error
	var granted []*host.ResourceLease
	err := e.update(ctx, func(tx store.Tx) error {
		typeErr, granted = nil, nil
		// Tasks whose type names resource intents: their state before the
		// grant, to step them aside when their resources are held.
		var snaps map[string]host.Task
		var intents map[string][]host.ResourceIntent
		q := store.ClaimQuery{
			Tenant: req.Tenant, Types: req.Types, Now: now, Limit: req.MaxTasks,
			Grant: func(t *host.Task) {
				secs := req.LeaseSeconds
				if secs == 0 {
					if ct, err := e.types.getIn(ctx, tx, t.Tenant, t.Type); err == nil {
						secs = ct.tt.LeaseSeconds
					} else {
						typeErr = err
						secs = host.DefaultLeaseSeconds
					}
				}
				if len(t.ResourceIntents) > 0 {
					if snaps == nil {
						snaps, intents = map[string]host.Task{}, map[string][]host.ResourceIntent{}
					}
					snaps[t.ID], intents[t.ID] = *t, t.ResourceIntents
				}
				if secs > e.cfg.MaxLeaseSeconds {
					secs = e.cfg.MaxLeaseSeconds
				}
				t.State = host.StateLeased
				t.LeaseID = host.NewLeaseID(t.ID)
				t.WorkerID = req.WorkerID
				t.LeasedAt = ptr(now)
				t.LeaseExpiresAt = ptr(now.Add(time.Duration(secs) * time.Second))
				t.LeaseSeconds = secs
				t.AcceptedAt, t.AcceptReceipt = nil, ""
				t.LeaseCount++
				t.UpdatedAt = now
				if t.StartedAt == nil {
					t.StartedAt = ptr(now)
				}
			},
		}
		// Paused task types are not offered: the call is narrowed to the
		// others (nothing to offer when none is left).
		ps, err := e.pauses.getIn(ctx, tx, req.Tenant, e.cfg.TaskTypeTTL)
		if err != nil {
			return err
		}
		var ok bool
		if q.Types, ok = ps.leasable(q.Types); !ok {
			tasks = nil
			return nil
		}
		tasks, err = tx.ClaimTasks(ctx, q)
		if err != nil || snaps == nil {
			return err
		}
		// Some tasks name resource intents: grant them, or step the task
		// aside and look further down the queue, a bounded number of times.
		var kept []*host.Task
		for round := 1; ; round++ {
			// Lock every resource of the round at once, in one sorted
			// order, before granting any of them.
			var all []string
			for _, t := range tasks {
				all = append(all, intentResources(intents[t.ID])...)
			}
			if len(all) > 0 {
				if _, err := tx.LockResources(ctx, req.Tenant, all); err != nil {
					return err
				}
			}
			stepped := 0
			for _, t := range tasks {
				in := intents[t.ID]
				if in == nil {
					kept = append(kept, t)
					continue
				}
				ls, blocked, err := e.grantTaskResources(ctx, tx, t, in)
				if err != nil {
					return err
				}
				if blocked == nil {
					granted = append(granted, ls...)
					kept = append(kept, t)
					continue
				}
				if err := e.stepAside(ctx, tx, snaps[t.ID], t.LeaseID, blocked, now); err != nil {
					return err
				}
				stepped++
			}
			if stepped == 0 || round == claimRounds {
				break
			}
			q.Limit = stepped
			if tasks, err = tx.ClaimTasks(ctx, q); err != nil {
				return err
			}
		}
		tasks = kept
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, l := range granted {
		e.emit(Event{Kind: EvResourceGranted, Tenant: l.Tenant, WorkerID: l.Holder, Detail: string(l.Predicate)})
	}
	if typeErr != nil && !host.IsCode(typeErr, host.CodeUnknownTaskType) {
		e.log.Warn("lease used the default lease length", "err", typeErr)
	}
	offers := make([]host.Offer, len(tasks))
	for i, t := range tasks {
		e.leases.put(t, now)
		offers[i] = host.Offer{LeaseID: t.LeaseID, RunID: t.LeaseID, LeaseExpiresAt: *t.LeaseExpiresAt, Attempt: t.Attempts + 1, Task: t,
			LeaseSeconds: int(t.LeaseExpiresAt.Sub(now) / time.Second), ServerTime: now}
		for _, l := range granted {
			if l.TaskID == t.ID {
				offers[i].ResourceLeases = append(offers[i].ResourceLeases, l)
			}
		}
		e.emit(Event{Kind: EvLeased, Tenant: t.Tenant, TaskType: t.Type, WorkerID: req.WorkerID, Duration: now.Sub(t.AvailableAt)})
	}
	if err := e.dependencyOutcomes(ctx, req.Tenant, offers); err != nil {
		// The leases are granted and committed: the offers stand, and a
		// worker that needs the outcomes reads them from the tasks.
		e.log.Warn("could not read the dependencies of offered tasks", "err", err)
	}
	return offers, nil
}

// sawWorker records a worker sighting at most every few seconds per worker.
func (e *Engine) sawWorker(ctx context.Context, tenant, id string, caps []string) {
	k := tenant + "\x00" + id
	now := e.now()
	e.seenMu.Lock()
	last, ok := e.seen[k]
	if ok && now.Sub(last) < 5*time.Second && now.After(last) {
		e.seenMu.Unlock()
		return
	}
	e.seen[k] = now
	e.seenMu.Unlock()
	var capsJSON json.RawMessage
	if caps != nil {
		capsJSON = mustJSON(caps)
	}
	err := e.update(ctx, func(tx store.Tx) error {
		return tx.UpsertWorker(ctx, store.Worker{Tenant: tenant, ID: id, Capabilities: capsJSON, FirstSeen: now, LastSeen: now})
	})
	if err != nil {
		e.log.Warn("could not record worker sighting", "worker_id", id, "err", err)
	}
}
