package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// attemptView is one attempt of GET /v1/tasks/{id}/attempts as the CLI reads it.
type attemptView struct {
	Attempt        int             `json:"attempt"`
	Lease          int             `json:"lease"`
	LeaseID        string          `json:"lease_id"`
	WorkerID       string          `json:"worker_id"`
	LeasedAt       time.Time       `json:"leased_at"`
	AcceptedAt     *time.Time      `json:"accepted_at"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	EndedAt        *time.Time      `json:"ended_at"`
	LastHeardAt    *time.Time      `json:"last_heard_at"`
	DurationMS     int64           `json:"duration_ms"`
	Outcome        string          `json:"outcome"`
	Error          string          `json:"error_message"`
	ErrorMetadata  json.RawMessage `json:"error_metadata"`
	RetryAt        *time.Time      `json:"retry_scheduled_at"`
	DeadReason     string          `json:"dead_reason"`
}

// timelineEvent is one event of GET /v1/tasks/{id}/timeline.
type timelineEvent struct {
	EventID   int             `json:"event_id"`
	Time      time.Time       `json:"event_time"`
	Type      string          `json:"event_type"`
	Attempt   int             `json:"attempt"`
	Lease     int             `json:"lease"`
	WorkerID  string          `json:"worker_id"`
	ReceiptID string          `json:"receipt_id"`
	From      string          `json:"from"`
	To        string          `json:"to"`
	Details   json.RawMessage `json:"details"`
}

// printTaskStory prints a task's attempts (the live one with its lease's
// time left and when its worker was last heard from) and its timeline:
// receipts, lease grants and expiries and progress reports, oldest first.
func printTaskStory(rc *remoteCtx, id string) error {
	var at struct {
		Attempts   []attemptView `json:"attempts"`
		ServerTime time.Time     `json:"server_time"`
	}
	if err := rc.call("GET", "/v1/tasks/"+url.PathEscape(id)+"/attempts", nil, &at); err != nil {
		return err
	}
	if n := len(at.Attempts); n > 0 {
		if a := at.Attempts[n-1]; a.Outcome == "running" {
			kv := [][2]string{{"current attempt", fmt.Sprintf("%d (lease %d of the task) by %s", a.Attempt, a.Lease, a.WorkerID)}}
			acc := "no (an offer: the worker has not accepted it)"
			if a.AcceptedAt != nil {
				acc = "at " + a.AcceptedAt.UTC().Format(time.RFC3339)
			}
			kv = append(kv, [2]string{"accepted", acc})
			if a.LeaseExpiresAt != nil {
				kv = append(kv, [2]string{"lease left", short(a.LeaseExpiresAt.Sub(at.ServerTime)) + " (expires " + a.LeaseExpiresAt.UTC().Format(time.RFC3339) + ")"})
			}
			if a.LastHeardAt != nil {
				kv = append(kv, [2]string{"last heard", short(at.ServerTime.Sub(*a.LastHeardAt)) + " ago (grant, accept or heartbeat)"})
			}
			fmt.Fprintln(rc.out)
			rc.fields(kv)
		}
		fmt.Fprintln(rc.out, "\nattempts (oldest first):")
		rows := make([][]string, 0, n)
		for _, a := range at.Attempts {
			acc := "no"
			if a.AcceptedAt != nil {
				acc = "+" + shortMS(a.AcceptedAt.Sub(a.LeasedAt).Milliseconds())
			}
			rows = append(rows, []string{"  " + strconv.Itoa(a.Attempt), strconv.Itoa(a.Lease), a.WorkerID,
				a.LeasedAt.UTC().Format(time.RFC3339), acc, shortMS(a.DurationMS), a.Outcome, attemptNote(a)})
		}
		rc.table([]string{"  ATTEMPT", "LEASE", "WORKER", "LEASED", "ACCEPTED", "HELD", "OUTCOME", "ERROR / NOTE"}, rows)
	}
	var tl struct {
		Events    []timelineEvent `json:"events"`
		Truncated bool            `json:"truncated"`
	}
	if err := rc.call("GET", "/v1/tasks/"+url.PathEscape(id)+"/timeline", nil, &tl); err != nil {
		return err
	}
	if len(tl.Events) > 0 {
		fmt.Fprintln(rc.out, "\ntimeline (oldest first):")
		rows := make([][]string, 0, len(tl.Events))
		for _, ev := range tl.Events {
			att := ""
			if ev.Lease > 0 {
				att = strconv.Itoa(ev.Attempt) + "/" + strconv.Itoa(ev.Lease)
			}
			who := ev.WorkerID
			if ev.From != "" {
				who = ev.From + " → " + ev.To
			}
			rows = append(rows, []string{"  " + strconv.Itoa(ev.EventID), ev.Time.UTC().Format("2006-01-02T15:04:05.000Z"), ev.Type, att, who, eventNote(ev), ev.ReceiptID})
		}
		rc.table([]string{"  #", "AT", "EVENT", "ATTEMPT/LEASE", "WHO", "DETAIL", "RECEIPT"}, rows)
		if tl.Truncated {
			fmt.Fprintf(rc.out, "  more: the task has more receipts or progress reports than one timeline holds (gate receipts verify %s reads them all)\n", id)
		}
	}
	return nil
}

// attemptNote is an attempt's error, or where its end left the task.
func attemptNote(a attemptView) string {
	var parts []string
	if a.Error != "" {
		parts = append(parts, clip(a.Error, 50))
	}
	if m := strings.TrimSpace(string(a.ErrorMetadata)); m != "" && m != "null" {
		parts = append(parts, clip(m, 40))
	}
	if a.DeadReason != "" {
		parts = append(parts, "dead letter: "+a.DeadReason)
	}
	if a.RetryAt != nil {
		parts = append(parts, "offered again "+a.RetryAt.UTC().Format(time.RFC3339))
	}
	if a.Outcome == "running" && a.LeaseExpiresAt != nil {
		parts = append(parts, "lease until "+a.LeaseExpiresAt.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, " · ")
}

// eventNote is the part of an event's details worth a line.
func eventNote(ev timelineEvent) string {
	var d map[string]any
	_ = json.Unmarshal(ev.Details, &d)
	str := func(k string) string {
		if v, ok := d[k].(string); ok {
			return v
		}
		return ""
	}
	var parts []string
	if ev.Type == "progress" {
		if p, ok := d["percent"].(float64); ok {
			parts = append(parts, strconv.FormatFloat(p, 'f', -1, 64)+"%")
		}
		if m := str("message"); m != "" {
			parts = append(parts, clip(m, 50))
		}
		return strings.Join(parts, " ")
	}
	for _, k := range []string{"error_message", "dead_reason", "escalation_reason", "reason", "summary", "outcome"} {
		if v := str(k); v != "" {
			parts = append(parts, clip(v, 50))
		}
	}
	if ms, ok := d["duration_ms"].(float64); ok {
		parts = append(parts, "held "+shortMS(int64(ms)))
	}
	for _, k := range []string{"retry_scheduled_at", "available_at"} {
		if v := str(k); v != "" {
			parts = append(parts, "offered again "+v)
		}
	}
	return strings.Join(parts, " · ")
}

// shortMS is a duration in milliseconds for a table: "850ms", "4.2s", "3m".
func shortMS(ms int64) string {
	switch {
	case ms < 1000:
		return strconv.FormatInt(ms, 10) + "ms"
	case ms < 60_000:
		return strconv.FormatFloat(float64(ms)/1000, 'f', 1, 64) + "s"
	}
	return short(time.Duration(ms) * time.Millisecond)
}
