package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Schedules (issue 39): the fires of cron and interval schedules, their
// missed-run policies, pause and resume, one fire per occurrence across
// writers, and the owner's privacy.

func scheduleCases() []struct {
	name string
	fn   func(*testing.T, *Bundle)
} {
	return []struct {
		name string
		fn   func(*testing.T, *Bundle)
	}{
		{"ScheduleCRUD", testScheduleCRUD},
		{"ScheduleRefusesBadInput", testScheduleBadInput},
		{"ScheduleInvisibleToOtherAgents", testScheduleHostile},
		{"ScheduleIntervalFires", testScheduleInterval},
		{"ScheduleCronInZoneAcrossDST", testScheduleCronDST},
		{"SchedulePauseResume", testSchedulePauseResume},
		{"ScheduleUpdate", testScheduleUpdate},
		{"ScheduleUpdateBetweenReadAndClaim", testScheduleUpdateRacesFire},
		{"ScheduleMissedPolicies", testScheduleMissed},
		{"ScheduleFiresOnceAcrossEngines", testScheduleFiresOnce},
		{"ScheduleTemplateGone", testScheduleTemplateGone},
		{"ScheduleReceiptsListed", testScheduleReceipts},
		{"ScheduleGraceZeroStillFires", testScheduleGraceZero},
		{"ScheduleQuotaPerOwner", testScheduleQuota},
		{"ScheduleQuotaHoldsUnderConcurrentCreates", testScheduleQuotaConcurrent},
		{"ScheduleWithNoNextFireDoesNotWedgeTheFirer", testScheduleNoNextFire},
		{"SchedulePoisonTemplateDoesNotStopOthers", testSchedulePoison},
		{"ScheduleOwnerRevokedStopsFiring", testScheduleOwnerRevoked},
		{"EveryWayToQueueRefusesAlike", testQueueRefusesAlike},
	}
}

func (b *Bundle) createSchedule(t testing.TB, req engine.CreateScheduleRequest) *engine.ScheduleView {
	t.Helper()
	if req.Template.TaskType == "" {
		req.Template = host.ScheduleTemplate{TaskType: "work", Params: json.RawMessage(`{"n": 7}`)}
	}
	v, err := b.Engine.CreateSchedule(b.Ctx, b.Agent, req)
	if err != nil {
		t.Fatalf("CreateSchedule(%s): %v", req.Name, err)
	}
	return v
}

func (b *Bundle) fire(t testing.TB) int {
	t.Helper()
	n, err := b.Engine.FireSchedules(b.Ctx)
	if err != nil {
		t.Fatalf("FireSchedules: %v", err)
	}
	return n
}

// firedAt returns the fire times of the tasks schedule id enqueued, in
// order, read back from their idempotency keys, and fails on a fire
// enqueued twice.
func (b *Bundle) firedAt(t testing.TB, id string) []time.Time {
	t.Helper()
	var out []time.Time
	seen := map[string]bool{}
	cursor := ""
	for {
		ts, next, err := b.Engine.ListTasks(b.Ctx, b.Admin, store.TaskFilter{Cursor: cursor, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			k, ok := strings.CutPrefix(tk.IdempotencyKey, "schedule:"+id+":")
			if !ok {
				continue
			}
			if seen[k] {
				t.Fatalf("fire %s of %s enqueued twice", k, id)
			}
			seen[k] = true
			at, err := time.Parse(time.RFC3339Nano, k)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, at)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

func every(start time.Time, step time.Duration, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = start.Add(time.Duration(i) * step)
	}
	return out
}

func wantTimes(t testing.TB, what string, got, want []time.Time) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d fires %v, want %d %v", what, len(got), got, len(want), want)
	}
	for i := range got {
		if !got[i].Equal(want[i]) {
			t.Fatalf("%s: fire %d at %v, want %v (all: %v)", what, i, got[i], want[i], got)
		}
	}
}

func testScheduleCRUD(t *testing.T, b *Bundle) {
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "nightly", Cron: "0 3 * * *", Timezone: "Europe/Berlin"})
	if v.Owner != "agent.kee" || v.MissedPolicy != host.MissedSkip || v.GraceSeconds != host.DefaultScheduleGrace || v.Paused {
		t.Fatalf("defaults: %+v", v.Schedule)
	}
	// 03:00 in Berlin is 02:00 UTC in January.
	want := every(time.Date(2026, 1, 5, 2, 0, 0, 0, time.UTC), 24*time.Hour, 5)
	wantTimes(t, "next runs", v.NextRuns, want)
	if _, err := b.Engine.CreateSchedule(b.Ctx, b.Agent, engine.CreateScheduleRequest{Name: "nightly", IntervalSeconds: 5,
		Template: host.ScheduleTemplate{TaskType: "work"}}); !host.IsCode(err, host.CodeConflict) {
		t.Fatalf("a second schedule of the same name: %v, want conflict", err)
	}
	got, err := b.Engine.GetSchedule(b.Ctx, b.Agent, v.ID, 3)
	if err != nil || len(got.NextRuns) != 3 || got.Name != "nightly" || string(got.Template.Params) != `{"n":7}` {
		t.Fatalf("get: %+v %v", got, err)
	}
	b.createSchedule(t, engine.CreateScheduleRequest{Name: "often", IntervalSeconds: 30})
	list, next, err := b.Engine.ListSchedules(b.Ctx, b.Agent, "", 1, 2)
	if err != nil || len(list) != 1 || next == "" || len(list[0].NextRuns) != 2 {
		t.Fatalf("list page 1: %d %q %v", len(list), next, err)
	}
	list2, next2, err := b.Engine.ListSchedules(b.Ctx, b.Agent, next, 1, 0)
	if err != nil || len(list2) != 1 || next2 != "" || list2[0].ID == list[0].ID {
		t.Fatalf("list page 2: %+v %q %v", list2, next2, err)
	}
	if err := b.Engine.DeleteSchedule(b.Ctx, b.Agent, v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.GetSchedule(b.Ctx, b.Agent, v.ID, 0); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("deleted schedule: %v", err)
	}
	if err := b.Engine.DeleteSchedule(b.Ctx, b.Agent, v.ID); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("deleting again: %v", err)
	}
}

