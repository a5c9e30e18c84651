package storetest

import (
	"strings"
	"sync"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// testArchiveOwedResult: a result a managed channel holds is not archived
// while a task that waits on its task has not finished (conflict, nothing
// written, no ack); once none does, the archive acks it and purges the
// pointer, a read says it was archived, an enqueue after it is refused, and
// a channel that fails leaves the result archived with its pointer until an
// archive again releases it.
func testArchiveOwedResult(t *testing.T, b *Bundle) {
	eng, ch := retentionEngine(t, b, engine.RetentionConfig{})
	a := b.finish(t, eng, "work", `{"x":1}`)
	w, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = eng.ArchiveResult(b.Ctx, b.Agent, a)
	if !host.IsCode(err, host.CodeConflict) || !strings.Contains(host.ErrorDetail(err), w.TaskID) {
		t.Fatalf("archive with a queued waiter: %v, want conflict naming %s", err, w.TaskID)
	}
	if tk := b.task(t, eng, a); tk.Result.ArchivedAt != nil || tk.Result.Pointer == "" || len(ch.acked) != 0 || ch.held() != 1 {
		t.Fatalf("a refused archive wrote %+v, acked %v", tk.Result, ch.acked)
	}
	o := b.leaseOn(t, eng, "other")
	if _, err := eng.ArchiveResult(b.Ctx, b.Agent, a); !host.IsCode(err, host.CodeConflict) {
		t.Fatalf("archive with a leased waiter: %v", err)
	}
	if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer}); err != nil {
		t.Fatal(err)
	}

	// The channel fails: archived, pointer kept, channel_error; again, released.
	ch.setFail(true)
	if _, err := eng.ArchiveResult(b.Ctx, b.Agent, a); !host.IsCode(err, host.CodeChannelError) {
		t.Fatalf("archive through a failing channel: %v", err)
	}
	if tk := b.task(t, eng, a); tk.Result.ArchivedAt == nil || tk.Result.Pointer == "" || tk.Result.PurgedAt != nil {
		t.Fatalf("after a failed release: %+v", tk.Result)
	}
	ch.setFail(false)
	if _, err := eng.ArchiveResult(b.Ctx, b.Agent, a); err != nil {
		t.Fatal(err)
	}
	if tk := b.task(t, eng, a); tk.Result.Pointer != "" || tk.Result.PurgedAt == nil || tk.Result.Checksum == "" || ch.held() != 0 {
		t.Fatalf("after the release: %+v, %d payloads held", tk.Result, ch.held())
	}
	if _, err := eng.FetchResult(b.Ctx, b.Agent, a); !host.IsCode(err, host.CodeNotFound) || !strings.Contains(host.ErrorDetail(err), "archived at") {
		t.Fatalf("read of a released result: %v", err)
	}
	if _, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a}}); !host.IsCode(err, host.CodeConflict) {
		t.Fatalf("enqueue after a released result: %v", err)
	}
}

// testArchiveRacesEnqueue: an archive of a stored result and an enqueue
// after its task, at the same time, never both succeed: either the waiter
// is refused, or the archive is and the waiter's payload stays.
func testArchiveRacesEnqueue(t *testing.T, b *Bundle) {
	eng, _ := retentionEngine(t, b, engine.RetentionConfig{})
	var archived, waited int
	for i := range 20 {
		a := b.finish(t, eng, "work", `{"x":1}`)
		var wg sync.WaitGroup
		var archErr, enqErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, archErr = eng.ArchiveResult(b.Ctx, b.Agent, a)
		}()
		go func() {
			defer wg.Done()
			_, enqErr = eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a}})
		}()
		wg.Wait()
		switch {
		case archErr == nil && enqErr == nil:
			t.Fatalf("round %d: both the archive and a waiter of its task went through", i)
		case archErr == nil && !host.IsCode(enqErr, host.CodeConflict):
			t.Fatalf("round %d: enqueue after the archive: %v", i, enqErr)
		case enqErr == nil && !host.IsCode(archErr, host.CodeConflict):
			t.Fatalf("round %d: archive with a waiter: %v", i, archErr)
		case enqErr == nil && b.task(t, eng, a).Result.Pointer == "":
			t.Fatalf("round %d: the waiter's payload was purged", i)
		case archErr != nil && enqErr != nil:
			t.Fatalf("round %d: both refused: %v; %v", i, archErr, enqErr)
		}
		if archErr == nil {
			archived++
		}
		if enqErr == nil { // drain the waiter
			waited++
			o := b.leaseOn(t, eng, "other")
			if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer}); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("of 20 rounds the archive went through in %d, the waiter in %d", archived, waited)
}

