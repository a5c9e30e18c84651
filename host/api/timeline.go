package api

import (
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// AttemptsResponse is the answer of GET /v1/tasks/{id}/attempts.
type AttemptsResponse struct {
	TaskID string         `json:"task_id"`
	Status host.TaskState `json:"status"`
	// Attempts are the task's leases, oldest first; a leased task's live
	// lease is the last, with outcome running.
	Attempts []host.Attempt `json:"attempts"`
	// ServerTime is the gate's clock when it answered: a running attempt's
	// duration and its lease's time left are measured against it.
	ServerTime time.Time `json:"server_time"`
}

// TimelineResponse is the answer of GET /v1/tasks/{id}/timeline.
type TimelineResponse struct {
	TaskID string         `json:"task_id"`
	Status host.TaskState `json:"status"`
	// Events are the task's history, oldest first, numbered from 1.
	Events []host.TimelineEvent `json:"events"`
	// Truncated is set when the task has more receipts (over 500) or
	// progress reports (over 100, the newest are shown) than one timeline
	// holds; GET /v1/receipts and /progress page through all of them.
	Truncated bool `json:"truncated"`
}
