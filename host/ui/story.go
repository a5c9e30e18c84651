package ui

import (
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
		r := attemptRow{Attempt: a, Leased: stamp(a.LeasedAt), Accepted: "no", Held: held(a.DurationMS), Note: a.Note()}
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
		d.Events = append(d.Events, eventRow{TimelineEvent: ev, At: stamp(ev.Time), Note: ev.Note()})
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

// held is a duration in milliseconds for a table.
func held(ms int64) string { return host.HeldText(ms) }
