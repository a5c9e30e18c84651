package storetest

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// Principals inside one tenant (issue 37): every agent of a tenant is a party
// the gate keeps honest, so nothing one agent does may read, take or forge
// another's part of the store.

// mallory is another agent of the bundle's tenant.
var mallory = engine.Actor{Tenant: "acme", Principal: "agent.mallory", Role: engine.RoleAgent}

// testIdempotencyPerProducer: an idempotency key belongs to the principal
// that produced the task. Another agent of the tenant that names the same
// recipient and reuses the key is neither handed the task, nor told by a
// conflict that it exists (its id, its first differing field), nor able to
// take the key first; a repeat by the producer is still its duplicate.
func testIdempotencyPerProducer(t *testing.T, b *Bundle) {
	enq := func(a engine.Actor, params, recipient, key string) (*engine.EnqueueResult, error) {
		return b.Engine.Enqueue(b.Ctx, a, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(params), Recipient: recipient, IdempotencyKey: key})
	}
	own, err := enq(b.Agent, `{"n":1}`, "", "k-own")
	if err != nil {
		t.Fatal(err)
	}
	// The same params: a task of mallory's own, not agent.kee's.
	same, err := enq(mallory, `{"n":1}`, "agent.kee", "k-own")
	if err != nil || same.IsDuplicate || same.TaskID == own.TaskID {
		t.Fatalf("another agent's enqueue under agent.kee's key with the same params = %+v, %v; want a new task", same, err)
	}
	if tk := b.Task(t, same.TaskID); tk.CreatedBy != "agent.mallory" || tk.Recipient != "agent.kee" {
		t.Fatalf("its task: created_by %q recipient %q", tk.CreatedBy, tk.Recipient)
	}
	// Other params: a conflict with mallory's own task at most, never a word
	// about agent.kee's.
	_, err = enq(mallory, `{"n":2}`, "agent.kee", "k-own")
	WantCode(t, err, host.CodeIdempotencyConflict)
	if strings.Contains(err.Error(), own.TaskID) || !strings.Contains(err.Error(), same.TaskID) {
		t.Fatalf("the conflict names %v; want mallory's task %s and never agent.kee's %s", err, same.TaskID, own.TaskID)
	}
	if _, err := enq(mallory, `{"n":3}`, "agent.kee", "k-probe"); err != nil {
		t.Fatalf("a key only agent.kee could have used: %v, want a new task", err)
	}
	// Squatting: mallory takes a key first; agent.kee's enqueue under it is
	// agent.kee's own task.
	squat, err := enq(mallory, `{"n":5}`, "agent.kee", "k-squat")
	if err != nil {
		t.Fatal(err)
	}
	mine, err := enq(b.Agent, `{"n":1}`, "", "k-squat")
	if err != nil || mine.IsDuplicate || mine.TaskID == squat.TaskID {
		t.Fatalf("agent.kee's enqueue under a key another agent took first = %+v, %v; want its own new task", mine, err)
	}
	if tk := b.Task(t, mine.TaskID); tk.CreatedBy != "agent.kee" || string(tk.Params) != `{"n":1}` {
		t.Fatalf("agent.kee's task: created_by %q params %s", tk.CreatedBy, tk.Params)
	}
	// An admin of the tenant produces under its own principal too.
	adm, err := enq(b.Admin, `{"n":1}`, "agent.kee", "k-own")
	if err != nil || adm.IsDuplicate || adm.TaskID == own.TaskID || adm.TaskID == same.TaskID {
		t.Fatalf("an admin's enqueue under agent.kee's key = %+v, %v; want a task of its own", adm, err)
	}
	// The producer's repeats keep their answers.
	if dup, err := enq(b.Agent, `{"n":1}`, "", "k-own"); err != nil || !dup.IsDuplicate || dup.TaskID != own.TaskID {
		t.Fatalf("agent.kee's repeat = %+v, %v; want a duplicate of %s", dup, err, own.TaskID)
	}
	_, err = enq(b.Agent, `{"n":9}`, "", "k-own")
	WantCode(t, err, host.CodeIdempotencyConflict)
	if !strings.Contains(err.Error(), own.TaskID) || !strings.Contains(err.Error(), "params") {
		t.Fatalf("agent.kee's conflicting repeat: %v; want its task %s and params named", err, own.TaskID)
	}
	b.Verify(t)
}

