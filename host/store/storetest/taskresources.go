package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Task integration of resource leases (KLIS-3): a task type's resource
// intents are granted with the task's lease, follow it, and end with it; two
// tasks that MUTATE one resource never run at once.

func runTaskResources(t *testing.T, open Opener) {
	cases := []struct {
		name string
		fn   func(t *testing.T, b *Bundle)
	}{
		{"TaskResourceIntentsValidated", testTRValidated},
		{"TaskResourceEnqueueIntents", testTREnqueue},
		{"TaskResourceMutatesExclusive", testTRMutates},
		{"TaskResourceReadsShared", testTRReads},
		{"TaskResourceBlockedTaskStepsAside", testTRStepAside},
		{"TaskResourceReofferedOnRelease", testTRReoffered},
		{"TaskResourceReofferedInOrder", testTRReofferedInOrder},
		{"TaskResourceHeartbeatExtends", testTRHeartbeat},
		{"TaskResourceHeartbeatRefusedOnceSwept", testTRHeartbeatAfterSweep},
		{"TaskResourceEndsWithTheLease", testTREnds},
		{"TaskResourceWaitsForAgentLease", testTRAgent},
		{"TaskResourceWorkersNeverOverlap", testTRWorkers},
		{"TaskResourceFencingTokens", testTRFencingTokens}, // fencing.go
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := Setup(t, open)
			for _, tt := range []struct{ name, pred string }{{"edit", "MUTATES"}, {"look", "READS"}} {
				ty := host.NewTaskType(tt.name)
				ty.Tenant = "acme"
				ty.LeaseSeconds = 3600
				ty.ResourceIntents = []host.ResourceIntent{{Resource: "file:/repo/./x.go", Predicate: host.LeasePredicate(tt.pred)}}
				b.MustPutType(t, ty)
			}
			c.fn(t, b)
			b.VerifyAfter(t)
		})
	}
}

// taskLeases returns the resource leases held for a task, oldest first.
func taskLeases(t *testing.T, b *Bundle, taskID string) []*host.ResourceLease {
	t.Helper()
	ls, _, _, err := b.Engine.ListResourceLeases(b.Ctx, store.ResourceLeaseFilter{Tenant: "acme", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []*host.ResourceLease
	for _, l := range ls {
		if l.TaskID == taskID {
			out = append(out, l)
		}
	}
	return out
}

// oneTaskLease returns the only resource lease held for a task.
func oneTaskLease(t *testing.T, b *Bundle, taskID string) *host.ResourceLease {
	t.Helper()
	ls := taskLeases(t, b, taskID)
	if len(ls) != 1 {
		t.Fatalf("task %s has %d resource leases, want 1: %v", taskID, len(ls), ls)
	}
	return ls[0]
}

func leaseN(t *testing.T, b *Bundle, worker string, n int, types ...string) []host.Offer {
	t.Helper()
	offers, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: worker, Types: types, MaxTasks: n})
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	return offers
}

