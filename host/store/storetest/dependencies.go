package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Task dependencies (issue 39): a task enqueued with an after list waits
// until its rule is met, is offered once with its dependencies' outcomes,
// and is canceled by the gate when its rule can no longer be met.
func dependencyCases() []struct {
	name string
	fn   func(*testing.T, *Bundle)
} {
	return []struct {
		name string
		fn   func(*testing.T, *Bundle)
	}{
		{"DependenciesAllSucceeded", testDepsAllSucceeded},
		{"DependenciesAnySucceeded", testDepsAnySucceeded},
		{"DependenciesAllFinished", testDepsAllFinished},
		{"DependencyDeadLetterCancelsWaiter", testDepsDeadLetterCancels},
		{"DependencyRedriven", testDepsRedriven},
		{"DependencyRedrivenAfterItsWaiters", testDepsRedrivenLateWaiters},
		{"DependencyCancelSettlesWaiter", testDepsCancelSettles},
		{"DependenciesRefuseForeignIDs", testDepsForeign},
		{"DependenciesAtEnqueue", testDepsAtEnqueue},
		{"DependenciesIdempotentEnqueue", testDepsIdempotent},
		{"DependencyCompletedByAnotherWriter", testDepsOtherWriter},
		{"DependencyHammer", testDepsHammer},
		{"DependencyOutcomesNarrow", testDepsOutcomesNarrow},
		{"DependencyOutcomesCapped", testDepsOutcomesCapped},
		{"DependencyChainCancel", testDepsChainCancel},
		{"DependencyWaitersBounded", testDepsWaitersBounded},
		{"DependencyCreatorKeepsWaiterRoom", testDepsCreatorWaiterRoom},
		{"DependencyChainDepthBounded", testDepsDepthBounded},
		{"DependencyMarker", testDepsMarker},
		{"DependencyMarkAndLock", testDepsMarkAndLock},
		{"DependencyReadyWaiterRows", testDepsReadyRows},
		{"DependencyRaceWithCompletion", testDepsRaceWithCompletion},
		{"DependencyCascadeBounded", testDepsCascadeBounded}, {"DependencyCascadeResumes", testDepsCascadeResumes}, // cascade.go
		{"DependencyCascadeFromDeadLetter", testDepsCascadeFromDeadLetter}, // cascade.go
		{"DependencyCascadePoison", testDepsCascadePoison},                 // cascadepoison.go
		{"DependencyEdgeByKey", testDepsGetEdge},                           // depedge.go
		{"DependencyOwedWaiters", testDepsOwedWaiters},                     // depowed.go
	}
}

// after makes an enqueue wait on ids under rule ("" for the default).
func after(rule host.DependencyRule, ids ...string) func(*engine.EnqueueRequest) {
	return func(r *engine.EnqueueRequest) { r.After, r.AfterRule = ids, rule }
}

// leaseType leases one task of typ for worker or fails the test.
func (b *Bundle) leaseType(t *testing.T, worker, typ string) host.Offer {
	t.Helper()
	return b.LeaseOne(t, worker, typ)
}

func (b *Bundle) noOffer(t *testing.T, typ, why string) {
	t.Helper()
	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.9", Types: []string{typ}, MaxTasks: 10}, why)
}

func (b *Bundle) waitingCount(t *testing.T) int64 {
	t.Helper()
	qs, err := b.Engine.Stats(b.Ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	return qs.ByState[host.StateWaiting]
}

func (b *Bundle) failFatal(t *testing.T, worker string, o host.Offer) {
	t.Helper()
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call(worker, o), Error: "broken input"}); err != nil {
		t.Fatal(err)
	}
}

// wantDeps checks an offer's dependency outcomes: their ids and states in
// after order.
func wantDeps(t *testing.T, o host.Offer, want ...string) {
	t.Helper()
	var got []string
	for _, d := range o.Dependencies {
		got = append(got, d.TaskID+":"+string(d.Status))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("offer of %s carries dependencies %v, want %v", o.Task.ID, got, want)
	}
}

func testDepsAllSucceeded(t *testing.T, b *Bundle) {
	a := b.Enqueue(t, "work")
	c := b.Enqueue(t, "work")
	w := b.Enqueue(t, "other", after("", a.TaskID, c.TaskID))
	if w.Status != string(host.StateWaiting) {
		t.Fatalf("waiter enqueued %q, want waiting", w.Status)
	}
	if n := b.waitingCount(t); n != 1 {
		t.Fatalf("stats count %d waiting, want 1", n)
	}
	b.noOffer(t, "other", "a waiter was offered before its dependencies finished")
	oa := b.leaseType(t, "w.1", "work")
	b.Complete(t, "w.1", oa)
	b.noOffer(t, "other", "a waiter was offered after one of two dependencies")
	oc := b.leaseType(t, "w.1", "work")
	b.Complete(t, "w.1", oc)
	if n := b.waitingCount(t); n != 0 {
		t.Fatalf("stats count %d waiting after the rule was met, want 0", n)
	}
	o := b.leaseType(t, "w.2", "other")
	if o.Task.ID != w.TaskID {
		t.Fatalf("offered %s, want the waiter %s", o.Task.ID, w.TaskID)
	}
	wantDeps(t, o, a.TaskID+":succeeded", c.TaskID+":succeeded")
	for _, d := range o.Dependencies {
		if d.Result == nil || d.Result.Pointer != Pointer.Pointer || d.Result.Summary != Pointer.Summary {
			t.Fatalf("dependency %s offered without its result: %+v", d.TaskID, d.Result)
		}
	}
	b.noOffer(t, "other", "a waiter was offered twice")
	b.Complete(t, "w.2", o)
}