func testScheduleBadInput(t *testing.T, b *Bundle) {
	tmpl := host.ScheduleTemplate{TaskType: "work"}
	for _, c := range []struct {
		name string
		req  engine.CreateScheduleRequest
		code string
	}{
		{"bad cron", engine.CreateScheduleRequest{Name: "a", Cron: "61 * * * *", Template: tmpl}, host.CodeInvalidCron},
		{"six fields", engine.CreateScheduleRequest{Name: "a", Cron: "0 0 0 * * *", Template: tmpl}, host.CodeInvalidCron},
		{"never", engine.CreateScheduleRequest{Name: "a", Cron: "0 0 31 2 *", Template: tmpl}, host.CodeInvalidCron},
		{"zone in expression", engine.CreateScheduleRequest{Name: "a", Cron: "CRON_TZ=UTC 0 * * * *", Template: tmpl}, host.CodeInvalidCron},
		{"@every", engine.CreateScheduleRequest{Name: "a", Cron: "@every 1m", Template: tmpl}, host.CodeInvalidCron},
		{"bad zone", engine.CreateScheduleRequest{Name: "a", Cron: "@hourly", Timezone: "Mars/Olympus", Template: tmpl}, host.CodeInvalidTimezone},
		{"Local", engine.CreateScheduleRequest{Name: "a", Cron: "@hourly", Timezone: "Local", Template: tmpl}, host.CodeInvalidTimezone},
		{"zone on interval", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: 5, Timezone: "UTC", Template: tmpl}, host.CodeInvalidTimezone},
		{"neither", engine.CreateScheduleRequest{Name: "a", Template: tmpl}, host.CodeInvalidInterval},
		{"both", engine.CreateScheduleRequest{Name: "a", Cron: "@hourly", IntervalSeconds: 5, Template: tmpl}, host.CodeInvalidInterval},
		{"interval 0.5", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: -1, Template: tmpl}, host.CodeInvalidInterval},
		{"interval too long", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: host.MaxScheduleInterval + 1, Template: tmpl}, host.CodeInvalidInterval},
		{"policy", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: 5, MissedPolicy: "later", Template: tmpl}, host.CodeInvalidMissedPolicy},
		{"cap", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: 5, MissedPolicy: host.MissedRunAll, MissedCap: 101, Template: tmpl}, host.CodeInvalidMissedPolicy},
		{"cap on skip", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: 5, MissedCap: 3, Template: tmpl}, host.CodeInvalidMissedPolicy},
		{"grace", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: 5, GraceSeconds: ptrInt(-1), Template: tmpl}, host.CodeInvalidMissedPolicy},
		{"no name", engine.CreateScheduleRequest{IntervalSeconds: 5, Template: tmpl}, host.CodeBadRequest},
		{"no type", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: 5}, host.CodeBadRequest},
		{"unknown type", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: 5, Template: host.ScheduleTemplate{TaskType: "nope"}}, host.CodeUnknownTaskType},
		{"params", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: 5, Template: host.ScheduleTemplate{TaskType: "work", Params: json.RawMessage(`{"n":-1}`)}}, host.CodeInvalidParams},
		{"priority", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: 5, Template: host.ScheduleTemplate{TaskType: "work", Priority: 11}}, host.CodeBadRequest},
		{"workflow recipient", engine.CreateScheduleRequest{Name: "a", IntervalSeconds: 5, Template: host.ScheduleTemplate{TaskType: "work", Recipient: host.WorkflowFinalRecipient("WF-x")}}, host.CodeBadRequest},
	} {
		_, err := b.Engine.CreateSchedule(b.Ctx, b.Agent, c.req)
		if !host.IsCode(err, c.code) {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	list, _, err := b.Engine.ListSchedules(b.Ctx, b.Admin, "", 0, 0)
	if err != nil || len(list) != 0 {
		t.Fatalf("refused schedules were stored: %d %v", len(list), err)
	}
}

func testScheduleHostile(t *testing.T, b *Bundle) {
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "mine", IntervalSeconds: 60})
	mallory := engine.Actor{Tenant: "acme", Principal: "agent.mallory", Role: engine.RoleAgent}
	foreignAdmin := engine.Actor{Tenant: "globex", Principal: "ops", Role: engine.RoleAdmin}
	for _, a := range []engine.Actor{mallory, foreignAdmin} {
		for _, id := range []string{v.ID, "S-01UNKNOWN"} {
			_, getErr := b.Engine.GetSchedule(b.Ctx, a, id, 0)
			_, pauseErr := b.Engine.PauseSchedule(b.Ctx, a, id)
			_, resumeErr := b.Engine.ResumeSchedule(b.Ctx, a, id)
			delErr := b.Engine.DeleteSchedule(b.Ctx, a, id)
			for _, err := range []error{getErr, pauseErr, resumeErr, delErr} {
				if !host.IsCode(err, host.CodeNotFound) || !strings.Contains(host.ErrorDetail(err), "no schedule "+id) {
					t.Fatalf("%s on %s: %v, want not_found like an unknown id", a.Principal, id, err)
				}
			}
		}
		list, _, err := b.Engine.ListSchedules(b.Ctx, a, "", 0, 0)
		if err != nil || len(list) != 0 {
			t.Fatalf("%s/%s lists %d schedules (%v)", a.Tenant, a.Principal, len(list), err)
		}
	}
	if got, err := b.Engine.GetSchedule(b.Ctx, b.Agent, v.ID, 0); err != nil || got.Paused {
		t.Fatalf("the owner's schedule after the attempts: %+v %v", got, err)
	}
	// The tenant's admin sees and pauses it.
	list, _, err := b.Engine.ListSchedules(b.Ctx, b.Admin, "", 0, 0)
	if err != nil || len(list) != 1 {
		t.Fatalf("admin list: %d %v", len(list), err)
	}
	p, err := b.Engine.PauseSchedule(b.Ctx, b.Admin, v.ID)
	if err != nil || !p.Paused || len(p.NextRuns) != 0 {
		t.Fatalf("admin pause: %+v %v", p, err)
	}
}

func testScheduleInterval(t *testing.T, b *Bundle) {
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "tick", IntervalSeconds: 10})
	start := Epoch.Add(10 * time.Second)
	if !v.NextFireAt.Equal(start) {
		t.Fatalf("first fire %v, want %v", v.NextFireAt, start)
	}
	if n := b.fire(t); n != 0 {
		t.Fatalf("fired %d before the first fire", n)
	}
	b.Clock.Advance(10 * time.Second)
	if n := b.fire(t); n != 1 {
		t.Fatalf("fired %d at the first fire", n)
	}
	b.Clock.Advance(5 * time.Second)
	if n := b.fire(t); n != 0 {
		t.Fatalf("fired %d between fires", n)
	}
	b.Clock.Advance(35 * time.Second) // 4 fires late, all within the grace
	if n := b.fire(t); n != 4 {
		t.Fatalf("fired %d after 4 fires within the grace, want 4", n)
	}
	if n := b.fire(t); n != 0 {
		t.Fatalf("fired %d again", n)
	}
	wantTimes(t, "interval", b.firedAt(t, v.ID), every(start, 10*time.Second, 5))
	got, err := b.Engine.GetSchedule(b.Ctx, b.Agent, v.ID, 0)
	if err != nil || got.Fires != 5 || !got.NextFireAt.Equal(start.Add(50*time.Second)) || got.LastFireAt == nil {
		t.Fatalf("after 5 fires: %+v %v", got, err)
	}
	// The fired task: the owner's, recording its schedule and fire.
	var tk *host.Task
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		tk, err = r.FindTaskByIdempotency(b.Ctx, store.IdempotencyKey{Tenant: "acme", Producer: "agent.kee", Recipient: "agent.kee", Key: engine.FireKey(v.ID, start)})
		return err
	}); err != nil || tk == nil {
		t.Fatalf("first fire's task: %v %v", tk, err)
	}
	if tk.CreatedBy != "agent.kee" || tk.Type != "work" || string(tk.Params) != `{"n":7}` || tk.State != host.StateQueued {
		t.Fatalf("fired task: %+v", tk)
	}
	types := b.ReceiptTypes(t, tk.ID)
	if !containsType(types, host.ReceiptAssigned) || !containsType(types, host.ReceiptScheduleFired) {
		t.Fatalf("fired task's receipts: %v", types)
	}
	for _, rc := range b.Receipts(t, tk.ID) {
		if rc.Type == host.ReceiptAssigned && !strings.Contains(string(rc.Body), `"schedule_id":"`+v.ID+`"`) {
			t.Fatalf("task.assigned does not name the schedule: %s", rc.Body)
		}
	}
	b.LeaseOne(t, "w.1", "work")
}

func containsType(ts []host.ReceiptType, x host.ReceiptType) bool {
	for _, t := range ts {
		if t == x {
			return true
		}
	}
	return false
}

func testScheduleCronDST(t *testing.T, b *Bundle) {
	// 09:30 every day in New York; the clocks go forward on Sunday 8 March
	// 2026 (EST, UTC−5 → EDT, UTC−4), so the fire moves from 14:30 to 13:30
	// UTC.
	b.Clock.Set(time.Date(2026, 3, 5, 12, 0, 0, 0, time.UTC))
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "open", Cron: "30 9 * * *", Timezone: "America/New_York", GraceSeconds: ptrInt(3600)})
	want := []time.Time{
		time.Date(2026, 3, 5, 14, 30, 0, 0, time.UTC),
		time.Date(2026, 3, 6, 14, 30, 0, 0, time.UTC),
		time.Date(2026, 3, 7, 14, 30, 0, 0, time.UTC),
		time.Date(2026, 3, 8, 13, 30, 0, 0, time.UTC),
		time.Date(2026, 3, 9, 13, 30, 0, 0, time.UTC),
	}
	wantTimes(t, "next runs", v.NextRuns, want)
	// Walk the clock in hours: each fire is taken within the hour it falls
	// in, inside its grace.
	for b.Clock.Now().Before(time.Date(2026, 3, 9, 23, 0, 0, 0, time.UTC)) {
		b.Clock.Advance(time.Hour)
		b.fire(t)
	}
	wantTimes(t, "fires", b.firedAt(t, v.ID), want)
	// A descriptor in a zone: @daily is local midnight.
	d := b.createSchedule(t, engine.CreateScheduleRequest{Name: "midnight", Cron: "@daily", Timezone: "Asia/Tokyo"})
	if !d.NextRuns[0].Equal(time.Date(2026, 3, 10, 15, 0, 0, 0, time.UTC)) { // 23:00 UTC on the 9th is 08:00 on the 10th in Tokyo
		t.Fatalf("@daily in Tokyo: %v", d.NextRuns)
	}
}

