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