func testTRValidated(t *testing.T, b *Bundle) {
	tt, err := b.Engine.GetTaskType(b.Ctx, "acme", "edit")
	if err != nil {
		t.Fatal(err)
	}
	if len(tt.ResourceIntents) != 1 || tt.ResourceIntents[0].Resource != "FILE:/repo/x.go" || tt.ResourceIntents[0].Predicate != host.PredicateMutates {
		t.Fatalf("stored intents not normalized: %+v", tt.ResourceIntents)
	}
	both := host.NewTaskType("both")
	both.Tenant = "acme"
	both.ResourceIntents = []host.ResourceIntent{{Resource: "REPO:a", Predicate: "reads"}, {Resource: " repo:a ", Predicate: "MUTATES"}, {Resource: "b", Predicate: "READS"}}
	got := b.MustPutType(t, both)
	if fmt.Sprint(got.ResourceIntents) != "[{REPO:a MUTATES} {b READS}]" {
		t.Fatalf("one intent per resource, MUTATES wins, sorted: got %v", got.ResourceIntents)
	}
	for _, c := range []struct {
		in   host.ResourceIntent
		code string
	}{
		{host.ResourceIntent{Resource: "", Predicate: "READS"}, host.CodeInvalidResource},
		{host.ResourceIntent{Resource: "FILE:", Predicate: "READS"}, host.CodeInvalidResource},
		{host.ResourceIntent{Resource: "a\x00b", Predicate: "READS"}, host.CodeInvalidResource},
		{host.ResourceIntent{Resource: strings.Repeat("a", host.MaxResourceLen+1), Predicate: "READS"}, host.CodeInvalidResource},
		{host.ResourceIntent{Resource: "FILE:/a", Predicate: "WRITES"}, host.CodeBadRequest},
	} {
		bad := host.NewTaskType("bad")
		bad.Tenant = "acme"
		bad.ResourceIntents = []host.ResourceIntent{c.in}
		_, err := b.Engine.PutTaskType(b.Ctx, bad)
		WantCode(t, err, c.code)
		if d := host.ErrorDetail(err); len(d) < len("resource_intents[0]") || d[:len("resource_intents[0]")] != "resource_intents[0]" {
			t.Fatalf("detail does not name the intent: %q", d)
		}
	}
	many := host.NewTaskType("bad")
	many.Tenant = "acme"
	for i := 0; i <= host.MaxTaskResourceIntents; i++ {
		many.ResourceIntents = append(many.ResourceIntents, host.ResourceIntent{Resource: fmt.Sprintf("R:%d", i), Predicate: "READS"})
	}
	_, err = b.Engine.PutTaskType(b.Ctx, many)
	WantCode(t, err, host.CodeTooLarge)
	if _, err := b.Engine.GetTaskType(b.Ctx, "acme", "bad"); !host.IsCode(err, host.CodeNotFound) && !host.IsCode(err, host.CodeUnknownTaskType) {
		t.Fatalf("a refused task type was stored: %v", err)
	}
}

