package engine

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// FailRequest reports a failed attempt.
type FailRequest struct {
	WorkerCall
	Error     string
	Retryable bool
	Metadata  json.RawMessage
}

// FailResult is the outcome of Fail, in the spec's shape.
type FailResult struct {
	Task             *host.Task `json:"-"`
	Status           string     `json:"status"` // "failed" (will retry), "dead_letter" or "canceled"
	WillRetry        bool       `json:"will_retry"`
	RetryScheduledAt *time.Time `json:"retry_scheduled_at,omitempty"`
	ReceiptID        string     `json:"receipt_id"`
	Duplicate        bool       `json:"duplicate"`
}

func failDedupe(leaseID string) string { return "fail:" + leaseID }

// Fail records a failed attempt: it uses up one attempt and asks the task type's
// retry policy whether to retry after a delay or dead-letter the task. A
// failure on a task whose cancel was requested cancels it. Failing the same lease
// again returns the first outcome.
func (e *Engine) Fail(ctx context.Context, req FailRequest) (*FailResult, error) {
	defer e.leases.drop(req.LeaseID) // the lease ends here, or was not live
	if len(req.Error) > 8192 {
		req.Error = req.Error[:8192]
	}
	if len(req.Metadata) > 0 {
		c, err := compactJSON(req.Metadata)
		if err != nil || (string(c) != "null" && c[0] != '{') {
			return nil, host.Errorf(host.CodeBadRequest, "metadata must be a JSON object")
		}
		req.Metadata = c
	}
	now := e.now()
	// The policy runs outside the transaction (it may be a plugin): read first,
	// decide, then write fenced on the lease we read.
	var t *host.Task
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		t, err = liveLease(ctx, r, req.WorkerCall, now)
		return err
	})
	if err != nil {
		if host.IsCode(err, host.CodeLeaseExpired) {
			if dup := e.failDuplicate(ctx, req); dup != nil {
				return dup, nil
			}
		}
		return nil, err
	}
	decision, fault, err := e.decide(ctx, t, host.FailureInput{
		TaskID: t.ID, TaskType: t.Type, Kind: host.FailureError, Retryable: req.Retryable,
		Attempts: t.Attempts + 1, MaxRetries: t.MaxRetries, LeaseExpiries: t.LeaseExpiries, Error: req.Error,
	})
	if err != nil {
		// The task type's policy is still loading: nothing is decided or
		// written, the lease stays live, and the worker retries the fail.
		return nil, err
	}
	out := &FailResult{}
	var leasedAt time.Time
	var dead bool
	var rsReleased, rsExpired int
	_, err = e.changeLeased(ctx, req.WorkerCall, now, leaseChange{
		// The store may run this again (a batch rerun): nothing of a run
		// that did not commit may reach the answer or the events.
		reset: func() { *out, dead, rsReleased, rsExpired = FailResult{}, false, 0, 0 },
		build: func(tx store.Tx, t *host.Task) (*leaseWrite, error) {
			leasedAt = *t.LeasedAt
			ref := refOf(t)
			att := host.OpenAttempt(t)
			att.Error, att.ErrorMetadata, att.Retryable = req.Error, req.Metadata, req.Retryable
			outcome := host.AttemptDead
			t.Attempts++
			t.LastError = req.Error
			t.UpdatedAt = now
			body := map[string]any{"lease_id": t.LeaseID, "worker_id": t.WorkerID, "attempt": t.Attempts,
				"error_message": req.Error, "retryable": req.Retryable}
			if len(req.Metadata) > 0 {
				body["metadata"] = req.Metadata
			}
			var rs []*host.Receipt
			var rtypes map[string]host.ReceiptType
			switch {
			case t.CancelRequested:
				// The worker's error is its attempt's (kept in the
				// attempt and the receipt); the task's is the cancel's
				// reason (endCanceled).
				parents, types := taskParents(t)
				rtypes = types
				parents, err := endCanceled(ctx, tx, t, body, parents)
				if err != nil {
					return nil, err
				}
				rs = append(rs, &host.Receipt{Type: host.ReceiptCanceled, From: t.WorkerID, Parents: parents, Body: mustJSON(body)})
				clearLease(t)
				t.State, t.CompletedAt = host.StateCanceled, ptr(now)
				out.Status = "canceled"
				outcome = host.AttemptCanceled
			case decision.Action == host.ActionRetry:
				parents, types := acceptParents(t)
				rtypes = types
				at := now.Add(time.Duration(decision.DelaySeconds * float64(time.Second)))
				body["retry_scheduled_at"] = at
				body["delay_seconds"] = decision.DelaySeconds
				rs = append(rs, &host.Receipt{Type: host.ReceiptRetryScheduled, From: GatePrincipal, Parents: parents, Body: mustJSON(body)})
				clearLease(t)
				t.State, t.AvailableAt = host.StateQueued, at
				out.Status, out.WillRetry, out.RetryScheduledAt = "failed", true, &at
				outcome, att.RetryAt = host.AttemptFailed, &at
			default:
				parents, types := taskParents(t)
				rtypes = types
				reason := decision.Reason
				if reason == "" {
					reason = host.ReasonPolicy
				}
				body["dead_reason"] = reason
				failed := &host.Receipt{ID: host.NewID(host.PrefixReceipt), Type: host.ReceiptFailed, From: t.WorkerID, Parents: parents, Body: mustJSON(body)}
				rs = append(rs, failed)
				if reason == host.ReasonMaxRetriesExceeded || decision.Action == host.ActionEscalate {
					to := t.Recipient
					if decision.EscalateTo != "" {
						to = decision.EscalateTo
					}
					rs = append(rs, &host.Receipt{Type: host.ReceiptEscalated, From: GatePrincipal, To: to, Parents: []string{failed.ID},
						Body: mustJSON(map[string]any{"escalation_class": "policy", "escalation_reason": reason, "attempts": t.Attempts, "error_message": req.Error})})
				}
				clearLease(t)
				t.State, t.DeadReason, t.CompletedAt = host.StateDeadLetter, reason, ptr(now)
				out.Status = "dead_letter"
				dead = true
				att.DeadReason = reason
			}
			if fault != nil {
				rs = append(rs, policyFaultReceipt(t, fault))
			}
			return &leaseWrite{then: func(tx store.Tx, t *host.Task) (err error) {
				if rsReleased, rsExpired, err = e.endTaskResources(ctx, tx, ref); err != nil {
					return err
				}
				for i, r := range rs {
					fillTaskReceipt(r, t, req.LeaseID, now)
					if i == 0 {
						r.DedupeKey = failDedupe(req.LeaseID)
					}
					if err := appendReceipt(ctx, tx, r, rtypes); err != nil {
						return err
					}
				}
				if err := endAttempt(ctx, tx, att, now, outcome, rs[0].ID); err != nil {
					return err
				}
				out.Task, out.ReceiptID = t, rs[0].ID
				return nil
			}}, nil
		},
	})
	if err != nil {
		if host.IsCode(err, host.CodeLeaseExpired) {
			if dup := e.failDuplicate(ctx, req); dup != nil {
				return dup, nil
			}
		}
		return nil, err
	}
	e.emitTaskResources(out.Task.Tenant, rsReleased, rsExpired)
	ev := Event{Tenant: out.Task.Tenant, TaskType: out.Task.Type, WorkerID: req.WorkerID, Duration: now.Sub(leasedAt), Detail: req.Error}
	ev.Kind = EvFailed
	e.emit(ev)
	switch {
	case dead:
		ev.Kind = EvDeadLettered
		e.emit(ev)
	case out.WillRetry:
		ev.Kind = EvRetried
		e.emit(ev)
		if !out.RetryScheduledAt.After(now) {
			e.waiters.wake(out.Task.Tenant, out.Task.Type, 1)
		}
	case out.Status == "canceled":
		ev.Kind = EvCanceled
		e.emit(ev)
	}
	if fault != nil {
		e.emit(Event{Kind: EvPolicyFault, Tenant: out.Task.Tenant, TaskType: out.Task.Type, Detail: fault.Error()})
	}
	return out, nil
}

