package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// A workflow step takes what an enqueue takes to say when, and holding
// what, its task may start (delay_seconds, not_before, resource_intents),
// with an enqueue's meaning: the delay counts from the submission, and a
// step with after is offered once both its rule is met and its time has
// come.

// stepView returns the step of v named name.
func stepView(t testing.TB, v *engine.WorkflowView, name string) engine.WorkflowStepView {
	t.Helper()
	for _, s := range v.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("workflow %s has no step %s", v.ID, name)
	return engine.WorkflowStepView{}
}

// wantStepAt checks a step's status in its workflow's view and the
// available_at the view shows (nil: none).
func wantStepAt(t testing.TB, v *engine.WorkflowView, name string, status host.TaskState, at *time.Time) {
	t.Helper()
	s := stepView(t, v, name)
	if s.Status != status {
		t.Fatalf("step %s is %s, want %s", name, s.Status, status)
	}
	switch {
	case at == nil && s.AvailableAt != nil:
		t.Fatalf("step %s shows available_at %s, want none", name, s.AvailableAt)
	case at != nil && (s.AvailableAt == nil || !s.AvailableAt.Equal(*at)):
		t.Fatalf("step %s shows available_at %v, want %s", name, s.AvailableAt, at)
	}
}

// testWorkflowStepDelayed: a step with delay_seconds after another is
// waiting until its dependency succeeds, then scheduled until the
// submission + the delay, then offered; exactly as a plain task enqueued
// with the same after list and delay at the same moment.
func testWorkflowStepDelayed(t *testing.T, b *Bundle) {
	submitted := b.Clock.Now()
	later := step("later", "other", "a")
	later.DelaySeconds = 3600
	res := b.submit(t, "timer", step("a", "work"), later)
	dep := b.Enqueue(t, "work")
	plain := b.Enqueue(t, "other", func(r *engine.EnqueueRequest) { r.After, r.DelaySeconds = []string{dep.TaskID}, 3600 })
	due := submitted.Add(time.Hour)

	wantStepAt(t, b.workflow(t, res.WorkflowID), "later", host.StateWaiting, &due)
	if tk := b.Task(t, res.Steps["later"]); tk.State != host.StateWaiting || !tk.AvailableAt.Equal(due) {
		t.Fatalf("delayed step task: %s available %s, want waiting available %s", tk.State, tk.AvailableAt, due)
	}
	var body struct {
		AvailableAt time.Time `json:"available_at"`
	}
	if rs := b.Receipts(t, res.Steps["later"]); len(rs) != 1 || json.Unmarshal(rs[0].Body, &body) != nil || !body.AvailableAt.Equal(due) {
		t.Fatalf("the step's task.assigned receipt does not say available_at %s: %+v", due, rs)
	}

	// The dependencies succeed ten seconds in: both waiters are queued,
	// scheduled for the submission + one hour, not their dependency's end
	// + one hour.
	b.Clock.Advance(10 * time.Second)
	deps, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"work"}, MaxTasks: 10})
	if err != nil || len(deps) != 2 {
		t.Fatalf("the two dependencies: %d offers, %v", len(deps), err)
	}
	for _, o := range deps {
		b.Complete(t, "w.1", o)
	}
	wantStepAt(t, b.workflow(t, res.WorkflowID), "later", host.StateScheduled, &due)
	st, pt := b.Task(t, res.Steps["later"]), b.Task(t, plain.TaskID)
	if st.State != host.StateScheduled || !st.AvailableAt.Equal(due) || pt.State != st.State || !pt.AvailableAt.Equal(st.AvailableAt) {
		t.Fatalf("after its dependency: the step is %s until %s, the plain task %s until %s; want both scheduled until %s",
			st.State, st.AvailableAt, pt.State, pt.AvailableAt, due)
	}
	b.noOffer(t, "other", "a delayed step right after its dependency")
	b.Clock.Set(due.Add(-time.Second))
	b.noOffer(t, "other", "a delayed step a second before its time")

	b.Clock.Set(due)
	offers, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.2", Types: []string{"other"}, MaxTasks: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var so host.Offer
	for _, o := range offers {
		got = append(got, o.Task.ID)
		if o.Task.ID == res.Steps["later"] {
			so = o
		}
	}
	if len(offers) != 2 || so.Task == nil || !strings.Contains(strings.Join(got, ","), plain.TaskID) {
		t.Fatalf("at its time: offered %v, want the step %s and the plain task %s", got, res.Steps["later"], plain.TaskID)
	}
	wantDeps(t, so, res.Steps["a"]+":succeeded")
	wantStepAt(t, b.workflow(t, res.WorkflowID), "later", host.StateLeased, nil)
	b.Complete(t, "w.2", so)
	b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowSucceeded)

	// A dependency that ends after the step's time has come: the step is
	// offered at once (the delay is not counted again from that end).
	short := step("soon", "other", "slow")
	short.DelaySeconds = 60
	res2 := b.submit(t, "timer passed", step("slow", "work"), short)
	b.Clock.Advance(2 * time.Minute)
	wantStepAt(t, b.workflow(t, res2.WorkflowID), "soon", host.StateWaiting, nil)
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	wantStepAt(t, b.workflow(t, res2.WorkflowID), "soon", host.StateQueued, nil)
	if o := b.leaseType(t, "w.2", "other"); o.Task.ID != res2.Steps["soon"] {
		t.Fatalf("offered %s, want step soon %s", o.Task.ID, res2.Steps["soon"])
	}
}