func testSchedulePauseResume(t *testing.T, b *Bundle) {
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "tick", IntervalSeconds: 10})
	b.Clock.Advance(10 * time.Second)
	if n := b.fire(t); n != 1 {
		t.Fatalf("fired %d", n)
	}
	p, err := b.Engine.PauseSchedule(b.Ctx, b.Agent, v.ID)
	if err != nil || !p.Paused {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if p, err = b.Engine.PauseSchedule(b.Ctx, b.Agent, v.ID); err != nil || !p.Paused {
		t.Fatalf("pause again: %+v %v", p, err)
	}
	b.Clock.Advance(45 * time.Second)
	if n := b.fire(t); n != 0 {
		t.Fatalf("a paused schedule fired %d", n)
	}
	r, err := b.Engine.ResumeSchedule(b.Ctx, b.Agent, v.ID)
	if err != nil || r.Paused {
		t.Fatalf("resume: %+v %v", r, err)
	}
	// The fires the pause covered are not run; the next is the first after
	// the resume (at 55 s: the fire at 60 s).
	if want := Epoch.Add(60 * time.Second); !r.NextFireAt.Equal(want) || !r.NextRuns[0].Equal(want) {
		t.Fatalf("resumed next fire %v, want %v", r.NextFireAt, want)
	}
	if n := b.fire(t); n != 0 {
		t.Fatalf("resume fired %d at once", n)
	}
	b.Clock.Advance(5 * time.Second)
	if n := b.fire(t); n != 1 {
		t.Fatalf("fired %d after the resume", n)
	}
	wantTimes(t, "fires", b.firedAt(t, v.ID), []time.Time{Epoch.Add(10 * time.Second), Epoch.Add(60 * time.Second)})
	var kinds []host.ReceiptType
	rs, err := b.tenantReceipts()
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rs {
		if strings.HasPrefix(string(rc.Type), "schedule.") {
			kinds = append(kinds, rc.Type)
		}
	}
	want := []host.ReceiptType{host.ReceiptScheduleCreated, host.ReceiptScheduleFired, host.ReceiptSchedulePaused, host.ReceiptScheduleResumed, host.ReceiptScheduleFired}
	if len(kinds) != len(want) {
		t.Fatalf("schedule receipts %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("schedule receipts %v, want %v", kinds, want)
		}
	}

	// A pause that lands when fires are due that no firer pass has
	// queued yet: they are not run, and its receipt counts them.
	d := b.createSchedule(t, engine.CreateScheduleRequest{Name: "due", IntervalSeconds: 10}) // at 60 s: first fire at 70 s
	b.Clock.Advance(25 * time.Second)                                                        // 85 s: the fires at 70 and 80 s are due
	if _, err := b.Engine.PauseSchedule(b.Ctx, b.Agent, d.ID); err != nil {
		t.Fatal(err)
	}
	b.fire(t) // tick's fires
	if got := b.firedAt(t, d.ID); len(got) != 0 {
		t.Fatalf("fires %v after the pause", got)
	}
	if rs, err = b.tenantReceipts(); err != nil {
		t.Fatal(err)
	}
	var paused map[string]any
	for _, rc := range rs {
		if rc.Type == host.ReceiptSchedulePaused && strings.Contains(string(rc.Body), d.ID) {
			if err := json.Unmarshal(rc.Body, &paused); err != nil {
				t.Fatal(err)
			}
		}
	}
	first, last := Epoch.Add(70*time.Second).Format(time.RFC3339), Epoch.Add(80*time.Second).Format(time.RFC3339)
	if paused["skipped"] != float64(2) || paused["first_fire_at"] != first || paused["last_fire_at"] != last {
		t.Fatalf("paused receipt body %v, want skipped 2 from %s to %s", paused, first, last)
	}
}

func testScheduleMissed(t *testing.T, b *Bundle) {
	// Every minute, grace 60 s; the gate comes back 10 minutes later: the
	// fires at +1..+8 min are missed (older than the grace), +9 and +10 are
	// on time.
	mk := func(name string, policy host.MissedPolicy, limit int) *engine.ScheduleView {
		return b.createSchedule(t, engine.CreateScheduleRequest{Name: name, IntervalSeconds: 60, MissedPolicy: policy, MissedCap: limit})
	}
	skip, once, all, allCapped := mk("skip", host.MissedSkip, 0), mk("once", host.MissedRunOnce, 0), mk("all", host.MissedRunAll, 100), mk("all5", host.MissedRunAll, 5)
	b.Clock.Advance(10 * time.Minute)
	if n := b.fire(t); n != 2+3+10+7 {
		t.Fatalf("fired %d, want 22", n)
	}
	m := func(k int) time.Time { return Epoch.Add(time.Duration(k) * time.Minute) }
	wantTimes(t, "skip", b.firedAt(t, skip.ID), []time.Time{m(9), m(10)})
	wantTimes(t, "run_once", b.firedAt(t, once.ID), []time.Time{m(8), m(9), m(10)})
	wantTimes(t, "run_all", b.firedAt(t, all.ID), every(m(1), time.Minute, 10))
	wantTimes(t, "run_all cap 5", b.firedAt(t, allCapped.ID), every(m(4), time.Minute, 7))
	// The skipped fires are on the ledger.
	rs, err := b.tenantReceipts()
	if err != nil {
		t.Fatal(err)
	}
	skipped := map[string]float64{}
	spans := map[string][2]time.Time{}
	for _, rc := range rs {
		if rc.Type == host.ReceiptScheduleSkipped {
			var body struct {
				ID      string    `json:"schedule_id"`
				Skipped float64   `json:"skipped"`
				First   time.Time `json:"first_fire_at"`
				Last    time.Time `json:"last_fire_at"`
			}
			if err := json.Unmarshal(rc.Body, &body); err != nil {
				t.Fatal(err)
			}
			skipped[body.ID] = body.Skipped
			spans[body.ID] = [2]time.Time{body.First, body.Last}
		}
	}
	if skipped[skip.ID] != 8 || skipped[once.ID] != 7 || skipped[allCapped.ID] != 3 || skipped[all.ID] != 0 {
		t.Fatalf("skipped receipts: %v", skipped)
	}
	// Each receipt spans the fires not run, not the ones its policy ran.
	for id, want := range map[string][2]time.Time{skip.ID: {m(1), m(8)}, once.ID: {m(1), m(7)}, allCapped.ID: {m(1), m(3)}} {
		if got := spans[id]; !got[0].Equal(want[0]) || !got[1].Equal(want[1]) {
			t.Errorf("schedule %s's skipped receipt spans %v–%v, want %v–%v", id, got[0], got[1], want[0], want[1])
		}
	}
	// A cron schedule far behind (a year of minutes) catches up by its
	// policy without walking every fire.
	c := b.createSchedule(t, engine.CreateScheduleRequest{Name: "cron", Cron: "* * * * *", MissedPolicy: host.MissedRunOnce})
	b.Clock.Advance(366 * 24 * time.Hour)
	b.fire(t)
	if got := b.firedAt(t, c.ID); len(got) < 2 || len(got) > 3 {
		t.Fatalf("cron a year behind under run_once fired %v", got)
	}
}