// failDuplicate answers a repeated fail call for a lease that already failed.
func (e *Engine) failDuplicate(ctx context.Context, req FailRequest) *FailResult {
	var out *FailResult
	_ = e.view(ctx, func(r store.Reader) error {
		prev, err := r.GetReceiptByDedupe(ctx, req.Tenant, "", failDedupe(req.LeaseID))
		if err != nil || !ownOutcome(prev, req.WorkerCall, host.ReceiptRetryScheduled, host.ReceiptFailed, host.ReceiptCanceled) {
			return err
		}
		t, err := r.GetTask(ctx, prev.Tenant, prev.TaskID)
		if err != nil {
			return err
		}
		out = &FailResult{Task: t, ReceiptID: prev.ID, Duplicate: true}
		switch prev.Type {
		case host.ReceiptRetryScheduled:
			out.Status, out.WillRetry = "failed", true
			var b struct {
				At *time.Time `json:"retry_scheduled_at"`
			}
			_ = json.Unmarshal(prev.Body, &b)
			out.RetryScheduledAt = b.At
		case host.ReceiptCanceled:
			out.Status = "canceled"
		default:
			out.Status = "dead_letter"
		}
		return nil
	})
	return out
}

func policyFaultReceipt(t *host.Task, fault error) *host.Receipt {
	return &host.Receipt{Type: host.ReceiptEscalated, From: GatePrincipal, To: t.Recipient, Parents: []string{t.AssignReceipt},
		Body: mustJSON(map[string]any{"escalation_class": "system", "escalation_reason": host.ReasonPolicyFault,
			"detail": "the task type's retry policy failed; the built-in default decided instead: " + fault.Error()})}
}

