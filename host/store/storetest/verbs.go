package storetest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// testSnooze: a worker gives its leased task back until a later time. No
// attempt is used (attempt count and retry budget untouched), the task is
// not offered before the time, the attempt is kept as snoozed with that
// time, and an accepted lease's obligation is discharged by task.snoozed.
// Snoozing someone else's lease, live or gone, is refused as release
// refuses it, as a lease that never existed; snoozing the worker's own
// lease that is gone is a no-op; a bad duration is bad_request and changes
// nothing.
func testSnooze(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.MaxRetries = ptrInt(1) })
	o := b.LeaseOne(t, "w.1")
	if _, _, err := b.Engine.Accept(b.Ctx, Call("w.1", o)); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{0, -time.Second, 500 * time.Millisecond, engine.MaxSnooze + time.Second} {
		_, err := b.Engine.Snooze(b.Ctx, Call("w.1", o), d, "")
		WantCode(t, err, host.CodeBadRequest)
	}
	foreign := Call("w.1", o)
	foreign.Tenant = "other-tenant"
	_, err := b.Engine.Snooze(b.Ctx, foreign, time.Minute, "not mine")
	WantCode(t, err, host.CodeNotFound)
	_, err = b.Engine.Snooze(b.Ctx, Call("w.2", o), time.Minute, "not mine either")
	WantCode(t, err, host.CodeNotFound)
	if tk := b.Task(t, o.Task.ID); tk.State != host.StateLeased || tk.LeaseID != o.LeaseID {
		t.Fatalf("a refused snooze changed the task: %+v", tk)
	}

	b.Clock.Advance(2 * time.Second)
	until := b.Clock.Now().Add(90 * time.Second)
	tk, err := b.Engine.Snooze(b.Ctx, Call("w.1", o), 90*time.Second, "rate limited upstream")
	if err != nil {
		t.Fatal(err)
	}
	if tk.Attempts != 0 || tk.MaxRetries != 1 || !tk.AvailableAt.Equal(until) || tk.State != host.StateQueued {
		t.Fatalf("snoozed task: attempts %d max_retries %d available_at %v state %s; want 0, 1, %v, queued",
			tk.Attempts, tk.MaxRetries, tk.AvailableAt, tk.State, until)
	}
	if obs := b.Open(t, "w.1"); len(obs) != 0 {
		t.Fatalf("snooze left the worker's obligation open: %+v", obs)
	}
	rs := b.Receipts(t, res.TaskID)
	last := rs[len(rs)-1]
	var body struct {
		Reason   string    `json:"reason"`
		Seconds  int       `json:"snooze_seconds"`
		Until    time.Time `json:"available_at"`
		LeaseID  string    `json:"lease_id"`
		WorkerID string    `json:"worker_id"`
	}
	if err := json.Unmarshal(last.Body, &body); err != nil {
		t.Fatal(err)
	}
	if last.Type != host.ReceiptSnoozed || body.Seconds != 90 || !body.Until.Equal(until) || body.LeaseID != o.LeaseID || body.Reason != "rate limited upstream" {
		t.Fatalf("last receipt %s %s, want task.snoozed for 90 s until %v", last.Type, last.Body, until)
	}
	if _, err := b.Engine.Snooze(b.Ctx, Call("w.1", o), time.Minute, "again"); err != nil {
		t.Fatalf("snoozing a lease already given back must be a no-op: %v", err)
	}
	// Another worker's snoozed lease is, to it, a lease that never was.
	_, err = b.Engine.Snooze(b.Ctx, Call("w.2", o), time.Minute, "not mine")
	WantCode(t, err, host.CodeNotFound)
	unknown := Call("w.2", o)
	unknown.LeaseID = "lease-never"
	_, errU := b.Engine.Snooze(b.Ctx, unknown, time.Minute, "")
	if strings.ReplaceAll(err.Error(), o.LeaseID, "X") != strings.ReplaceAll(errU.Error(), "lease-never", "X") {
		t.Fatalf("another worker's snoozed lease answers %v, an unknown one %v", err, errU)
	}
	if got := b.Task(t, res.TaskID); !got.AvailableAt.Equal(until) {
		t.Fatalf("a repeated snooze moved the task to %v, want %v", got.AvailableAt, until)
	}

	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.2"}, "a snoozed task before its time")
	b.Clock.Set(until)
	o2 := b.LeaseOne(t, "w.2")
	if o2.Task.ID != res.TaskID || o2.Attempt != 1 {
		t.Fatalf("after the snooze: task %s attempt %d, want %s attempt 1", o2.Task.ID, o2.Attempt, res.TaskID)
	}
	// An offer snoozed before it was accepted: no receipt (there is no
	// obligation to discharge), the attempt says snoozed and until when.
	b.Clock.Advance(time.Second)
	if _, err := b.Engine.Snooze(b.Ctx, Call("w.2", o2), time.Hour, ""); err != nil {
		t.Fatal(err)
	}
	if n := len(b.Receipts(t, res.TaskID)); n != len(rs) {
		t.Fatalf("snoozing an offer wrote %d receipts", n-len(rs))
	}
	ta, err := b.Engine.Attempts(b.Ctx, b.Admin, res.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ta.Attempts) != 2 {
		t.Fatalf("attempts: %+v, want 2", ta.Attempts)
	}
	for i, a := range ta.Attempts {
		if a.Outcome != host.AttemptSnoozed || a.RetryAt == nil || a.Attempt != 1 {
			t.Fatalf("attempt %d: %+v, want snoozed, attempt 1, with its time", i, a)
		}
	}
	if a := ta.Attempts[0]; !a.RetryAt.Equal(until) || a.ReceiptID != last.ID {
		t.Fatalf("first attempt: until %v receipt %s, want %v %s", a.RetryAt, a.ReceiptID, until, last.ID)
	}
	tl, err := b.Engine.Timeline(b.Ctx, b.Admin, res.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if ev := tl.Events[len(tl.Events)-1]; ev.Type != host.EventLeaseSnoozed {
		t.Fatalf("the timeline ends with %s, want %s", ev.Type, host.EventLeaseSnoozed)
	}
}

