package ui

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
)

// storyData is the task page's history: the live attempt's lease, every
// attempt, and the timeline of receipts, lease events and progress.
type storyData struct {
	Current *host.Attempt
	// LeaseLeft is the live lease's time left; HeardAgo how long since its
	// grant, accept or latest heartbeat.
	LeaseLeft, HeardAgo time.Duration
	// Accepted and Expires are the live lease's accept and expiry times.
	Accepted, Expires string
	Attempts          []attemptRow
	Events            []eventRow
	Truncated         bool
}

// attemptRow is one attempt of the page's table.
type attemptRow struct {
	host.Attempt
	Leased   string
	Accepted string // "+1.2 s" after the grant, or "no"
	Ended    string
	Held     string
	Note     string // its error and metadata, or where its end left the task
}

// eventRow is one event of the page's timeline.
type eventRow struct {
	host.TimelineEvent
	At   string
	Note string
}

// story reads a task's attempts and timeline as the session may.
func (u *UI) story(c echo.Context, id string) (*storyData, error) {
	ctx := c.Request().Context()
	actor := sessionOf(c).actor()
	ta, err := u.eng.Attempts(ctx, actor, id)
	if err != nil {
		return nil, err
	}
	tl, err := u.eng.Timeline(ctx, actor, id)
	if err != nil {
		return nil, err
	}
	d := &storyData{Truncated: tl.Truncated}
	for _, a := range ta.Attempts {
		r := attemptRow{Attempt: a, Leased: stamp(a.LeasedAt), Accepted: "no", Held: held(a.DurationMS), Note: attemptNote(a)}
		if a.EndedAt != nil {
			r.Ended = stamp(*a.EndedAt)
		}
		if a.AcceptedAt != nil {
			r.Accepted = "+" + held(a.AcceptedAt.Sub(a.LeasedAt).Milliseconds())
		}
		d.Attempts = append(d.Attempts, r)
		if a.Outcome == host.AttemptRunning {
			cur := a
			d.Current = &cur
			if a.LeaseExpiresAt != nil {
				d.LeaseLeft, d.Expires = a.LeaseExpiresAt.Sub(ta.At), stamp(*a.LeaseExpiresAt)
			}
			if a.AcceptedAt != nil {
				d.Accepted = stamp(*a.AcceptedAt)
			}
			if a.LastHeardAt != nil {
				d.HeardAgo = ta.At.Sub(*a.LastHeardAt)
			}
		}
	}
	for _, ev := range tl.Events {
		d.Events = append(d.Events, eventRow{TimelineEvent: ev, At: stamp(ev.Time), Note: eventNote(ev)})
	}
	return d, nil
}

// failuresText says how a task's failures stand against what its type
// allows, in words that read right for a dead letter too ("dead letter
// after 1 failure; no retries were allowed", never "1 failed of 0 allowed").
func failuresText(t *host.Task) string {
	fails := plural(t.Attempts, "failure")
	retries := "no retries allowed"
	if t.MaxRetries > 0 {
		retries = "up to " + plural(t.MaxRetries, "retry") + " allowed"
	}
	leases := plural(t.LeaseCount, "lease")
	if t.LeaseExpiries > 0 {
		leases += " (" + strconv.Itoa(t.LeaseExpiries) + " expired)"
	}
	if t.State == host.StateDeadLetter {
		why := ""
		switch t.DeadReason {
		case host.ReasonMaxRetriesExceeded:
			why = "; its retries were used up"
			if t.MaxRetries == 0 {
				why = "; no retries were allowed"
			}
		case host.ReasonFatalError:
			why = "; the worker said it cannot succeed"
		case host.ReasonMaxLeaseExpiries:
			why = "; its leases expired too often"
		}
		return "dead letter after " + fails + why + " · " + leases
	}
	return fails + " · " + retries + " · " + leases
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	if strings.HasSuffix(word, "y") {
		return strconv.Itoa(n) + " " + strings.TrimSuffix(word, "y") + "ies"
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// stamp is a time to the millisecond, UTC.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") }

// held is a duration in milliseconds for a table: "850 ms", "4.2 s", "3m".
func held(ms int64) string {
	switch {
	case ms < 1000:
		return strconv.FormatInt(ms, 10) + " ms"
	case ms < 60_000:
		return strconv.FormatFloat(float64(ms)/1000, 'f', 1, 64) + " s"
	}
	return ago(time.Duration(ms) * time.Millisecond)
}

// attemptNote is an attempt's error, or where its end left the task.
func attemptNote(a host.Attempt) string {
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
		parts = append(parts, "offered again at "+a.RetryAt.UTC().Format("15:04:05"))
	}
	return strings.Join(parts, " · ")
}

// eventNote is the part of an event's details worth a line.
func eventNote(ev host.TimelineEvent) string {
	var d map[string]any
	_ = json.Unmarshal(ev.Details, &d)
	str := func(k string) string {
		if v, ok := d[k].(string); ok {
			return v
		}
		return ""
	}
	var parts []string
	if ev.Type == host.EventProgress {
		if p, ok := d["percent"].(float64); ok {
			parts = append(parts, strconv.FormatFloat(p, 'f', -1, 64)+"%")
		}
		if m := str("message"); m != "" {
			parts = append(parts, m)
		}
		return strings.Join(parts, " ")
	}
	for _, k := range []string{"error_message", "dead_reason", "escalation_reason", "reason", "summary", "outcome"} {
		if v := str(k); v != "" {
			parts = append(parts, v)
		}
	}
	if ms, ok := d["duration_ms"].(float64); ok {
		parts = append(parts, "held "+held(int64(ms)))
	}
	for _, k := range []string{"retry_scheduled_at", "available_at"} {
		if v := str(k); v != "" {
			if at, err := time.Parse(time.RFC3339Nano, v); err == nil {
				v = at.UTC().Format("15:04:05")
			}
			parts = append(parts, "offered again at "+v)
		}
	}
	if len(parts) == 0 && ev.Type == host.EventLeaseGranted && ev.WorkerID != "" {
		parts = append(parts, fmt.Sprintf("offered to %s", ev.WorkerID))
	}
	return strings.Join(parts, " · ")
}
