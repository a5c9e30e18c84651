package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// testSnooze: a worker gives its leased task back until a later time. No
// attempt is used (attempt count and retry budget untouched), the task is
// not offered before the time, the attempt is kept as snoozed with that
// time, and an accepted lease's obligation is discharged by task.snoozed.
// Snoozing someone else's lease, or one that is gone, is refused as
// release refuses it; a bad duration is bad_request and changes nothing.
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
	WantCode(t, err, host.CodeLeaseExpired)
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