func testDepsAnySucceeded(t *testing.T, b *Bundle) {
	a := b.Enqueue(t, "work")
	c := b.Enqueue(t, "work")
	w := b.Enqueue(t, "other", after(host.RuleAnySucceeded, a.TaskID, c.TaskID))
	b.failFatal(t, "w.1", b.leaseType(t, "w.1", "work"))
	b.noOffer(t, "other", "any_succeeded ran after a dead letter alone")
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	o := b.leaseType(t, "w.2", "other")
	if o.Task.ID != w.TaskID {
		t.Fatalf("offered %s, want %s", o.Task.ID, w.TaskID)
	}
	wantDeps(t, o, a.TaskID+":dead_letter", c.TaskID+":succeeded")

	// Every dependency failed: the waiter is canceled.
	x := b.Enqueue(t, "work")
	w2 := b.Enqueue(t, "other", after(host.RuleAnySucceeded, x.TaskID))
	b.failFatal(t, "w.1", b.leaseType(t, "w.1", "work"))
	if tk := b.Task(t, w2.TaskID); tk.State != host.StateCanceled {
		t.Fatalf("any_succeeded waiter of a dead letter is %s, want canceled", tk.State)
	}
	b.noOffer(t, "other", "a canceled waiter was offered")
}

func testDepsAllFinished(t *testing.T, b *Bundle) {
	a := b.Enqueue(t, "work")
	c := b.Enqueue(t, "work")
	d := b.Enqueue(t, "work")
	w := b.Enqueue(t, "other", after(host.RuleAllFinished, a.TaskID, c.TaskID, d.TaskID))
	b.failFatal(t, "w.1", b.leaseType(t, "w.1", "work"))
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, c.TaskID, "not needed"); err != nil {
		t.Fatal(err)
	}
	b.noOffer(t, "other", "all_finished ran with a dependency unfinished")
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	o := b.leaseType(t, "w.2", "other")
	if o.Task.ID != w.TaskID {
		t.Fatalf("offered %s, want %s", o.Task.ID, w.TaskID)
	}
	wantDeps(t, o, a.TaskID+":dead_letter", c.TaskID+":canceled", d.TaskID+":succeeded")
	if o.Dependencies[0].Error != "broken input" || o.Dependencies[0].DeadReason != host.ReasonFatalError {
		t.Fatalf("the dead letter's failure is not visible to the waiter: %+v", o.Dependencies[0])
	}
}

// testDepsRedriven: a dead letter redriven while tasks still wait on it
// is unfinished again for them: an any_succeeded waiter is not canceled
// when its other dependency dead-letters too (the redriven one may yet
// succeed), an all_finished one is not offered before the redriven one
// ends again, and both are offered with its new outcome. A waiter its
// dead letter canceled stays canceled.
func testDepsRedriven(t *testing.T, b *Bundle) {
	a := b.Enqueue(t, "work")
	c := b.Enqueue(t, "work")
	anyW := b.Enqueue(t, "other", after(host.RuleAnySucceeded, a.TaskID, c.TaskID))
	allW := b.Enqueue(t, "other", after(host.RuleAllFinished, a.TaskID, c.TaskID))
	gone := b.Enqueue(t, "other", after(host.RuleAllSucceeded, a.TaskID))
	oa := b.leaseType(t, "w.1", "work")
	if oa.Task.ID != a.TaskID {
		t.Fatalf("leased %s first, want %s", oa.Task.ID, a.TaskID)
	}
	b.failFatal(t, "w.1", oa)
	if tk := b.Task(t, gone.TaskID); tk.State != host.StateCanceled {
		t.Fatalf("all_succeeded waiter of a dead letter is %s, want canceled", tk.State)
	}
	if _, err := b.Engine.Redrive(b.Ctx, b.Admin, a.TaskID); err != nil {
		t.Fatal(err)
	}
	// a (redriven, the older) is leased and held; c dead-letters.
	oa = b.leaseType(t, "w.1", "work")
	oc := b.leaseType(t, "w.1", "work")
	if oa.Task.ID != a.TaskID || oc.Task.ID != c.TaskID {
		t.Fatalf("leased %s and %s, want %s and %s", oa.Task.ID, oc.Task.ID, a.TaskID, c.TaskID)
	}
	b.failFatal(t, "w.1", oc)
	for _, w := range []string{anyW.TaskID, allW.TaskID} {
		if tk := b.Task(t, w); tk.State != host.StateWaiting {
			t.Fatalf("waiter %s is %s while its redriven dependency runs, want waiting", w, tk.State)
		}
	}
	b.noOffer(t, "other", "a waiter was offered before its redriven dependency ended")
	b.Complete(t, "w.1", oa)
	got := map[string]host.Offer{}
	for range 2 {
		o := b.leaseType(t, "w.2", "other")
		got[o.Task.ID] = o
	}
	for _, w := range []string{anyW.TaskID, allW.TaskID} {
		o, ok := got[w]
		if !ok {
			t.Fatalf("waiter %s was not offered once its redriven dependency succeeded (offered %v)", w, got)
		}
		wantDeps(t, o, a.TaskID+":succeeded", c.TaskID+":dead_letter")
	}
	if tk := b.Task(t, gone.TaskID); tk.State != host.StateCanceled {
		t.Fatalf("a waiter the dead letter canceled is %s after the redrive's success, want canceled", tk.State)
	}
	b.noOffer(t, "other", "a canceled waiter was offered")
}

// testDepsRedrivenLateWaiters: waiters enqueued after their dependency had
// already dead-lettered (their edges born settled, the dead letter never
// marked as waited on) count it as unfinished again once it is redriven,
// and its next end settles them.
func testDepsRedrivenLateWaiters(t *testing.T, b *Bundle) {
	a := b.Enqueue(t, "work")
	b.failFatal(t, "w.1", b.leaseType(t, "w.1", "work"))
	c := b.Enqueue(t, "work")
	anyW := b.Enqueue(t, "other", after(host.RuleAnySucceeded, a.TaskID, c.TaskID))
	allW := b.Enqueue(t, "other", after(host.RuleAllFinished, a.TaskID, c.TaskID))
	if _, err := b.Engine.Redrive(b.Ctx, b.Admin, a.TaskID); err != nil {
		t.Fatal(err)
	}
	// Another host runs the rest: it has no memory of the enqueues, only
	// what the store holds.
	other, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, MaxLeaseSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ob := *b
	ob.Engine = other
	b = &ob
	// The redriven a (the older) is leased and held; c dead-letters.
	oa := b.leaseType(t, "w.1", "work")
	oc := b.leaseType(t, "w.1", "work")
	if oa.Task.ID != a.TaskID || oc.Task.ID != c.TaskID {
		t.Fatalf("leased %s and %s, want %s and %s", oa.Task.ID, oc.Task.ID, a.TaskID, c.TaskID)
	}
	b.failFatal(t, "w.1", oc)
	for _, w := range []string{anyW.TaskID, allW.TaskID} {
		if tk := b.Task(t, w); tk.State != host.StateWaiting {
			t.Fatalf("waiter %s is %s (%s) while its redriven dependency runs, want waiting", w, tk.State, tk.LastError)
		}
	}
	b.noOffer(t, "other", "a waiter was offered before its redriven dependency ended")
	b.Complete(t, "w.1", oa)
	got := map[string]host.Offer{}
	for range 2 {
		o := b.leaseType(t, "w.2", "other")
		got[o.Task.ID] = o
	}
	for _, w := range []string{anyW.TaskID, allW.TaskID} {
		o, ok := got[w]
		if !ok {
			t.Fatalf("waiter %s was not offered once its redriven dependency succeeded (offered %v)", w, got)
		}
		wantDeps(t, o, a.TaskID+":succeeded", c.TaskID+":dead_letter")
	}
}

