package engine

import (
	"context"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Release gives a leased task back to the queue at once without using an
// attempt. Releasing a lease of the caller's tenant that is already gone is
// a no-op (KLIS-3 §5.3); a lease id no task of the tenant holds or last held
// (unknown, another tenant's, or replaced by a later lease of its task) is
// 404 not_found, the same answer for each.
func (e *Engine) Release(ctx context.Context, c WorkerCall, reason string) (*host.Task, error) {
	return e.giveBack(ctx, c, reason, 0)
}

// MaxSnooze is the longest a task may be snoozed (a year, as every duration
// of a task type).
const MaxSnooze = 366 * 24 * time.Hour

// Snooze gives a leased task back to the queue until delay from now without
// using an attempt (SQS ChangeMessageVisibility, River's JobSnooze): its
// attempt count and retry budget are untouched, the attempt is recorded as
// snoozed with the time it is offered again, and an accepted lease's
// obligation is discharged by a task.snoozed receipt saying until when. A
// task whose cancel was requested is canceled instead, as by Release. Its
// answers for leases that are gone are Release's.
func (e *Engine) Snooze(ctx context.Context, c WorkerCall, delay time.Duration, reason string) (*host.Task, error) {
	if delay < time.Second || delay > MaxSnooze {
		return nil, host.Errorf(host.CodeBadRequest, "snooze must be 1 s..%d s, got %s", int(MaxSnooze/time.Second), delay)
	}
	return e.giveBack(ctx, c, reason, delay)
}

// giveBack is Release (delay 0) and Snooze (delay > 0).
func (e *Engine) giveBack(ctx context.Context, c WorkerCall, reason string, delay time.Duration) (*host.Task, error) {
	defer e.leases.drop(c.LeaseID) // the lease ends here, or was not live
	now := e.now()
	until := now.Add(delay)
	rtype, outcome := host.ReceiptReleased, host.AttemptReleased
	if delay > 0 {
		rtype, outcome = host.ReceiptSnoozed, host.AttemptSnoozed
	}
	var released bool
	var rsReleased, rsExpired int
	out, err := e.changeLeased(ctx, c, now, leaseChange{
		reset: func() { released, rsReleased, rsExpired = false, 0, 0 },
		gone: func(tx store.Tx, t *host.Task, err error) error {
			if host.IsCode(err, host.CodeLeaseExpired) {
				if t != nil && t.State == host.StateLeased && t.LeaseID == c.LeaseID && c.WorkerID != "" && t.WorkerID != c.WorkerID {
					return err // someone else's live lease: not this caller's to release
				}
				if t == nil {
					// A lease no task of this tenant has (had): unknown, or
					// another tenant's. Both are 404 with the same words, so
					// the answer says nothing of other tenants' leases.
					cur, gerr := tx.GetTaskByLease(ctx, c.LeaseID)
					if host.IsCode(gerr, host.CodeNotFound) || (gerr == nil && cur.Tenant != c.Tenant) {
						return host.Errorf(host.CodeNotFound, "no lease %s", c.LeaseID)
					} else if gerr != nil {
						return gerr
					}
				}
				return nil // idempotent: already released or expired; say nothing of the task
			}
			return err
		},
		build: func(_ store.Tx, t *host.Task) (*leaseWrite, error) {
			ref, att := refOf(t), host.OpenAttempt(t)
			// The task's resource leases end before its receipt is appended.
			end := func(tx store.Tx) (err error) {
				rsReleased, rsExpired, err = e.endTaskResources(ctx, tx, ref)
				return err
			}
			if t.CancelRequested {
				parents, types := taskParents(t)
				r := &host.Receipt{Type: host.ReceiptCanceled, From: t.WorkerID, Parents: parents, Body: mustJSON(map[string]any{"reason": "cancel_requested", "lease_id": t.LeaseID})}
				fillTaskReceipt(r, t, t.LeaseID, now)
				clearLease(t)
				t.State, t.CompletedAt, t.UpdatedAt = host.StateCanceled, ptr(now), now
				return &leaseWrite{then: func(tx store.Tx, _ *host.Task) error {
					if err := end(tx); err != nil {
						return err
					}
					if err := endAttempt(ctx, tx, att, now, host.AttemptCanceled, r.ID); err != nil {
						return err
					}
					return appendReceipt(ctx, tx, r, types)
				}}, nil
			}
			var r *host.Receipt
			if t.AcceptReceipt != "" {
				body := map[string]any{"reason": reason, "lease_id": t.LeaseID}
				if delay > 0 {
					body["snooze_seconds"], body["available_at"] = int64(delay/time.Second), until
				}
				r = &host.Receipt{Type: rtype, From: t.WorkerID, Parents: []string{t.AcceptReceipt}, Body: mustJSON(body)}
				fillTaskReceipt(r, t, t.LeaseID, now)
			}
			acc := t.AcceptReceipt
			if delay > 0 {
				att.RetryAt = ptr(until)
			}
			clearLease(t)
			t.State, t.AvailableAt, t.UpdatedAt = host.StateQueued, until, now
			return &leaseWrite{then: func(tx store.Tx, _ *host.Task) error {
				if err := end(tx); err != nil {
					return err
				}
				released = true
				rid := ""
				if r != nil {
					rid = r.ID
				}
				if err := endAttempt(ctx, tx, att, now, outcome, rid); err != nil {
					return err
				}
				if r != nil {
					return appendReceipt(ctx, tx, r, map[string]host.ReceiptType{acc: host.ReceiptAccepted})
				}
				return nil
			}}, nil
		},
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, nil
	}
	e.emitTaskResources(out.Tenant, rsReleased, rsExpired)
	if released {
		if delay > 0 {
			e.emit(Event{Kind: EvSnoozed, Tenant: out.Tenant, TaskType: out.Type, WorkerID: c.WorkerID})
		} else {
			e.emit(Event{Kind: EvReleased, Tenant: out.Tenant, TaskType: out.Type, WorkerID: c.WorkerID})
			e.waiters.wake(out.Tenant, out.Type, 1)
		}
	}
	return out, nil
}