func testScheduleFiresOnce(t *testing.T, b *Bundle) {
	// Two engines on one store fire 60 schedules (more than one pass
	// claims) concurrently while the clock moves: each fire is enqueued
	// once.
	other, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	var ids []string
	for i := range 60 {
		ids = append(ids, b.createSchedule(t, engine.CreateScheduleRequest{Name: fmt.Sprint("s", i), IntervalSeconds: 1}).ID)
	}
	for range 15 {
		b.Clock.Advance(time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for _, e := range []*engine.Engine{b.Engine, other, b.Engine, other} {
			wg.Go(func() {
				if _, err := e.FireSchedules(b.Ctx); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		wantTimes(t, id, b.firedAt(t, id), every(Epoch.Add(time.Second), time.Second, 15))
	}
}

func testScheduleTemplateGone(t *testing.T, b *Bundle) {
	gone := host.NewTaskType("gone")
	gone.Tenant = "acme"
	b.MustPutType(t, gone)
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "g", IntervalSeconds: 10, Template: host.ScheduleTemplate{TaskType: "gone"}})
	if err := b.Engine.DeleteTaskType(b.Ctx, "acme", "gone"); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(10 * time.Second)
	if n := b.fire(t); n != 0 {
		t.Fatalf("fired %d without its task type", n)
	}
	got, err := b.Engine.GetSchedule(b.Ctx, b.Agent, v.ID, 0)
	if err != nil || !got.NextFireAt.Equal(Epoch.Add(20*time.Second)) {
		t.Fatalf("a fire that cannot run still advances: %+v %v", got, err)
	}
}

// testScheduleReceipts: a schedule's own receipts — created, fired,
// skipped with the error that stopped its template, paused, resumed,
// deleted — are listed by its id, page by page, for its owner and an
// admin (after the delete too), never for another agent, and never with
// another schedule's; the schedule's view shows its last skip.
func testScheduleReceipts(t *testing.T, b *Bundle) {
	gone := host.NewTaskType("gone")
	gone.Tenant = "acme"
	b.MustPutType(t, gone)
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "r", IntervalSeconds: 10, Template: host.ScheduleTemplate{TaskType: "gone"}})
	other := b.createSchedule(t, engine.CreateScheduleRequest{Name: "beside", IntervalSeconds: 10})
	b.Clock.Advance(10 * time.Second)
	if n := b.fire(t); n != 2 {
		t.Fatalf("first fires: %d, want 2", n)
	}
	rs, _, err := b.Engine.ScheduleReceipts(b.Ctx, b.Agent, v.ID, "", 0)
	if err != nil || len(rs) != 2 || rs[1].Type != host.ReceiptScheduleFired {
		t.Fatalf("after the first fire: %d receipts %v", len(rs), err)
	}
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, rs[1].TaskID, "done with it"); err != nil {
		t.Fatal(err)
	}
	if err := b.Engine.DeleteTaskType(b.Ctx, "acme", "gone"); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(10 * time.Second)
	if n := b.fire(t); n != 1 {
		t.Fatalf("second fires: %d, want 1 (the other schedule's)", n)
	}
	got, err := b.Engine.GetSchedule(b.Ctx, b.Agent, v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ls := got.LastSkip; ls == nil || ls.Skipped != 1 || ls.Error != host.CodeUnknownTaskType || ls.Detail == "" ||
		!ls.At.Equal(b.Clock.Now()) || !ls.LastFireAt.Equal(Epoch.Add(20*time.Second)) || ls.ReceiptID == "" {
		t.Fatalf("the view's last skip: %+v, want 1 fire at %s skipped for %s", ls, Epoch.Add(20*time.Second), host.CodeUnknownTaskType)
	}
	if _, err := b.Engine.PauseSchedule(b.Ctx, b.Agent, v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.ResumeSchedule(b.Ctx, b.Admin, v.ID); err != nil {
		t.Fatal(err)
	}
	want := []host.ReceiptType{host.ReceiptScheduleCreated, host.ReceiptScheduleFired, host.ReceiptScheduleSkipped,
		host.ReceiptSchedulePaused, host.ReceiptScheduleResumed}
	list := func(a engine.Actor, id string) ([]host.ReceiptType, []*host.Receipt, error) {
		var types []host.ReceiptType
		var all []*host.Receipt
		cursor := ""
		for range 20 {
			rs, next, err := b.Engine.ScheduleReceipts(b.Ctx, a, id, cursor, 2)
			if err != nil {
				return nil, nil, err
			}
			for _, rc := range rs {
				types, all = append(types, rc.Type), append(all, rc)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		return types, all, nil
	}
	for _, a := range []engine.Actor{b.Agent, b.Admin} {
		types, all, err := list(a, v.ID)
		if err != nil || fmt.Sprint(types) != fmt.Sprint(want) {
			t.Fatalf("%s lists the schedule's receipts: %v %v, want %v", a.Principal, types, err, want)
		}
		if all[2].ID != got.LastSkip.ReceiptID || !strings.Contains(string(all[2].Body), host.CodeUnknownTaskType) {
			t.Fatalf("the skip receipt %s (%s) is not the view's last skip %s", all[2].ID, all[2].Body, got.LastSkip.ReceiptID)
		}
	}
	if rs, err := b.Engine.LatestScheduleReceipts(b.Ctx, b.Agent, v.ID, 2); err != nil || len(rs) != 2 ||
		rs[0].Type != host.ReceiptSchedulePaused || rs[1].Type != host.ReceiptScheduleResumed {
		t.Fatalf("the latest 2 receipts: %d %v, want paused then resumed", len(rs), err)
	}
	if rs, err := b.Engine.LatestScheduleReceipts(b.Ctx, b.Agent, v.ID, 0); err != nil || len(rs) != len(want) || rs[0].Type != host.ReceiptScheduleCreated {
		t.Fatalf("the latest receipts, fewer than asked: %d %v, want %d from created", len(rs), err, len(want))
	}
	if _, err := b.Engine.LatestScheduleReceipts(b.Ctx, engine.Actor{Tenant: "acme", Principal: "agent.other", Role: engine.RoleAgent}, v.ID, 0); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("another agent reads the latest receipts: %v, want not_found", err)
	}
	// GET /v1/receipts?task_id=S-… lists the same.
	if rs, _, err := b.Engine.TaskReceipts(b.Ctx, b.Agent, v.ID, "", 0); err != nil || len(rs) != len(want) {
		t.Fatalf("the receipts by task_id %s: %d %v, want %d", v.ID, len(rs), err, len(want))
	}
	if types, _, err := list(b.Agent, other.ID); err != nil || fmt.Sprint(types) != fmt.Sprint([]host.ReceiptType{
		host.ReceiptScheduleCreated, host.ReceiptScheduleFired, host.ReceiptScheduleFired}) {
		t.Fatalf("the other schedule's receipts: %v %v", types, err)
	}
	stranger := engine.Actor{Tenant: "acme", Principal: "agent.other", Role: engine.RoleAgent}
	elsewhere := engine.Actor{Tenant: "globex", Principal: b.Agent.Principal, Role: engine.RoleAdmin}
	for _, a := range []engine.Actor{stranger, elsewhere} {
		if _, _, err := b.Engine.ScheduleReceipts(b.Ctx, a, v.ID, "", 0); !host.IsCode(err, host.CodeNotFound) {
			t.Fatalf("%s/%s reads another's schedule receipts: %v, want not_found", a.Tenant, a.Principal, err)
		}
	}
	if _, _, err := b.Engine.ScheduleReceipts(b.Ctx, b.Agent, v.ID, "not-a-cursor", 0); !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("a bad cursor: %v, want bad_request", err)
	}
	for _, id := range []string{"S-nope", "T-" + v.ID[2:], "", "S-" + strings.Repeat("0", 26)} {
		if _, _, err := b.Engine.ScheduleReceipts(b.Ctx, b.Agent, id, "", 0); !host.IsCode(err, host.CodeNotFound) {
			t.Fatalf("schedule %q: %v, want not_found", id, err)
		}
	}
	if err := b.Engine.DeleteSchedule(b.Ctx, b.Agent, v.ID); err != nil {
		t.Fatal(err)
	}
	want = append(want, host.ReceiptScheduleDeleted)
	for _, a := range []engine.Actor{b.Agent, b.Admin} {
		if types, _, err := list(a, v.ID); err != nil || fmt.Sprint(types) != fmt.Sprint(want) {
			t.Fatalf("%s lists the deleted schedule's receipts: %v %v, want %v", a.Principal, types, err, want)
		}
	}
	if _, _, err := b.Engine.ScheduleReceipts(b.Ctx, stranger, v.ID, "", 0); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("another agent reads a deleted schedule's receipts: %v, want not_found", err)
	}
}