// task reads id through eng as the bundle's agent.
func (b *Bundle) task(t *testing.T, eng *engine.Engine, id string) *host.Task {
	t.Helper()
	tk, err := eng.PeekTask(b.Ctx, b.Agent, id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// leaseOn leases one task of typ through eng for w.1.
func (b *Bundle) leaseOn(t *testing.T, eng *engine.Engine, typ string) host.Offer {
	t.Helper()
	offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{typ}, MaxTasks: 1})
	if err != nil || len(offers) != 1 {
		t.Fatalf("lease of %s: %v %v", typ, offers, err)
	}
	return offers[0]
}

// testRedriveAfterReleasedResult: a dead-lettered waiter no longer holds
// its dependency's result, so the result may be archived and its payload
// released; redriving the waiter then is refused (conflict naming the
// dependency, nothing written), as an enqueue after that result is: its
// worker would be offered a pointer to a payload that is gone. A waiter
// whose dependency's result is still held is redriven as before.
func testRedriveAfterReleasedResult(t *testing.T, b *Bundle) {
	eng, _ := retentionEngine(t, b, engine.RetentionConfig{})
	deadWaiter := func(a string) string {
		t.Helper()
		w, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a}})
		if err != nil {
			t.Fatal(err)
		}
		o := b.leaseOn(t, eng, "other")
		if fr, err := eng.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "bad input"}); err != nil || fr.Status != "dead_letter" {
			t.Fatalf("fail of the waiter: %+v %v", fr, err)
		}
		return w.TaskID
	}

	kept := b.finish(t, eng, "work", `{"x":1}`)
	w1 := deadWaiter(kept)
	if _, err := eng.Redrive(b.Ctx, b.Admin, w1); err != nil {
		t.Fatalf("redrive of a waiter whose dependency's result is held: %v", err)
	}
	o := b.leaseOn(t, eng, "other")
	if len(o.Dependencies) != 1 || o.Dependencies[0].Result == nil || o.Dependencies[0].Result.Pointer == "" {
		t.Fatalf("the redriven waiter's offer: %+v", o.Dependencies)
	}
	if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer}); err != nil {
		t.Fatal(err)
	}

	a := b.finish(t, eng, "work", `{"x":2}`)
	w2 := deadWaiter(a)
	if _, err := eng.ArchiveResult(b.Ctx, b.Agent, a); err != nil {
		t.Fatalf("archive once its only waiter is a dead letter: %v", err)
	}
	before := b.task(t, eng, w2)
	_, err := eng.Redrive(b.Ctx, b.Admin, w2)
	if !host.IsCode(err, host.CodeConflict) || !strings.Contains(host.ErrorDetail(err), a) {
		t.Fatalf("redrive of a waiter whose dependency's payload was released: %v, want conflict naming %s", err, a)
	}
	if after := b.task(t, eng, w2); after.State != host.StateDeadLetter || after.AssignReceipt != before.AssignReceipt {
		t.Fatalf("a refused redrive wrote the waiter: %s, assign receipt %s → %s", after.State, before.AssignReceipt, after.AssignReceipt)
	}
}

// testRedriveRacesArchive: a redrive of a dead-lettered waiter and an
// archive of its dependency's stored result, at the same time, never both
// succeed: either the redrive is refused, or the archive is and the
// payload stays for the redriven waiter.
func testRedriveRacesArchive(t *testing.T, b *Bundle) {
	eng, _ := retentionEngine(t, b, engine.RetentionConfig{})
	for i := range 20 {
		a := b.finish(t, eng, "work", `{"x":1}`)
		w, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a}})
		if err != nil {
			t.Fatal(err)
		}
		o := b.leaseOn(t, eng, "other")
		if _, err := eng.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "bad input"}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var archErr, redErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, archErr = eng.ArchiveResult(b.Ctx, b.Agent, a)
		}()
		go func() {
			defer wg.Done()
			_, redErr = eng.Redrive(b.Ctx, b.Admin, w.TaskID)
		}()
		wg.Wait()
		switch {
		case archErr == nil && redErr == nil:
			t.Fatalf("round %d: both the archive and the redrive of a waiter went through", i)
		case archErr == nil && !host.IsCode(redErr, host.CodeConflict):
			t.Fatalf("round %d: redrive after the archive: %v", i, redErr)
		case redErr == nil && !host.IsCode(archErr, host.CodeConflict):
			t.Fatalf("round %d: archive with a redriven waiter: %v", i, archErr)
		case redErr == nil && b.task(t, eng, a).Result.Pointer == "":
			t.Fatalf("round %d: the redriven waiter's payload was purged", i)
		case archErr != nil && redErr != nil:
			t.Fatalf("round %d: both refused: %v; %v", i, archErr, redErr)
		}
		if redErr == nil { // drain the waiter
			o := b.leaseOn(t, eng, "other")
			if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer}); err != nil {
				t.Fatal(err)
			}
		}
	}
}
