package engine

import (
	"context"
	"errors"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Sweep handles every lease that has expired by the engine's clock: the task
// goes back to the queue after its requeue delay plus jitter without using an
// attempt; an accepted lease writes task.escalated (lease_expired); a task
// whose leases keep expiring goes to dead letter (max_lease_expiries); a task
// whose cancel was requested is canceled. It returns how many leases it handled.
func (e *Engine) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := e.sweepBatch(ctx, 200)
		total += n
		if err != nil || n < 200 {
			return total, err
		}
	}
}

func (e *Engine) sweepBatch(ctx context.Context, limit int) (int, error) {
	now := e.now()
	var events []Event
	var requeued []*host.Task
	var n, rsEnded int
	err := e.update(ctx, func(tx store.Tx) error {
		events, requeued, n, rsEnded = nil, nil, 0, 0
		ts, err := tx.ExpiredLeases(ctx, now, limit)
		if err != nil {
			return err
		}
		for _, t := range ts {
			fence := store.Fence{State: host.StateLeased, LeaseID: t.LeaseID, ExpiredAt: ptr(now)}
			leaseID, worker := t.LeaseID, t.WorkerID
			ref := refOf(t)
			att := host.OpenAttempt(t)
			var rs []*host.Receipt
			var rtypes map[string]host.ReceiptType
			expBody := map[string]any{"escalation_class": "policy", "escalation_reason": host.ReasonLeaseExpired,
				"lease_id": leaseID, "worker_id": worker, "lease_expires_at": t.LeaseExpiresAt}
			if t.AcceptReceipt != "" {
				rs = append(rs, &host.Receipt{Type: host.ReceiptEscalated, Parents: []string{t.AcceptReceipt}, Body: mustJSON(expBody)})
			}
			t.LeaseExpiries++
			t.UpdatedAt = now
			_, rtypes = taskParents(t)
			switch {
			case t.CancelRequested:
				parents, _ := taskParents(t)
				body := map[string]any{"lease_id": leaseID}
				if parents, err = endCanceled(ctx, tx, t, body, parents); err != nil {
					return err
				}
				rs = append(rs, &host.Receipt{Type: host.ReceiptCanceled, Parents: parents, Body: mustJSON(body)})
				clearLease(t)
				t.State, t.CompletedAt = host.StateCanceled, ptr(now)
				events = append(events, Event{Kind: EvCanceled, Tenant: t.Tenant, TaskType: t.Type})
			case t.LeaseExpiries >= e.maxExpiries(ctx, tx, t):
				parents, _ := taskParents(t)
				failed := &host.Receipt{ID: host.NewID(host.PrefixReceipt), Type: host.ReceiptFailed, Parents: parents,
					Body: mustJSON(map[string]any{"dead_reason": host.ReasonMaxLeaseExpiries, "lease_expiries": t.LeaseExpiries, "lease_id": leaseID})}
				rs = append(rs, failed, &host.Receipt{Type: host.ReceiptEscalated, Parents: []string{failed.ID},
					Body: mustJSON(map[string]any{"escalation_class": "policy", "escalation_reason": host.ReasonMaxLeaseExpiries, "lease_expiries": t.LeaseExpiries})})
				clearLease(t)
				t.State, t.DeadReason, t.CompletedAt = host.StateDeadLetter, host.ReasonMaxLeaseExpiries, ptr(now)
				att.DeadReason = host.ReasonMaxLeaseExpiries
				events = append(events, Event{Kind: EvDeadLettered, Tenant: t.Tenant, TaskType: t.Type, Detail: host.ReasonMaxLeaseExpiries})
			default:
				delay := time.Duration(e.requeueDelay(ctx, tx, t)) * time.Second
				clearLease(t)
				t.State, t.AvailableAt = host.StateQueued, now.Add(delay+e.jitter(e.cfg.ExpiryJitter))
				att.RetryAt = ptr(t.AvailableAt)
				requeued = append(requeued, t)
			}
			if err := tx.UpdateTask(ctx, t, fence); err != nil {
				if errors.Is(err, store.ErrFenced) {
					continue // another host or a racing call handled it
				}
				return err
			}
			rel, exp, err := e.endTaskResources(ctx, tx, ref)
			if err != nil {
				return err
			}
			for i := 0; i < rel+exp; i++ {
				kind := EvResourceExpired
				if i < rel {
					kind = EvResourceReleased
				}
				events = append(events, Event{Kind: kind, Tenant: t.Tenant})
			}
			rsEnded += rel + exp
			rid := ""
			for _, r := range rs {
				fillTaskReceipt(r, t, leaseID, now)
				if err := appendReceipt(ctx, tx, r, rtypes); err != nil {
					return err
				}
				if rid == "" {
					rid = r.ID
				}
			}
			if err := endAttempt(ctx, tx, att, now, host.AttemptExpired, rid); err != nil {
				return err
			}
			events = append(events, Event{Kind: EvLeaseExpired, Tenant: t.Tenant, TaskType: t.Type, WorkerID: worker})
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, ev := range events {
		e.emit(ev)
	}
	if rsEnded > 0 {
		e.rl().wake()
	}
	for _, t := range requeued {
		if !t.AvailableAt.After(now) {
			e.waiters.wake(t.Tenant, t.Type, 1)
		}
	}
	return n, nil
}

func (e *Engine) maxExpiries(ctx context.Context, r store.Reader, t *host.Task) int {
	if ct, err := e.types.getIn(ctx, r, t.Tenant, t.Type); err == nil {
		return ct.tt.MaxLeaseExpiries
	}
	return host.DefaultMaxLeaseExpiries
}

func (e *Engine) requeueDelay(ctx context.Context, r store.Reader, t *host.Task) int {
	if ct, err := e.types.getIn(ctx, r, t.Tenant, t.Type); err == nil {
		return ct.tt.RequeueDelaySeconds
	}
	return host.DefaultRequeueDelaySeconds
}