// tenantReceipts reads every receipt of tenant acme in ledger order.
func (b *Bundle) tenantReceipts() ([]*host.Receipt, error) {
	var out []*host.Receipt
	err := b.Store.View(b.Ctx, func(r store.Reader) error {
		cursor := ""
		for {
			rs, next, err := r.ListReceipts(b.Ctx, store.ReceiptFilter{Tenant: "acme", Cursor: cursor, Limit: 500})
			if err != nil {
				return err
			}
			out = append(out, rs...)
			if next == "" || len(rs) == 0 {
				return nil
			}
			cursor = next
		}
	})
	return out, err
}

// testScheduleGraceZero: grace_seconds 0 is accepted, so a schedule with it
// must still fire when the firer reaches a fire a tick after it is due
// (the firer runs every ScheduleTick, never at the exact instant): a fire
// is not missed for the firer's own lag.
func testScheduleGraceZero(t *testing.T, b *Bundle) {
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "strict", IntervalSeconds: 10, GraceSeconds: ptrInt(0)})
	b.Clock.Advance(10*time.Second + 300*time.Millisecond) // the firer's next tick
	if n := b.fire(t); n != 1 {
		t.Fatalf("grace 0, fire reached 300 ms after it was due: fired %d, want 1", n)
	}
	b.Clock.Advance(10 * time.Second)
	if n := b.fire(t); n != 1 {
		t.Fatalf("grace 0, second fire: fired %d, want 1", n)
	}
	wantTimes(t, "grace 0", b.firedAt(t, v.ID), every(v.NextFireAt, 10*time.Second, 2))
}

// testScheduleQuota: a schedule outlives its owner's requests and fires on
// its own, so one agent must not be able to create them without bound; the
// quota is the owner's, so another agent of the tenant still creates its
// own, and a delete frees a place.
func testScheduleQuota(t *testing.T, b *Bundle) {
	const limit = 3
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, ScheduleTick: -1, MaxSchedulesPerOwner: limit})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := host.ScheduleTemplate{TaskType: "work"}
	var first string
	for i := range limit {
		v, err := eng.CreateSchedule(b.Ctx, b.Agent, engine.CreateScheduleRequest{Name: fmt.Sprintf("s%d", i), IntervalSeconds: 1, Template: tmpl})
		if err != nil {
			t.Fatalf("schedule %d of %d: %v", i+1, limit, err)
		}
		if first == "" {
			first = v.ID
		}
	}
	_, err = eng.CreateSchedule(b.Ctx, b.Agent, engine.CreateScheduleRequest{Name: "one-more", IntervalSeconds: 1, Template: tmpl})
	if !host.IsCode(err, host.CodeQuotaExceeded) {
		t.Fatalf("schedule %d of an owner with quota %d: %v, want quota_exceeded", limit+1, limit, err)
	}
	if list, _, err := eng.ListSchedules(b.Ctx, b.Agent, "", 0, 0); err != nil || len(list) != limit {
		t.Fatalf("the refused schedule was stored: %d %v", len(list), err)
	}
	other := engine.Actor{Tenant: b.Agent.Tenant, Principal: "agent.other", Role: engine.RoleAgent}
	if _, err := eng.CreateSchedule(b.Ctx, other, engine.CreateScheduleRequest{Name: "theirs", IntervalSeconds: 1, Template: tmpl}); err != nil {
		t.Fatalf("another agent's first schedule: %v", err)
	}
	if err := eng.DeleteSchedule(b.Ctx, b.Agent, first); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateSchedule(b.Ctx, b.Agent, engine.CreateScheduleRequest{Name: "after-delete", IntervalSeconds: 1, Template: tmpl}); err != nil {
		t.Fatalf("a schedule after a delete freed a place: %v", err)
	}
}

// testScheduleQuotaConcurrent: an owner just under its quota fires many
// creates at once through two engines on one store (PostgreSQL: several
// writers, each its own transaction): exactly as many succeed as the quota
// has places, the rest are quota_exceeded, and the owner ends at its quota.
func testScheduleQuotaConcurrent(t *testing.T, b *Bundle) {
	const limit, before, racers = 40, 30, 60
	var engs []*engine.Engine
	for range 2 {
		eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, ScheduleTick: -1, MaxSchedulesPerOwner: limit})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(eng.Close)
		engs = append(engs, eng)
	}
	tmpl := host.ScheduleTemplate{TaskType: "work"}
	for i := range before {
		if _, err := engs[0].CreateSchedule(b.Ctx, b.Agent, engine.CreateScheduleRequest{Name: fmt.Sprint("before", i), IntervalSeconds: 60, Template: tmpl}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			_, err := engs[i%2].CreateSchedule(b.Ctx, b.Agent, engine.CreateScheduleRequest{Name: fmt.Sprint("race", i), IntervalSeconds: 60, Template: tmpl})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case host.IsCode(err, host.CodeQuotaExceeded):
				refused++
			default:
				t.Errorf("create %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	var n int
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		n, err = r.CountSchedules(b.Ctx, b.Agent.Tenant, b.Agent.Principal)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n != limit || ok != limit-before || refused != racers-(limit-before) {
		t.Fatalf("%d concurrent creates by an owner at %d of %d schedules: %d created, %d refused, the owner has %d; want %d, %d and %d",
			racers, before, limit, ok, refused, n, limit-before, racers-(limit-before), limit)
	}
}

// testScheduleNoNextFire: the cron parser looks at most five years ahead
// and answers the zero time past that ("0 0 29 2 *" after 29 February
// 2096 has none until 2104). A create whose first fire is beyond that is
// refused by the gate's clock, and a schedule whose next fire is beyond it
// is paused after its last fire: the firer must not walk it for ever
// inside its write transaction (which would wedge every writer).
func testScheduleNoNextFire(t *testing.T, b *Bundle) {
	b.Clock.Set(time.Date(2096, 3, 1, 0, 0, 0, 0, time.UTC))
	if _, err := b.Engine.CreateSchedule(b.Ctx, b.Agent, engine.CreateScheduleRequest{Name: "leap-late", Cron: "0 0 29 2 *",
		Template: host.ScheduleTemplate{TaskType: "work"}}); !host.IsCode(err, host.CodeInvalidCron) {
		t.Fatalf("a cron with no fire in the parser's reach of the gate's clock: %v, want invalid_cron", err)
	}
	b.Clock.Set(time.Date(2095, 6, 1, 0, 0, 0, 0, time.UTC))
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "leap", Cron: "0 0 29 2 *"})
	if want := time.Date(2096, 2, 29, 0, 0, 0, 0, time.UTC); !v.NextFireAt.Equal(want) {
		t.Fatalf("first fire %v, want %v", v.NextFireAt, want)
	}
	b.Clock.Set(time.Date(2096, 2, 29, 0, 0, 1, 0, time.UTC))
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		n, err := b.Engine.FireSchedules(b.Ctx)
		done <- res{n, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.n != 1 {
			t.Fatalf("the last fire in reach: fired %d, %v; want 1", r.n, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("FireSchedules did not return: the firer walks a schedule with no next fire for ever")
	}
	got, err := b.Engine.GetSchedule(b.Ctx, b.Agent, v.ID, 0)
	if err != nil || !got.Paused || got.Fires != 1 || got.NextFireAt.IsZero() {
		t.Fatalf("after its last fire in reach: %+v %v; want it paused, with its fire counted", got.Schedule, err)
	}
	if n := b.fire(t); n != 0 {
		t.Fatalf("fired %d more", n)
	}
}

// testSchedulePoison: a template the store cannot write as a task (a NUL in
// its summary: PostgreSQL refuses it in text) is refused at create; and a
// schedule stored with one anyway (before that check) must not stop the
// fires of the others claimed in the same pass (on PostgreSQL its fire
// failed the whole pass, at every pass, so no schedule of any tenant
// fired): the check at each fire skips it.
func testSchedulePoison(t *testing.T, b *Bundle) {
	tmpl := host.ScheduleTemplate{TaskType: "work", Params: json.RawMessage(`{}`), Summary: "a\x00b"}
	_, err := b.Engine.CreateSchedule(b.Ctx, b.Agent, engine.CreateScheduleRequest{Name: "poison", IntervalSeconds: 10, Template: tmpl})
	if !host.IsCode(err, host.CodeBadRequest) {
		t.Errorf("a template summary with a NUL: %v, want bad_request", err)
	}
	now := b.Clock.Now()
	poison := &host.Schedule{ID: host.NewID(host.PrefixSchedule), Tenant: "acme", Owner: "agent.x", Name: "poison",
		IntervalSeconds: 10, AnchorAt: now, Template: tmpl, MissedPolicy: host.MissedSkip, GraceSeconds: 60,
		NextFireAt: now.Add(5 * time.Second), CreatedAt: now, UpdatedAt: now}
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.InsertSchedule(b.Ctx, poison) }); err != nil {
		t.Fatal(err)
	}
	good := b.createSchedule(t, engine.CreateScheduleRequest{Name: "good", IntervalSeconds: 10})
	b.Clock.Advance(10 * time.Second)
	if _, err := b.Engine.FireSchedules(b.Ctx); err != nil {
		t.Fatalf("FireSchedules beside the poison schedule: %v", err)
	}
	wantTimes(t, "good", b.firedAt(t, good.ID), []time.Time{good.NextFireAt})
	var after *host.Schedule
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		after, err = r.GetSchedule(b.Ctx, "acme", poison.ID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !after.Paused && !after.NextFireAt.After(b.Clock.Now()) {
		t.Fatalf("the poison schedule is neither fired nor paused: %+v", after)
	}
	b.Clock.Advance(10 * time.Second)
	if _, err := b.Engine.FireSchedules(b.Ctx); err != nil {
		t.Fatalf("the next pass: %v", err)
	}
	if got := b.firedAt(t, good.ID); len(got) != 2 {
		t.Fatalf("good schedule's second fire: %v", got)
	}
}

// putKey stores an API key of role for principal in tenant acme.
func (b *Bundle) putKey(t testing.TB, id, role, principal string) {
	t.Helper()
	k := store.Key{ID: id, Hash: "hash-" + id, Prefix: "agw_" + id, Role: role, Tenant: "acme", Principal: principal, CreatedAt: b.Clock.Now()}
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.PutKey(b.Ctx, k) }); err != nil {
		t.Fatal(err)
	}
}