func testDepsDeadLetterCancels(t *testing.T, b *Bundle) {
	a := b.Enqueue(t, "work")
	w := b.Enqueue(t, "other", after("", a.TaskID))
	chained := b.Enqueue(t, "other", after("", w.TaskID))
	b.failFatal(t, "w.1", b.leaseType(t, "w.1", "work"))
	for _, id := range []string{w.TaskID, chained.TaskID} {
		tk := b.Task(t, id)
		if tk.State != host.StateCanceled || tk.CompletedAt == nil {
			t.Fatalf("waiter %s is %s after its dependency dead-lettered, want canceled", id, tk.State)
		}
		rs := b.Receipts(t, id)
		last := rs[len(rs)-1]
		if last.Type != host.ReceiptCanceled || last.From != engine.GatePrincipal {
			t.Fatalf("waiter %s's last receipt is %s from %s, want task.canceled from the gate", id, last.Type, last.From)
		}
		var body struct {
			Reason     string `json:"reason"`
			Dependency string `json:"dependency"`
		}
		if err := json.Unmarshal(last.Body, &body); err != nil || body.Dependency == "" || !strings.Contains(body.Reason, "dead_letter") && !strings.Contains(body.Reason, "canceled") {
			t.Fatalf("cancel receipt body %s does not say why", last.Body)
		}
	}
	if obs := b.Open(t, "agent.kee"); len(obs) != 0 {
		t.Fatalf("canceled waiters left obligations open: %+v", obs)
	}
	b.noOffer(t, "other", "a canceled waiter was offered")
	if n := b.waitingCount(t); n != 0 {
		t.Fatalf("%d tasks still counted waiting", n)
	}
}

func testDepsCancelSettles(t *testing.T, b *Bundle) {
	a := b.Enqueue(t, "work")
	w := b.Enqueue(t, "other", after("", a.TaskID))
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, a.TaskID, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	if tk := b.Task(t, w.TaskID); tk.State != host.StateCanceled || !strings.Contains(tk.LastError, a.TaskID) {
		t.Fatalf("waiter of a canceled dependency: %s %q", tk.State, tk.LastError)
	}
	// A waiting task can be canceled by its owner; its dependency finishing
	// later leaves it canceled.
	c := b.Enqueue(t, "work")
	w2 := b.Enqueue(t, "other", after("", c.TaskID))
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, w2.TaskID, "not needed"); err != nil {
		t.Fatal(err)
	}
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	if tk := b.Task(t, w2.TaskID); tk.State != host.StateCanceled {
		t.Fatalf("a canceled waiter became %s", tk.State)
	}
	b.noOffer(t, "other", "a canceled waiter was offered")
}

func testDepsForeign(t *testing.T, b *Bundle) {
	// Another tenant's task, another agent's task, and a made-up id are all
	// answered alike, so the answer reveals nothing.
	globex := host.NewTaskType("work")
	globex.Tenant = "globex"
	b.MustPutType(t, globex)
	theirs, err := b.Engine.Enqueue(b.Ctx, engine.Actor{Tenant: "globex", Principal: "agent.kee", Role: engine.RoleAgent}, engine.EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	hexy := engine.Actor{Tenant: "acme", Principal: "agent.hexy", Role: engine.RoleAgent}
	private, err := b.Engine.Enqueue(b.Ctx, hexy, engine.EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	mine := b.Enqueue(t, "work")
	for name, id := range map[string]string{"other tenant": theirs.TaskID, "other agent": private.TaskID, "unknown": "tsk_nosuchtask"} {
		_, err := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{mine.TaskID, id}})
		if host.ErrorCode(err) != host.CodeUnknownDependency {
			t.Fatalf("after naming an %s's task: %v, want %s", name, err, host.CodeUnknownDependency)
		}
		if strings.Contains(host.ErrorDetail(err), "globex") || strings.Contains(host.ErrorDetail(err), "hexy") {
			t.Fatalf("refusal leaks its owner: %v", err)
		}
	}
	// A worker may name only tasks it holds or held.
	worker := engine.Actor{Tenant: "acme", Principal: "w.5", Role: engine.RoleWorker}
	_, err = b.Engine.Enqueue(b.Ctx, worker, engine.EnqueueRequest{TaskType: "other", After: []string{mine.TaskID}})
	WantCode(t, err, host.CodeUnknownDependency)
	// The recipient of a task may wait on it.
	forKee, err := b.Engine.Enqueue(b.Ctx, hexy, engine.EnqueueRequest{TaskType: "work", Recipient: "agent.kee"})
	if err != nil {
		t.Fatal(err)
	}
	b.Enqueue(t, "other", after("", forKee.TaskID))
	// Nothing of the refused enqueues was written.
	ts, _, err := b.Engine.ListTasks(b.Ctx, b.Admin, store.TaskFilter{Types: []string{"other"}, Limit: 100})
	if err != nil || len(ts) != 1 {
		t.Fatalf("refused enqueues left tasks: %d, %v", len(ts), err)
	}
	// Bad shapes.
	for _, req := range []engine.EnqueueRequest{
		{TaskType: "other", After: []string{mine.TaskID}, AfterRule: "most_succeeded"},
		{TaskType: "other", After: []string{mine.TaskID, mine.TaskID}},
		{TaskType: "other", After: []string{""}},
		{TaskType: "other", AfterRule: host.RuleAllFinished},
	} {
		_, err := b.Engine.Enqueue(b.Ctx, b.Agent, req)
		WantCode(t, err, host.CodeBadRequest)
	}
	tooMany := make([]string, host.MaxDependencies+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("tsk_%d", i)
	}
	_, err = b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: tooMany})
	WantCode(t, err, host.CodeTooLarge)
}