// testWorkflowStepNotBefore: a step without after that names not_before
// (given in any zone) is scheduled until that instant, then offered.
func testWorkflowStepNotBefore(t *testing.T, b *Bundle) {
	at := b.Clock.Now().Add(30 * time.Minute)
	s := step("only", "work")
	inZone := at.In(time.FixedZone("UTC+2", 2*3600))
	s.NotBefore = &inZone
	early := step("early", "other") // a not_before already past starts it now
	past := b.Clock.Now().Add(-time.Hour)
	early.NotBefore = &past
	res := b.submit(t, "at a time", s)
	res2 := b.submit(t, "already due", early)
	v := b.workflow(t, res.WorkflowID)
	wantStepAt(t, v, "only", host.StateScheduled, &at)
	if got := stepView(t, v, "only").AvailableAt.Location(); got != time.UTC {
		t.Fatalf("available_at is in %s, want UTC", got)
	}
	wantStepAt(t, b.workflow(t, res2.WorkflowID), "early", host.StateQueued, nil)
	if o := b.leaseType(t, "w.1", "other"); o.Task.ID != res2.Steps["early"] {
		t.Fatalf("offered %s, want the step whose not_before has passed", o.Task.ID)
	}
	b.noOffer(t, "work", "a step before its not_before")
	b.Clock.Set(at)
	if o := b.leaseType(t, "w.1", "work"); o.Task.ID != res.Steps["only"] {
		t.Fatalf("offered %s, want the step at its not_before", o.Task.ID)
	}
}

