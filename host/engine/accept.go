package engine

import (
	"context"
	"errors"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Accept turns an offer into the worker's obligation: it writes task.accepted.
// Accepting twice is idempotent.
func (e *Engine) Accept(ctx context.Context, c WorkerCall) (*host.Task, string, error) {
	now := e.now()
	var out *host.Task
	var rid string
	// Fast path as in Complete: build the change outside the writer and write
	// it fenced on the version read.
	var pre *host.Task
	var preTask host.Task
	var preReceipt *host.Receipt
	prebuild := func(t *host.Task) {
		if t.AcceptReceipt == "" {
			pre, preTask = t, *t
			preReceipt = acceptTask(&preTask, now)
			if preReceipt.Validate() != nil {
				pre = nil // the writer builds it again and reports why
			}
		}
	}
	if t := e.leasedTask(ctx, c, now); t != nil {
		prebuild(t)
	}
	err := e.update(ctx, func(tx store.Tx) error {
		if pre != nil {
			t := preTask
			fence := liveFence(pre, now)
			fence.Version = pre.Version
			err := tx.UpdateTask(ctx, &t, fence)
			if err == nil {
				out, rid = &t, preReceipt.ID
				return appendValid(ctx, tx, preReceipt, map[string]host.ReceiptType{t.AssignReceipt: host.ReceiptAssigned})
			}
			if !errors.Is(err, store.ErrFenced) {
				return err
			}
		}
		t, err := liveLease(ctx, tx, c, now)
		if err != nil {
			return err
		}
		if t.AcceptReceipt != "" {
			out, rid = t, t.AcceptReceipt
			return nil
		}
		fence := liveFence(t, now)
		r := acceptTask(t, now)
		if err := tx.UpdateTask(ctx, t, fence); err != nil {
			return fenced(err, c.LeaseID)
		}
		out, rid = t, r.ID
		return appendReceipt(ctx, tx, r, map[string]host.ReceiptType{t.AssignReceipt: host.ReceiptAssigned})
	})
	if err != nil {
		return nil, "", err
	}
	e.leases.put(out, now)
	e.emit(Event{Kind: EvAccepted, Tenant: out.Tenant, TaskType: out.Type, WorkerID: out.WorkerID})
	return out, rid, nil
}

// acceptTask marks a live lease accepted and returns its task.accepted receipt.
func acceptTask(t *host.Task, now time.Time) *host.Receipt {
	r := &host.Receipt{
		ID: host.NewID(host.PrefixReceipt), Tenant: t.Tenant, Type: host.ReceiptAccepted,
		From: t.WorkerID, To: t.Recipient, TaskID: t.ID, LeaseID: t.LeaseID,
		Parents:   []string{t.AssignReceipt},
		Body:      mustJSON(map[string]any{"lease_id": t.LeaseID, "attempt": t.Attempts + 1, "lease_expires_at": t.LeaseExpiresAt}),
		CreatedAt: now,
	}
	t.AcceptedAt, t.AcceptReceipt, t.UpdatedAt = ptr(now), r.ID, now
	return r
}
