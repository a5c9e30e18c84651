package engine

import (
	"context"
	"slices"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Firing schedules, exactly once. Every host runs the firer. A pass reads
// the due schedules (no lock), checks their templates against their task
// types outside the writer, then, in ONE write transaction, claims the ones
// still due (store.ClaimSchedules: PostgreSQL's FOR UPDATE SKIP LOCKED,
// SQLite's single writer), enqueues a task for each fire it runs with its
// task.assigned and schedule.fired receipts, and advances next_fire_at. A
// fire is therefore taken by one transaction: another host skips the locked
// row, and reads it again only after the commit moved next_fire_at past the
// fire. A host killed mid-pass commits nothing, and the fire is taken again
// by the next pass on any host. As a second guard each fired task carries
// the idempotency key "schedule:<id>:<fire time>" (its owner's key space),
// and a fire whose key already holds a task is not enqueued again.

// fireBatch bounds the schedules one pass claims in one transaction: a
// pass rides in the writer's batch, and a short one lets the lease calls
// queued behind it through between passes (200 held PostgreSQL's writer
// long enough to triple the lease p99 during a burst of 10,000 fires;
// docs/performance.md). maxFiresPerClaim bounds the tasks one schedule
// enqueues in one claim (the rest, still due, go to the next pass).
const (
	fireBatch        = 25
	maxFiresPerClaim = 200
	// maxFireSteps bounds the cron fires one claim walks to find the
	// missed ones: a schedule further behind than that counts the older
	// fires as skipped without naming each.
	maxFireSteps = 100_000
)

// maxUnjudgedPerPass bounds the validator calls that may time out in one
// pass (a deadline each, 2 s by default): past it, the schedules still to
// be checked wait for the next pass. maxReadPast bounds how many set-aside
// schedules a pass's read goes past.
const (
	maxUnjudgedPerPass = 2
	maxReadPast        = 2000
)

// minFireLag is the least lateness a fire is allowed whatever its grace:
// the firer reaches a fire a tick (and a busy writer) after it is due, so a
// grace below that (grace_seconds 0) would make every fire missed and a
// skip schedule would never fire.
const minFireLag = 5 * time.Second

// fireLag is how late the firer itself may reach a fire: minFireLag, or two
// ticks when the tick is longer.
func (e *Engine) fireLag() time.Duration {
	return max(minFireLag, 2*e.cfg.ScheduleTick)
}

// scheduleLoop runs FireSchedules every Config.ScheduleTick.
func (e *Engine) scheduleLoop() {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.ScheduleTick)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			if _, err := e.FireSchedules(context.Background()); err != nil {
				e.log.Warn("firing schedules failed", "err", err)
			}
		}
	}
}

// firePrep is what a pass learned about a schedule outside the writer: its
// template's task type, or why no task can be enqueued from it now, and
// whether its owner's keys are all revoked.
type firePrep struct {
	tt      *host.TaskType
	err     error
	revoked bool
	// read is the schedule's updated_at as the pass read it: a claimed row
	// changed since (updated, paused, resumed) is left to the next pass,
	// which checks what it holds now.
	read time.Time
}

// firedTask is a task a pass enqueued, for the wake-ups after the commit.
type firedTask struct {
	tenant, typ string
	ready       bool
}

// FireSchedules runs every fire due by the engine's clock, in passes of up
// to fireBatch schedules, and returns how many tasks it enqueued.
func (e *Engine) FireSchedules(ctx context.Context) (int, error) {
	total := 0
	for {
		n, more, err := e.firePass(ctx)
		total += n
		if err != nil || !more {
			return total, err
		}
		select {
		case <-e.stop:
			return total, nil
		default:
		}
	}
}