// testWorkflowStepResources: a step's resource_intents are fixed on its
// task, merged and normalized as an enqueue's; the step is not offered
// while another task holds a conflicting lease, and holds its own lease
// once offered.
func testWorkflowStepResources(t *testing.T, b *Bundle) {
	holder := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) {
		r.ResourceIntents = []host.ResourceIntent{{Resource: "REPO:r", Predicate: "MUTATES"}}
	})
	oh := b.leaseType(t, "w.1", "work")
	if oh.Task.ID != holder.TaskID || len(taskLeases(t, b, holder.TaskID)) != 1 {
		t.Fatalf("the holder task was not offered with its resource lease")
	}
	s := step("edit", "work")
	s.ResourceIntents = []host.ResourceIntent{{Resource: "repo:r", Predicate: "mutates"}, {Resource: "FILE:/a/./b", Predicate: "READS"}}
	res := b.submit(t, "locked", s)
	if got := fmt.Sprint(b.Task(t, res.Steps["edit"]).ResourceIntents); got != "[{FILE:/a/b READS} {REPO:r MUTATES}]" {
		t.Fatalf("step task intents = %s", got)
	}
	b.noOffer(t, "work", "a step whose resource another task holds")
	b.Clock.Advance(2 * time.Second)
	b.noOffer(t, "work", "a step whose resource another task still holds")
	if n := len(taskLeases(t, b, res.Steps["edit"])); n != 0 {
		t.Fatalf("the blocked step holds %d resource leases", n)
	}
	b.Complete(t, "w.1", oh)
	b.Clock.Advance(2 * time.Second)
	o := b.leaseType(t, "w.2", "work")
	if o.Task.ID != res.Steps["edit"] || len(taskLeases(t, b, o.Task.ID)) != 2 {
		t.Fatalf("after the release: offered %s holding %d resource leases, want step %s holding 2",
			o.Task.ID, len(taskLeases(t, b, o.Task.ID)), res.Steps["edit"])
	}
	b.Complete(t, "w.2", o)
	b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowSucceeded)
}

