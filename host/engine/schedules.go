package engine

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	_ "time/tzdata" // IANA zones for schedules on a machine without them

	"github.com/robfig/cron/v3"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Schedules (issue 39): recurring tasks from a cron expression in a time
// zone, or an interval. A schedule belongs to the agent that created it
// (its owner): another agent of the tenant is answered not_found, as for an
// unknown id; the tenant's admins may list, pause, resume and delete all of
// them. Each fire enqueues one task from the schedule's template as the
// owner; schedulefire.go says how a fire is taken exactly once.

// CreateScheduleRequest is a new schedule: exactly one of Cron and
// IntervalSeconds, and the task to enqueue at each fire.
type CreateScheduleRequest struct {
	Name string `json:"name"`
	// Cron is a standard five-field expression (minute hour day-of-month
	// month day-of-week) or a descriptor (@hourly, @daily, @weekly,
	// @monthly, @yearly), read in Timezone ("" is UTC).
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	// IntervalSeconds fires every so many seconds from the schedule's
	// creation (1..31622400).
	IntervalSeconds int64                 `json:"interval_seconds,omitempty"`
	Template        host.ScheduleTemplate `json:"template"`
	// MissedPolicy is skip (the default), run_once or run_all; MissedCap
	// bounds run_all (1..100, default 10).
	MissedPolicy host.MissedPolicy `json:"missed_policy,omitempty"`
	MissedCap    int               `json:"missed_cap,omitempty"`
	// GraceSeconds is how late a fire may be and still run as on time
	// (0..3600; nil is 60). A fire is never missed for being late by less
	// than the firer's own lag (5 s, or two ticks), whatever the grace.
	GraceSeconds *int `json:"grace_seconds,omitempty"`
	// Paused creates the schedule paused.
	Paused bool `json:"paused,omitempty"`
}

// ScheduleView is a schedule as the doors show it: the schedule and its
// next runs (none while paused).
type ScheduleView struct {
	*host.Schedule
	NextRuns []time.Time `json:"next_runs"`
}

// MaxNextRuns bounds the next runs a view lists.
const MaxNextRuns = 100

// DefaultNextRuns is how many next runs a view lists when not told.
const DefaultNextRuns = 5

// cronParser reads the standard five fields and the descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// timing is a schedule's compiled expression: next returns its first fire
// strictly after t.
type timing struct {
	cron     cron.Schedule
	loc      *time.Location
	anchor   time.Time
	interval time.Duration
}

func (tm *timing) next(t time.Time) time.Time {
	if tm.cron != nil {
		n := tm.cron.Next(t.In(tm.loc))
		// A wall-clock time a fall-back repeats (01:30 on the night the
		// clocks go back an hour) fires once, at its first instant: the
		// parser offers both. A minute-by-minute expression meets up to
		// 120 second passes in a row (no zone goes back more than two
		// hours).
		for i := 0; i < 180 && !n.IsZero() && repeatedWallTime(n); i++ {
			n = tm.cron.Next(n)
		}
		return n.UTC().Truncate(time.Microsecond)
	}
	if t.Before(tm.anchor) {
		return tm.anchor.Add(tm.interval)
	}
	k := t.Sub(tm.anchor)/tm.interval + 1
	return tm.anchor.Add(k * tm.interval)
}

// repeatedWallTime reports whether n's wall-clock time in its zone was
// also read at an earlier instant: n falls in the hour (or half hour) a
// fall-back repeats, on its second pass. The zone's offset a day before n
// is the one it left; an instant that much earlier, still on that offset
// and showing the same wall clock, is the first pass.
func repeatedWallTime(n time.Time) bool {
	_, now := n.Zone()
	_, before := n.Add(-24 * time.Hour).Zone()
	if before <= now {
		return false
	}
	first := n.Add(-time.Duration(before-now) * time.Second)
	if _, off := first.Zone(); off != before {
		return false
	}
	y1, m1, d1 := first.Date()
	y2, m2, d2 := n.Date()
	return y1 == y2 && m1 == m2 && d1 == d2 && first.Hour() == n.Hour() && first.Minute() == n.Minute() && first.Second() == n.Second()
}

