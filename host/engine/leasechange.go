package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// WorkerCall identifies the lease a worker call is about.
type WorkerCall struct {
	Tenant   string
	WorkerID string // "" skips the holder check (admin tools)
	LeaseID  string
	// TaskID, when set, must match the lease's task (the spec's task_id + run_id).
	TaskID string
}

// liveLease loads the task the lease belongs to and checks that it is still
// held: leased, same lease, same worker, and strictly before its expiry by the
// server clock.
func liveLease(ctx context.Context, r store.Reader, c WorkerCall, now time.Time) (*host.Task, error) {
	if c.LeaseID == "" {
		return nil, host.Errorf(host.CodeBadRequest, "lease_id (run_id) is required")
	}
	t, err := r.GetTaskByLease(ctx, c.LeaseID)
	if err != nil {
		if host.IsCode(err, host.CodeNotFound) {
			return nil, host.Errorf(host.CodeLeaseExpired, "no live lease %s: it expired, was released or never existed", c.LeaseID)
		}
		return nil, err
	}
	return checkLive(t, c, now)
}

// leasedTask returns a copy of the task under c's live lease, to build a
// change outside the writer: the one this engine remembers leasing, or else
// one read now; nil when neither is live. The change must be written fenced
// on the copy's version (a remembered copy may be stale).
func (e *Engine) leasedTask(ctx context.Context, c WorkerCall, now time.Time) *host.Task {
	if t, ok := e.leases.get(c.LeaseID); ok && c.LeaseID != "" {
		if _, err := checkLive(t, c, now); err == nil {
			return t // leased here: no read needed
		}
	}
	var live *host.Task
	_ = e.view(ctx, func(r store.Reader) error {
		if t, err := liveLease(ctx, r, c, now); err == nil {
			live = t
		}
		return nil
	})
	return live
}

// checkLive reports whether t is the live lease c names at now.
func checkLive(t *host.Task, c WorkerCall, now time.Time) (*host.Task, error) {
	if t.Tenant != c.Tenant || (c.TaskID != "" && c.TaskID != t.ID) {
		return nil, host.Errorf(host.CodeLeaseExpired, "no live lease %s for this task", c.LeaseID)
	}
	if t.State != host.StateLeased || t.LeaseID != c.LeaseID {
		return t, host.Errorf(host.CodeLeaseExpired, "lease %s is no longer held: the task is %s", c.LeaseID, t.State)
	}
	if c.WorkerID != "" && t.WorkerID != c.WorkerID {
		return t, host.Errorf(host.CodeLeaseExpired, "lease %s is held by another worker", c.LeaseID)
	}
	if !now.Before(*t.LeaseExpiresAt) {
		return t, host.Errorf(host.CodeLeaseExpired, "lease %s expired at %s (server time %s)", c.LeaseID,
			t.LeaseExpiresAt.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	return t, nil
}

func liveFence(t *host.Task, now time.Time) store.Fence {
	return store.Fence{State: host.StateLeased, LeaseID: t.LeaseID, LiveAt: ptr(now)}
}

// fenced maps a fenced update to lease_expired: someone else moved the task.
func fenced(err error, leaseID string) error {
	if errors.Is(err, store.ErrFenced) {
		return host.Errorf(host.CodeLeaseExpired, "lease %s was lost to a concurrent change", leaseID)
	}
	return err
}

// ownOutcome reports whether prev is the outcome receipt the engine wrote for
// this very lease (and, when the call names them, this worker and task): only
// then may a repeated call be answered with it.
func ownOutcome(prev *host.Receipt, c WorkerCall, types ...host.ReceiptType) bool {
	if prev == nil || prev.LeaseID != c.LeaseID || (c.TaskID != "" && prev.TaskID != c.TaskID) {
		return false
	}
	if c.WorkerID != "" {
		var b struct {
			WorkerID string `json:"worker_id"`
		}
		_ = json.Unmarshal(prev.Body, &b)
		if b.WorkerID != c.WorkerID {
			return false
		}
	}
	for _, t := range types {
		if prev.Type == t {
			return true
		}
	}
	return false
}

func fillTaskReceipt(r *host.Receipt, t *host.Task, leaseID string, now time.Time) {
	if r.ID == "" {
		r.ID = host.NewID(host.PrefixReceipt)
	}
	r.Tenant, r.TaskID, r.LeaseID, r.CreatedAt = t.Tenant, t.ID, leaseID, now
	if r.To == "" {
		r.To = t.Recipient
	}
	if r.From == "" {
		r.From = GatePrincipal
	}
}