// fireTenant is the tenant a fire pass's enqueues are bulk work for: the
// one tenant of all its schedules, else none. A pass of several tenants'
// fires is not held back by one tenant's backlog (store.BulkUpdate): it
// enqueues at most fireBatch tasks, whatever any tenant's backlog.
func fireTenant(due []*host.Schedule) string {
	for _, s := range due[1:] {
		if s.Tenant != due[0].Tenant {
			return ""
		}
	}
	return due[0].Tenant
}

func (e *Engine) firePass(ctx context.Context) (int, bool, error) {
	now := e.now()
	var due []*host.Schedule
	// The schedules set aside (firedefer.go) are read past, so that as
	// many others as a pass holds are still found behind them.
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		due, err = r.DueSchedules(ctx, now, fireBatch+min(e.fireDefer.active(now), maxReadPast))
		return err
	}); err != nil {
		return 0, false, err
	}
	due = slices.DeleteFunc(due, func(s *host.Schedule) bool { return e.fireDefer.held(s.ID, now) })
	if len(due) > fireBatch {
		due = due[:fireBatch]
	}
	if len(due) == 0 {
		return 0, false, nil
	}
	prep := make(map[string]firePrep, len(due))
	ids := make([]string, 0, len(due))
	kept := make([]*host.Schedule, 0, len(due)) // the schedules this pass claims
	revoked := map[[2]string]bool{}             // (tenant, owner) → its keys are all revoked
	// A template its validator could not judge sets that schedule aside
	// (firedefer.go). In this pass, the other schedules of its task type
	// are left for the next one without a call (the validator is likely
	// slow for them too, but may not be: they get their own call then),
	// and after maxUnjudgedPerPass such calls every schedule still to be
	// checked is: a pass costs at most that many deadlines.
	unjudged := map[[2]string]bool{}
	for _, s := range due {
		select {
		case <-e.stop:
			return 0, false, nil // closing: the fires are the next start's
		default:
		}
		typ := [2]string{s.Tenant, s.Template.TaskType}
		if unjudged[typ] || len(unjudged) >= maxUnjudgedPerPass {
			continue
		}
		owner := [2]string{s.Tenant, s.Owner}
		r, seen := revoked[owner]
		if !seen {
			var err error
			if r, err = e.ownerRevoked(ctx, s.Tenant, s.Owner); err != nil {
				return 0, false, err
			}
			revoked[owner] = r
		}
		if r {
			ids, kept = append(ids, s.ID), append(kept, s)
			prep[s.ID] = firePrep{revoked: true, read: s.UpdatedAt}
			continue
		}
		_, tt, err := e.checkTemplate(ctx, s.Tenant, s.Template)
		switch {
		case err == nil || isTemplateFault(err):
			e.fireDefer.clear(s.ID)
		case isPluginTransient(err):
			// Its validator cannot judge the template now: this
			// schedule waits, the pass goes on with the others.
			wait := e.fireDefer.deferFire(s.ID, now)
			e.log.Warn("schedule's template could not be checked; its fires wait", "tenant", s.Tenant,
				"schedule", s.ID, "task_type", s.Template.TaskType, "retry_in", wait, "err", err)
			unjudged[typ] = true
			continue
		default:
			return 0, false, err // the store, not the template: try again later
		}
		ids, kept = append(ids, s.ID), append(kept, s)
		prep[s.ID] = firePrep{tt: tt, err: err, read: s.UpdatedAt}
	}
	if len(ids) == 0 {
		return 0, false, nil
	}
	var fired []firedTask
	var claimed int
	// The types the pass may enqueue are its bulk work's (the enqueue
	// budget's keys, store.BulkUpdate).
	var types []string
	for _, p := range prep {
		if p.tt != nil && !slices.Contains(types, p.tt.Name) {
			types = append(types, p.tt.Name)
		}
	}
	err := e.update(store.BulkUpdate(ctx, fireTenant(kept), types...), func(tx store.Tx) error {
		fired, claimed = fired[:0], 0
		ss, err := tx.ClaimSchedules(ctx, ids, now)
		if err != nil {
			return err
		}
		claimed = len(ss)
		for _, s := range ss {
			p, ok := prep[s.ID]
			if !ok || !p.read.Equal(s.UpdatedAt) {
				continue
			}
			if err := e.fireOne(ctx, tx, s, p, now, &fired); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	for _, f := range fired {
		e.emit(Event{Kind: EvEnqueued, Tenant: f.tenant, TaskType: f.typ})
		if f.ready {
			e.waiters.wake(f.tenant, f.typ, 1)
		}
	}
	// Another pass when this one was full and claimed something (a pass
	// whose rows other hosts hold stops: they fire them).
	return len(fired), len(due) == fireBatch && claimed > 0, nil
}

// isTemplateFault reports whether err is the template's (a task type gone,
// disabled, or params it no longer accepts) rather than the store's.
func isTemplateFault(err error) bool {
	switch host.ErrorCode(err) {
	case host.CodeDatabaseUnavailable, host.CodeInternal, host.CodeBusy, host.CodePluginNotReady, host.CodePluginTimeout:
		return false
	}
	return true
}

// isPluginTransient reports whether err is a plugin's that passes by
// itself (a call past its deadline, a plugin in its first load, too many
// calls at once): the template was not judged.
func isPluginTransient(err error) bool {
	switch host.ErrorCode(err) {
	case host.CodePluginNotReady, host.CodePluginTimeout, host.CodeBusy:
		return true
	}
	return false
}

// dueFires counts the fires of tm from from (a schedule's next fire) up to
// now, with the first and the last: the fires due that no firer pass has
// queued. A cron schedule's walk stops after maxFireSteps fires.
func dueFires(tm *timing, from, now time.Time) (n int64, first, last time.Time) {
	if from.IsZero() || from.After(now) {
		return 0, first, last
	}
	if tm.cron == nil {
		n = int64(now.Sub(from)/tm.interval) + 1
		return n, from, from.Add(time.Duration(n-1) * tm.interval)
	}
	for t, steps := from, 0; !t.After(now) && steps < maxFireSteps; steps++ {
		if n == 0 {
			first = t
		}
		n, last = n+1, t
		next := tm.next(t)
		if !next.After(t) {
			break
		}
		t = next
	}
	return n, first, last
}

// fireOne runs the fires of one claimed schedule by its missed-run policy
// and advances it.
func (e *Engine) fireOne(ctx context.Context, tx store.Tx, s *host.Schedule, p firePrep, now time.Time, fired *[]firedTask) error {
	if p.revoked {
		// The owner can no longer queue a task itself: its schedule stops
		// too, paused with the reason, until the owner (with a live key
		// again) or an admin resumes it.
		s.Paused, s.PausedReason, s.UpdatedAt = true, host.PausedOwnerRevoked, now
		if err := tx.UpdateSchedule(ctx, s); err != nil {
			return err
		}
		e.log.Warn("schedule's owner holds no live key; paused", "tenant", s.Tenant, "schedule", s.ID, "owner", s.Owner)
		return appendReceipt(ctx, tx, e.scheduleReceipt(s, host.ReceiptSchedulePaused, GatePrincipal, map[string]any{
			"schedule_id": s.ID, "name": s.Name, "reason": host.PausedOwnerRevoked,
		}, now), nil)
	}
	tm, err := scheduleTiming(s)
	if err != nil { // a stored schedule always compiles; never fire it in a loop
		s.Paused, s.UpdatedAt = true, now
		return tx.UpdateSchedule(ctx, s)
	}
	grace := max(time.Duration(s.GraceSeconds)*time.Second, e.fireLag())
	keep := 0
	switch s.MissedPolicy {
	case host.MissedRunOnce:
		keep = 1
	case host.MissedRunAll:
		keep = max(s.MissedCap, 1)
	}
	var missedTail []time.Time // the latest missed fires, at most keep
	var missed int64
	var firstMissed, lastMissed time.Time
	var lastSkipped time.Time // the latest missed fire not run (the tail runs)
	var onTime []time.Time
	t := s.NextFireAt
	lateBefore := now.Add(-grace) // a fire before this is missed
	if tm.cron == nil && t.Before(lateBefore) {
		// An interval's missed fires, counted without walking them.
		m := int64((lateBefore.Sub(t) + tm.interval - 1) / tm.interval)
		missed, firstMissed = m, t
		lastMissed = t.Add(time.Duration(m-1) * tm.interval)
		if m > int64(keep) {
			lastSkipped = t.Add(time.Duration(m-int64(keep)-1) * tm.interval)
		}
		for i := max(m-int64(keep), 0); i < m; i++ {
			missedTail = append(missedTail, t.Add(time.Duration(i)*tm.interval))
		}
		t = t.Add(time.Duration(m) * tm.interval)
	}
	// The cron parser answers the zero time when it finds no fire within
	// five years of t: the schedule then has no next fire the gate can
	// name, and is paused after the fires before it (never walked for
	// ever).
	exhausted := false
	advance := func(next time.Time) {
		if next.IsZero() || !next.After(t) {
			exhausted = true
			return
		}
		t = next
	}
	if t.IsZero() {
		exhausted = true
	}
	for steps := 0; !exhausted && !t.After(now) && len(onTime) < maxFiresPerClaim; steps++ {
		if steps == maxFireSteps { // far behind: go on from the first on-time fire
			advance(tm.next(lateBefore.Add(-time.Microsecond)))
			continue
		}
		if t.Before(lateBefore) {
			if missed == 0 {
				firstMissed = t
			}
			missed++
			lastMissed = t
			if keep > 0 {
				if len(missedTail) == keep {
					lastSkipped = missedTail[0]
					missedTail = missedTail[1:]
				}
				missedTail = append(missedTail, t)
			} else {
				lastSkipped = t
			}
		} else {
			onTime = append(onTime, t)
		}
		advance(tm.next(t))
	}
	run := append(missedTail, onTime...)
	skipped := missed - int64(len(missedTail))
	if p.err != nil {
		// None runs: every due fire is skipped.
		skipped, run = missed+int64(len(onTime)), nil
		lastSkipped = lastMissed
		if missed == 0 && len(onTime) > 0 {
			firstMissed = onTime[0]
		}
		if len(onTime) > 0 {
			lastSkipped = onTime[len(onTime)-1]
		}
	}
	actor := Actor{Tenant: s.Tenant, Principal: s.Owner, Role: RoleAgent}
	for _, ft := range run {
		task, err := e.fireTask(ctx, tx, actor, s, p.tt, ft, now)
		if err != nil {
			return err
		}
		if task == nil {
			continue // this fire's task exists already
		}
		s.Fires++
		*fired = append(*fired, firedTask{tenant: task.Tenant, typ: task.Type, ready: !task.AvailableAt.After(now)})
	}
	if skipped > 0 {
		body := map[string]any{
			"schedule_id": s.ID, "name": s.Name, "skipped": skipped, "first_fire_at": firstMissed,
			"last_fire_at": lastSkipped, "missed_policy": s.MissedPolicy, // of the fires not run
		}
		skip := &host.ScheduleSkip{At: now, Skipped: skipped, FirstFireAt: firstMissed, LastFireAt: lastSkipped}
		if p.err != nil {
			body["error"], body["detail"] = host.ErrorCode(p.err), host.ErrorDetail(p.err)
			skip.Error, skip.Detail = host.ErrorCode(p.err), host.ErrorDetail(p.err)
		}
		rc := e.scheduleReceipt(s, host.ReceiptScheduleSkipped, GatePrincipal, body, now)
		if err := appendReceipt(ctx, tx, rc, nil); err != nil {
			return err
		}
		// The schedule's view shows the last skip without a read of the
		// ledger.
		skip.ReceiptID = rc.ID
		s.LastSkip = skip
	}
	if len(run) > 0 {
		last := run[len(run)-1]
		s.LastFireAt = &last
	}
	s.NextFireAt, s.UpdatedAt = t, now
	if exhausted {
		// NextFireAt keeps its last fire (already run or skipped above):
		// a resume starts again from the first fire after it.
		s.Paused, s.PausedReason = true, host.PausedNoNextFire
		e.log.Warn("schedule has no next fire within five years; paused", "tenant", s.Tenant, "schedule", s.ID, "cron", s.Cron, "timezone", s.Timezone)
	}
	return tx.UpdateSchedule(ctx, s)
}

// ownerRevoked reports whether a schedule's owner can no longer act in its
// tenant: it has held agent or admin keys there and every one of them is
// revoked. A principal that never held a key (a local `gate mcp
// --principal` session, the operator's own) is not revoked.
func (e *Engine) ownerRevoked(ctx context.Context, tenant, owner string) (bool, error) {
	var keys []store.Key
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		keys, err = r.PrincipalKeys(ctx, tenant, owner)
		return err
	}); err != nil {
		return false, err
	}
	held := false
	for _, k := range keys {
		if k.Role != RoleAgent && k.Role != RoleAdmin {
			continue
		}
		if k.RevokedAt == nil {
			return false, nil
		}
		held = true
	}
	return held, nil
}

