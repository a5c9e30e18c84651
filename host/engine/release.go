package engine

import (
	"context"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Release gives a leased task back to the queue at once without using an
// attempt. Releasing the caller's own lease that is already gone is a no-op
// (KLIS-3 §5.3). A lease the caller cannot hold is 404 not_found, the same
// answer, in the same words, as a lease id that never existed: another
// tenant's, another worker's (live or ended), one named with another task,
// or one a later lease of its task replaced.
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

// noLease answers a release or snooze naming a lease the caller cannot
// hold, in the words of one that never existed (see noLiveLease).
func noLease(c WorkerCall) error {
	return host.Errorf(host.CodeNotFound, "no lease %s", c.LeaseID)
}

// heldLease reports whether the lease c names, which liveLease found not
// live (t is the task it found, nil for none of the caller's tenant and
// task), is the caller's own: held by c's worker — the task's holder while
// it is leased or after a success, else the worker its ended attempt
// records — or, for an admin tool's call (no worker), any lease of the
// tenant.
func heldLease(ctx context.Context, r store.Reader, c WorkerCall, t *host.Task) (bool, error) {
	if t == nil || t.LeaseID != c.LeaseID {
		return false, nil
	}
	if c.WorkerID == "" {
		return true, nil
	}
	if t.WorkerID != "" {
		return t.WorkerID == c.WorkerID, nil
	}
	a, err := r.GetAttemptByLease(ctx, t.Tenant, t.ID, c.LeaseID)
	if host.IsCode(err, host.CodeNotFound) {
		return false, nil // no record of its holder: tell nothing
	}
	if err != nil {
		return false, err
	}
	return a.WorkerID == c.WorkerID, nil
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
			if !host.IsCode(err, host.CodeLeaseExpired) {
				return err
			}
			held, herr := heldLease(ctx, tx, c, t)
			if herr != nil {
				return herr
			}
			if !held {
				return noLease(c)
			}
			return nil // idempotent: the caller's own lease, already ended; say nothing of the task
		},
		build: func(tx store.Tx, t *host.Task) (*leaseWrite, error) {
			ref, att := refOf(t), host.OpenAttempt(t)
			from := t.WorkerID
			if c.By != "" {
				from = c.By // an operator's give-back is its own, not the worker's
			}
			// The task's resource leases end before its receipt is appended.
			end := func(tx store.Tx) (err error) {
				rsReleased, rsExpired, err = e.endTaskResources(ctx, tx, ref)
				return err
			}
			if t.CancelRequested {
				parents, types := taskParents(t)
				body := map[string]any{"lease_id": t.LeaseID}
				parents, err := endCanceled(ctx, tx, t, body, parents)
				if err != nil {
					return nil, err
				}
				r := &host.Receipt{Type: host.ReceiptCanceled, From: from, Parents: parents, Body: mustJSON(body)}
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
				r = &host.Receipt{Type: rtype, From: from, Parents: []string{t.AcceptReceipt}, Body: mustJSON(body)}
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
