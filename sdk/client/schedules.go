package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Missed-run policies of a schedule: what it does with the fires the gate
// missed (it was down, or came to a fire later than the grace).
const (
	MissedSkip    = "skip"     // drop them
	MissedRunOnce = "run_once" // one task for the latest
	MissedRunAll  = "run_all"  // one task each, the latest MissedCap
)

// ScheduleTemplate is the task a schedule enqueues at each fire.
type ScheduleTemplate struct {
	TaskType   string          `json:"task_type"`
	Params     json.RawMessage `json:"params,omitempty"`
	Priority   int             `json:"priority,omitempty"`
	Recipient  string          `json:"recipient_ai,omitempty"`
	Summary    string          `json:"task_summary,omitempty"`
	MaxRetries *int            `json:"max_retries,omitempty"`
}

// NewSchedule is a schedule to create: exactly one of Cron (five fields or
// a descriptor such as @hourly, read in Timezone, default UTC) and
// IntervalSeconds.
type NewSchedule struct {
	Name            string           `json:"name"`
	Cron            string           `json:"cron,omitempty"`
	Timezone        string           `json:"timezone,omitempty"`
	IntervalSeconds int64            `json:"interval_seconds,omitempty"`
	Template        ScheduleTemplate `json:"template"`
	MissedPolicy    string           `json:"missed_policy,omitempty"`
	MissedCap       int              `json:"missed_cap,omitempty"`
	GraceSeconds    *int             `json:"grace_seconds,omitempty"`
	Paused          bool             `json:"paused,omitempty"`
}

// Schedule is a schedule as the gate shows it, with its next runs (none
// while paused).
type Schedule struct {
	ScheduleID      string           `json:"schedule_id"`
	Owner           string           `json:"owner"`
	Name            string           `json:"name"`
	Cron            string           `json:"cron,omitempty"`
	Timezone        string           `json:"timezone,omitempty"`
	IntervalSeconds int64            `json:"interval_seconds,omitempty"`
	Template        ScheduleTemplate `json:"template"`
	MissedPolicy    string           `json:"missed_policy"`
	MissedCap       int              `json:"missed_cap,omitempty"`
	GraceSeconds    int              `json:"grace_seconds"`
	Paused          bool             `json:"paused"`
	// PausedReason says why the gate paused it (owner_revoked,
	// no_next_fire); "" when it runs or a person paused it.
	PausedReason string `json:"paused_reason,omitempty"`
	// LastSkip is the last time the gate skipped fires of it; nil if it
	// never did.
	LastSkip   *ScheduleSkip `json:"last_skip,omitempty"`
	NextFireAt time.Time     `json:"next_fire_at"`
	LastFireAt *time.Time    `json:"last_fire_at,omitempty"`
	Fires      int64         `json:"fires"`
	NextRuns   []time.Time   `json:"next_runs"`
	CreatedAt  time.Time     `json:"created_at"`
	UpdatedAt  time.Time     `json:"updated_at"`
}

// ScheduleSkip is a schedule's last schedule.skipped receipt in short: when
// the gate skipped fires, how many, which, and the error its template met
// when no task could be queued from it (its task type gone or disabled, its
// params refused); a skip for lateness (the missed-runs policy) has none.
type ScheduleSkip struct {
	At          time.Time `json:"at"`
	ReceiptID   string    `json:"receipt_id"`
	Skipped     int64     `json:"skipped"`
	FirstFireAt time.Time `json:"first_fire_at"`
	LastFireAt  time.Time `json:"last_fire_at"`
	Error       string    `json:"error,omitempty"`
	Detail      string    `json:"detail,omitempty"`
}