func testTREnqueue(t *testing.T, b *Bundle) {
	for _, c := range []struct {
		in   []host.ResourceIntent
		code string
	}{
		{[]host.ResourceIntent{{Resource: "FILE:", Predicate: "READS"}}, host.CodeInvalidResource},
		{[]host.ResourceIntent{{Resource: "FILE:/a", Predicate: "OWNS"}}, host.CodeBadRequest},
		{make([]host.ResourceIntent, host.MaxTaskResourceIntents+1), host.CodeTooLarge},
	} {
		_, err := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", Params: []byte(`{}`), ResourceIntents: c.in})
		WantCode(t, err, c.code)
	}
	if tasks, _, err := b.Engine.ListTasks(b.Ctx, b.Admin, store.TaskFilter{Tenant: "acme", Limit: 10}); err != nil || len(tasks) != 0 {
		t.Fatalf("a refused enqueue left tasks: %d (%v)", len(tasks), err)
	}
	// The type's intents and the request's are merged and fixed on the task.
	e := b.Enqueue(t, "edit", func(r *engine.EnqueueRequest) {
		r.ResourceIntents = []host.ResourceIntent{{Resource: "repo:r", Predicate: "reads"}, {Resource: "FILE:/repo/x.go", Predicate: "READS"}}
	})
	if got := fmt.Sprint(b.Task(t, e.TaskID).ResourceIntents); got != "[{FILE:/repo/x.go MUTATES} {REPO:r READS}]" {
		t.Fatalf("task intents = %s", got)
	}
	// A task of a type without intents, with its own: one MUTATES at a time.
	w1 := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) {
		r.ResourceIntents = []host.ResourceIntent{{Resource: "REPO:r", Predicate: "MUTATES"}}
	})
	w2 := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) {
		r.ResourceIntents = []host.ResourceIntent{{Resource: "REPO:r", Predicate: "MUTATES"}}
	})
	free := b.Enqueue(t, "work")
	offers := leaseN(t, b, "w.1", 10)
	var got []string
	for _, o := range offers {
		got = append(got, o.Task.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint([]string{e.TaskID, free.TaskID}) {
		t.Fatalf("offered %v, want the edit task (REPO:r READS) and the free one: both work tasks MUTATE REPO:r", got)
	}
	b.Complete(t, "w.1", offers[0])
	b.Clock.Advance(2 * time.Second)
	o := b.LeaseOne(t, "w.2")
	if o.Task.ID != w1.TaskID || len(taskLeases(t, b, w1.TaskID)) != 1 {
		t.Fatalf("after the READS ended: offered %s, want %s holding one resource lease", o.Task.ID, w1.TaskID)
	}
	b.Clock.Advance(2 * time.Second)
	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.3"}, "second task that MUTATES REPO:r")
	// Editing the type does not change what queued tasks run under.
	e3 := b.Enqueue(t, "edit")
	edit, err := b.Engine.GetTaskType(b.Ctx, "acme", "edit")
	if err != nil {
		t.Fatal(err)
	}
	edit.ResourceIntents = nil
	b.MustPutType(t, *edit)
	if got := fmt.Sprint(b.Task(t, e3.TaskID).ResourceIntents); got != "[{FILE:/repo/x.go MUTATES}]" {
		t.Fatalf("queued task's intents changed with its type: %s", got)
	}
	if got := fmt.Sprint(b.Task(t, w2.TaskID).ResourceIntents); got != "[{REPO:r MUTATES}]" {
		t.Fatalf("queued task's intents: %s", got)
	}
}

func testTRMutates(t *testing.T, b *Bundle) {
	e1 := b.Enqueue(t, "edit")
	e2 := b.Enqueue(t, "edit")
	offers := leaseN(t, b, "w.1", 10)
	if len(offers) != 1 || offers[0].Task.ID != e1.TaskID {
		t.Fatalf("two MUTATES tasks on one resource: got %d offers, want only the first", len(offers))
	}
	l := oneTaskLease(t, b, e1.TaskID)
	if l.Holder != "w.1" || l.Predicate != host.PredicateMutates || l.Resource != "FILE:/repo/x.go" || !l.LiveAt(b.Clock.Now()) ||
		!l.ExpiresAt.Equal(offers[0].LeaseExpiresAt) {
		t.Fatalf("resource lease does not follow the task lease %s: %+v", offers[0].LeaseExpiresAt, l)
	}
	tk2 := b.Task(t, e2.TaskID)
	if tk2.State != host.StateScheduled || tk2.LeaseCount != 0 || tk2.LeaseID != "" || !tk2.AvailableAt.After(b.Clock.Now()) {
		t.Fatalf("the blocked task was not put back untouched and stepped aside: %+v", tk2)
	}
	if len(taskLeases(t, b, e2.TaskID)) != 0 {
		t.Fatal("the blocked task holds resource leases")
	}
	b.Clock.Advance(2 * time.Second)
	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.2"}, "second MUTATES task while the first runs")
	b.Complete(t, "w.1", offers[0])
	if l := oneTaskLease(t, b, e1.TaskID); l.State != host.ResourceLeaseReleased || l.EndedAt == nil {
		t.Fatalf("complete did not release the resource lease: %+v", l)
	}
	b.Clock.Advance(2 * time.Second)
	o2 := b.LeaseOne(t, "w.2")
	if o2.Task.ID != e2.TaskID || o2.Attempt != 1 {
		t.Fatalf("after the release: offer %+v", o2)
	}
	oneTaskLease(t, b, e2.TaskID)
	b.Verify(t)
}

func testTRReads(t *testing.T, b *Bundle) {
	r1 := b.Enqueue(t, "look")
	r2 := b.Enqueue(t, "look")
	ed := b.Enqueue(t, "edit")
	offers := leaseN(t, b, "w.1", 10)
	if len(offers) != 2 || offers[0].Task.ID != r1.TaskID || offers[1].Task.ID != r2.TaskID {
		t.Fatalf("READS tasks must share the resource and MUTATES wait: got %d offers", len(offers))
	}
	oneTaskLease(t, b, r1.TaskID)
	oneTaskLease(t, b, r2.TaskID)
	b.Complete(t, "w.1", offers[0])
	b.Clock.Advance(2 * time.Second)
	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.2"}, "MUTATES while one READS still runs")
	b.Complete(t, "w.1", offers[1])
	b.Clock.Advance(2 * time.Second)
	if o := b.LeaseOne(t, "w.2"); o.Task.ID != ed.TaskID {
		t.Fatalf("offered %s, want the edit task", o.Task.ID)
	}
}

func testTRStepAside(t *testing.T, b *Bundle) {
	b.Enqueue(t, "edit")
	o := b.LeaseOne(t, "w.1")
	// Blocked tasks at the head of the queue, with higher priority, must not
	// stop the task behind them from being offered in one lease call.
	var blocked []string
	for i := 0; i < 3; i++ {
		blocked = append(blocked, b.Enqueue(t, "edit", func(r *engine.EnqueueRequest) { r.Priority = 9 }).TaskID)
	}
	free := b.Enqueue(t, "work")
	o2 := b.LeaseOne(t, "w.2")
	if o2.Task.ID != free.TaskID {
		t.Fatalf("offered %s, want the free task behind the blocked ones", o2.Task.ID)
	}
	for _, id := range blocked {
		if tk := b.Task(t, id); tk.State != host.StateScheduled || tk.LeaseCount != 0 {
			t.Fatalf("blocked task %s: %+v", id, tk)
		}
	}
	b.Complete(t, "w.1", o)
	b.Clock.Advance(2 * time.Second)
	if o3 := b.LeaseOne(t, "w.3"); o3.Task.ID != blocked[0] {
		t.Fatalf("after the release: offered %s, want the first blocked task (order kept)", o3.Task.ID)
	}
	b.Verify(t)
}

// otherHost opens a second engine on b's store and clock: another gate
// host, whose memory holds nothing of what b.Engine did.
func otherHost(t *testing.T, b *Bundle) *engine.Engine {
	t.Helper()
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	return eng
}

// testTRReoffered: a task stepped aside for its resource is available again
// in the transaction that releases the resource, at the release's time,
// whichever host releases it: a lease call right after the release's answer,
// on the same clock reading, is offered the task.
func testTRReoffered(t *testing.T, b *Bundle) {
	other := otherHost(t, b)
	for _, end := range []string{"complete", "agent release"} {
		var release func()
		switch end {
		case "complete":
			b.Enqueue(t, "edit")
			o := b.LeaseOne(t, "w.1")
			release = func() {
				if _, err := other.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer}); err != nil {
					t.Fatal(err)
				}
			}
		case "agent release":
			res := mustAcquire(t, b.Engine, "agent.kee", time.Minute, "FILE:/repo/x.go", "MUTATES")
			release = func() {
				if _, err := other.ReleaseResources(b.Ctx, rlActor("agent.kee"), []string{res.Leases[0].ID}); err != nil {
					t.Fatal(err)
				}
			}
		}
		blocked := b.Enqueue(t, "edit")
		b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.2"}, end+": a second MUTATES task")
		if tk := b.Task(t, blocked.TaskID); tk.State != host.StateScheduled || !tk.AvailableAt.After(b.Clock.Now()) {
			t.Fatalf("%s: the blocked task did not step aside: %+v", end, tk)
		}
		release()
		if tk := b.Task(t, blocked.TaskID); tk.AvailableAt.After(b.Clock.Now()) {
			t.Fatalf("%s: the release left the task stepped aside until %s (now %s)", end, tk.AvailableAt, b.Clock.Now())
		}
		o := b.LeaseOne(t, "w.2")
		if o.Task.ID != blocked.TaskID {
			t.Fatalf("%s: offered %s, want the task that stepped aside (%s)", end, o.Task.ID, blocked.TaskID)
		}
		oneTaskLease(t, b, blocked.TaskID)
		b.Complete(t, "w.2", o)
		b.Clock.Advance(time.Second)
	}
	b.Verify(t)
}

