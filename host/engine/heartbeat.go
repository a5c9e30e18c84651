package engine

import (
	"context"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// HeartbeatRequest extends a lease and reports progress.
type HeartbeatRequest struct {
	WorkerCall
	ProgressPercent *float64
	ProgressMessage string
	// ExtendSeconds is the new lease length from now; 0 means the lease's own
	// TTL, the length it was granted with (KLIS-3 §3.2). Either is capped by
	// Config.MaxLeaseSeconds.
	ExtendSeconds int
	// Milestone marks the progress report as worth the recipient's
	// attention: it becomes an inbox item (plain progress never does).
	Milestone bool
}

// HeartbeatResult tells the worker its new expiry and whether to stop.
type HeartbeatResult struct {
	Status          string    `json:"status"`
	LeaseExpiresAt  time.Time `json:"lease_expires_at"`
	CancelRequested bool      `json:"cancel_requested"`
	// ServerTime is the gate's clock when it extended the lease.
	ServerTime time.Time `json:"server_time"`
}

// Heartbeat extends a live lease to now + extension (capped) and records
// progress. A heartbeat at or after lease_expires_at is refused (lease_expired).
func (e *Engine) Heartbeat(ctx context.Context, req HeartbeatRequest) (*HeartbeatResult, error) {
	if req.ProgressPercent != nil && (*req.ProgressPercent < 0 || *req.ProgressPercent > 100 || *req.ProgressPercent != *req.ProgressPercent) {
		return nil, host.Errorf(host.CodeBadRequest, "progress_percent must be 0..100")
	}
	if len(req.ProgressMessage) > 4096 {
		return nil, host.Errorf(host.CodeTooLarge, "progress_message is longer than 4096 bytes")
	}
	if req.ExtendSeconds < 0 {
		return nil, host.Errorf(host.CodeBadRequest, "extend_lease_seconds must not be negative")
	}
	now := e.now()
	var res HeartbeatResult
	written, err := e.changeLeased(ctx, req.WorkerCall, now, leaseChange{
		build: func(tx store.Tx, t *host.Task) (*leaseWrite, error) {
			if err := e.heartbeatTask(ctx, tx, t, req, now); err != nil {
				return nil, err
			}
			return &leaseWrite{then: func(tx store.Tx, t *host.Task) error {
				if err := e.extendTaskResources(ctx, tx, t); err != nil {
					return err
				}
				res = HeartbeatResult{Status: "ok", LeaseExpiresAt: *t.LeaseExpiresAt, CancelRequested: t.CancelRequested, ServerTime: now}
				return nil
			}}, nil
		},
	})
	if err != nil {
		return nil, err
	}
	e.leases.put(written, now)
	e.sawWorker(ctx, req.Tenant, req.WorkerID, nil)
	return &res, nil
}

// heartbeatTask extends the live lease of t to now + the extension (capped)
// and records the progress the heartbeat reports, in its transaction.
func (e *Engine) heartbeatTask(ctx context.Context, tx store.Tx, t *host.Task, req HeartbeatRequest, now time.Time) error {
	ext := req.ExtendSeconds
	if ext == 0 {
		ext = t.LeaseSeconds
	}
	if ext == 0 {
		// A lease granted before its TTL was recorded: the task type's length.
		ext = int(t.LeaseExpiresAt.Sub(*t.LeasedAt).Seconds())
		if ct, err := e.types.getIn(ctx, tx, t.Tenant, t.Type); err == nil {
			ext = ct.tt.LeaseSeconds
		}
	}
	if ext > e.cfg.MaxLeaseSeconds {
		ext = e.cfg.MaxLeaseSeconds
	}
	newExp := now.Add(time.Duration(ext) * time.Second)
	if newExp.After(*t.LeaseExpiresAt) {
		t.LeaseExpiresAt = &newExp
	}
	if req.ProgressPercent != nil || req.ProgressMessage != "" {
		if req.ProgressPercent != nil {
			t.ProgressPercent = ptr(*req.ProgressPercent)
		}
		if req.ProgressMessage != "" {
			t.ProgressMessage = req.ProgressMessage
		}
		if err := tx.InsertProgress(ctx, store.Progress{Tenant: t.Tenant, TaskID: t.ID, LeaseID: t.LeaseID,
			Percent: req.ProgressPercent, Message: req.ProgressMessage, At: now}); err != nil {
			return err
		}
	}
	if req.Milestone {
		if err := milestone(ctx, tx, t, req.ProgressMessage, now); err != nil {
			return err
		}
	}
	t.UpdatedAt = now
	return nil
}