func testDepsAtEnqueue(t *testing.T, b *Bundle) {
	// Dependencies already finished decide at enqueue.
	done := b.Enqueue(t, "work")
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	w := b.Enqueue(t, "other", after("", done.TaskID))
	if w.Status != string(host.StateQueued) {
		t.Fatalf("waiter of a finished dependency enqueued %s, want queued", w.Status)
	}
	o := b.leaseType(t, "w.2", "other")
	wantDeps(t, o, done.TaskID+":succeeded")
	dead := b.Enqueue(t, "work")
	b.failFatal(t, "w.1", b.leaseType(t, "w.1", "work"))
	_, err := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{dead.TaskID}})
	WantCode(t, err, host.CodeDependencyFailed)
	w2 := b.Enqueue(t, "other", after(host.RuleAllFinished, dead.TaskID, done.TaskID))
	if w2.Status != string(host.StateQueued) {
		t.Fatalf("all_finished waiter of finished dependencies enqueued %s", w2.Status)
	}
}

func testDepsIdempotent(t *testing.T, b *Bundle) {
	a := b.Enqueue(t, "work")
	c := b.Enqueue(t, "work")
	key := func(r *engine.EnqueueRequest) { r.IdempotencyKey = "fan-in" }
	first := b.Enqueue(t, "other", key, after("", a.TaskID, c.TaskID))
	again := b.Enqueue(t, "other", key, after("", a.TaskID, c.TaskID))
	if !again.IsDuplicate || again.TaskID != first.TaskID || again.Status != string(host.StateWaiting) {
		t.Fatalf("repeat = %+v, first %+v", again, first)
	}
	// The default rule named is the same rule.
	named := b.Enqueue(t, "other", key, after(host.RuleAllSucceeded, a.TaskID, c.TaskID))
	if !named.IsDuplicate || named.TaskID != first.TaskID {
		t.Fatalf("repeat naming the default rule = %+v, first %+v", named, first)
	}
	// Another list, another order, another rule, or no list at all (left
	// out or empty) is another task.
	for name, mod := range map[string]func(*engine.EnqueueRequest){
		"reordered": after("", c.TaskID, a.TaskID),
		"shorter":   after("", a.TaskID),
		"rule":      after(host.RuleAllFinished, a.TaskID, c.TaskID),
		"left out":  func(r *engine.EnqueueRequest) { r.After = nil },
		"empty":     func(r *engine.EnqueueRequest) { r.After = []string{} },
	} {
		req := engine.EnqueueRequest{TaskType: "other", Params: json.RawMessage(`{"n":1}`), IdempotencyKey: "fan-in"}
		mod(&req)
		_, err := b.Engine.Enqueue(b.Ctx, b.Agent, req)
		if !host.IsCode(err, host.CodeIdempotencyConflict) {
			t.Fatalf("repeat with after %s: %v, want %s", name, err, host.CodeIdempotencyConflict)
		}
		if !contains(err.Error(), first.TaskID) {
			t.Fatalf("repeat with after %s: the conflict does not name the task: %v", name, err)
		}
	}
	// And a repeat naming dependencies its key's task does not have.
	plain := b.Enqueue(t, "other", func(r *engine.EnqueueRequest) { r.IdempotencyKey = "plain" })
	_, err := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", Params: json.RawMessage(`{"n":1}`),
		IdempotencyKey: "plain", After: []string{a.TaskID}})
	if !host.IsCode(err, host.CodeIdempotencyConflict) || !contains(err.Error(), plain.TaskID) {
		t.Fatalf("repeat adding after: %v, want %s naming %s", err, host.CodeIdempotencyConflict, plain.TaskID)
	}
	// A repeat after a dependency failed still answers the first task.
	b.failFatal(t, "w.1", b.leaseType(t, "w.1", "work"))
	late := b.Enqueue(t, "other", key, after("", a.TaskID, c.TaskID))
	if !late.IsDuplicate || late.TaskID != first.TaskID || late.Status != string(host.StateCanceled) {
		t.Fatalf("repeat after the failure = %+v", late)
	}
}

// testDepsOtherWriter completes the dependencies through a second engine on
// the same store (another gate host's writer): the waiter is settled by that
// writer's transaction and offered by the first.
func testDepsOtherWriter(t *testing.T, b *Bundle) {
	other, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	a := b.Enqueue(t, "work")
	c := b.Enqueue(t, "work")
	w := b.Enqueue(t, "other", after("", a.TaskID, c.TaskID))
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			eng := []*engine.Engine{b.Engine, other}[i]
			worker := fmt.Sprintf("w.%d", i+1)
			offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: worker, Types: []string{"work"}})
			if err != nil || len(offers) != 1 {
				t.Errorf("lease: %d offers, %v", len(offers), err)
				return
			}
			if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call(worker, offers[0]), Result: Pointer}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	o := b.leaseType(t, "w.3", "other")
	if o.Task.ID != w.TaskID || len(o.Dependencies) != 2 {
		t.Fatalf("offered %s with %d dependencies", o.Task.ID, len(o.Dependencies))
	}
	b.noOffer(t, "other", "the waiter was offered twice")
}