// timings caches compiled expressions by (cron, zone). Callers choose the
// expressions, so the cache stops growing at maxCachedTimings entries: an
// expression past it is compiled at each use.
var (
	timings      sync.Map
	timingsCount atomic.Int64
)

// maxCachedTimings bounds the compiled expressions cached.
const maxCachedTimings = 4096

// compileTiming parses a schedule's expression and zone, with a clear 400
// code for what is wrong.
func compileTiming(cronExpr, zone string, intervalSeconds int64, anchor time.Time) (*timing, error) {
	if (cronExpr == "") == (intervalSeconds == 0) {
		if cronExpr == "" {
			// interval_seconds 0 reads as not given: say what it takes.
			return nil, host.Errorf(host.CodeInvalidInterval, "give exactly one of cron and interval_seconds (%d..%d; 0 or absent is none)",
				host.MinScheduleInterval, host.MaxScheduleInterval)
		}
		return nil, host.Errorf(host.CodeInvalidInterval, "give exactly one of cron and interval_seconds, not both")
	}
	if cronExpr == "" {
		if zone != "" {
			return nil, host.Errorf(host.CodeInvalidTimezone, "timezone applies to cron schedules only")
		}
		if intervalSeconds < host.MinScheduleInterval || intervalSeconds > host.MaxScheduleInterval {
			return nil, host.Errorf(host.CodeInvalidInterval, "interval_seconds must be %d..%d, got %d",
				host.MinScheduleInterval, host.MaxScheduleInterval, intervalSeconds)
		}
		return &timing{anchor: anchor, interval: time.Duration(intervalSeconds) * time.Second}, nil
	}
	key := cronExpr + "\x00" + zone
	if tm, ok := timings.Load(key); ok {
		return tm.(*timing), nil
	}
	if host.LongerThan(cronExpr, 200) {
		return nil, host.Errorf(host.CodeInvalidCron, "cron is longer than 200 characters")
	}
	trimmed := strings.TrimSpace(cronExpr)
	if strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ=") {
		return nil, host.Errorf(host.CodeInvalidCron, "give the time zone in timezone, not in the expression")
	}
	if strings.HasPrefix(trimmed, "@every") {
		return nil, host.Errorf(host.CodeInvalidCron, "use interval_seconds for a fixed interval, not @every")
	}
	if host.LongerThan(zone, 100) {
		return nil, host.Errorf(host.CodeInvalidTimezone, "timezone is longer than 100 characters")
	}
	loc := time.UTC
	if zone != "" {
		var err error
		if strings.EqualFold(zone, "local") {
			return nil, host.Errorf(host.CodeInvalidTimezone, "timezone must name an IANA zone (e.g. Europe/Berlin), not Local")
		}
		if loc, err = time.LoadLocation(zone); err != nil {
			return nil, host.Errorf(host.CodeInvalidTimezone, "timezone %q is not an IANA zone name (e.g. Europe/Berlin)", zone)
		}
	}
	// The parser drops an empty element of a list ("0,,5"), which crontab
	// refuses: so does the gate, rather than read what was not written.
	if !strings.HasPrefix(trimmed, "@") {
		for i, f := range strings.Fields(trimmed) {
			if strings.HasPrefix(f, ",") || strings.HasSuffix(f, ",") || strings.Contains(f, ",,") {
				return nil, host.Errorf(host.CodeInvalidCron, "cron %q: field %d has an empty list element", cronExpr, i+1)
			}
		}
	}
	sched, err := cronParser.Parse(trimmed)
	if err != nil {
		return nil, host.Errorf(host.CodeInvalidCron, "cron %q: %v (five fields: minute hour day-of-month month day-of-week, or @hourly, @daily, @weekly, @monthly, @yearly)", cronExpr, err)
	}
	crontabDays(sched, trimmed)
	// An expression that can never fire (31 February) would make Next
	// return the zero time.
	if sched.Next(time.Now().In(loc)).IsZero() {
		return nil, host.Errorf(host.CodeInvalidCron, "cron %q never fires", cronExpr)
	}
	tm := &timing{cron: sched, loc: loc}
	if timingsCount.Add(1) <= maxCachedTimings {
		if _, loaded := timings.LoadOrStore(key, tm); loaded {
			timingsCount.Add(-1)
		}
	} else {
		timingsCount.Add(-1)
	}
	return tm, nil
}