func (b *Bundle) revokeKey(t testing.TB, id string) {
	t.Helper()
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.RevokeKey(b.Ctx, id, b.Clock.Now()) }); err != nil {
		t.Fatal(err)
	}
}

// A schedule does not go on queueing tasks as an owner whose keys are all
// revoked: the firer pauses it (paused_reason owner_revoked, a
// schedule.paused receipt from the gate), no task is queued, and it is not
// resumed until the owner holds a live agent or admin key again (a live
// worker key of the same name does not count).
func testScheduleOwnerRevoked(t *testing.T, b *Bundle) {
	b.putKey(t, "K-own", engine.RoleAgent, "agent.kee")
	b.putKey(t, "K-wrk", engine.RoleWorker, "agent.kee") // not an agent's authority
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "tick", IntervalSeconds: 10})
	// Another owner's schedule, never keyed, goes on firing.
	other := engine.Actor{Tenant: "acme", Principal: "agent.local", Role: engine.RoleAgent}
	ov, err := b.Engine.CreateSchedule(b.Ctx, other, engine.CreateScheduleRequest{Name: "tick", IntervalSeconds: 10,
		Template: host.ScheduleTemplate{TaskType: "work", Params: json.RawMessage(`{"n": 1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(10 * time.Second)
	if n := b.fire(t); n != 2 {
		t.Fatalf("fired %d with live owners, want 2", n)
	}
	b.revokeKey(t, "K-own")
	b.Clock.Advance(30 * time.Second)
	if n := b.fire(t); n != 3 {
		t.Fatalf("fired %d after the owner's key was revoked, want only the other schedule's 3", n)
	}
	b.Clock.Advance(30 * time.Second)
	b.fire(t)
	wantTimes(t, "the revoked owner's fires", b.firedAt(t, v.ID), []time.Time{Epoch.Add(10 * time.Second)})
	if got := len(b.firedAt(t, ov.ID)); got != 7 {
		t.Fatalf("the keyless owner's schedule fired %d times, want 7", got)
	}
	for _, a := range []engine.Actor{b.Admin, b.Agent} {
		got, err := b.Engine.GetSchedule(b.Ctx, a, v.ID, 0)
		if err != nil || !got.Paused || got.PausedReason != host.PausedOwnerRevoked || len(got.NextRuns) != 0 {
			t.Fatalf("%s sees the schedule as %+v %v, want paused: owner_revoked", a.Principal, got, err)
		}
	}
	list, _, err := b.Engine.ListSchedules(b.Ctx, b.Admin, "", 0, 0)
	if err != nil || len(list) != 2 || list[0].PausedReason+list[1].PausedReason != host.PausedOwnerRevoked {
		t.Fatalf("admin list: %d %v", len(list), err)
	}
	paused := 0
	rs, err := b.tenantReceipts()
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rs {
		if rc.Type == host.ReceiptSchedulePaused {
			paused++
			if rc.From != engine.GatePrincipal || rc.To != "agent.kee" || !strings.Contains(string(rc.Body), `"reason":"owner_revoked"`) {
				t.Fatalf("schedule.paused receipt: %+v %s", rc, rc.Body)
			}
		}
	}
	if paused != 1 {
		t.Fatalf("%d schedule.paused receipts, want 1", paused)
	}
	// Not resumed while the owner has no live key, even by an admin.
	_, err = b.Engine.ResumeSchedule(b.Ctx, b.Admin, v.ID)
	WantCode(t, err, host.CodeOwnerRevoked)
	// A new key gives the owner its authority back; the schedule stays
	// paused until someone allowed resumes it.
	b.putKey(t, "K-new", engine.RoleAgent, "agent.kee")
	b.Clock.Advance(10 * time.Second)
	b.fire(t)
	if got := len(b.firedAt(t, v.ID)); got != 1 {
		t.Fatalf("a schedule paused for its owner fired on its own once the owner held a key again: %d fires", got)
	}
	r, err := b.Engine.ResumeSchedule(b.Ctx, b.Agent, v.ID)
	if err != nil || r.Paused || r.PausedReason != "" {
		t.Fatalf("resume by the re-keyed owner: %+v %v", r, err)
	}
	b.Clock.Advance(10 * time.Second)
	b.fire(t)
	if got := len(b.firedAt(t, v.ID)); got != 2 {
		t.Fatalf("resumed schedule fired %d times in all, want 2", got)
	}
}

// The same bad task fields are refused with the same machine code by an
// enqueue, a workflow step and a schedule's template: one validator serves
// the three (engine.checkTaskFields), so a rule added to one reaches all.
// Nothing is written by any of them.
func testQueueRefusesAlike(t *testing.T, b *Bundle) {
	off := host.NewTaskType("off")
	off.Tenant, off.Enabled = "acme", false
	b.MustPutType(t, off)
	retries := func(n int) *int { return &n }
	type fields struct {
		typ        string
		params     string
		priority   int
		summary    string
		maxRetries *int
		recipient  string
	}
	ok := fields{typ: "work", params: `{"n":1}`}
	cases := []struct {
		name string
		mod  func(*fields)
		code string
	}{
		{"no task type", func(f *fields) { f.typ = "" }, host.CodeBadRequest},
		{"unknown task type", func(f *fields) { f.typ = "nope" }, host.CodeUnknownTaskType},
		{"disabled task type", func(f *fields) { f.typ = "off" }, host.CodeTaskTypeDisabled},
		{"params over the limit", func(f *fields) { f.params = `{"s":"` + strings.Repeat("x", engine.MaxParamsBytes) + `"}` }, host.CodeTooLarge},
		{"params the schema refuses", func(f *fields) { f.params = `{"n":-1}` }, host.CodeInvalidParams},
		{"params not an object", func(f *fields) { f.params = `[1]` }, host.CodeInvalidParams},
		{"priority 11", func(f *fields) { f.priority = 11 }, host.CodeBadRequest},
		{"priority -1", func(f *fields) { f.priority = -1 }, host.CodeBadRequest},
		{"summary too long", func(f *fields) { f.summary = strings.Repeat("s", 1001) }, host.CodeBadRequest},
		{"summary with NUL", func(f *fields) { f.summary = "a\x00b" }, host.CodeBadRequest},
		{"summary not UTF-8", func(f *fields) { f.summary = "a\xffb" }, host.CodeBadRequest},
		{"max_retries 1001", func(f *fields) { f.maxRetries = retries(1001) }, host.CodeBadRequest},
		{"max_retries -1", func(f *fields) { f.maxRetries = retries(-1) }, host.CodeBadRequest},
		{"recipient a workflow", func(f *fields) { f.recipient = "workflow/W-01X" }, host.CodeBadRequest},
		{"recipient with a control character", func(f *fields) { f.recipient = "agent\x07b" }, host.CodeBadRequest},
		{"recipient too long", func(f *fields) { f.recipient = strings.Repeat("r", 201) }, host.CodeBadRequest},
	}
	before := b.Verify(t).Receipts
	for _, c := range cases {
		f := ok
		c.mod(&f)
		_, enqErr := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: f.typ, Params: json.RawMessage(f.params),
			Priority: f.priority, Summary: f.summary, MaxRetries: f.maxRetries, Recipient: f.recipient})
		_, schedErr := b.Engine.CreateSchedule(b.Ctx, b.Agent, engine.CreateScheduleRequest{Name: "v", IntervalSeconds: 60,
			Template: host.ScheduleTemplate{TaskType: f.typ, Params: json.RawMessage(f.params), Priority: f.priority,
				Summary: f.summary, MaxRetries: f.maxRetries, Recipient: f.recipient}})
		got := map[string]error{"enqueue": enqErr, "schedule template": schedErr}
		if f.recipient == "" { // a workflow's steps are addressed by the gate
			_, wfErr := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, engine.WorkflowRequest{Name: "v", Steps: []engine.WorkflowStepRequest{
				{Name: "s", TaskType: f.typ, Params: json.RawMessage(f.params), Priority: f.priority, Summary: f.summary, MaxRetries: f.maxRetries}}})
			got["workflow step"] = wfErr
		}
		for door, err := range got {
			if host.ErrorCode(err) != c.code {
				t.Errorf("%s, %s: %v, want %s", c.name, door, err, c.code)
			}
		}
	}
	if after := b.Verify(t).Receipts; after != before {
		t.Fatalf("refused requests wrote %d receipts", after-before)
	}
}

func ptrStr(s string) *string { return &s }

// testScheduleUpdate: UpdateSchedule changes what it is given and keeps the
// rest; a new timing runs from its first fire after now (the next fire
// otherwise stays); a new template is checked as at create and is what the
// next fire queues; a refused change (bad input, a name the owner already
// uses, another agent) writes nothing; a change to the same values writes
// no receipt; each change writes one schedule.updated naming its fields.
func testScheduleUpdate(t *testing.T, b *Bundle) {
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "tick", IntervalSeconds: 10})
	b.createSchedule(t, engine.CreateScheduleRequest{Name: "taken", IntervalSeconds: 60})
	b.Clock.Advance(10 * time.Second)
	if n := b.fire(t); n != 1 {
		t.Fatalf("fired %d", n)
	}
	before, err := b.Engine.GetSchedule(b.Ctx, b.Agent, v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	mallory := engine.Actor{Tenant: "acme", Principal: "agent.mallory", Role: engine.RoleAgent}
	refused := []struct {
		name  string
		actor engine.Actor
		req   engine.UpdateScheduleRequest
		code  string
	}{
		{"nothing", b.Agent, engine.UpdateScheduleRequest{}, host.CodeBadRequest},
		{"name taken", b.Agent, engine.UpdateScheduleRequest{Name: ptrStr("taken")}, host.CodeConflict},
		{"blank name", b.Agent, engine.UpdateScheduleRequest{Name: ptrStr("  ")}, host.CodeBadRequest},
		{"bad cron", b.Agent, engine.UpdateScheduleRequest{Cron: ptrStr("61 * * * *")}, host.CodeInvalidCron},
		{"cron and interval", b.Agent, engine.UpdateScheduleRequest{Cron: ptrStr("@hourly"), IntervalSeconds: ptrInt64(5)}, host.CodeInvalidInterval},
		{"zone on an interval", b.Agent, engine.UpdateScheduleRequest{Timezone: ptrStr("Europe/Berlin")}, host.CodeInvalidTimezone},
		{"bad zone", b.Agent, engine.UpdateScheduleRequest{Cron: ptrStr("@hourly"), Timezone: ptrStr("Mars/Olympus")}, host.CodeInvalidTimezone},
		{"interval 0", b.Agent, engine.UpdateScheduleRequest{IntervalSeconds: ptrInt64(0)}, host.CodeInvalidInterval},
		{"cap on skip", b.Agent, engine.UpdateScheduleRequest{MissedCap: ptrInt(3)}, host.CodeInvalidMissedPolicy},
		{"policy", b.Agent, engine.UpdateScheduleRequest{MissedPolicy: ptrPolicy("later")}, host.CodeInvalidMissedPolicy},
		{"grace", b.Agent, engine.UpdateScheduleRequest{GraceSeconds: ptrInt(-1)}, host.CodeInvalidMissedPolicy},
		{"unknown type", b.Agent, engine.UpdateScheduleRequest{Template: &host.ScheduleTemplate{TaskType: "nope"}}, host.CodeUnknownTaskType},
		{"bad params", b.Agent, engine.UpdateScheduleRequest{Template: &host.ScheduleTemplate{TaskType: "work", Params: json.RawMessage(`{"n":-1}`)}}, host.CodeInvalidParams},
		{"workflow recipient", b.Agent, engine.UpdateScheduleRequest{Template: &host.ScheduleTemplate{TaskType: "work", Recipient: host.WorkflowFinalRecipient("WF-x")}}, host.CodeBadRequest},
		{"another agent", mallory, engine.UpdateScheduleRequest{Name: ptrStr("mine now")}, host.CodeNotFound},
	}
	for _, c := range refused {
		if _, err := b.Engine.UpdateSchedule(b.Ctx, c.actor, v.ID, c.req); !host.IsCode(err, c.code) {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	if _, err := b.Engine.UpdateSchedule(b.Ctx, b.Agent, "S-01UNKNOWN", engine.UpdateScheduleRequest{Name: ptrStr("x")}); !host.IsCode(err, host.CodeNotFound) {
		t.Errorf("unknown id: %v", err)
	}
	after, err := b.Engine.GetSchedule(b.Ctx, b.Agent, v.ID, 0)
	if err != nil || after.Name != "tick" || after.IntervalSeconds != 10 || !after.UpdatedAt.Equal(before.UpdatedAt) || string(after.Template.Params) != `{"n":7}` {
		t.Fatalf("a refused change was written: %+v %v", after, err)
	}

	// Same values: nothing written.
	if _, err := b.Engine.UpdateSchedule(b.Ctx, b.Agent, v.ID, engine.UpdateScheduleRequest{Name: ptrStr(" tick "), IntervalSeconds: ptrInt64(10), GraceSeconds: ptrInt(host.DefaultScheduleGrace)}); err != nil {
		t.Fatal(err)
	}
	// Rename and new grace: the next fire stays.
	u, err := b.Engine.UpdateSchedule(b.Ctx, b.Agent, v.ID, engine.UpdateScheduleRequest{Name: ptrStr("tock"), GraceSeconds: ptrInt(5)})
	if err != nil || u.Name != "tock" || u.GraceSeconds != 5 || u.IntervalSeconds != 10 || !u.NextFireAt.Equal(before.NextFireAt) {
		t.Fatalf("rename: %+v %v", u, err)
	}
	// The old name is free again; the new one is taken.
	b.createSchedule(t, engine.CreateScheduleRequest{Name: "tick", IntervalSeconds: 60})
	// A new timing, from now (15 s): a cron in a zone, read there.
	b.Clock.Advance(5 * time.Second)
	u, err = b.Engine.UpdateSchedule(b.Ctx, b.Agent, v.ID, engine.UpdateScheduleRequest{Cron: ptrStr("30 9 * * *"), Timezone: ptrStr("America/New_York")})
	if err != nil || u.Cron != "30 9 * * *" || u.Timezone != "America/New_York" || u.IntervalSeconds != 0 {
		t.Fatalf("to cron: %+v %v", u, err)
	}
	if want := time.Date(2026, 1, 5, 14, 30, 0, 0, time.UTC); !u.NextFireAt.Equal(want) || !u.NextRuns[0].Equal(want) {
		t.Fatalf("to cron: next fire %v, want %v", u.NextFireAt, want)
	}
	// Zone alone moves the cron; back to an interval counts from now.
	if u, err = b.Engine.UpdateSchedule(b.Ctx, b.Agent, v.ID, engine.UpdateScheduleRequest{Timezone: ptrStr("Europe/Berlin")}); err != nil ||
		u.Cron != "30 9 * * *" || !u.NextFireAt.Equal(time.Date(2026, 1, 5, 8, 30, 0, 0, time.UTC)) {
		t.Fatalf("zone alone: %+v %v", u, err)
	}
	now := b.Clock.Now()
	if u, err = b.Engine.UpdateSchedule(b.Ctx, b.Agent, v.ID, engine.UpdateScheduleRequest{IntervalSeconds: ptrInt64(20),
		Template: &host.ScheduleTemplate{TaskType: "work", Params: json.RawMessage(`{ "n" : 9 }`), Priority: 8}}); err != nil ||
		u.Cron != "" || u.Timezone != "" || !u.NextFireAt.Equal(now.Truncate(time.Second).Add(20*time.Second)) || string(u.Template.Params) != `{"n":9}` {
		t.Fatalf("to interval with a new template: %+v %v", u, err)
	}
	if u, err = b.Engine.UpdateSchedule(b.Ctx, b.Agent, v.ID, engine.UpdateScheduleRequest{MissedPolicy: ptrPolicy(host.MissedRunAll), MissedCap: ptrInt(4)}); err != nil ||
		u.MissedPolicy != host.MissedRunAll || u.MissedCap != 4 {
		t.Fatalf("policy: %+v %v", u, err)
	}
	// The same policy again, missed_cap left out: the cap keeps its value
	// (a field left out is not changed), and nothing is written.
	again, err := b.Engine.UpdateSchedule(b.Ctx, b.Agent, v.ID, engine.UpdateScheduleRequest{MissedPolicy: ptrPolicy(host.MissedRunAll)})
	if err != nil {
		t.Fatal(err)
	}
	if again.MissedCap != 4 || !again.UpdatedAt.Equal(u.UpdatedAt) {
		t.Fatalf("the same policy again, no cap: missed_cap %d (want 4), updated %v (want %v)", again.MissedCap, again.UpdatedAt, u.UpdatedAt)
	}
	// The next fire queues the new template.
	b.Clock.Advance(20 * time.Second)
	if n := b.fire(t); n < 1 {
		t.Fatalf("fired %d after the update", n)
	}
	fires := b.firedAt(t, v.ID)
	last := fires[len(fires)-1]
	var tk *host.Task
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		tk, err = r.FindTaskByIdempotency(b.Ctx, store.IdempotencyKey{Tenant: "acme", Producer: "agent.kee", Recipient: "agent.kee", Key: engine.FireKey(v.ID, last)})
		return err
	}); err != nil || tk == nil || string(tk.Params) != `{"n":9}` || tk.Priority != 8 {
		t.Fatalf("the fire after the update queued %+v (%v), want the new template", tk, err)
	}
	// Receipts: one schedule.updated per change that changed something.
	rs, err := b.tenantReceipts()
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, rc := range rs {
		if rc.Type != host.ReceiptScheduleUpdated {
			continue
		}
		var body struct {
			ID      string   `json:"schedule_id"`
			Changed []string `json:"changed"`
		}
		if err := json.Unmarshal(rc.Body, &body); err != nil || body.ID != v.ID || rc.From != "agent.kee" || rc.To != "agent.kee" {
			t.Fatalf("schedule.updated: %+v %s %v", rc, rc.Body, err)
		}
		changes = append(changes, strings.Join(body.Changed, ","))
	}
	want := []string{"name,grace_seconds", "cron,timezone,interval_seconds", "timezone", "cron,timezone,interval_seconds,template", "missed_policy,missed_cap"}
	if strings.Join(changes, " ") != strings.Join(want, " ") {
		t.Fatalf("schedule.updated receipts changed %v, want %v", changes, want)
	}
}

// dueHook is a store whose DueSchedules runs hook (once) after its read:
// what a change landing between a firer pass's read and its claim looks
// like.
type dueHook struct {
	store.Store
	hook func()
	once sync.Once
}

type dueHookReader struct {
	store.Reader
	s *dueHook
}

func (s *dueHook) View(ctx context.Context, fn func(store.Reader) error) error {
	return s.Store.View(ctx, func(r store.Reader) error { return fn(dueHookReader{r, s}) })
}

func (r dueHookReader) DueSchedules(ctx context.Context, now time.Time, limit int) ([]*host.Schedule, error) {
	ss, err := r.Reader.DueSchedules(ctx, now, limit)
	if err == nil && len(ss) > 0 {
		r.s.once.Do(r.s.hook)
	}
	return ss, err
}

// testScheduleUpdateRacesFire: a schedule changed after a firer pass read
// it and before the pass claimed it is not fired from what the pass read
// (its old template's task type with the new params): the next pass fires
// what the schedule holds now.
func testScheduleUpdateRacesFire(t *testing.T, b *Bundle) {
	v := b.createSchedule(t, engine.CreateScheduleRequest{Name: "tick", IntervalSeconds: 10})
	b.Clock.Advance(10 * time.Second)
	st := &dueHook{Store: b.Store, hook: func() {
		if _, err := b.Engine.UpdateSchedule(b.Ctx, b.Agent, v.ID, engine.UpdateScheduleRequest{
			Template: &host.ScheduleTemplate{TaskType: "other", Params: json.RawMessage(`{"n":9}`)}}); err != nil {
			t.Errorf("update: %v", err)
		}
	}}
	firer, err := engine.New(engine.Config{Store: st, Clock: b.Clock, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(firer.Close)
	for range 2 {
		if _, err := firer.FireSchedules(b.Ctx); err != nil {
			t.Fatal(err)
		}
	}
	fires := b.firedAt(t, v.ID)
	if len(fires) != 1 {
		t.Fatalf("fires %v, want one", fires)
	}
	var tk *host.Task
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		tk, err = r.FindTaskByIdempotency(b.Ctx, store.IdempotencyKey{Tenant: "acme", Producer: "agent.kee", Recipient: "agent.kee", Key: engine.FireKey(v.ID, fires[0])})
		return err
	}); err != nil || tk == nil || tk.Type != "other" || string(tk.Params) != `{"n":9}` {
		t.Fatalf("the fire queued %+v (%v), want the updated template's type and params", tk, err)
	}
}

func ptrInt64(n int64) *int64 { return &n }

func ptrPolicy(p host.MissedPolicy) *host.MissedPolicy { return &p }