// testDepsMarker: an enqueue marks the unfinished tasks it waits on
// (has_waiters) and nothing else, and a dependency leased before it was
// marked, completed through an engine whose copy of the task predates the
// marker, still settles its waiter: the completion's write, fenced on the
// marker's absence, is built again from the row.
func testDepsMarker(t *testing.T, b *Bundle) {
	other, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	a := b.Enqueue(t, "work")
	offers, err := other.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"work"}})
	if err != nil || len(offers) != 1 || offers[0].Task.ID != a.TaskID {
		t.Fatalf("lease: %d offers, %v", len(offers), err)
	}
	if offers[0].Task.HasWaiters {
		t.Fatal("a task none waits on was leased marked as waited on")
	}
	done := b.Enqueue(t, "work")
	b.Complete(t, "w.2", b.leaseType(t, "w.2", "work"))
	plain := b.Enqueue(t, "work")
	w := b.Enqueue(t, "other", after(host.RuleAllFinished, a.TaskID, done.TaskID))
	if w.Status != string(host.StateWaiting) {
		t.Fatalf("waiter enqueued %q, want waiting", w.Status)
	}
	marked := map[string]bool{}
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		for _, id := range []string{a.TaskID, done.TaskID, plain.TaskID, w.TaskID} {
			task, err := r.GetTask(b.Ctx, "acme", id)
			if err != nil {
				return err
			}
			marked[id] = task.HasWaiters
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !marked[a.TaskID] || marked[done.TaskID] || marked[plain.TaskID] || marked[w.TaskID] {
		t.Fatalf("marked: leased dependency %v (want true), finished dependency %v, task none waits on %v, the waiter %v (want false)",
			marked[a.TaskID], marked[done.TaskID], marked[plain.TaskID], marked[w.TaskID])
	}
	if _, err := other.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", offers[0]), Result: Pointer}); err != nil {
		t.Fatal(err)
	}
	o := b.leaseType(t, "w.3", "other")
	if o.Task.ID != w.TaskID {
		t.Fatalf("offered %s, want the waiter %s", o.Task.ID, w.TaskID)
	}
	wantDeps(t, o, a.TaskID+":succeeded", done.TaskID+":succeeded")
	b.noOffer(t, "other", "the waiter was offered twice")
}

// testDepsMarkAndLock calls MarkAndLockDependencies directly: it answers
// the tasks named (not an unknown id), marks the unfinished ones only, and
// the counts CrowdedDependency then answers from see an edge written after
// it in the same transaction.
func testDepsMarkAndLock(t *testing.T, b *Bundle) {
	done := b.Enqueue(t, "work")
	if o := b.leaseType(t, "w.2", "work"); o.Task.ID != done.TaskID {
		t.Fatalf("leased %s, want %s", o.Task.ID, done.TaskID)
	} else {
		b.Complete(t, "w.2", o)
	}
	a := b.Enqueue(t, "work")
	waiter := b.Enqueue(t, "other")
	err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		got, err := tx.MarkAndLockDependencies(b.Ctx, "acme", []string{"nope", done.TaskID, a.TaskID})
		if err != nil {
			return err
		}
		marked := map[string]bool{}
		for _, task := range got {
			marked[task.ID] = task.HasWaiters
		}
		if len(got) != 2 || !marked[a.TaskID] || marked[done.TaskID] {
			t.Errorf("answered %d tasks (want 2), marked %v, want the unfinished one marked and not the finished one", len(got), marked)
		}
		if c, err := tx.CrowdedDependency(b.Ctx, "acme", []string{a.TaskID}, 1); err != nil || c != "" {
			t.Errorf("crowded before any edge: %q, %v", c, err)
		}
		if err := tx.InsertDependencies(b.Ctx, []host.Dependency{{Tenant: "acme", Waiter: waiter.TaskID, DependsOn: a.TaskID, Rule: host.RuleAllSucceeded, Depth: 1}}); err != nil {
			return err
		}
		if c, err := tx.CrowdedDependency(b.Ctx, "acme", []string{a.TaskID}, 1); err != nil || c != a.TaskID {
			t.Errorf("crowded after an edge to it in the same transaction: %q, %v, want %s", c, err, a.TaskID)
		}
		return errors.New("roll back")
	})
	if err == nil || err.Error() != "roll back" {
		t.Fatalf("update: %v", err)
	}
}

// testDepsHammer runs many small fan-out/fan-in graphs at once: producers
// enqueue children and then their waiter while workers on two engines lease
// and complete whatever is offered. Every waiter must be offered exactly
// once, after all its children succeeded, with their outcomes in order.
func testDepsHammer(t *testing.T, b *Bundle) {
	other, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const graphs = 40
	children := make([][]string, graphs)
	waiters := make([]string, graphs)
	var producing sync.WaitGroup
	for g := range graphs {
		producing.Add(1)
		go func() {
			defer producing.Done()
			n := 1 + g%4
			for range n {
				res, err := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work"})
				if err != nil {
					t.Error(err)
					return
				}
				children[g] = append(children[g], res.TaskID)
			}
			res, err := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: children[g]})
			if err != nil {
				t.Error(err)
				return
			}
			waiters[g] = res.TaskID
		}()
	}
	var offered sync.Map // task id -> *atomic.Int32
	var doneWaiters atomic.Int32
	var depsSeen sync.Map // waiter id -> []string (dependency ids:state)
	stop := make(chan struct{})
	var working sync.WaitGroup
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); working.Wait() }
	defer halt() // a failure below stops the workers before the store closes
	for i := range 4 {
		working.Add(1)
		go func() {
			defer working.Done()
			eng := []*engine.Engine{b.Engine, other}[i%2]
			worker := fmt.Sprintf("w.%d", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: worker, MaxTasks: 3})
				if err != nil {
					t.Error(err)
					return
				}
				for _, o := range offers {
					n, _ := offered.LoadOrStore(o.Task.ID, new(atomic.Int32))
					n.(*atomic.Int32).Add(1)
					if o.Task.Type == "other" {
						var got []string
						for _, d := range o.Dependencies {
							got = append(got, d.TaskID+":"+string(d.Status))
						}
						depsSeen.Store(o.Task.ID, got)
						doneWaiters.Add(1)
					}
					if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call(worker, o), Result: Pointer}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	producing.Wait()
	waitFor(t, "every waiter offered", func() bool { return doneWaiters.Load() >= graphs || t.Failed() })
	// A last look: nothing more is offered.
	b.noOffer(t, "other", "a waiter was offered again")
	halt()
	for g := range graphs {
		n, ok := offered.Load(waiters[g])
		if !ok || n.(*atomic.Int32).Load() != 1 {
			t.Fatalf("waiter %d offered %v times, want once", g, n)
		}
		got, _ := depsSeen.Load(waiters[g])
		var want []string
		for _, c := range children[g] {
			want = append(want, c+":succeeded")
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("waiter %d offered with %v, want %v", g, got, want)
		}
	}
	if n := b.waitingCount(t); n != 0 {
		t.Fatalf("%d tasks still counted waiting", n)
	}
}