// starBit is the parser's mark on a field written as "*" (cron's
// SpecSchedule keeps it in bit 63 of the field's bits).
const starBit = 1 << 63

// crontabDays makes the day fields combine as crontab(5) has them: when
// both day of month and day of week are restricted (neither starts with
// "*"), a day matching either fires; when either starts with "*", a day
// must match both. The parser marks a field unrestricted only when it is
// exactly "*" or "?", so "*/2" in one field and "1" in the other read as
// "odd days or Mondays"; crontab, Vixie cron and cronie fire on odd-dated
// Mondays only. The flag is what decides, so a field starting with "*"
// (or "?", the parser's other "any") gets it.
func crontabDays(sched cron.Schedule, expr string) {
	spec, ok := sched.(*cron.SpecSchedule)
	fields := strings.Fields(expr)
	if !ok || len(fields) != 5 {
		return
	}
	unrestricted := func(f string) bool { return strings.HasPrefix(f, "*") || strings.HasPrefix(f, "?") }
	if unrestricted(fields[2]) {
		spec.Dom |= starBit
	}
	if unrestricted(fields[4]) {
		spec.Dow |= starBit
	}
}

func scheduleTiming(s *host.Schedule) (*timing, error) {
	return compileTiming(s.Cron, s.Timezone, s.IntervalSeconds, s.AnchorAt)
}

// nextRuns lists n fires of s from its next one (none while paused).
func nextRuns(s *host.Schedule, n int) []time.Time {
	out := []time.Time{}
	if s.Paused || n <= 0 {
		return out
	}
	tm, err := scheduleTiming(s)
	if err != nil {
		return out
	}
	t := s.NextFireAt
	for len(out) < n && !t.IsZero() {
		out = append(out, t)
		t = tm.next(t)
	}
	return out
}

func viewOf(s *host.Schedule, n int) *ScheduleView {
	return &ScheduleView{Schedule: s, NextRuns: nextRuns(s, n)}
}

// checkTemplate validates a schedule's task template as an enqueue of it
// would be validated, and returns it with its params compacted.
func (e *Engine) checkTemplate(ctx context.Context, tenant string, tmpl host.ScheduleTemplate) (host.ScheduleTemplate, *host.TaskType, error) {
	f := taskFields{TaskType: tmpl.TaskType, Params: tmpl.Params, Priority: tmpl.Priority, Summary: tmpl.Summary,
		MaxRetries: tmpl.MaxRetries, Recipient: tmpl.Recipient}
	tt, err := e.checkTaskRequest(ctx, tenant, "template.", &f)
	if err == nil && f.Recipient != "" {
		err = e.checkRecipientRole(ctx, tenant, "template.", f.Recipient)
	}
	tmpl.Params, tmpl.Recipient = f.Params, f.Recipient
	return tmpl, tt, err
}

// checkScheduleName returns a schedule's name trimmed, or a 400.
func checkScheduleName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", host.Errorf(host.CodeBadRequest, "name is required: at most %d printable characters", host.MaxScheduleName)
	}
	if host.LongerThan(name, host.MaxScheduleName) || !printable(name) {
		return "", host.Errorf(host.CodeBadRequest, "name must be at most %d printable characters", host.MaxScheduleName)
	}
	return name, nil
}

// checkMissed checks a missed-runs policy and its cap, and returns them
// with their defaults (skip; a cap of 10 for run_all).
func checkMissed(p host.MissedPolicy, capN int) (host.MissedPolicy, int, error) {
	switch p {
	case "":
		p = host.MissedSkip
	case host.MissedSkip, host.MissedRunOnce, host.MissedRunAll:
	default:
		return "", 0, host.Errorf(host.CodeInvalidMissedPolicy, "missed_policy must be skip, run_once or run_all, got %q", p)
	}
	switch {
	case p != host.MissedRunAll && capN != 0:
		return "", 0, host.Errorf(host.CodeInvalidMissedPolicy, "missed_cap applies to run_all only")
	case p == host.MissedRunAll && capN == 0:
		capN = 10
	case capN < 0 || capN > host.MaxMissedCap:
		return "", 0, host.Errorf(host.CodeInvalidMissedPolicy, "missed_cap must be 1..%d, got %d", host.MaxMissedCap, capN)
	}
	return p, capN, nil
}

