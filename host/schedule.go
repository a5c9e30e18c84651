package host

import (
	"encoding/json"
	"time"
)

// Schedules (issue 39): recurring tasks fired from a cron expression in a
// time zone, or every so many seconds. Each fire enqueues one task from the
// schedule's template, as the schedule's owner, exactly once across hosts and
// restarts (host/engine/schedules.go says how).

// PrefixSchedule starts every schedule id.
const PrefixSchedule = "S-"

// MissedPolicy says what a schedule does with the fires it missed: those due
// longer ago than its grace when the gate came to them (the gate was down,
// or the schedule was overdue for another reason).
type MissedPolicy string

// Missed-run policies.
const (
	// MissedSkip drops missed fires; the schedule goes on from the next one.
	MissedSkip MissedPolicy = "skip"
	// MissedRunOnce enqueues one task for the latest missed fire.
	MissedRunOnce MissedPolicy = "run_once"
	// MissedRunAll enqueues one task for each missed fire, the most recent
	// MissedCap of them.
	MissedRunAll MissedPolicy = "run_all"
)

// Schedule bounds.
const (
	// MinScheduleInterval and MaxScheduleInterval bound interval_seconds.
	MinScheduleInterval = 1
	MaxScheduleInterval = 366 * 24 * 3600
	// MaxMissedCap bounds run_all's missed_cap.
	MaxMissedCap = 100
	// DefaultScheduleGrace is how late a fire may be and still count as on
	// time (default grace_seconds); MaxScheduleGrace bounds it.
	DefaultScheduleGrace = 60
	MaxScheduleGrace     = 3600
	// MaxScheduleName bounds a schedule's name.
	MaxScheduleName = 200
	// MaxSchedulesPerOwner is the default cap on the schedules one
	// principal owns (engine.Config.MaxSchedulesPerOwner); past it a create
	// is quota_exceeded (429).
	MaxSchedulesPerOwner = 1000
)

// Schedule errors (400 unless said).
const (
	CodeInvalidCron         = "invalid_cron"          // the cron expression does not parse (400)
	CodeInvalidTimezone     = "invalid_timezone"      // the time zone is not an IANA zone name (400)
	CodeInvalidInterval     = "invalid_interval"      // interval_seconds out of bounds, or both/neither of cron and interval (400)
	CodeInvalidMissedPolicy = "invalid_missed_policy" // missed_policy or missed_cap out of bounds (400)
	// CodeOwnerRevoked: a schedule whose owner holds no live key cannot be
	// resumed until the owner holds one again (409).
	CodeOwnerRevoked = "owner_revoked"
)

// Why the gate paused a schedule (Schedule.PausedReason); a schedule paused
// by its owner or an admin has none.
const (
	// PausedOwnerRevoked: the owner's agent and admin keys in the tenant are
	// all revoked, so it can no longer queue tasks, and neither can its
	// schedule.
	PausedOwnerRevoked = "owner_revoked"
	// PausedNoNextFire: the cron expression has no fire within five years.
	PausedNoNextFire = "no_next_fire"
)

// ScheduleTemplate is the task a schedule enqueues at each fire: the fields of
// an enqueue that stay the same from fire to fire.
type ScheduleTemplate struct {
	TaskType   string          `json:"task_type"`
	Params     json.RawMessage `json:"params,omitempty"`
	Priority   int             `json:"priority,omitempty"`
	Recipient  string          `json:"recipient_ai,omitempty"`
	Summary    string          `json:"task_summary,omitempty"`
	MaxRetries *int            `json:"max_retries,omitempty"`
}

// ScheduleSkip is what a schedule.skipped receipt said: when the firer
// skipped fires, how many and which, and, when no task could be enqueued
// from the template (its task type gone or disabled, its params refused),
// the error it met.
type ScheduleSkip struct {
	At          time.Time `json:"at"`
	ReceiptID   string    `json:"receipt_id"`
	Skipped     int64     `json:"skipped"`
	FirstFireAt time.Time `json:"first_fire_at"`
	LastFireAt  time.Time `json:"last_fire_at"`
	Error       string    `json:"error,omitempty"`
	Detail      string    `json:"detail,omitempty"`
}

// Schedule is a recurring task. Exactly one of Cron and IntervalSeconds is
// set. NextFireAt is the next fire the gate owes; a paused schedule keeps it
// but does not fire, and a resumed one starts again from the next fire after
// the resume.
type Schedule struct {
	ID       string `json:"schedule_id"`
	Tenant   string `json:"-"`
	Owner    string `json:"owner"`
	Name     string `json:"name"`
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	// IntervalSeconds fires at AnchorAt + k·interval, k ≥ 1.
	IntervalSeconds int64            `json:"interval_seconds,omitempty"`
	AnchorAt        time.Time        `json:"anchor_at"`
	Template        ScheduleTemplate `json:"template"`
	MissedPolicy    MissedPolicy     `json:"missed_policy"`
	MissedCap       int              `json:"missed_cap,omitempty"`
	GraceSeconds    int              `json:"grace_seconds"`
	Paused          bool             `json:"paused"`
	// PausedReason says why the gate paused the schedule (PausedOwnerRevoked,
	// PausedNoNextFire); empty when it runs or was paused by a person.
	PausedReason string     `json:"paused_reason,omitempty"`
	NextFireAt   time.Time  `json:"next_fire_at"`
	LastFireAt   *time.Time `json:"last_fire_at,omitempty"`
	// Fires counts the tasks the schedule has enqueued.
	Fires int64 `json:"fires"`
	// LastSkip is the last time the firer skipped fires of the schedule
	// (its schedule.skipped receipt), nil if it never did.
	LastSkip  *ScheduleSkip `json:"last_skip,omitempty"`
	CreatedAt time.Time     `json:"created_at"`
	UpdatedAt time.Time     `json:"updated_at"`
}
