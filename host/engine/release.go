package engine

import (
	"context"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Release gives a leased task back to the queue at once without using an
// attempt. Releasing a lease of the caller's tenant that is already gone is
// a no-op (KLIS-3 §5.3); a lease id no task of the tenant holds or last held
// (unknown, another tenant's, or replaced by a later lease of its task) is
// 404 not_found, the same answer for each.
func (e *Engine) Release(ctx context.Context, c WorkerCall, reason string) (*host.Task, error) {
	defer e.leases.drop(c.LeaseID) // the lease ends here, or was not live
	now := e.now()
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
				r = &host.Receipt{Type: host.ReceiptReleased, From: t.WorkerID, Parents: []string{t.AcceptReceipt},
					Body: mustJSON(map[string]any{"reason": reason, "lease_id": t.LeaseID})}
				fillTaskReceipt(r, t, t.LeaseID, now)
			}
			acc := t.AcceptReceipt
			clearLease(t)
			t.State, t.AvailableAt, t.UpdatedAt = host.StateQueued, now, now
			return &leaseWrite{then: func(tx store.Tx, _ *host.Task) error {
				if err := end(tx); err != nil {
					return err
				}
				released = true
				rid := ""
				if r != nil {
					rid = r.ID
				}
				if err := endAttempt(ctx, tx, att, now, host.AttemptReleased, rid); err != nil {
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
		e.emit(Event{Kind: EvReleased, Tenant: out.Tenant, TaskType: out.Type, WorkerID: c.WorkerID})
		e.waiters.wake(out.Tenant, out.Type, 1)
	}
	return out, nil
}