func ptrInt(n int) *int { return &n }

// testScheduledState: a queued task not yet available (a delayed start, a
// retry's backoff, a snooze) is scheduled in every view — a read, a list
// filtered by status, the queue stats by state and by type — and not
// counted as queued; it becomes queued when its time comes, with no write.
func testScheduledState(t *testing.T, b *Bundle) {
	ready := b.Enqueue(t, "work")
	later := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.DelaySeconds = 60 })
	if ready.Status != "queued" || later.Status != "scheduled" {
		t.Fatalf("enqueue answers %s and %s, want queued and scheduled", ready.Status, later.Status)
	}
	if st := b.Task(t, later.TaskID).State; st != host.StateScheduled {
		t.Fatalf("a delayed task reads as %s, want scheduled", st)
	}
	if st := b.Task(t, ready.TaskID).State; st != host.StateQueued {
		t.Fatalf("a ready task reads as %s, want queued", st)
	}
	list := func(states ...host.TaskState) []string {
		t.Helper()
		ts, _, err := b.Engine.ListTasks(b.Ctx, b.Admin, store.TaskFilter{States: states})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tk := range ts {
			if !slices.Contains(states, tk.State) {
				t.Fatalf("a list of %v holds a task that is %s", states, tk.State)
			}
			ids = append(ids, tk.ID)
		}
		return ids
	}
	if got := list(host.StateScheduled); !slices.Equal(got, []string{later.TaskID}) {
		t.Fatalf("scheduled: %v, want [%s]", got, later.TaskID)
	}
	if got := list(host.StateQueued); !slices.Equal(got, []string{ready.TaskID}) {
		t.Fatalf("queued: %v, want [%s]", got, ready.TaskID)
	}
	if got := list(host.StateQueued, host.StateScheduled); len(got) != 2 {
		t.Fatalf("queued and scheduled: %v, want both", got)
	}
	stats := func(queued, scheduled int64) {
		t.Helper()
		for _, tenant := range []string{"acme", ""} {
			qs, err := b.Engine.Stats(b.Ctx, tenant)
			if err != nil {
				t.Fatal(err)
			}
			if qs.ByState[host.StateQueued] != queued || qs.ByState[host.StateScheduled] != scheduled ||
				qs.ByTypeState["work"][host.StateQueued] != queued || qs.ByTypeState["work"][host.StateScheduled] != scheduled {
				t.Fatalf("stats of %q: by state %v, work's %v; want queued %d scheduled %d", tenant, qs.ByState, qs.ByTypeState["work"], queued, scheduled)
			}
		}
	}
	stats(1, 1)

	// A retry's backoff and a snooze are scheduled too.
	o := b.LeaseOne(t, "w.1")
	if o.Task.ID != ready.TaskID {
		t.Fatalf("leased %s, want the ready task", o.Task.ID)
	}
	if _, err := b.Engine.Snooze(b.Ctx, Call("w.1", o), 30*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	stats(0, 2)
	b.Clock.Advance(30 * time.Second)
	stats(1, 1)
	o = b.LeaseOne(t, "w.1")
	fr, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "flaky", Retryable: true})
	if err != nil || !fr.WillRetry {
		t.Fatalf("fail: %+v %v", fr, err)
	}
	if st := b.Task(t, ready.TaskID).State; st != host.StateScheduled {
		t.Fatalf("a task waiting for its retry reads as %s, want scheduled", st)
	}
	b.Clock.Set(Epoch.Add(60 * time.Second))
	if st := b.Task(t, later.TaskID).State; st != host.StateQueued {
		t.Fatalf("a delayed task past its time reads as %s, want queued", st)
	}
	b.Clock.Set(fr.RetryScheduledAt.Add(time.Second))
	stats(2, 0)
	_, _, err = b.Engine.ListTasks(b.Ctx, b.Admin, store.TaskFilter{States: []host.TaskState{"later"}})
	WantCode(t, err, host.CodeBadRequest)
}

