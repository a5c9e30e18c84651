package api

import (
	"encoding/json"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// TaskEnvelope is the spec's shared worker envelope; run_id is the lease id.
type TaskEnvelope struct {
	TaskID         string          `json:"task_id"`
	RunID          string          `json:"run_id"`
	TaskType       string          `json:"task_type"`
	Params         json.RawMessage `json:"params"`
	Priority       int             `json:"priority"`
	LeaseExpiresAt time.Time       `json:"lease_expires_at"`
	Metadata       map[string]any  `json:"metadata"`
	// ResourceLeases are the task's resource leases with their fencing
	// tokens (only for a task with resource intents).
	ResourceLeases []*host.ResourceLease `json:"resource_leases,omitempty"`
	// Dependencies are the outcomes of the tasks this one waited on (its
	// after list, in order): status, and result pointer and summary or
	// error (only for a task enqueued with after).
	Dependencies []host.DependencyOutcome `json:"dependencies,omitempty"`
}

// HeartbeatResponse is the answer of a heartbeat.
type HeartbeatResponse struct {
	Status          string    `json:"status"`
	LeaseID         string    `json:"lease_id,omitempty"`
	LeaseExpiresAt  time.Time `json:"lease_expires_at"`
	CancelRequested bool      `json:"cancel_requested"`
	// ServerTime is the gate's clock at the extension, for a worker's
	// conservative local expiry.
	ServerTime time.Time `json:"server_time"`
}

// CompleteResponse is the answer of a completion.
type CompleteResponse struct {
	Status         string `json:"status"`
	TaskID         string `json:"task_id"`
	LeaseID        string `json:"lease_id"`
	ReceiptID      string `json:"receipt_id"`
	Duplicate      bool   `json:"duplicate"`
	ResultChannel  string `json:"result_channel,omitempty"`
	ResultPointer  string `json:"result_pointer,omitempty"`
	ResultChecksum string `json:"result_checksum,omitempty"`
}

// FailResponse is the answer of a failure report.
type FailResponse struct {
	Status           string     `json:"status"`
	TaskID           string     `json:"task_id"`
	LeaseID          string     `json:"lease_id"`
	WillRetry        bool       `json:"will_retry"`
	RetryScheduledAt *time.Time `json:"retry_scheduled_at,omitempty"`
	ReceiptID        string     `json:"receipt_id"`
	Duplicate        bool       `json:"duplicate"`
}

// NewTaskEnvelope is the envelope of a leased task's offer.
func NewTaskEnvelope(o host.Offer) TaskEnvelope {
	t := o.Task
	md := map[string]any{"attempt": o.Attempt, "principal_ai": t.CreatedBy, "recipient_ai": t.Recipient}
	if t.Summary != "" {
		md["task_summary"] = t.Summary
	}
	return TaskEnvelope{TaskID: t.ID, RunID: o.RunID, TaskType: t.Type, Params: t.Params, Priority: t.Priority,
		LeaseExpiresAt: o.LeaseExpiresAt, Metadata: md, ResourceLeases: o.ResourceLeases, Dependencies: o.Dependencies}
}

// SnoozeResponse is the answer of a snooze.
type SnoozeResponse struct {
	// Status is "snoozed" when the task waits until AvailableAt,
	// "canceled" when a cancel requested meanwhile ended it instead, and
	// "ended" when the lease had already ended (a completion, a failure,
	// an expiry before it): nothing was snoozed, and the task is not named.
	Status     string `json:"status"`
	LeaseID    string `json:"lease_id"`
	TaskID     string `json:"task_id,omitempty"`
	TaskStatus string `json:"task_status,omitempty"`
	// AvailableAt is when the task is offered again (absent when the lease
	// was already gone, or the task was canceled instead).
	AvailableAt *time.Time `json:"available_at,omitempty"`
}

// SnoozeStatus is a snooze's Status from the task it gave back (nil: the
// lease had already ended).
func SnoozeStatus(t *host.Task) string {
	switch {
	case t == nil:
		return "ended"
	case t.State == host.StateCanceled:
		return "canceled"
	}
	return "snoozed"
}

// Fill names the task a snooze gave back: its id, its status, and when it
// is offered again if it waits in the queue.
func (r *SnoozeResponse) Fill(t *host.Task) {
	r.TaskID, r.TaskStatus = t.ID, string(t.State)
	if t.State == host.StateQueued || t.State == host.StateScheduled {
		// A snooze is a second at least: the task is scheduled until then.
		at := t.AvailableAt
		r.AvailableAt, r.TaskStatus = &at, string(host.StateScheduled)
	}
}