// testDepsOutcomesNarrow: the outcomes an offer is given are read without
// the dependencies' params (up to 256 KB each), so a lease of tasks with
// many dependencies does not hold all their inputs in memory.
func testDepsOutcomesNarrow(t *testing.T, b *Bundle) {
	big := json.RawMessage(`{"blob":"` + strings.Repeat("p", 64<<10) + `"}`)
	a := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.Params = big })
	w := b.Enqueue(t, "other", after("", a.TaskID))
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	var got map[string][]*host.Task
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		got, err = r.DependencyTasks(b.Ctx, "acme", []string{w.TaskID})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ds := got[w.TaskID]
	if len(ds) != 1 {
		t.Fatalf("DependencyTasks gave %d dependencies, want 1", len(ds))
	}
	d := ds[0]
	if len(d.Params) != 0 {
		t.Fatalf("DependencyTasks read the dependency's params (%d bytes)", len(d.Params))
	}
	if d.ID != a.TaskID || d.Type != "work" || d.State != host.StateSucceeded || d.CompletedAt == nil ||
		d.Result == nil || d.Result.Pointer != Pointer.Pointer {
		t.Fatalf("DependencyTasks lost an outcome field: %+v", d)
	}
	wantDeps(t, b.leaseType(t, "w.2", "other"), a.TaskID+":succeeded")
}

// testDepsOutcomesCapped: the outcomes of one offer are bounded by
// host.MaxOutcomeBytes; the ones past the bound keep their status but not
// their result, and are marked truncated.
func testDepsOutcomesCapped(t *testing.T, b *Bundle) {
	const n, each = 24, 60 << 10 // 1.4 MB of results (a receipt body holds 64 KB)
	meta := json.RawMessage(`{"blob":"` + strings.Repeat("m", each) + `"}`)
	var ids, want []string
	for range n {
		ids = append(ids, b.Enqueue(t, "work").TaskID)
	}
	for range n {
		o := b.leaseType(t, "w.1", "work")
		res := Pointer
		res.Metadata = meta
		if _, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: res}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		want = append(want, id+":succeeded")
	}
	b.Enqueue(t, "other", after("", ids...))
	o := b.leaseType(t, "w.2", "other")
	wantDeps(t, o, want...)
	size, cut := 0, -1
	for i, d := range o.Dependencies {
		if d.Truncated {
			if cut < 0 {
				cut = i
			}
			if d.Result != nil || d.Error != "" || d.DeadReason != "" {
				t.Fatalf("truncated outcome %d kept its result or errors", i)
			}
			continue
		}
		if cut >= 0 {
			t.Fatalf("outcome %d is whole after truncated outcome %d", i, cut)
		}
		if d.Result == nil || len(d.Result.Metadata) < each {
			t.Fatalf("whole outcome %d lost its result", i)
		}
		enc, _ := json.Marshal(d.Result)
		size += len(enc)
	}
	if cut < 0 {
		t.Fatalf("%d outcomes of %d KB each were all given whole", n, each>>10)
	}
	if size > host.MaxOutcomeBytes {
		t.Fatalf("an offer carried %d bytes of results, the bound is %d", size, host.MaxOutcomeBytes)
	}
	if cut*each < host.MaxOutcomeBytes/2 {
		t.Fatalf("only %d outcomes given whole", cut)
	}
}

// testDepsChainCancel: a cancel at the head of a chain cancels every link
// in its transaction, each naming the link it waited on, and a second
// waiter of the head beside the chain too.
func testDepsChainCancel(t *testing.T, b *Bundle) {
	const links = host.MaxDependencyDepth
	ids := []string{b.Enqueue(t, "work").TaskID}
	for i := 1; i <= links; i++ {
		ids = append(ids, b.Enqueue(t, "other", after("", ids[i-1])).TaskID)
	}
	side := b.Enqueue(t, "other", after(host.RuleAllFinished, ids[0], ids[links/2]))
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, ids[0], "stop the chain"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= links; i++ {
		tk := b.Task(t, ids[i])
		if tk.State != host.StateCanceled || !strings.Contains(tk.LastError, "dependency "+ids[i-1]+" ") {
			t.Fatalf("link %d after its head was canceled: %s %q", i, tk.State, tk.LastError)
		}
	}
	if tk := b.Task(t, side.TaskID); tk.State != host.StateQueued {
		t.Fatalf("all_finished waiter of the head and a link is %s, want queued", tk.State)
	}
	if n := b.waitingCount(t); n != 0 {
		t.Fatalf("%d tasks still waiting after the chain was canceled", n)
	}
}

// testDepsWaitersBounded: an unfinished task takes at most MaxWaiters
// waiters; one more is refused with too_many_waiters and nothing is
// written, while a finished dependency takes any number (it decides at
// once, adding no open edge).
func testDepsWaitersBounded(t *testing.T, b *Bundle) {
	const limit = 3
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, MaxWaiters: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	enqueue := func(ids ...string) (*engine.EnqueueResult, error) {
		return eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: ids, AfterRule: host.RuleAllFinished})
	}
	a := b.Enqueue(t, "work")
	c := b.Enqueue(t, "work")
	for range limit {
		if _, err := enqueue(a.TaskID); err != nil {
			t.Fatal(err)
		}
	}
	_, err = enqueue(c.TaskID, a.TaskID)
	if !host.IsCode(err, host.CodeTooManyWaiters) {
		t.Fatalf("waiter %d of one task: %v, want %s", limit+1, err, host.CodeTooManyWaiters)
	}
	if n := b.waitingCount(t); n != limit {
		t.Fatalf("%d tasks waiting after a refused enqueue, want %d", n, limit)
	}
	if _, err := enqueue(c.TaskID); err != nil {
		t.Fatalf("a waiter of another task: %v", err)
	}
	o := b.leaseType(t, "w.1", "work")
	b.Complete(t, "w.1", o)
	for i := range limit + 1 {
		if _, err := enqueue(o.Task.ID); err != nil {
			t.Fatalf("waiter %d of a finished task: %v", i+1, err)
		}
	}
}