// testTRReofferedInOrder: tasks stepped aside for one resource are offered
// again one at a time, each as soon as the one before it releases the
// resource, in the documented order of waiters (docs/http.md, "Fairness"):
// oldest first, senior from the first time each stepped aside, whatever
// their queue priority. Each release is answered by another host.
func testTRReofferedInOrder(t *testing.T, b *Bundle) {
	other := otherHost(t, b)
	b.Enqueue(t, "edit")
	o, worker := b.LeaseOne(t, "w.1"), "w.1"
	var want []string
	for i, prio := range []int{5, 9, 5, 9} {
		b.Clock.Advance(time.Millisecond)
		id := b.Enqueue(t, "edit", func(r *engine.EnqueueRequest) { r.Priority = prio }).TaskID
		b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", MaxTasks: 10}, fmt.Sprintf("blocked task %d", i))
		if tk := b.Task(t, id); !tk.AvailableAt.After(b.Clock.Now()) {
			t.Fatalf("blocked task %d did not step aside: %+v", i, tk)
		}
		want = append(want, id)
	}
	for i, id := range want {
		b.Clock.Advance(time.Millisecond)
		if _, err := other.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call(worker, o), Result: Pointer}); err != nil {
			t.Fatal(err)
		}
		worker = fmt.Sprintf("w.%d", i+2)
		offers := leaseN(t, b, worker, 10)
		if len(offers) != 1 || offers[0].Task.ID != id {
			var got []string
			for _, o := range offers {
				got = append(got, o.Task.ID)
			}
			t.Fatalf("release %d: offered %v, want only %s (order %v)", i, got, id, want)
		}
		o = offers[0]
	}
	b.Verify(t)
}

