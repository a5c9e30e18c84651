package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// How a task went, for the agent that queued it: every lease of the task
// (Attempts) and its history as events (Timeline), the answers of
// GET /v1/tasks/{id}/attempts and /timeline. A task the key may not see is
// a 404 not_found APIError (errors.Is ErrNotFound), as for Status.

// How an attempt ended (Attempt.Outcome).
const (
	// AttemptRunning is the live lease of a leased task: it has not ended.
	AttemptRunning    = "running"
	AttemptSucceeded  = "succeeded"   // the worker completed the task
	AttemptFailed     = "failed"      // the worker failed it and a retry is scheduled
	AttemptDeadLetter = "dead_letter" // it failed, or expired once too often, and the task is a dead letter
	AttemptReleased   = "released"    // the worker gave the task back
	AttemptSnoozed    = "snoozed"     // the worker gave the task back until RetryAt, no attempt used
	AttemptExpired    = "expired"     // the lease ran out; the task went back to the queue
	AttemptCanceled   = "canceled"    // the lease ended on a cancel that was requested
)

// Attempt is one lease of a task from its grant to its end: who held it,
// when it was granted and accepted, how it ended and with which error.
type Attempt struct {
	TaskID string `json:"task_id"`
	// Attempt is the attempt number the worker was told in its offer:
	// failures before it plus one. A lease that expired or was released
	// uses none, so two leases may carry the same number.
	Attempt int `json:"attempt"`
	// Lease is the lease's number among the task's leases, from 1.
	Lease int `json:"lease"`
	// LeaseID is the lease's id; WorkerID the worker that held it.
	LeaseID  string `json:"lease_id"`
	WorkerID string `json:"worker_id"`
	// LeasedAt is when the lease was granted (offered to the worker);
	// AcceptedAt when the worker accepted it (nil: it never did).
	LeasedAt   time.Time  `json:"leased_at"`
	AcceptedAt *time.Time `json:"accepted_at,omitempty"`
	// LeaseExpiresAt is when the lease ran (or runs) out, after every
	// heartbeat that extended it.
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	// EndedAt is when the lease ended (nil while it runs).
	EndedAt *time.Time `json:"ended_at,omitempty"`
	// LastHeardAt is, for a running attempt, when its lease was last
	// written: its grant, accept or latest heartbeat (or a cancel request).
	LastHeardAt *time.Time `json:"last_heard_at,omitempty"`
	// DurationMS is how long the lease was held, in milliseconds: from its
	// grant to its end, or to the answer's ServerTime while it runs.
	DurationMS int64 `json:"duration_ms"`
	// Outcome is how the attempt ended: AttemptSucceeded, AttemptFailed,
	// …, or AttemptRunning for a live lease.
	Outcome string `json:"outcome"`
	// ErrorMessage and ErrorMetadata are the error the worker failed the
	// attempt with, and Retryable whether it said a retry could help.
	ErrorMessage  string          `json:"error_message,omitempty"`
	ErrorMetadata json.RawMessage `json:"error_metadata,omitempty"`
	Retryable     bool            `json:"retryable,omitempty"`
	// RetryAt is when the task is offered again after a failed attempt or
	// a snooze.
	RetryAt *time.Time `json:"retry_scheduled_at,omitempty"`
	// DeadReason is why the task became a dead letter with this attempt.
	DeadReason string `json:"dead_reason,omitempty"`
	// ReceiptID is the receipt that recorded the end (none for an offer
	// that expired or was released before it was accepted).
	ReceiptID string `json:"receipt_id,omitempty"`
}

// Attempts is a task's attempts, the answer of Client.Attempts.
type Attempts struct {
	TaskID string `json:"task_id"`
	// Status is the task's state (StateQueued, StateLeased, …).
	Status string `json:"status"`
	// Attempts are the task's leases, oldest first; a leased task's live
	// lease is the last, with outcome AttemptRunning.
	Attempts []Attempt `json:"attempts"`
	// ServerTime is the gate's clock when it answered: a running attempt's
	// duration and its lease's time left are measured against it.
	ServerTime time.Time `json:"server_time"`
}

// Attempts returns every lease of a task, oldest first: who held it, when,
// for how long, how it ended and with which error.
func (c *Client) Attempts(ctx context.Context, taskID string) (*Attempts, error) {
	var out Attempts
	if _, err := c.Do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(taskID)+"/attempts", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Types of timeline event (TimelineEvent.Type) that are not receipt types.
// The other events of a timeline are the task's receipts, each named by its
// receipt type (task.assigned, task.accepted, task.retry_scheduled,
// task.completed, task.failed, …).
const (
	// EventLeaseGranted is a lease offered to a worker (an attempt began).
	EventLeaseGranted = "lease.granted"
	// EventLeaseExpired is a lease that ran out before its worker ended it.
	EventLeaseExpired = "lease.expired"
	// EventLeaseReleased is an offer given back before it was accepted
	// (an accepted one has its task.released receipt).
	EventLeaseReleased = "lease.released"
	// EventLeaseSnoozed is an offer snoozed before it was accepted (an
	// accepted one has its task.snoozed receipt).
	EventLeaseSnoozed = "lease.snoozed"
	// EventProgress is a progress report of a heartbeat.
	EventProgress = "progress"
)

// TimelineEvent is one entry of a task's history, in the order things
// happened: its receipts, the grants and ends of its leases that wrote no
// receipt, and its progress reports.
type TimelineEvent struct {
	// EventID numbers the events of one timeline from 1, in order.
	EventID int `json:"event_id"`
	// Time is when the event happened.
	Time time.Time `json:"event_time"`
	// Type is a receipt type (task.assigned, task.completed, …) or one of
	// the Event… constants.
	Type string `json:"event_type"`
	// Attempt and Lease are the attempt number and lease number of the
	// lease the event belongs to (0 when it belongs to none).
	Attempt int `json:"attempt,omitempty"`
	Lease   int `json:"lease,omitempty"`
	// LeaseID and WorkerID are the lease the event belongs to and the
	// worker that held it.
	LeaseID  string `json:"lease_id,omitempty"`
	WorkerID string `json:"worker_id,omitempty"`
	// ReceiptID, From and To are the receipt a receipt event is, its
	// sender and its recipient ("" for the other events).
	ReceiptID string `json:"receipt_id,omitempty"`
	From      string `json:"from,omitempty"`
	To        string `json:"to,omitempty"`
	// Details is the receipt's body, or what the gate knows of a lease
	// event (its expiry, outcome, duration) or progress report.
	Details json.RawMessage `json:"details,omitempty"`
}

// Timeline is a task's history, the answer of Client.Timeline.
type Timeline struct {
	TaskID string `json:"task_id"`
	// Status is the task's state (StateQueued, StateLeased, …).
	Status string `json:"status"`
	// Events are the task's history, oldest first, numbered from 1.
	Events []TimelineEvent `json:"events"`
	// Truncated is set when the task has more receipts (over 500) or
	// progress reports (over 100, the newest are shown) than one timeline
	// holds; Receipts pages through all the receipts, Progress reads the
	// progress reports.
	Truncated bool `json:"truncated"`
}

// Timeline returns a task's history as events, oldest first: its receipts,
// the grants of its leases and the ends that wrote no receipt, and its
// progress reports.
func (c *Client) Timeline(ctx context.Context, taskID string) (*Timeline, error) {
	var out Timeline
	if _, err := c.Do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(taskID)+"/timeline", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
