package storetest

import (
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// testRememberedLeaseGoneElsewhere: an engine remembers the leases it grants
// and completes them without reading the task first. When another engine (a
// second gate host on the same store) moves the task meanwhile, the
// remembered copy is stale: the completion must still see the truth — a
// released lease is refused, and a lease accepted and heartbeaten there
// completes here with the acceptance and progress kept.
func testRememberedLeaseGoneElsewhere(t *testing.T, b *Bundle) {
	other, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, MaxLeaseSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	call := func(o host.Offer) engine.WorkerCall {
		return engine.WorkerCall{Tenant: "acme", WorkerID: "w.1", LeaseID: o.LeaseID}
	}

	// Released on the other host: this host's completion is refused.
	released := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	if o.Task.ID != released.TaskID {
		t.Fatalf("leased %s, want %s", o.Task.ID, released.TaskID)
	}
	if _, err := other.Release(b.Ctx, call(o), "handing back"); err != nil {
		t.Fatal(err)
	}
	_, err = b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: call(o), Result: Pointer})
	WantCode(t, err, host.CodeLeaseExpired)
	if got := b.Task(t, released.TaskID); got.State != host.StateQueued {
		t.Fatalf("a completion of a released lease left the task %s, want queued", got.State)
	}

	// Accepted and extended on the other host: this host's completion
	// succeeds and the task records both.
	o = b.LeaseOne(t, "w.1")
	if _, _, err := other.Accept(b.Ctx, call(o)); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(10e9)
	if _, err := other.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: call(o), ExtendSeconds: 600, ProgressMessage: "half way"}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: call(o), Result: Pointer})
	if err != nil {
		t.Fatalf("complete after another host's heartbeat: %v", err)
	}
	got := b.Task(t, res.Task.ID)
	if got.State != host.StateSucceeded || got.AcceptReceipt == "" || got.ProgressMessage != "half way" {
		t.Fatalf("task after completion: state %s, accept receipt %q, progress %q: the stale copy was written over the other host's changes",
			got.State, got.AcceptReceipt, got.ProgressMessage)
	}
	b.Verify(t)
}