// checkGrace returns a schedule's grace in seconds (nil: the default), or
// a 400.
func checkGrace(g *int) (int, error) {
	grace := host.DefaultScheduleGrace
	if g != nil {
		grace = *g
	}
	if grace < 0 || grace > host.MaxScheduleGrace {
		return 0, host.Errorf(host.CodeInvalidMissedPolicy, "grace_seconds must be 0..%d, got %d", host.MaxScheduleGrace, grace)
	}
	return grace, nil
}

// CreateSchedule creates a schedule owned by actor and writes its
// schedule.created receipt in the same transaction. Its first fire is the
// first after now.
func (e *Engine) CreateSchedule(ctx context.Context, actor Actor, req CreateScheduleRequest) (*ScheduleView, error) {
	if actor.Tenant == "" || actor.Principal == "" {
		return nil, host.Errorf(host.CodeBadRequest, "the caller has no tenant or principal")
	}
	var err error
	if req.Name, err = checkScheduleName(req.Name); err != nil {
		return nil, err
	}
	if req.MissedPolicy, req.MissedCap, err = checkMissed(req.MissedPolicy, req.MissedCap); err != nil {
		return nil, err
	}
	grace, err := checkGrace(req.GraceSeconds)
	if err != nil {
		return nil, err
	}
	now := e.now()
	anchor := now.Truncate(time.Second)
	tm, err := compileTiming(req.Cron, req.Timezone, req.IntervalSeconds, anchor)
	if err != nil {
		return nil, err
	}
	first := tm.next(now)
	if first.IsZero() {
		// compileTiming checked the real clock; the parser looks five years
		// ahead of the gate's.
		return nil, host.Errorf(host.CodeInvalidCron, "cron %q has no fire in the next five years", req.Cron)
	}
	tmpl, _, err := e.checkTemplate(ctx, actor.Tenant, req.Template)
	if err != nil {
		return nil, err
	}
	s := &host.Schedule{
		ID: host.NewID(host.PrefixSchedule), Tenant: actor.Tenant, Owner: actor.Principal, Name: req.Name,
		Cron: strings.TrimSpace(req.Cron), Timezone: req.Timezone, IntervalSeconds: req.IntervalSeconds, AnchorAt: anchor,
		Template: tmpl, MissedPolicy: req.MissedPolicy, MissedCap: req.MissedCap, GraceSeconds: grace,
		Paused: req.Paused, NextFireAt: first, CreatedAt: now, UpdatedAt: now,
	}
	rc := e.scheduleReceipt(s, host.ReceiptScheduleCreated, actor.Principal, map[string]any{
		"schedule_id": s.ID, "name": s.Name, "cron": s.Cron, "timezone": s.Timezone,
		"interval_seconds": s.IntervalSeconds, "task_type": s.Template.TaskType,
		"missed_policy": s.MissedPolicy, "paused": s.Paused, "next_fire_at": s.NextFireAt,
	}, now)
	if err := rc.Validate(); err != nil {
		return nil, err
	}
	err = e.update(ctx, func(tx store.Tx) error {
		// The owner's cap. The owner's lock (LockResources: a
		// transaction-scoped advisory lock on PostgreSQL, held to the
		// commit) orders its creates across writers and hosts, so each
		// counts what the one before it committed and two cannot both
		// take the last place.
		if _, err := tx.LockResources(ctx, s.Tenant, []string{scheduleOwnerLockName(s.Owner)}); err != nil {
			return err
		}
		n, err := tx.CountSchedules(ctx, s.Tenant, s.Owner)
		if err != nil {
			return err
		}
		if n >= e.cfg.MaxSchedulesPerOwner {
			return host.Errorf(host.CodeQuotaExceeded, "%s owns %d schedules, its quota: delete one before creating another", s.Owner, n)
		}
		if err := tx.InsertSchedule(ctx, s); err != nil {
			return err
		}
		return appendValid(ctx, tx, rc, nil)
	})
	if err != nil {
		return nil, err
	}
	return viewOf(s, DefaultNextRuns), nil
}

