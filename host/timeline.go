package host

import (
	"encoding/json"
	"strconv"
	"strings"
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

// Note is the part of an event's details worth a line of a table: a
// progress report's percent and message; else its error, reasons, who
// asked for a cancel (when not the receipt's sender), summary or outcome, how long the lease was held, and when the task is offered
// again.
func (ev TimelineEvent) Note() string {
	var d map[string]any
	_ = json.Unmarshal(ev.Details, &d)
	str := func(k string) string {
		if v, ok := d[k].(string); ok {
			return v
		}
		return ""
	}
	var parts []string
	if ev.Type == EventProgress {
		if p, ok := d["percent"].(float64); ok {
			parts = append(parts, strconv.FormatFloat(p, 'f', -1, 64)+"%")
		}
		if m := str("message"); m != "" {
			parts = append(parts, m)
		}
		return strings.Join(parts, " ")
	}
	for _, k := range []string{"error_message", "dead_reason", "escalation_reason", "reason", "canceled_by", "summary", "outcome"} {
		v := str(k)
		if k == "canceled_by" && v == ev.From {
			continue // the row names its sender already
		}
		if k == "canceled_by" && v != "" {
			v = "canceled by " + v // who asked, when another ended the lease
		}
		if v != "" {
			parts = append(parts, v)
		}
	}
	if ms, ok := d["duration_ms"].(float64); ok {
		parts = append(parts, "held "+HeldText(int64(ms)))
	}
	for _, k := range []string{"retry_scheduled_at", "available_at"} {
		v := str(k)
		if v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		if err == nil {
			v = at.UTC().Format(time.RFC3339)
		}
		if ev.Type == string(ReceiptAssigned) {
			// A new task is offered for the first time, not again: its
			// start is worth a note only when it lies ahead (a delayed
			// start; a waiting task's rule may make it later still).
			if err == nil && at.After(ev.Time) {
				parts = append(parts, "not before "+v)
			}
			continue
		}
		parts = append(parts, "offered again "+v)
	}
	return strings.Join(parts, " · ")
}

// Note is an attempt's error and its metadata, or where its end left the
// task, for a line of a table.
func (a Attempt) Note() string {
	var parts []string
	if a.Error != "" {
		parts = append(parts, a.Error)
	}
	if m := strings.TrimSpace(string(a.ErrorMetadata)); m != "" && m != "null" {
		parts = append(parts, m)
	}
	if a.DeadReason != "" {
		parts = append(parts, "dead letter: "+a.DeadReason)
	}
	if a.RetryAt != nil {
		parts = append(parts, "offered again "+a.RetryAt.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, " · ")
}

// HeldText is a duration in milliseconds for a table: "850ms", "4.2s",
// "3m10s".
func HeldText(ms int64) string {
	switch {
	case ms < 1000:
		return strconv.FormatInt(ms, 10) + "ms"
	case ms < 60_000:
		return strconv.FormatFloat(float64(ms)/1000, 'f', 1, 64) + "s"
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}