// testDepsCreatorWaiterRoom: of a task's waiter bound, the last
// host.CreatorWaiterReserve are its creator's. Its recipient (or an admin,
// or both together) may bring its open waiters up to the bound less the
// reserve and no further (too_many_waiters, nothing written), and its
// creator's own fan-in still finds room, up to the whole bound. A creator
// that fills the task first leaves the others no room past theirs.
func testDepsCreatorWaiterRoom(t *testing.T, b *Bundle) {
	const limit = 10
	reserve := host.CreatorWaiterReserve(limit)
	if reserve != 1 {
		t.Fatalf("CreatorWaiterReserve(%d) = %d, want 1", limit, reserve)
	}
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, MaxWaiters: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	hexy := engine.Actor{Tenant: "acme", Principal: "agent.hexy", Role: engine.RoleAgent}
	enqueue := func(a engine.Actor, ids ...string) (*engine.EnqueueResult, error) {
		return eng.Enqueue(b.Ctx, a, engine.EnqueueRequest{TaskType: "other", After: ids, AfterRule: host.RuleAllFinished})
	}
	// kee's task, addressed to hexy: hexy may read it, so may wait on it.
	dep := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.Recipient = hexy.Principal })
	mine, err := eng.Enqueue(b.Ctx, hexy, engine.EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range limit - reserve - 1 {
		if _, err := enqueue(hexy, dep.TaskID); err != nil {
			t.Fatalf("hexy's waiter %d: %v", i+1, err)
		}
	}
	if _, err := enqueue(b.Admin, dep.TaskID); err != nil {
		t.Fatalf("an admin's waiter: %v", err)
	}
	waiting := b.waitingCount(t)
	for _, a := range []engine.Actor{hexy, b.Admin} {
		_, err := enqueue(a, mine.TaskID, dep.TaskID)
		if !host.IsCode(err, host.CodeTooManyWaiters) {
			t.Fatalf("%s's waiter %d of kee's task: %v, want %s", a.Principal, limit-reserve+1, err, host.CodeTooManyWaiters)
		}
	}
	if n := b.waitingCount(t); n != waiting {
		t.Fatalf("%d tasks waiting after refused enqueues, want %d", n, waiting)
	}
	// The creator's own fan-in: its waiter on its task and another of its own.
	own := b.Enqueue(t, "work")
	for i := range reserve {
		if _, err := enqueue(b.Agent, own.TaskID, dep.TaskID); err != nil {
			t.Fatalf("kee's own waiter %d after hexy took its share: %v", i+1, err)
		}
	}
	_, err = enqueue(b.Agent, dep.TaskID)
	WantCode(t, err, host.CodeTooManyWaiters) // the whole bound
	// A single producer stays bounded on a task it did not create, with
	// room left on those it did.
	if _, err := enqueue(hexy, mine.TaskID); err != nil {
		t.Fatalf("hexy's waiter of its own task: %v", err)
	}
	// A creator that fills its task first: the others get no room past
	// their share, the creator the whole bound.
	dep2 := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.Recipient = hexy.Principal })
	for i := range limit - reserve {
		if _, err := enqueue(b.Agent, dep2.TaskID); err != nil {
			t.Fatalf("kee's waiter %d: %v", i+1, err)
		}
	}
	_, err = enqueue(hexy, dep2.TaskID)
	WantCode(t, err, host.CodeTooManyWaiters)
	if _, err := enqueue(b.Agent, dep2.TaskID); err != nil {
		t.Fatalf("kee's waiter %d: %v", limit, err)
	}
	// Once the task finished, any number may wait on it, whoever they are.
	o := b.leaseType(t, "w.1", "work")
	if o.Task.ID != dep.TaskID {
		t.Fatalf("leased %s, want the oldest task %s", o.Task.ID, dep.TaskID)
	}
	b.Complete(t, "w.1", o)
	if _, err := enqueue(hexy, dep.TaskID); err != nil {
		t.Fatalf("hexy's waiter of the finished task: %v", err)
	}
}

// testDepsDepthBounded: a chain of waiting tasks is at most
// host.MaxDependencyDepth deep; a task naming a waiting task at that depth
// is refused with dependency_too_deep and nothing is written, while a
// shallower one, or one whose deep dependency is no longer waiting, is not.
func testDepsDepthBounded(t *testing.T, b *Bundle) {
	head := b.Enqueue(t, "work")
	ids := []string{head.TaskID}
	for i := 1; i <= host.MaxDependencyDepth; i++ {
		ids = append(ids, b.Enqueue(t, "other", after("", ids[i-1])).TaskID)
	}
	_, err := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{head.TaskID, ids[host.MaxDependencyDepth]}})
	if !host.IsCode(err, host.CodeDependencyTooDeep) {
		t.Fatalf("waiter on a waiting task at depth %d: %v, want %s", host.MaxDependencyDepth, err, host.CodeDependencyTooDeep)
	}
	if n := b.waitingCount(t); n != host.MaxDependencyDepth {
		t.Fatalf("%d tasks waiting after a refused enqueue, want %d", n, host.MaxDependencyDepth)
	}
	b.Enqueue(t, "other", after("", ids[host.MaxDependencyDepth-1]))
	// Once the chain has run down, its last task is queued, not waiting:
	// a task may wait on it again.
	for range host.MaxDependencyDepth {
		o := b.LeaseOne(t, "w.1", "work", "other")
		b.Complete(t, "w.1", o)
	}
	if tk := b.Task(t, ids[host.MaxDependencyDepth]); tk.State != host.StateQueued && tk.State != host.StateSucceeded {
		t.Fatalf("last link is %s after the chain ran, want queued or succeeded", tk.State)
	}
	b.Enqueue(t, "other", after("", ids[host.MaxDependencyDepth]))
}

