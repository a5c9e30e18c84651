package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Cancel cancels a task: a queued or waiting task at once (task.canceled), a leased one by
// flagging it so the worker learns from its next heartbeat, and recording
// who asked and why in a task.cancel_requested receipt to the worker; the
// task.canceled that ends the lease names that receipt and repeats both.
// Canceling a task that is already finished is a conflict; canceling twice
// is a no-op. A canceled task's error_message is the cancel's reason (an
// earlier attempt's error stays in its attempts and receipts).
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
				Body: mustJSON(map[string]any{"reason": reason, "canceled_by": actor.Principal}), DedupeKey: cancelDedupe(t.ID)}
			fillTaskReceipt(r, t, "", now)
			t.State, t.CompletedAt, t.UpdatedAt, t.LastError = host.StateCanceled, ptr(now), now, reason
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
			return appendReceipt(ctx, tx, cancelRequest(t, actor.Principal, reason, nil, now), nil)
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

// cancelDedupe is the dedupe key of the receipt that records where a
// task's cancel was asked for: the task.cancel_requested of a leased task,
// the task.canceled of one canceled at once (by a principal, a workflow's
// cancel or a dependency's end). Either ends the task or flags its lease,
// whose every end is terminal (canceled, or succeeded when its worker
// completes anyway), so a task has one such receipt at most and the key,
// which embeds its id, one issuer (store.LedgerReader.GetReceiptByDedupe
// with no issuer). A principal's own keys live apart (userDedupePrefix).
func cancelDedupe(taskID string) string { return "cancel:" + taskID }

// cancelRequest is the task.cancel_requested receipt of principal by
// asking, for reason, to cancel leased task t: from by to the worker
// holding the lease, citing the lease's acceptance (its assignment when
// not accepted), with extra in its body.
func cancelRequest(t *host.Task, by, reason string, extra map[string]any, now time.Time) *host.Receipt {
	body := map[string]any{"reason": reason, "requested_by": by, "lease_id": t.LeaseID, "worker_id": t.WorkerID}
	for k, v := range extra {
		body[k] = v
	}
	parents, _ := acceptParents(t)
	r := &host.Receipt{Type: host.ReceiptCancelRequested, From: by, To: t.WorkerID, Parents: parents,
		Body: mustJSON(body), DedupeKey: cancelDedupe(t.ID)}
	fillTaskReceipt(r, t, t.LeaseID, now)
	return r
}

// cancelAsk is what the ledger says of a task's cancel: the receipt that
// recorded it where it was asked for, who asked and why.
type cancelAsk struct {
	Receipt *host.Receipt
	By      string
	Reason  string
}

// askOf reads the receipt that recorded the cancel of task t (cancelDedupe),
// or nil when there is none: t was never canceled, or canceled (or its
// lease flagged) by a gate that did not record it so.
func askOf(ctx context.Context, r store.LedgerReader, t *host.Task) (*cancelAsk, error) {
	rc, err := r.GetReceiptByDedupe(ctx, t.Tenant, "", cancelDedupe(t.ID))
	if err != nil || rc == nil || rc.TaskID != t.ID {
		return nil, err
	}
	var b struct {
		Reason      string `json:"reason"`
		RequestedBy string `json:"requested_by"`
		CanceledBy  string `json:"canceled_by"`
	}
	_ = json.Unmarshal(rc.Body, &b)
	a := &cancelAsk{Receipt: rc, By: b.RequestedBy, Reason: b.Reason}
	if a.By == "" {
		a.By = b.CanceledBy
	}
	if a.By == "" {
		a.By = rc.From
	}
	return a, nil
}

// endCanceled prepares the end of the flagged lease of task t as a
// cancel: it reads the task.cancel_requested receipt that flagged it and
// adds to body (the task.canceled receipt's) who asked (canceled_by), why
// (reason) and that receipt (cancel_request), which it appends to parents
// too; the task's error_message becomes that reason. A lease flagged by a
// gate that wrote no such receipt keeps the old body (reason
// cancel_requested) and an empty error_message: who asked is not known,
// and an earlier attempt's error is not the outcome.
func endCanceled(ctx context.Context, r store.LedgerReader, t *host.Task, body map[string]any, parents []string) ([]string, error) {
	a, err := askOf(ctx, r, t)
	if err != nil {
		return nil, err
	}
	if a == nil || a.Receipt.Type != host.ReceiptCancelRequested || a.Receipt.LeaseID != t.LeaseID {
		body["reason"] = "cancel_requested"
		t.LastError = ""
		return parents, nil
	}
	body["reason"], body["canceled_by"], body["cancel_request"] = a.Reason, a.By, a.Receipt.ID
	t.LastError = a.Reason
	return append(parents, a.Receipt.ID), nil
}

// fillCancel sets, on a task read alone, who asked for its cancel and
// why (Task.CancelRequestedBy, Task.CancelReason) while the cancel is
// requested or once the task is canceled.
func fillCancel(ctx context.Context, r store.LedgerReader, t *host.Task) error {
	if !t.CancelRequested && host.FinishedAs(t) != host.StateCanceled {
		return nil
	}
	a, err := askOf(ctx, r, t)
	if err != nil || a == nil {
		return err
	}
	t.CancelRequestedBy, t.CancelReason = a.By, a.Reason
	return nil
}