// scheduleOwnerLockName is the name under which one owner's schedule
// creates lock each other (LockResources) while its quota is counted. A
// resource name cannot hold a NUL, so it names no resource.
func scheduleOwnerLockName(owner string) string { return "\x00schedules\x00" + owner }

// scheduleReceipt builds a receipt about s from by to its owner.
func (e *Engine) scheduleReceipt(s *host.Schedule, typ host.ReceiptType, by string, body map[string]any, now time.Time) *host.Receipt {
	return &host.Receipt{
		ID: host.NewID(host.PrefixReceipt), Tenant: s.Tenant, Type: typ, From: by, To: s.Owner,
		Parents: []string{}, Body: mustJSON(body), CreatedAt: now,
	}
}

// mayManage reports whether actor may see and change s: its owner, or an
// admin of its tenant.
func mayManage(actor Actor, s *host.Schedule) bool {
	return s.Tenant == actor.Tenant && (actor.Role == RoleAdmin || s.Owner == actor.Principal)
}

func scheduleNotFound(id string) error { return host.Errorf(host.CodeNotFound, "no schedule %s", id) }

// GetSchedule returns a schedule with its next n runs (1..MaxNextRuns; 0:
// the default). Another agent's schedule is not_found, as an unknown one.
func (e *Engine) GetSchedule(ctx context.Context, actor Actor, id string, n int) (*ScheduleView, error) {
	n, err := runsAsked(n)
	if err != nil {
		return nil, err
	}
	var s *host.Schedule
	err = e.view(ctx, func(r store.Reader) error {
		var err error
		s, err = r.GetSchedule(ctx, actor.Tenant, id)
		return err
	})
	if err != nil {
		if host.IsCode(err, host.CodeNotFound) {
			return nil, scheduleNotFound(id)
		}
		return nil, err
	}
	if !mayManage(actor, s) {
		return nil, scheduleNotFound(id)
	}
	return viewOf(s, n), nil
}

// ScheduleReceipts lists a schedule's own receipts (created, updated,
// paused, resumed, fired, skipped, deleted) in ledger order from the cursor,
// at most limit (1..500, default 100), with the cursor of the next page.
// The schedule's owner and the tenant's admins may read them, after a
// delete too (every one of them is addressed to the owner); anyone else,
// or an id no schedule ever had, is not_found.
func (e *Engine) ScheduleReceipts(ctx context.Context, actor Actor, id, cursor string, limit int) ([]*host.Receipt, string, error) {
	limit, err := pageSize(limit, MaxPage)
	if err != nil {
		return nil, "", err
	}
	return e.scheduleReceipts(ctx, actor, id, store.ReceiptFilter{Cursor: cursor, Limit: limit})
}

// LatestScheduleReceipts returns a schedule's last n receipts (1..100,
// default 10) in ledger order, for the same readers as ScheduleReceipts.
func (e *Engine) LatestScheduleReceipts(ctx context.Context, actor Actor, id string, n int) ([]*host.Receipt, error) {
	if n <= 0 || n > 100 {
		n = 10
	}
	out, _, err := e.scheduleReceipts(ctx, actor, id, store.ReceiptFilter{Latest: true, Limit: n})
	return out, err
}

