package host

import (
	"encoding/json"
	"time"
)

// Timeline event types that are not receipt types. The other events of a
// timeline are the task's receipts, each named by its receipt type
// (task.assigned, task.accepted, task.completed, …).
const (
	// EventLeaseGranted is a lease offered to a worker (an attempt began).
	EventLeaseGranted = "lease.granted"
	// EventLeaseExpired is a lease that ran out before its worker ended it.
	EventLeaseExpired = "lease.expired"
	// EventLeaseReleased is an offer given back before it was accepted
	// (an accepted one has its task.released receipt).
	EventLeaseReleased = "lease.released"
	// EventProgress is a progress report of a heartbeat.
	EventProgress = "progress"
)

// TimelineEvent is one entry of a task's history, in the order things
// happened: its receipts, the grants and ends of its leases that wrote no
// receipt, and its progress reports.
type TimelineEvent struct {
	// EventID numbers the events of one timeline from 1, in order.
	EventID int       `json:"event_id"`
	Time    time.Time `json:"event_time"`
	Type    string    `json:"event_type"`
	// Attempt and Lease are the attempt number and lease number of the
	// lease the event belongs to (0 when it belongs to none).
	Attempt   int    `json:"attempt,omitempty"`
	Lease     int    `json:"lease,omitempty"`
	LeaseID   string `json:"lease_id,omitempty"`
	WorkerID  string `json:"worker_id,omitempty"`
	ReceiptID string `json:"receipt_id,omitempty"`
	From      string `json:"from,omitempty"`
	To        string `json:"to,omitempty"`
	// Details is the receipt's body, or what the gate knows of a lease
	// event (its expiry, outcome, duration) or progress report.
	Details json.RawMessage `json:"details,omitempty"`
}