// ScheduleReceipts returns a page of a schedule's own receipts
// (schedule.created, .updated, .paused, .resumed, .fired, .skipped,
// .deleted) in ledger order and the cursor of the next page ("" after the
// last); a deleted schedule's too. Another agent's schedule is a 404
// not_found APIError.
func (c *Client) ScheduleReceipts(ctx context.Context, id, cursor string, limit int) ([]Receipt, string, error) {
	q := url.Values{}
	setPage(q, cursor, limit)
	var out struct {
		Receipts []Receipt `json:"receipts"`
		Cursor   string    `json:"cursor"`
	}
	if _, err := c.Do(ctx, http.MethodGet, withQuery("/v1/schedules/"+url.PathEscape(id)+"/receipts", q), nil, &out); err != nil {
		return nil, "", err
	}
	return out.Receipts, out.Cursor, nil
}

// FireKey is the idempotency key of the task a schedule's fire at t
// enqueued: a task's IdempotencyKey names the schedule and fire that made it.
func FireKey(scheduleID string, t time.Time) string {
	return "schedule:" + scheduleID + ":" + t.UTC().Format(time.RFC3339Nano)
}

// CreateSchedule creates a schedule owned by the key's principal.
func (c *Client) CreateSchedule(ctx context.Context, s NewSchedule) (*Schedule, error) {
	var out Schedule
	if _, err := c.Do(ctx, http.MethodPost, "/v1/schedules", s, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Schedule returns a schedule with its next nextRuns runs (0: 5).
func (c *Client) Schedule(ctx context.Context, id string, nextRuns int) (*Schedule, error) {
	path := "/v1/schedules/" + url.PathEscape(id)
	if nextRuns > 0 {
		path += "?next_runs=" + strconv.Itoa(nextRuns)
	}
	var out Schedule
	if _, err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Schedules returns a page of the key's schedules (an admin key: the
// tenant's) after cursor, and the cursor of the next page ("" after the
// last).
func (c *Client) Schedules(ctx context.Context, cursor string, limit, nextRuns int) ([]Schedule, string, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if nextRuns > 0 {
		q.Set("next_runs", strconv.Itoa(nextRuns))
	}
	path := "/v1/schedules"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		Schedules []Schedule `json:"schedules"`
		Cursor    string     `json:"cursor"`
	}
	if _, err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, "", err
	}
	return out.Schedules, out.Cursor, nil
}

// ScheduleChange changes a schedule (UpdateSchedule): a nil field keeps its
// value. Giving Cron or IntervalSeconds replaces the timing whole (Cron
// with Timezone, default UTC); Timezone alone moves a cron schedule to
// another zone. Template, when given, replaces the template whole.
type ScheduleChange struct {
	Name            *string           `json:"name,omitempty"`
	Cron            *string           `json:"cron,omitempty"`
	Timezone        *string           `json:"timezone,omitempty"`
	IntervalSeconds *int64            `json:"interval_seconds,omitempty"`
	Template        *ScheduleTemplate `json:"template,omitempty"`
	MissedPolicy    *string           `json:"missed_policy,omitempty"`
	MissedCap       *int              `json:"missed_cap,omitempty"`
	GraceSeconds    *int              `json:"grace_seconds,omitempty"`
}

// UpdateSchedule changes a schedule's definition (PATCH
// /v1/schedules/{id}); a new timing runs from its first fire after now.
func (c *Client) UpdateSchedule(ctx context.Context, id string, ch ScheduleChange) (*Schedule, error) {
	var out Schedule
	if _, err := c.Do(ctx, http.MethodPatch, "/v1/schedules/"+url.PathEscape(id), ch, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PauseSchedule stops a schedule's fires until ResumeSchedule.
func (c *Client) PauseSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.scheduleVerb(ctx, id, "pause")
}

// ResumeSchedule lets a paused schedule fire again from its first fire
// after now.
func (c *Client) ResumeSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.scheduleVerb(ctx, id, "resume")
}

func (c *Client) scheduleVerb(ctx context.Context, id, verb string) (*Schedule, error) {
	var out Schedule
	if _, err := c.Do(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(id)+"/"+verb, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSchedule deletes a schedule; the tasks it enqueued stay.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/v1/schedules/"+url.PathEscape(id), nil, nil)
	return err
}