// testDepsReadyRows checks what settling writes on the waiters a success
// makes ready, under each rule, and on those it leaves waiting: a ready
// one is queued with its version moved on, updated now and available no
// earlier than now (a delayed one keeps its later time), a parked
// long-poll is woken for it, and the queue counts follow.
func testDepsReadyRows(t *testing.T, b *Bundle) {
	a := b.Enqueue(t, "work")
	c := b.Enqueue(t, "work") // stays unfinished
	w1 := b.Enqueue(t, "other", after("", a.TaskID))
	w2 := b.Enqueue(t, "other", after("", a.TaskID), func(r *engine.EnqueueRequest) { r.DelaySeconds = 3600 })
	w3 := b.Enqueue(t, "other", after(host.RuleAnySucceeded, a.TaskID, c.TaskID))
	w4 := b.Enqueue(t, "other", after(host.RuleAllFinished, a.TaskID, c.TaskID))
	w5 := b.Enqueue(t, "other", after(host.RuleAllSucceeded, a.TaskID, c.TaskID))
	before := map[string]*host.Task{}
	for _, id := range []string{w1.TaskID, w2.TaskID, w3.TaskID, w4.TaskID, w5.TaskID} {
		before[id] = b.Task(t, id)
	}
	if n := b.waitingCount(t); n != 5 {
		t.Fatalf("%d tasks waiting, want 5", n)
	}
	o := b.leaseType(t, "w.1", "work")
	if o.Task.ID != a.TaskID {
		t.Fatalf("leased %s, want %s", o.Task.ID, a.TaskID)
	}
	b.Clock.Advance(10 * time.Second)
	// A long-poll parked before the completion is woken by it: on an
	// engine whose fallback poll is longer than the poll's wait, only the
	// wake-up can answer it.
	eng, err := engine.New(WakeOnly(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, MaxWait: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	type polled struct {
		offers []host.Offer
		err    error
	}
	got := make(chan polled, 1)
	go func() {
		offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.2", Types: []string{"other"}, MaxTasks: 1, Wait: 20 * time.Second})
		got <- polled{offers, err}
	}()
	time.Sleep(100 * time.Millisecond) // mostly parked by now; if not, its first look finds w1
	now := b.Clock.Now()
	if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	p := <-got
	if p.err != nil || len(p.offers) != 1 || p.offers[0].Task.ID != w1.TaskID {
		t.Fatalf("the long-poll got %d offers, %v; want %s (not woken by the completion)", len(p.offers), p.err, w1.TaskID)
	}
	wantDeps(t, p.offers[0], a.TaskID+":succeeded")
	for _, id := range []string{w2.TaskID, w3.TaskID} {
		old, tk := before[id], b.Task(t, id)
		wantAvail, wantState := now, host.StateQueued
		if old.AvailableAt.After(now) {
			wantAvail, wantState = old.AvailableAt, host.StateScheduled // queued, shown as scheduled until then
		}
		if tk.State != wantState || tk.Version != old.Version+1 || !tk.UpdatedAt.Equal(now) || !tk.AvailableAt.Equal(wantAvail) {
			t.Errorf("ready waiter %s: %s, version %d (was %d), updated %v, available %v; want %s, version %d, updated %v, available %v",
				id, tk.State, tk.Version, old.Version, tk.UpdatedAt, tk.AvailableAt, wantState, old.Version+1, now, wantAvail)
		}
	}
	for _, id := range []string{w4.TaskID, w5.TaskID} {
		old, tk := before[id], b.Task(t, id)
		if tk.State != host.StateWaiting || tk.Version != old.Version || !tk.UpdatedAt.Equal(old.UpdatedAt) {
			t.Errorf("waiter %s: %s, version %d (was %d); want it still waiting, untouched", id, tk.State, tk.Version, old.Version)
		}
	}
	if n := b.waitingCount(t); n != 2 {
		t.Fatalf("%d tasks waiting after the settlement, want 2", n)
	}
	// The rest settles as before: c's success readies both.
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	if n := b.waitingCount(t); n != 0 {
		t.Fatalf("%d tasks waiting once every dependency succeeded, want 0", n)
	}
}

// testDepsRaceWithCompletion: a waiter enqueued while its dependency is
// being completed (or dead-lettered) through another engine is settled
// whichever commits first: once both calls returned it is queued (the
// dependency succeeded) or canceled, or its enqueue was refused with
// dependency_failed; never left waiting (a lost wake-up). Several pairs
// race at once, for several rounds, so on a store with several writers
// the two writes often run in batches of their own at the same time.
func testDepsRaceWithCompletion(t *testing.T, b *Bundle) {
	other, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const rounds, pairs = 8, 6
	for round := range rounds {
		deps := make([]string, pairs)
		for i := range deps {
			deps[i] = b.Enqueue(t, "work").TaskID
		}
		offers, err := other.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"work"}, MaxTasks: pairs})
		if err != nil || len(offers) != pairs {
			t.Fatalf("round %d: lease: %d offers, %v", round, len(offers), err)
		}
		waiters := make([]*engine.EnqueueResult, pairs)
		enqErrs := make([]error, pairs)
		failed := map[string]bool{}
		var wg sync.WaitGroup
		for i, o := range offers {
			fail := (round+i)%3 == 0
			failed[o.Task.ID] = fail
			wg.Add(2)
			go func() {
				defer wg.Done()
				var err error
				if fail {
					_, err = other.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "broken input"})
				} else {
					_, err = other.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer})
				}
				if err != nil {
					t.Error(err)
				}
			}()
			go func() {
				defer wg.Done()
				waiters[i], enqErrs[i] = b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{deps[i]}})
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for i, dep := range deps {
			if enqErrs[i] != nil {
				if !failed[dep] || !host.IsCode(enqErrs[i], host.CodeDependencyFailed) {
					t.Fatalf("round %d: enqueue after %s (failed %v): %v", round, dep, failed[dep], enqErrs[i])
				}
				continue
			}
			want := host.StateQueued
			if failed[dep] {
				want = host.StateCanceled
			}
			if tk := b.Task(t, waiters[i].TaskID); tk.State != want {
				t.Fatalf("round %d: the waiter of %s (failed %v) is %s once both calls returned (enqueued %s), want %s",
					round, dep, failed[dep], tk.State, waiters[i].Status, want)
			}
		}
	}
	if n := b.waitingCount(t); n != 0 {
		t.Fatalf("%d tasks still counted waiting", n)
	}
}