func testTRHeartbeat(t *testing.T, b *Bundle) {
	e := b.Enqueue(t, "edit")
	o := b.LeaseOne(t, "w.1")
	b.Clock.Advance(30 * time.Second)
	hb, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o)})
	if err != nil {
		t.Fatal(err)
	}
	l := oneTaskLease(t, b, e.TaskID)
	if !hb.LeaseExpiresAt.After(o.LeaseExpiresAt) || !l.ExpiresAt.Equal(hb.LeaseExpiresAt) {
		t.Fatalf("heartbeat moved the task lease to %s and the resource lease to %s", hb.LeaseExpiresAt, l.ExpiresAt)
	}
	// Still held past the first expiry: another MUTATES task waits.
	b.Enqueue(t, "edit")
	b.Clock.Set(o.LeaseExpiresAt.Add(time.Second))
	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.2"}, "MUTATES task while the heartbeat-extended one runs")
	// The resource API cannot touch a task's lease.
	_, err = b.Engine.ReleaseResources(b.Ctx, b.Admin, []string{l.ID})
	WantCode(t, err, host.CodeConflict)
	_, err = b.Engine.HeartbeatResources(b.Ctx, b.Admin, []string{l.ID}, 0)
	WantCode(t, err, host.CodeConflict)
}

// hookClock is a manual clock that runs hook once, the first time it is read
// after being armed.
type hookClock struct {
	*host.ManualClock
	armed atomic.Bool
	hook  func()
}

func (c *hookClock) Now() time.Time {
	now := c.ManualClock.Now()
	if c.armed.CompareAndSwap(true, false) {
		c.hook()
	}
	return now
}

// testTRHeartbeatAfterSweep: a heartbeat that read the clock just before the
// task's lease expired, and reached the writer after the resource sweeper
// had recorded the task's resource lease expired and an agent had taken the
// resource, is refused: the task no longer holds its resource, and extending
// its lease would let it run beside the agent's MUTATES.
func testTRHeartbeatAfterSweep(t *testing.T, b *Bundle) {
	clock := &hookClock{ManualClock: host.NewManualClock(b.Clock.Now())}
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: clock, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	b.Enqueue(t, "edit")
	offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1"})
	if err != nil || len(offers) != 1 {
		t.Fatalf("lease: %v, %d offers", err, len(offers))
	}
	exp := offers[0].LeaseExpiresAt
	clock.Set(exp.Add(-time.Millisecond))
	var agentLease *host.ResourceLease
	clock.hook = func() {
		clock.Set(exp.Add(time.Millisecond))
		if n, err := eng.SweepResourceLeases(b.Ctx); err != nil || n != 1 {
			t.Errorf("resource sweep: %d expired, %v; want 1", n, err)
		}
		res, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: "agent.kee", TTL: time.Minute,
			Intents: []host.ResourceIntent{{Resource: "file:/repo/x.go", Predicate: host.PredicateMutates}}})
		if err != nil {
			t.Errorf("the agent's MUTATES after the sweep: %v", err)
			return
		}
		agentLease = res.Leases[0]
	}
	clock.armed.Store(true)
	hb, err := eng.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", offers[0])})
	if agentLease == nil {
		t.Fatal("the hook did not run between the heartbeat's clock reading and its transaction")
	}
	if err == nil {
		t.Fatalf("the heartbeat extended the task's lease to %s while agent.kee holds MUTATES lease %s on its resource until %s",
			hb.LeaseExpiresAt, agentLease.ID, agentLease.ExpiresAt)
	}
	WantCode(t, err, host.CodeLeaseExpired)
}

