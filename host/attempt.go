package host

import (
	"encoding/json"
	"time"
)

// AttemptOutcome is how one lease of a task (an attempt) ended.
type AttemptOutcome string

// Attempt outcomes. AttemptRunning is the current lease of a leased task;
// it is never stored. AttemptSucceeded is derived from the succeeded task
// and its receipt (SucceededAttempt); the others are written when the lease
// ends.
const (
	AttemptRunning   AttemptOutcome = "running"
	AttemptSucceeded AttemptOutcome = "succeeded"
	AttemptFailed    AttemptOutcome = "failed"      // the worker failed it and a retry is scheduled
	AttemptDead      AttemptOutcome = "dead_letter" // it failed, or expired once too often, and the task is a dead letter
	AttemptReleased  AttemptOutcome = "released"    // the worker gave the task back
	AttemptSnoozed   AttemptOutcome = "snoozed"     // the worker gave the task back until RetryAt, no attempt used
	AttemptExpired   AttemptOutcome = "expired"     // the lease ran out; the task went back to the queue
	AttemptCanceled  AttemptOutcome = "canceled"    // the lease ended on a cancel that was requested
)

// Attempt is one lease of a task from its grant to its end: who held it,
// when it was granted and accepted, how it ended and with which error. A
// task's attempts are its history; they are kept with the task for as long
// as the task row is.
type Attempt struct {
	Tenant string `json:"-"`
	TaskID string `json:"task_id"`
	// Attempt is the attempt number the worker was told in its offer:
	// failures before it plus one. A lease that expired or was released
	// uses none, so two leases may carry the same number.
	Attempt int `json:"attempt"`
	// Lease is the lease's number among the task's leases, from 1.
	Lease    int    `json:"lease"`
	LeaseID  string `json:"lease_id"`
	WorkerID string `json:"worker_id"`

	LeasedAt   time.Time  `json:"leased_at"`
	AcceptedAt *time.Time `json:"accepted_at,omitempty"`
	// LeaseExpiresAt is when the lease ran (or runs) out, after every
	// heartbeat that extended it.
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	EndedAt        *time.Time `json:"ended_at,omitempty"`
	// LastHeardAt is, for a running attempt, when its lease was last
	// written: its grant, accept or latest heartbeat (or a cancel request).
	LastHeardAt *time.Time `json:"last_heard_at,omitempty"`
	// DurationMS is how long the lease was held: from its grant to its end,
	// or to now while it runs.
	DurationMS int64          `json:"duration_ms"`
	Outcome    AttemptOutcome `json:"outcome"`

	Error         string          `json:"error_message,omitempty"`
	ErrorMetadata json.RawMessage `json:"error_metadata,omitempty"`
	Retryable     bool            `json:"retryable,omitempty"`
	// RetryAt is when the task is offered again after a failed attempt
	// or a snooze.
	RetryAt *time.Time `json:"retry_scheduled_at,omitempty"`
	// DeadReason is why the task became a dead letter with this attempt.
	DeadReason string `json:"dead_reason,omitempty"`
	// ReceiptID is the receipt that recorded the end (none for an offer
	// that expired or was released before it was accepted).
	ReceiptID string `json:"receipt_id,omitempty"`
}

// CurrentAttempt returns the attempt a leased task's lease is, as of now,
// or nil when the task holds no live lease.
func CurrentAttempt(t *Task, now time.Time) *Attempt {
	if t == nil || t.State != StateLeased || t.LeasedAt == nil {
		return nil
	}
	a := OpenAttempt(t)
	a.Outcome = AttemptRunning
	heard := t.UpdatedAt
	a.LastHeardAt = &heard
	a.DurationMS = max(now.Sub(a.LeasedAt), 0).Milliseconds()
	return a
}

// OpenAttempt returns the attempt of t's lease as its task row records it,
// before the lease fields are cleared; the caller sets how it ended.
func OpenAttempt(t *Task) *Attempt {
	a := &Attempt{Tenant: t.Tenant, TaskID: t.ID, Attempt: t.Attempts + 1, Lease: t.LeaseCount,
		LeaseID: t.LeaseID, WorkerID: t.WorkerID, ReceiptID: ""}
	if t.LeasedAt != nil {
		a.LeasedAt = *t.LeasedAt
	}
	if t.AcceptedAt != nil {
		at := *t.AcceptedAt
		a.AcceptedAt = &at
	}
	if t.LeaseExpiresAt != nil {
		at := *t.LeaseExpiresAt
		a.LeaseExpiresAt = &at
	}
	return a
}

// SucceededAttempt returns the attempt that completed the succeeded task
// t: it is not stored, but derived from the task's row, which keeps its
// last lease (id, worker, grant, acceptance) and its completion time, and
// from rc, the task.completed receipt written under that lease, which
// gives the attempt its receipt and the lease's expiry when it ended (nil
// when it cannot be found: the attempt then has neither). It returns nil
// when t has not succeeded under a lease; a success archived by retention
// keeps its row's lease and so its attempt (FinishedAs).
func SucceededAttempt(t *Task, rc *Receipt) *Attempt {
	if t == nil || FinishedAs(t) != StateSucceeded || t.LeaseID == "" || t.LeasedAt == nil || t.CompletedAt == nil {
		return nil
	}
	a := OpenAttempt(t)
	if rc != nil && rc.Type == ReceiptCompleted && rc.TaskID == t.ID && rc.LeaseID == t.LeaseID {
		a.ReceiptID = rc.ID
		var b struct {
			Expires *time.Time `json:"lease_expires_at"`
		}
		if json.Unmarshal(rc.Body, &b) == nil {
			a.LeaseExpiresAt = b.Expires
		}
	}
	a.End(*t.CompletedAt, AttemptSucceeded)
	return a
}

// End marks a ended at with outcome and sets its duration.
func (a *Attempt) End(at time.Time, outcome AttemptOutcome) {
	a.EndedAt, a.Outcome = &at, outcome
	a.DurationMS = max(at.Sub(a.LeasedAt), 0).Milliseconds()
}
