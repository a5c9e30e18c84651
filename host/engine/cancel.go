package engine

import (
	"context"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Cancel cancels a task: a queued or waiting task at once (task.canceled), a leased one by
// flagging it so the worker learns from its next heartbeat. Canceling a task
// that is already finished is a conflict; canceling twice is a no-op.
func (e *Engine) Cancel(ctx context.Context, actor Actor, taskID, reason string) (*host.Task, error) {
	t, _, err := e.CancelChanged(ctx, actor, taskID, reason)
	return t, err
}

// CancelChanged is Cancel that also reports whether this call changed the
// task: false when it was already canceled, or its cancellation already
// requested, before the call (the no-op of canceling twice).
func (e *Engine) CancelChanged(ctx context.Context, actor Actor, taskID, reason string) (*host.Task, bool, error) {
	if host.LongerThan(reason, 1000) {
		return nil, false, host.Errorf(host.CodeBadRequest, "reason is longer than 1000 characters")
	}
	now := e.now()
	var out *host.Task
	var canceled, changed bool
	err := e.update(ctx, func(tx store.Tx) error {
		canceled, changed = false, false
		t, err := tx.GetTask(ctx, actor.Tenant, taskID)
		if err != nil {
			return err
		}
		if !visible(actor, t) {
			return host.Errorf(host.CodeNotFound, "no task %s", taskID)
		}
		switch t.State {
		case host.StateCanceled:
			out = t
			return nil
		case host.StateQueued, host.StateWaiting:
			fence := store.Fence{State: t.State}
			parents, types := taskParents(t)
			r := &host.Receipt{Type: host.ReceiptCanceled, From: actor.Principal, Parents: parents,
				Body: mustJSON(map[string]any{"reason": reason, "canceled_by": actor.Principal})}
			fillTaskReceipt(r, t, "", now)
			t.State, t.CompletedAt, t.UpdatedAt = host.StateCanceled, ptr(now), now
			if err := tx.UpdateTask(ctx, t, fence); err != nil {
				return host.Errorf(host.CodeConflict, "task %s changed while canceling; try again", taskID)
			}
			out, canceled, changed = t, true, true
			return appendReceipt(ctx, tx, r, types)
		case host.StateLeased:
			if t.CancelRequested {
				out = t
				return nil
			}
			fence := store.Fence{State: host.StateLeased, LeaseID: t.LeaseID}
			t.CancelRequested, t.UpdatedAt = true, now
			if err := tx.UpdateTask(ctx, t, fence); err != nil {
				return host.Errorf(host.CodeConflict, "task %s changed while canceling; try again", taskID)
			}
			out, changed = t, true
			return nil
		default:
			return host.Errorf(host.CodeConflict, "task %s is %s and can no longer be canceled", taskID, t.State)
		}
	})
	if err != nil {
		return nil, false, err
	}
	if canceled {
		e.emit(Event{Kind: EvCanceled, Tenant: out.Tenant, TaskType: out.Type})
	}
	return out, changed, nil
}
