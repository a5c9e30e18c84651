package engine

import (
	"context"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// Accept turns an offer into the worker's obligation: it writes task.accepted.
// Accepting twice is idempotent.
func (e *Engine) Accept(ctx context.Context, c WorkerCall) (*host.Task, string, error) {
	now := e.now()
	out, err := e.changeLeased(ctx, c, now, leaseChange{
		prebuild: func(t *host.Task) *leaseWrite {
			if t.AcceptReceipt != "" {
				return nil // accepted already: the task is the answer
			}
			r := acceptTask(t, now)
			return &leaseWrite{receipts: []*host.Receipt{r}, parents: map[string]host.ReceiptType{t.AssignReceipt: host.ReceiptAssigned}}
		},
	})
	if err != nil {
		return nil, "", err
	}
	e.leases.put(out, now)
	e.emit(Event{Kind: EvAccepted, Tenant: out.Tenant, TaskType: out.Type, WorkerID: out.WorkerID})
	return out, out.AcceptReceipt, nil
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