func testTREnds(t *testing.T, b *Bundle) {
	ends := []struct {
		name string
		end  func(o host.Offer)
		want host.ResourceLeaseState
	}{
		{"fail", func(o host.Offer) {
			if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "boom", Retryable: true}); err != nil {
				t.Fatal(err)
			}
		}, host.ResourceLeaseReleased},
		{"release", func(o host.Offer) {
			if _, err := b.Engine.Release(b.Ctx, Call("w.1", o), "give back"); err != nil {
				t.Fatal(err)
			}
		}, host.ResourceLeaseReleased},
		{"cancel", func(o host.Offer) {
			if _, err := b.Engine.Cancel(b.Ctx, b.Admin, o.Task.ID, "stop"); err != nil {
				t.Fatal(err)
			}
			if l := oneTaskLease(t, b, o.Task.ID); !l.LiveAt(b.Clock.Now()) {
				t.Fatal("a cancel request ended the resource lease before the worker stopped")
			}
			if _, err := b.Engine.Release(b.Ctx, Call("w.1", o), "canceled"); err != nil {
				t.Fatal(err)
			}
			if tk := b.Task(t, o.Task.ID); tk.State != host.StateCanceled {
				t.Fatalf("task %s after cancel and release", tk.State)
			}
		}, host.ResourceLeaseReleased},
		{"expiry", func(o host.Offer) {
			b.Clock.Set(o.LeaseExpiresAt)
			if n, err := b.Engine.Sweep(b.Ctx); err != nil || n != 1 {
				t.Fatalf("sweep handled %d (%v)", n, err)
			}
		}, host.ResourceLeaseExpired},
	}
	for _, c := range ends {
		// The sweep and retries put tasks back later: enqueue a fresh one.
		e := b.Enqueue(t, "edit")
		offers := leaseN(t, b, "w.1", 1, "edit")
		if len(offers) != 1 || offers[0].Task.ID != e.TaskID {
			t.Fatalf("%s: lease got %d offers, want task %s", c.name, len(offers), e.TaskID)
		}
		c.end(offers[0])
		l := oneTaskLease(t, b, e.TaskID)
		if l.State != c.want || l.EndedAt == nil {
			t.Fatalf("%s: resource lease is %s (ended %v), want %s", c.name, l.State, l.EndedAt, c.want)
		}
		evs, _, err := b.Engine.ResourceLeaseEvents(b.Ctx, store.ResourceLeaseEventFilter{Tenant: "acme", LeaseID: l.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || evs[0].Kind != host.ResourceEventGranted || evs[1].Kind != host.ResourceLeaseEventKind(c.want) {
			t.Fatalf("%s: audit trail %+v", c.name, evs)
		}
		if tk := b.Task(t, e.TaskID); tk.State == host.StateQueued || tk.State == host.StateScheduled {
			if _, err := b.Engine.Cancel(b.Ctx, b.Admin, e.TaskID, "next case"); err != nil {
				t.Fatal(err)
			}
		}
		// The resource is free again: an agent may take it.
		res := mustAcquire(t, b.Engine, "agent.kee", time.Second, "FILE:/repo/x.go", "MUTATES")
		if _, err := b.Engine.ReleaseResources(b.Ctx, rlActor("agent.kee"), []string{res.Leases[0].ID}); err != nil {
			t.Fatal(err)
		}
	}
	b.Verify(t)
}

func testTRAgent(t *testing.T, b *Bundle) {
	res := mustAcquire(t, b.Engine, "agent.kee", time.Minute, "FILE:/repo/x.go", "READS")
	look := b.Enqueue(t, "look")
	edit := b.Enqueue(t, "edit")
	offers := leaseN(t, b, "w.1", 10)
	if len(offers) != 1 || offers[0].Task.ID != look.TaskID {
		t.Fatalf("with an agent's READS lease: got %d offers, want only the READS task", len(offers))
	}
	b.Complete(t, "w.1", offers[0])
	b.Clock.Advance(2 * time.Second)
	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1"}, "MUTATES task while an agent READS")
	if _, err := b.Engine.ReleaseResources(b.Ctx, rlActor("agent.kee"), []string{res.Leases[0].ID}); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(2 * time.Second)
	o := b.LeaseOne(t, "w.1")
	if o.Task.ID != edit.TaskID {
		t.Fatalf("offered %s, want the edit task", o.Task.ID)
	}
	// While the task holds it, the agent is refused, naming the task's lease.
	_, err := acquire(b.Engine, "agent.kee", time.Minute, "FILE:/repo/x.go", "READS")
	wantConflict(t, err, oneTaskLease(t, b, edit.TaskID).ID, false)
}

// testTRWorkers runs workers concurrently on READS and MUTATES tasks of one
// resource; each worker marks the resource in use between its offer and its
// complete (or fail, or release) call, and the test fails if two ever
// overlapped where the predicates conflict.
func testTRWorkers(t *testing.T, b *Bundle) {
	const tasks, workers = 40, 4
	for i := 0; i < tasks; i++ {
		typ := "look"
		if i%2 == 0 {
			typ = "edit"
		}
		b.Enqueue(t, typ)
	}
	var mu sync.Mutex
	// held counts the tasks a worker holds and has not ended yet.
	readers, writers, done, maxReaders, held := 0, 0, 0, 0, 0
	var violation string
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(b.Ctx, 2*time.Minute)
	defer cancel()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			worker := fmt.Sprintf("w.%d", w)
			for ctx.Err() == nil {
				mu.Lock()
				finished := done >= tasks
				mu.Unlock()
				if finished {
					return
				}
				offers, err := b.Engine.Lease(ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: worker, MaxTasks: 1 + rand.IntN(3)})
				if err != nil {
					mu.Lock()
					violation = "lease: " + err.Error()
					mu.Unlock()
					cancel()
					return
				}
				if len(offers) == 0 {
					// Let stepped-aside tasks come back, but only while no
					// worker holds a task: a clock moved by idle workers
					// would expire the leases of a worker that a loaded
					// machine runs slowly, and the tasks would go round
					// until the deadline. With tasks held, wait for them
					// to end.
					mu.Lock()
					idle := held == 0
					mu.Unlock()
					if idle {
						b.Clock.Advance(time.Second)
					} else {
						time.Sleep(time.Millisecond)
					}
					continue
				}
				mu.Lock()
				held += len(offers)
				for _, o := range offers {
					if o.Task.Type == "edit" {
						if writers > 0 || readers > 0 {
							violation = fmt.Sprintf("MUTATES task %s offered while %d readers and %d writers run", o.Task.ID, readers, writers)
						}
						writers++
					} else {
						if writers > 0 {
							violation = fmt.Sprintf("READS task %s offered while a MUTATES task runs", o.Task.ID)
						}
						readers++
					}
				}
				maxReaders = max(maxReaders, readers)
				mu.Unlock()
				for _, o := range offers {
					mu.Lock()
					if o.Task.Type == "edit" {
						writers--
					} else {
						readers--
					}
					mu.Unlock()
					var err error
					switch rand.IntN(4) {
					case 0:
						_, err = b.Engine.Release(ctx, Call(worker, o), "later")
					case 1:
						var res *engine.FailResult
						res, err = b.Engine.Fail(ctx, engine.FailRequest{WorkerCall: Call(worker, o), Error: "flaky", Retryable: true})
						if err == nil && res.Status == "dead_letter" {
							mu.Lock()
							done++
							mu.Unlock()
						}
					default:
						_, err = b.Engine.Complete(ctx, engine.CompleteRequest{WorkerCall: Call(worker, o), Result: Pointer})
						if err == nil {
							mu.Lock()
							done++
							mu.Unlock()
						}
					}
					mu.Lock()
					held--
					if err != nil && !host.IsCode(err, host.CodeLeaseExpired) {
						violation = "end: " + err.Error()
					}
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	if violation != "" {
		t.Fatal(violation)
	}
	if done < tasks {
		t.Fatalf("only %d of %d tasks completed before the deadline", done, tasks)
	}
	live, err := b.Engine.CountLiveResourceLeases(b.Ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if live[host.PredicateMutates]+live[host.PredicateReads] != 0 {
		t.Fatalf("resource leases left live after every task ended: %v", live)
	}
	t.Logf("%d tasks, at most %d READS tasks at once", tasks, maxReaders)
}