// testWorkflowStepStartRefused: a step's bad delay_seconds, not_before or
// resource_intents is refused with the code a plain enqueue with the same
// field gets, the detail naming the step, and nothing is written even when
// the other steps are good.
func testWorkflowStepStartRefused(t *testing.T, b *Bundle) {
	far := b.Clock.Now().Add(367 * 24 * time.Hour)
	for _, c := range []struct {
		name, code, field string
		delay             int
		notBefore         *time.Time
		intents           []host.ResourceIntent
	}{
		{name: "negative delay", code: host.CodeBadRequest, field: "delay_seconds", delay: -1},
		{name: "delay over a year", code: host.CodeBadRequest, field: "delay_seconds", delay: 366*24*3600 + 1},
		{name: "not_before over a year", code: host.CodeBadRequest, field: "not_before", notBefore: &far},
		{name: "bad resource", code: host.CodeInvalidResource, field: "resource_intents[0]", intents: []host.ResourceIntent{{Resource: "FILE:", Predicate: "READS"}}},
		{name: "bad predicate", code: host.CodeBadRequest, field: "resource_intents[0]", intents: []host.ResourceIntent{{Resource: "FILE:/a", Predicate: "OWNS"}}},
		{name: "too many intents", code: host.CodeTooLarge, field: "resource_intents", intents: make([]host.ResourceIntent, host.MaxTaskResourceIntents+1)},
	} {
		_, plainErr := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{"n":1}`),
			DelaySeconds: c.delay, NotBefore: c.notBefore, ResourceIntents: c.intents})
		bad := step("b", "work", "a")
		bad.DelaySeconds, bad.NotBefore, bad.ResourceIntents = c.delay, c.notBefore, c.intents
		_, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, engine.WorkflowRequest{Name: "x", Steps: []engine.WorkflowStepRequest{step("a", "work"), bad, step("c", "other", "b")}})
		if host.ErrorCode(plainErr) != c.code {
			t.Fatalf("%s: a plain enqueue got %v, want %s", c.name, plainErr, c.code)
		}
		d := host.ErrorDetail(err)
		if host.ErrorCode(err) != c.code || !strings.Contains(d, "steps[1] (b)") || !strings.Contains(d, c.field) {
			t.Fatalf("%s: got %v, want %s (as a plain enqueue) naming steps[1] (b) and %s", c.name, err, c.code, c.field)
		}
	}
	if qs, err := b.Engine.Stats(b.Ctx, "acme"); err != nil || sum(qs.ByState) != 0 {
		t.Fatalf("refused workflows and enqueues left tasks: %v %v", qs.ByState, err)
	}
	if wfs, _, err := b.Engine.ListWorkflows(b.Ctx, b.Admin, store.WorkflowFilter{}); err != nil || len(wfs) != 0 {
		t.Fatalf("refused workflows left rows: %d, %v", len(wfs), err)
	}
	if n := len(b.Open(t, "agent.kee")); n != 0 {
		t.Fatalf("refused workflows left %d obligations", n)
	}
}

// testWorkflowStepStartIdempotent: the request hash of an idempotent
// submission covers the steps' delay_seconds, not_before and
// resource_intents as they are meant: the same request spelled otherwise
// is a duplicate, a change of any of them a conflict.
func testWorkflowStepStartIdempotent(t *testing.T, b *Bundle) {
	nb := b.Clock.Now().Add(time.Hour)
	req := func(mod func(s *engine.WorkflowStepRequest)) engine.WorkflowRequest {
		s := step("b", "work", "a")
		at := nb
		s.DelaySeconds, s.NotBefore = 60, &at
		s.ResourceIntents = []host.ResourceIntent{{Resource: "repo:r", Predicate: "reads"}, {Resource: "FILE:/x", Predicate: "MUTATES"}}
		if mod != nil {
			mod(&s)
		}
		return engine.WorkflowRequest{Name: "timed", IdempotencyKey: "k-start", Steps: []engine.WorkflowStepRequest{step("a", "work"), s}}
	}
	first, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, req(nil))
	if err != nil {
		t.Fatal(err)
	}
	if tk := b.Task(t, first.Steps["b"]); !tk.AvailableAt.Equal(nb) || fmt.Sprint(tk.ResourceIntents) != "[{FILE:/x MUTATES} {REPO:r READS}]" {
		t.Fatalf("step b's task: available %s, intents %v", tk.AvailableAt, tk.ResourceIntents)
	}
	b.Clock.Advance(time.Minute) // a retransmission comes later; the request is the same
	again, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, req(func(s *engine.WorkflowStepRequest) {
		at := nb.In(time.FixedZone("UTC-5", -5*3600))
		s.NotBefore = &at
		s.ResourceIntents = []host.ResourceIntent{{Resource: "FILE:/x", Predicate: "mutates"}, {Resource: "REPO:r", Predicate: "READS"}}
	}))
	if err != nil || !again.IsDuplicate || again.WorkflowID != first.WorkflowID {
		t.Fatalf("the same request spelled otherwise: %+v, %v; want the first workflow %s as a duplicate", again, err, first.WorkflowID)
	}
	for _, c := range []struct {
		name string
		mod  func(s *engine.WorkflowStepRequest)
	}{
		{"another delay", func(s *engine.WorkflowStepRequest) { s.DelaySeconds = 61 }},
		{"no delay", func(s *engine.WorkflowStepRequest) { s.DelaySeconds = 0 }},
		{"another not_before", func(s *engine.WorkflowStepRequest) { at := nb.Add(time.Second); s.NotBefore = &at }},
		{"no not_before", func(s *engine.WorkflowStepRequest) { s.NotBefore = nil }},
		{"another predicate", func(s *engine.WorkflowStepRequest) { s.ResourceIntents[0].Predicate = "MUTATES" }},
		{"no intents", func(s *engine.WorkflowStepRequest) { s.ResourceIntents = nil }},
	} {
		_, err := b.Engine.SubmitWorkflow(b.Ctx, b.Agent, req(c.mod))
		if host.ErrorCode(err) != host.CodeIdempotencyConflict {
			t.Fatalf("%s under the same key: %v, want %s", c.name, err, host.CodeIdempotencyConflict)
		}
	}
	if wfs, _, err := b.Engine.ListWorkflows(b.Ctx, b.Admin, store.WorkflowFilter{}); err != nil || len(wfs) != 1 {
		t.Fatalf("%d workflows (%v), want 1", len(wfs), err)
	}
}