// testIdempotencyPerProducerConcurrent: two principals racing the same key
// for the same recipient (many enqueues sharing write batches) end with one
// task each, each made by its producer.
func testIdempotencyPerProducerConcurrent(t *testing.T, b *Bundle) {
	actors := []engine.Actor{b.Agent, mallory}
	const per = 6
	ids := make([][]string, len(actors))
	var wg sync.WaitGroup
	for a := range actors {
		ids[a] = make([]string, per)
		for i := range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := b.Engine.Enqueue(b.Ctx, actors[a], engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{"n":1}`),
					Recipient: "agent.kee", IdempotencyKey: "k-race"})
				if err != nil {
					t.Error(err)
					return
				}
				ids[a][i] = res.TaskID
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for a, got := range ids {
		for _, id := range got {
			if id != got[0] {
				t.Fatalf("%s's concurrent enqueues under one key made different tasks: %v", actors[a].Principal, got)
			}
		}
		if tk := b.Task(t, got[0]); tk.CreatedBy != actors[a].Principal {
			t.Fatalf("%s was handed %s, made by %s", actors[a].Principal, got[0], tk.CreatedBy)
		}
	}
	if ids[0][0] == ids[1][0] {
		t.Fatalf("two producers share task %s", ids[0][0])
	}
}

// testInboxMarksOnlyTheActor: an inbox mark records what its recipient did
// (seed 002: fetched_at tracks that that AI accessed the work). When the
// task's creator or an admin archives or promotes the result of a task
// handed to another agent, the recipient's item keeps every mark unset; the
// recipient's own acts set them.
func testInboxMarksOnlyTheActor(t *testing.T, b *Bundle) {
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, Delivery: engine.DeliveryConfig{Outbox: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	hexy := engine.Actor{Tenant: "acme", Principal: "agent.hexy", Role: engine.RoleAgent}
	handOff := func() string {
		t.Helper()
		res, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", Recipient: hexy.Principal})
		if err != nil {
			t.Fatal(err)
		}
		offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", MaxTasks: 1})
		if err != nil || len(offers) != 1 {
			t.Fatal(offers, err)
		}
		if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", offers[0]), Result: Pointer}); err != nil {
			t.Fatal(err)
		}
		return res.TaskID
	}
	item := func(taskID string) host.InboxItem {
		t.Helper()
		items, _, err := eng.Inbox(b.Ctx, b.Admin, engine.InboxQuery{Recipient: hexy.Principal, TaskID: taskID})
		if err != nil || len(items) != 1 {
			t.Fatalf("agent.hexy's items of %s: %+v %v", taskID, items, err)
		}
		return items[0]
	}
	unmarked := func(id, what string) {
		t.Helper()
		if it := item(id); it.FetchedAt != nil || it.PromotedAt != nil || it.DeliveredAt != nil || it.ReadAt != nil {
			t.Fatalf("%s marked the recipient's item: %+v", what, it)
		}
	}
	id := handOff()
	if _, err := eng.ArchiveResult(b.Ctx, b.Agent, id); err != nil {
		t.Fatal(err)
	}
	unmarked(id, "the creator's archive")
	for _, a := range []engine.Actor{b.Agent, b.Admin} {
		if p, err := eng.PromoteToMemory(b.Ctx, a, engine.PromoteRequest{TaskID: id}); err != nil || p.AlreadyPromoted {
			t.Fatalf("%s promotes: %+v %v", a.Principal, p, err)
		}
		unmarked(id, a.Principal+"'s promotion")
	}
	b.Clock.Advance(1e9)
	if p, err := eng.PromoteToMemory(b.Ctx, hexy, engine.PromoteRequest{TaskID: id}); err != nil || p.AlreadyPromoted {
		t.Fatalf("the recipient promotes: %+v %v", p, err)
	}
	if it := item(id); it.PromotedAt == nil || !it.PromotedAt.Equal(b.Clock.Now()) || it.FetchedAt != nil {
		t.Fatalf("the recipient's promotion: %+v", it)
	}
	// Once an item of the task is promoted, a promotion by anyone is
	// already_promoted: the memory item is the task's.
	if p, err := eng.PromoteToMemory(b.Ctx, b.Agent, engine.PromoteRequest{TaskID: id}); err != nil || !p.AlreadyPromoted {
		t.Fatalf("the creator promotes after the recipient: %+v %v", p, err)
	}
	id2 := handOff()
	if _, err := eng.ArchiveResult(b.Ctx, hexy, id2); err != nil {
		t.Fatal(err)
	}
	if it := item(id2); it.FetchedAt == nil || !it.FetchedAt.Equal(b.Clock.Now()) {
		t.Fatalf("the recipient's archive: %+v", it)
	}
}
