// Package storetest is the store conformance suite: every storage driver runs
// the same cases through the engine, so lease, completion and ledger semantics
// are one thing whatever the database. A change to those semantics adds a case
// here first.
package storetest

import (
	"context"
	"encoding/json"
	"runtime/debug"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Opener returns a fresh, empty store for one test; it registers its own cleanup.
type Opener func(t testing.TB) store.Store

// Store is store.Store, so driver tests need not import both packages.
type Store = store.Store

// Bundle is what each case works with.
type Bundle struct {
	Store  store.Store
	Engine *engine.Engine
	Clock  *host.ManualClock
	Ctx    context.Context
	Agent  engine.Actor
	Admin  engine.Actor
}

// Epoch is the manual clock's start.
var Epoch = time.Date(2026, 1, 4, 15, 30, 0, 0, time.UTC)

// Setup opens a store and an engine on a manual clock with no expiry jitter,
// and registers the task types the cases use.
func Setup(t testing.TB, open Opener) *Bundle {
	t.Helper()
	st := open(t)
	clock := host.NewManualClock(Epoch)
	eng, err := engine.New(engine.Config{Store: st, Clock: clock, ExpiryJitter: -1, MaxLeaseSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	b := &Bundle{Store: st, Engine: eng, Clock: clock, Ctx: context.Background(),
		Agent: engine.Actor{Tenant: "acme", Principal: "agent.kee", Role: engine.RoleAgent},
		Admin: engine.Actor{Tenant: "acme", Principal: "ops", Role: engine.RoleAdmin}}
	work := host.NewTaskType("work")
	work.Tenant = "acme"
	work.LeaseSeconds = 60
	work.RequeueDelaySeconds = 30
	work.MaxLeaseExpiries = 3
	work.ParamsSchema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":0}},"additionalProperties":true}`)
	b.MustPutType(t, work)
	other := host.NewTaskType("other")
	other.Tenant = "acme"
	b.MustPutType(t, other)
	return b
}

// MustPutType registers a task type or fails the test.
func (b *Bundle) MustPutType(t testing.TB, tt host.TaskType) *host.TaskType {
	t.Helper()
	out, err := b.Engine.PutTaskType(b.Ctx, tt)
	if err != nil {
		t.Fatalf("PutTaskType(%s): %v", tt.Name, err)
	}
	return out
}

// Enqueue queues a task of type typ or fails the test.
func (b *Bundle) Enqueue(t testing.TB, typ string, mod ...func(*engine.EnqueueRequest)) *engine.EnqueueResult {
	t.Helper()
	req := engine.EnqueueRequest{TaskType: typ, Params: json.RawMessage(`{"n":1}`)}
	for _, m := range mod {
		m(&req)
	}
	res, err := b.Engine.Enqueue(b.Ctx, b.Agent, req)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return res
}

// LeaseOne leases one task for worker or fails the test.
func (b *Bundle) LeaseOne(t testing.TB, worker string, types ...string) host.Offer {
	t.Helper()
	offers, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: worker, Types: types, MaxTasks: 1})
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	if len(offers) != 1 {
		t.Fatalf("Lease: got %d offers, want 1", len(offers))
	}
	return offers[0]
}

// Call returns the worker call for an offer.
func Call(worker string, o host.Offer) engine.WorkerCall {
	return engine.WorkerCall{Tenant: "acme", WorkerID: worker, LeaseID: o.LeaseID}
}

// Pointer is a locatable result.
var Pointer = host.Result{Channel: "inline", Pointer: "inline:aGk=", Summary: "done"}

// Complete completes an offer or fails the test.
func (b *Bundle) Complete(t testing.TB, worker string, o host.Offer) *engine.CompleteResult {
	t.Helper()
	res, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call(worker, o), Result: Pointer})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return res
}

// Task reads a task as admin or fails the test.
func (b *Bundle) Task(t testing.TB, id string) *host.Task {
	t.Helper()
	tk, err := b.Engine.GetTask(b.Ctx, b.Admin, id)
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	return tk
}

// Receipts lists a task's receipt types in ledger order.
func (b *Bundle) Receipts(t testing.TB, id string) []*host.Receipt {
	t.Helper()
	rs, _, err := b.Engine.TaskReceipts(b.Ctx, b.Admin, id, "", 500)
	if err != nil {
		t.Fatalf("TaskReceipts: %v", err)
	}
	return rs
}

// ReceiptTypes lists a task's receipt types in ledger order.
func (b *Bundle) ReceiptTypes(t testing.TB, id string) []host.ReceiptType {
	t.Helper()
	var out []host.ReceiptType
	for _, r := range b.Receipts(t, id) {
		out = append(out, r.Type)
	}
	return out
}

// Open returns the open obligations of principal.
func (b *Bundle) Open(t testing.TB, principal string) []host.Obligation {
	t.Helper()
	obs, _, err := b.Engine.OpenObligations(b.Ctx, b.Admin, store.ObligationFilter{Principal: principal, Limit: 500})
	if err != nil {
		t.Fatalf("OpenObligations: %v", err)
	}
	return obs
}

// Verify checks the ledger or fails the test.
func (b *Bundle) Verify(t testing.TB) *engine.VerifyReport {
	t.Helper()
	rep, err := b.Engine.VerifyLedger(b.Ctx)
	if err != nil {
		t.Fatalf("VerifyLedger: %v", err)
	}
	if !rep.OK {
		t.Fatalf("ledger does not verify: %+v", rep)
	}
	return rep
}

// VerifyAfter is Verify at the end of a conformance case that passed:
// whatever a case did through the engine (or the store, as the engine
// would), it leaves a ledger that verifies, obligation index included.
func (b *Bundle) VerifyAfter(t *testing.T) {
	t.Helper()
	if !t.Failed() {
		b.Verify(t)
	}
}

// NoOffers fails the test unless a lease call succeeds and offers nothing:
// an error is not "no work".
func (b *Bundle) NoOffers(t testing.TB, req engine.LeaseRequest, why string) {
	t.Helper()
	offers, err := b.Engine.Lease(b.Ctx, req)
	if err != nil {
		t.Fatalf("%s: lease failed instead of offering nothing: %v", why, err)
	}
	if len(offers) != 0 {
		t.Fatalf("%s: got %d offers, first for task %s", why, len(offers), offers[0].Task.ID)
	}
}

// WantCode fails the test unless err carries code.
func WantCode(t testing.TB, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	if got := host.ErrorCode(err); got != code {
		t.Fatalf("got error %q (%v), want code %s", got, err, code)
	}
}

// GCAsGate runs the rest of a benchmark with the collector's target a gate
// runs with (host.GCPercent; GOGC wins when set), and restores the previous
// one when it ends: the figures are the gate's, not a default test binary's.
func GCAsGate(tb testing.TB) {
	if changed, prev := host.SetGCPercent(host.GCPercent); changed {
		tb.Cleanup(func() { debug.SetGCPercent(prev) })
	}
}