// testPauseLeasing: an operator pauses a task type's leasing. Enqueue still
// accepts its tasks; no lease call is offered them (with or without naming
// the type), while other types and other tenants' same-named types are
// offered as before. The pause is stored: a second engine on the same store
// (another host, or this one after a restart) honours it. Resuming offers
// the tasks again; pausing twice keeps the first pause; an unknown type is
// not_found.
func testPauseLeasing(t *testing.T, b *Bundle) {
	_, err := b.Engine.PauseTaskType(b.Ctx, "acme", "nope", "ops", "")
	WantCode(t, err, host.CodeNotFound)
	first := b.Enqueue(t, "work")
	p, err := b.Engine.PauseTaskType(b.Ctx, "acme", "work", "ops", "upstream outage")
	if err != nil || p.TaskType != "work" || p.PausedBy != "ops" || p.Reason != "upstream outage" || !p.PausedAt.Equal(Epoch) {
		t.Fatalf("pause: %+v %v", p, err)
	}
	b.Clock.Advance(time.Second)
	if p2, err := b.Engine.PauseTaskType(b.Ctx, "acme", "work", "ops2", "again"); err != nil || !p2.PausedAt.Equal(Epoch) || p2.PausedBy != "ops" {
		t.Fatalf("a second pause must keep the first: %+v %v", p2, err)
	}
	second := b.Enqueue(t, "work") // enqueue is still accepted
	if st := b.Task(t, second.TaskID).State; st != host.StateQueued {
		t.Fatalf("a paused type's new task is %s, want queued", st)
	}
	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1"}, "a paused type, any type asked")
	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"work"}}, "a paused type, asked by name")
	o := b.Enqueue(t, "other")
	if got := b.LeaseOne(t, "w.1"); got.Task.ID != o.TaskID {
		t.Fatalf("offered %s, want the other type's task %s", got.Task.ID, o.TaskID)
	}
	// A type registered while another is paused is offered at once to a
	// lease call that names no type (the registration refreshes the
	// host's snapshot of the tenant's types).
	ft := host.NewTaskType("fresh")
	ft.Tenant = "acme"
	b.MustPutType(t, ft)
	f := b.Enqueue(t, "fresh")
	if got := b.LeaseOne(t, "w.1"); got.Task.ID != f.TaskID {
		t.Fatalf("offered %s, want the new type's task %s", got.Task.ID, f.TaskID)
	}
	// Another tenant's type of the same name is not paused.
	ot := host.NewTaskType("work")
	ot.Tenant = "tenant-b"
	b.MustPutType(t, ot)
	agentB := engine.Actor{Tenant: "tenant-b", Principal: "agent.b", Role: engine.RoleAgent}
	resB, err := b.Engine.Enqueue(b.Ctx, agentB, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if offers, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "tenant-b", WorkerID: "w.b"}); err != nil || len(offers) != 1 || offers[0].Task.ID != resB.TaskID {
		t.Fatalf("another tenant's type was paused too: %v %v", offers, err)
	}
	ps, err := b.Engine.TaskTypePauses(b.Ctx, "acme")
	if err != nil || len(ps) != 1 || ps[0].TaskType != "work" {
		t.Fatalf("pauses: %+v %v", ps, err)
	}
	if ps, err := b.Engine.TaskTypePauses(b.Ctx, "tenant-b"); err != nil || len(ps) != 0 {
		t.Fatalf("tenant-b's pauses: %+v %v", ps, err)
	}
	// Another engine on the same store: the pause is the store's.
	other, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, MaxLeaseSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if offers, err := other.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.2"}); err != nil || len(offers) != 0 {
		t.Fatalf("a second engine leased a paused type: %v %v", offers, err)
	}

	if was, err := b.Engine.ResumeTaskType(b.Ctx, "acme", "work"); err != nil || !was {
		t.Fatalf("resume: %v %v", was, err)
	}
	if was, err := b.Engine.ResumeTaskType(b.Ctx, "acme", "work"); err != nil || was {
		t.Fatalf("a second resume: %v %v, want false", was, err)
	}
	offers, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", MaxTasks: 5})
	if err != nil || len(offers) != 2 || offers[0].Task.ID != first.TaskID || offers[1].Task.ID != second.TaskID {
		t.Fatalf("after resume: %v %v, want both tasks in order", offers, err)
	}
}
