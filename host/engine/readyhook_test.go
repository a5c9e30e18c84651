package engine

import (
	"context"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// SQLite settles the waiters of a batch's succeeded dependencies when the
// batch's rows go out, not inside the completion's update, so the update
// hands the engine no ready waiter to wake a long-poll for; the store calls
// the engine's ready hook once the batch commits instead
// (store.ReadyHooker). A call parked for the waiter's type, with a fallback
// poll far longer than its wait, is offered the waiter when its dependency
// completes.
func TestAWaiterTheStoreReadiesAtItsBatchsEndWakesAParkedCall(t *testing.T) {
	ctx := context.Background()
	eng, err := New(Config{Store: openSQLite(t), ExpiryJitter: -1, FallbackPoll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	agent := Actor{Tenant: "acme", Principal: "agent.kee", Role: RoleAgent}
	for _, name := range []string{"first", "second"} {
		tt := host.NewTaskType(name)
		tt.Tenant, tt.LeaseSeconds = "acme", 60
		if _, err := eng.PutTaskType(ctx, tt); err != nil {
			t.Fatal(err)
		}
	}
	a, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "first"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "second", After: []string{a.TaskID}})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := eng.Lease(ctx, LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"first"}, MaxTasks: 1})
	if err != nil || len(offers) != 1 {
		t.Fatalf("leasing the dependency: %d offers, %v", len(offers), err)
	}
	type answer struct {
		offers []host.Offer
		err    error
	}
	parked := make(chan answer, 1)
	go func() {
		o, err := eng.Lease(ctx, LeaseRequest{Tenant: "acme", WorkerID: "w.2", Types: []string{"second"}, MaxTasks: 1, Wait: 30 * time.Second})
		parked <- answer{o, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		eng.waiters.mu.Lock()
		n := len(eng.waiters.byT["acme"])
		eng.waiters.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call for the waiter's type did not park within 30 s")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := eng.Complete(ctx, CompleteRequest{WorkerCall: WorkerCall{Tenant: "acme", WorkerID: "w.1", LeaseID: offers[0].LeaseID},
		Result: host.Result{Pointer: "inline:eA=="}}); err != nil {
		t.Fatal(err)
	}
	got := <-parked
	if got.err != nil || len(got.offers) != 1 || got.offers[0].Task.ID != b.TaskID {
		t.Fatalf("the parked call answered %d offers, %v; want the waiter %s, woken when its dependency completed", len(got.offers), got.err, b.TaskID)
	}
}