// decide asks the task type's policy; on a policy fault it falls back to the
// default policy and returns the fault so an escalation receipt is written.
// A policy that is still loading (host.CodePluginNotReady, after the
// plugins' own bounded wait) is no fault: decide returns it as err and
// decides nothing, since no other policy may decide for the task type's.
func (e *Engine) decide(ctx context.Context, t *host.Task, in host.FailureInput) (_ host.Decision, fault, err error) {
	pol := e.policy
	if e.cfg.Plugins != nil {
		if ct, err := e.types.get(ctx, t.Tenant, t.Type); err == nil && ct.tt.Policy != nil {
			in.Config = ct.tt.Policy.Config
			p, err := e.cfg.Plugins.Policy(ct.tt)
			switch {
			case host.IsCode(err, host.CodePluginNotReady):
				return host.Decision{}, nil, err
			case err != nil:
				fault = err
			case p != nil:
				pol = p
			}
		}
	}
	if fault == nil {
		d, err := pol.Decide(ctx, in)
		if pol != e.policy && host.IsCode(err, host.CodePluginNotReady) {
			return host.Decision{}, nil, err
		}
		if err == nil {
			err = checkDecision(d)
		}
		if err == nil {
			return d, nil, nil
		}
		if pol == e.policy {
			// The built-in policy itself failed: dead-letter, never lose the task.
			return host.Decision{Action: host.ActionDeadLetter, Reason: host.ReasonPolicyFault}, err, nil
		}
		fault = err
	}
	e.log.Warn("retry policy failed; using the built-in default", "task_id", t.ID, "task_type", t.Type, "err", fault)
	in.Config = nil
	d, err := e.policy.Decide(ctx, in)
	if err != nil || checkDecision(d) != nil {
		d = host.Decision{Action: host.ActionDeadLetter, Reason: host.ReasonPolicyFault}
	}
	return d, fault, nil
}

// MaxReasonLen bounds a policy's reason, which becomes a dead letter's reason.
const MaxReasonLen = 200

// checkDecision refuses a decision the engine must not act on: an unknown
// action, a delay outside 0 s..1 year, an escalate_to that is not a valid
// principal (it becomes a receipt's "to", read by agents and ledger tools)
// or names the gate itself (GatePrincipal, any case: no one reads it),
// or a reason with control characters. The error names what was wrong,
// quoted, so no raw control character reaches a log or a receipt.
func checkDecision(d host.Decision) error {
	switch d.Action {
	case host.ActionRetry:
		if !(d.DelaySeconds >= 0 && d.DelaySeconds <= 366*24*3600) {
			return host.Errorf(host.CodeInternal, "policy returned retry with delay_seconds %v, outside 0..31622400", d.DelaySeconds)
		}
	case host.ActionDeadLetter, host.ActionEscalate:
	default:
		return host.Errorf(host.CodeInternal, "policy returned an unknown action %.64q", string(d.Action))
	}
	if d.EscalateTo != "" && !host.ValidPrincipal(d.EscalateTo) {
		return host.Errorf(host.CodeInternal, "policy returned escalate_to %.80q, which is not a valid principal (it must match %s)", d.EscalateTo, host.PrincipalPattern)
	}
	if strings.EqualFold(d.EscalateTo, GatePrincipal) {
		return host.Errorf(host.CodeInternal, "policy returned escalate_to %.80q, which is not a valid principal: it names the gate itself (%s), which reads no escalations", d.EscalateTo, GatePrincipal)
	}
	if len(d.Reason) > MaxReasonLen || !printable(d.Reason) {
		return host.Errorf(host.CodeInternal, "policy returned a reason %.80q with control characters or over %d bytes", d.Reason, MaxReasonLen)
	}
	return nil
}