// FireKey is the idempotency key of the task a schedule's fire at ft
// enqueues.
func FireKey(scheduleID string, ft time.Time) string {
	return "schedule:" + scheduleID + ":" + ft.UTC().Format(time.RFC3339Nano)
}

// fireTask enqueues the task of s's fire at ft inside tx as s's owner, with
// its task.assigned and schedule.fired receipts; nil when the fire's task
// exists already.
func (e *Engine) fireTask(ctx context.Context, tx store.Tx, actor Actor, s *host.Schedule, tt *host.TaskType, ft, now time.Time) (*host.Task, error) {
	tmpl := s.Template
	f := taskFields{TaskType: tmpl.TaskType, Params: tmpl.Params, Priority: tmpl.Priority, Summary: tmpl.Summary,
		MaxRetries: tmpl.MaxRetries, Recipient: tmpl.Recipient}
	t := f.task(tt, actor.Tenant, actor.Principal)
	if t.Recipient == "" {
		t.Recipient = s.Owner
	}
	t.ID, t.IdempotencyKey = host.NewID(host.PrefixTask), FireKey(s.ID, ft)
	t.CreatedAt, t.UpdatedAt, t.AvailableAt = now, now, now
	old, err := tx.FindTaskByIdempotency(ctx, store.IdempotencyKeyOf(t))
	if err != nil || old != nil {
		return nil, err
	}
	assigned := &host.Receipt{
		ID: host.NewID(host.PrefixReceipt), Tenant: t.Tenant, Type: host.ReceiptAssigned,
		From: GatePrincipal, To: t.Recipient, TaskID: t.ID, Parents: []string{},
		Body: mustJSON(map[string]any{
			"task_type": t.Type, "priority": t.Priority, "queued_by": t.CreatedBy,
			"task_summary": t.Summary, "available_at": t.AvailableAt,
			"schedule_id": s.ID, "fire_at": ft,
		}),
		CreatedAt: now,
	}
	t.AssignReceipt = assigned.ID
	if err := tx.InsertTask(ctx, t); err != nil {
		return nil, err
	}
	if err := appendReceipt(ctx, tx, assigned, nil); err != nil {
		return nil, err
	}
	firedRc := e.scheduleReceipt(s, host.ReceiptScheduleFired, GatePrincipal, map[string]any{
		"schedule_id": s.ID, "name": s.Name, "fire_at": ft, "task_id": t.ID,
	}, now)
	firedRc.TaskID = t.ID
	if err := appendReceipt(ctx, tx, firedRc, nil); err != nil {
		return nil, err
	}
	return t, nil
}