func (e *Engine) scheduleReceipts(ctx context.Context, actor Actor, id string, f store.ReceiptFilter) ([]*host.Receipt, string, error) {
	if !host.IsID(host.PrefixSchedule, id) {
		return nil, "", scheduleNotFound(id)
	}
	f.Tenant, f.ScheduleID = actor.Tenant, id
	var out []*host.Receipt
	var cur string
	err := e.view(ctx, func(r store.Reader) error {
		s, err := r.GetSchedule(ctx, actor.Tenant, id)
		switch {
		case err == nil:
			if !mayManage(actor, s) {
				return scheduleNotFound(id)
			}
		case host.IsCode(err, host.CodeNotFound):
			// Deleted: its receipts stay, addressed to its owner.
			first, _, err := r.ListReceipts(ctx, store.ReceiptFilter{Tenant: actor.Tenant, ScheduleID: id, Limit: 1})
			if err != nil {
				return err
			}
			if len(first) == 0 || (actor.Role != RoleAdmin && first[0].To != actor.Principal) {
				return scheduleNotFound(id)
			}
		default:
			return err
		}
		out, cur, err = r.ListReceipts(ctx, f)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	// The index reads the id out of the body's text: keep only receipts
	// whose body names the schedule when read as JSON.
	kept := make([]*host.Receipt, 0, len(out))
	for _, rc := range out {
		var b struct {
			ScheduleID string `json:"schedule_id"`
		}
		if json.Unmarshal(rc.Body, &b) == nil && b.ScheduleID == id {
			kept = append(kept, rc)
		}
	}
	return kept, cur, nil
}

// runsAsked returns how many next runs a view lists: n, DefaultNextRuns for
// 0 (none asked for); n below 0 or above MaxNextRuns is a bad_request.
func runsAsked(n int) (int, error) {
	return inRange("next_runs", n, MaxNextRuns, DefaultNextRuns)
}

// ListSchedules lists the caller's schedules (an admin: the tenant's) by
// id, after the id cursor, at most limit (1..500, default 100), each with
// its next n runs. A cursor that is not a schedule id is a bad_request.
func (e *Engine) ListSchedules(ctx context.Context, actor Actor, cursor string, limit, n int) ([]*ScheduleView, string, error) {
	limit, err := pageSize(limit, MaxPage)
	if err != nil {
		return nil, "", err
	}
	n, err = runsAsked(n)
	if err != nil {
		return nil, "", err
	}
	owner := actor.Principal
	if actor.Role == RoleAdmin {
		owner = ""
	}
	if owner == "" && actor.Role != RoleAdmin {
		return nil, "", host.Errorf(host.CodeBadRequest, "the caller has no principal")
	}
	if cursor != "" && !host.IsID(host.PrefixSchedule, cursor) {
		// The cursor is the last schedule id of the previous page.
		return nil, "", host.Errorf(host.CodeBadRequest, "bad cursor %q", cursor)
	}
	var ss []*host.Schedule
	err = e.view(ctx, func(r store.Reader) error {
		var err error
		ss, err = r.ListSchedules(ctx, actor.Tenant, owner, cursor, limit+1)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(ss) > limit {
		ss = ss[:limit]
		next = ss[limit-1].ID
	}
	out := make([]*ScheduleView, 0, len(ss))
	for _, s := range ss {
		out = append(out, viewOf(s, n))
	}
	return out, next, nil
}

// changeSchedule reads a schedule the actor may manage inside a write
// transaction (locking it), lets change edit it, and writes it with a
// receipt of type typ when change reports a change.
func (e *Engine) changeSchedule(ctx context.Context, actor Actor, id string, typ host.ReceiptType, change func(s *host.Schedule, now time.Time) (bool, map[string]any, error)) (*host.Schedule, error) {
	now := e.now()
	var out *host.Schedule
	err := e.update(ctx, func(tx store.Tx) error {
		s, err := tx.GetSchedule(ctx, actor.Tenant, id)
		if err != nil {
			if host.IsCode(err, host.CodeNotFound) {
				return scheduleNotFound(id)
			}
			return err
		}
		if !mayManage(actor, s) {
			return scheduleNotFound(id)
		}
		changed, body, err := change(s, now)
		if err != nil {
			return err
		}
		out = s
		if !changed {
			return nil
		}
		s.UpdatedAt = now
		if typ == host.ReceiptScheduleDeleted {
			if err := tx.DeleteSchedule(ctx, s.Tenant, s.ID); err != nil {
				return err
			}
		} else if err := tx.UpdateSchedule(ctx, s); err != nil {
			return err
		}
		body["schedule_id"], body["name"] = s.ID, s.Name
		return appendReceipt(ctx, tx, e.scheduleReceipt(s, typ, actor.Principal, body, now), nil)
	})
	return out, err
}

// PauseSchedule stops a schedule's fires until ResumeSchedule; pausing a
// paused schedule changes nothing.
func (e *Engine) PauseSchedule(ctx context.Context, actor Actor, id string) (*ScheduleView, error) {
	s, err := e.changeSchedule(ctx, actor, id, host.ReceiptSchedulePaused, func(s *host.Schedule, now time.Time) (bool, map[string]any, error) {
		if s.Paused {
			return false, nil, nil
		}
		s.Paused, s.PausedReason = true, ""
		body := map[string]any{}
		// Fires already due that no firer pass has queued yet are not
		// run (the pause lands first): its receipt counts them, as a
		// schedule.skipped receipt counts the fires a policy does not run.
		if tm, err := scheduleTiming(s); err == nil {
			if n, first, last := dueFires(tm, s.NextFireAt, now); n > 0 {
				body["skipped"], body["first_fire_at"], body["last_fire_at"] = n, first, last
			}
		}
		return true, body, nil
	})
	if err != nil {
		return nil, err
	}
	return viewOf(s, DefaultNextRuns), nil
}

// ResumeSchedule lets a paused schedule fire again from its first fire
// after now: the fires its pause covered are not run (a pause is not an
// outage). Resuming a running schedule changes nothing.
//
// A schedule whose owner's keys are all revoked is not resumed
// (owner_revoked, 409): the firer would pause it again at its next fire.
func (e *Engine) ResumeSchedule(ctx context.Context, actor Actor, id string) (*ScheduleView, error) {
	if cur, err := e.GetSchedule(ctx, actor, id, 0); err != nil {
		return nil, err
	} else if cur.Paused {
		revoked, err := e.ownerRevoked(ctx, cur.Tenant, cur.Owner)
		if err != nil {
			return nil, err
		}
		if revoked {
			return nil, host.Errorf(host.CodeOwnerRevoked, "schedule %s's owner %s holds no live agent or admin key in its tenant: it can be resumed (by the owner or an admin) once the owner holds one again", id, cur.Owner)
		}
	}
	s, err := e.changeSchedule(ctx, actor, id, host.ReceiptScheduleResumed, func(s *host.Schedule, now time.Time) (bool, map[string]any, error) {
		if !s.Paused {
			return false, nil, nil
		}
		tm, err := scheduleTiming(s)
		if err != nil { // stored schedules compile; keep the one it had
			tm = nil
		}
		s.Paused, s.PausedReason = false, ""
		if tm != nil && s.NextFireAt.Before(now) {
			if next := tm.next(now); !next.IsZero() {
				s.NextFireAt = next
			} // else: the firer finds no fire after it and pauses it again
		}
		return true, map[string]any{"next_fire_at": s.NextFireAt}, nil
	})
	if err != nil {
		return nil, err
	}
	return viewOf(s, DefaultNextRuns), nil
}

// DeleteSchedule removes a schedule; the tasks it enqueued stay.
func (e *Engine) DeleteSchedule(ctx context.Context, actor Actor, id string) error {
	_, err := e.changeSchedule(ctx, actor, id, host.ReceiptScheduleDeleted, func(s *host.Schedule, _ time.Time) (bool, map[string]any, error) {
		return true, map[string]any{"fires": s.Fires}, nil
	})
	return err
}

// UpdateScheduleRequest changes a schedule's definition (PATCH): a field
// left out keeps its value. The timing is replaced whole when cron or
// interval_seconds is given — cron with timezone (left out: UTC), or
// interval_seconds, counted from the update — and timezone alone moves a
// cron schedule to another zone. A template given replaces the old one
// whole, checked as at create.
type UpdateScheduleRequest struct {
	Name            *string                `json:"name,omitempty"`
	Cron            *string                `json:"cron,omitempty"`
	Timezone        *string                `json:"timezone,omitempty"`
	IntervalSeconds *int64                 `json:"interval_seconds,omitempty"`
	Template        *host.ScheduleTemplate `json:"template,omitempty"`
	MissedPolicy    *host.MissedPolicy     `json:"missed_policy,omitempty"`
	MissedCap       *int                   `json:"missed_cap,omitempty"`
	GraceSeconds    *int                   `json:"grace_seconds,omitempty"`
}

// UpdateSchedule changes a schedule's definition and writes a
// schedule.updated receipt naming the fields that changed, in one
// transaction that holds the schedule's row (a fire under way on another
// host finishes first, or waits). A new timing takes effect from its first
// fire after now; otherwise the next fire stays. A request that changes
// nothing writes nothing. Another agent's schedule is not_found.
func (e *Engine) UpdateSchedule(ctx context.Context, actor Actor, id string, req UpdateScheduleRequest) (*ScheduleView, error) {
	if req == (UpdateScheduleRequest{}) {
		return nil, host.Errorf(host.CodeBadRequest, "nothing to change: give at least one of name, cron, timezone, interval_seconds, template, missed_policy, missed_cap, grace_seconds")
	}
	var err error
	if req.Name != nil {
		n, err := checkScheduleName(*req.Name)
		if err != nil {
			return nil, err
		}
		req.Name = &n
	}
	var grace int
	if req.GraceSeconds != nil {
		if grace, err = checkGrace(req.GraceSeconds); err != nil {
			return nil, err
		}
	}
	var tmpl host.ScheduleTemplate
	if req.Template != nil {
		if tmpl, _, err = e.checkTemplate(ctx, actor.Tenant, *req.Template); err != nil {
			return nil, err
		}
	}
	s, err := e.changeSchedule(ctx, actor, id, host.ReceiptScheduleUpdated, func(s *host.Schedule, now time.Time) (bool, map[string]any, error) {
		var changed []string
		if req.Name != nil && *req.Name != s.Name {
			s.Name = *req.Name
			changed = append(changed, "name")
		}
		if req.Cron != nil || req.IntervalSeconds != nil || req.Timezone != nil {
			cronExpr, zone, every := s.Cron, s.Timezone, s.IntervalSeconds
			if req.Cron != nil || req.IntervalSeconds != nil {
				cronExpr, zone, every = "", "", 0
				if req.Cron != nil {
					cronExpr = strings.TrimSpace(*req.Cron)
				}
				if req.IntervalSeconds != nil {
					every = *req.IntervalSeconds
				}
			}
			if req.Timezone != nil {
				zone = *req.Timezone
			}
			if cronExpr != s.Cron || zone != s.Timezone || every != s.IntervalSeconds {
				anchor := now.Truncate(time.Second)
				tm, err := compileTiming(cronExpr, zone, every, anchor)
				if err != nil {
					return false, nil, err
				}
				next := tm.next(now)
				if next.IsZero() {
					return false, nil, host.Errorf(host.CodeInvalidCron, "cron %q has no fire in the next five years", cronExpr)
				}
				for _, f := range []struct {
					name string
					diff bool
				}{{"cron", cronExpr != s.Cron}, {"timezone", zone != s.Timezone}, {"interval_seconds", every != s.IntervalSeconds}} {
					if f.diff {
						changed = append(changed, f.name)
					}
				}
				s.Cron, s.Timezone, s.IntervalSeconds, s.AnchorAt, s.NextFireAt = cronExpr, zone, every, anchor, next
			}
		}
		if req.MissedPolicy != nil || req.MissedCap != nil {
			p, c := s.MissedPolicy, s.MissedCap
			if req.MissedPolicy != nil && *req.MissedPolicy != s.MissedPolicy {
				// A new policy starts from its own default cap; the
				// same one given again keeps the cap (left out: kept).
				p, c = *req.MissedPolicy, 0
			}
			if req.MissedCap != nil {
				c = *req.MissedCap
			}
			p, c, err := checkMissed(p, c)
			if err != nil {
				return false, nil, err
			}
			if p != s.MissedPolicy {
				changed = append(changed, "missed_policy")
			}
			if c != s.MissedCap {
				changed = append(changed, "missed_cap")
			}
			s.MissedPolicy, s.MissedCap = p, c
		}
		if req.GraceSeconds != nil && grace != s.GraceSeconds {
			s.GraceSeconds = grace
			changed = append(changed, "grace_seconds")
		}
		if req.Template != nil && !sameTemplate(tmpl, s.Template) {
			s.Template = tmpl
			changed = append(changed, "template")
		}
		if len(changed) == 0 {
			return false, nil, nil
		}
		return true, map[string]any{
			"changed": changed, "cron": s.Cron, "timezone": s.Timezone, "interval_seconds": s.IntervalSeconds,
			"task_type": s.Template.TaskType, "missed_policy": s.MissedPolicy, "missed_cap": s.MissedCap,
			"grace_seconds": s.GraceSeconds, "next_fire_at": s.NextFireAt,
		}, nil
	})
	if err != nil {
		return nil, err
	}
	return viewOf(s, DefaultNextRuns), nil
}

// sameTemplate reports whether two checked templates are the same.
func sameTemplate(a, b host.ScheduleTemplate) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
