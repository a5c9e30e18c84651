package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// pair enqueues a task of type work and a second one after it, leases the
// first, and returns the second's id and the first's offer.
func (g *failGate) pair(t *testing.T) (waiter string, dep host.Offer) {
	t.Helper()
	a, err := g.b.Engine.Enqueue(g.b.Ctx, g.b.Agent, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.b.Engine.Enqueue(g.b.Ctx, g.b.Agent, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{}`), After: []string{a.TaskID}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != string(host.StateWaiting) {
		t.Fatalf("setup: the second task is %s, want waiting", b.Status)
	}
	return b.TaskID, g.b.LeaseOne(t, "worker.one", "work")
}

func (g *failGate) complete(o host.Offer) func() error {
	return func() error {
		_, err := g.b.Engine.Complete(g.b.Ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "acme", WorkerID: "worker.one", LeaseID: o.LeaseID},
			Result: host.Result{Pointer: "inline:eA=="}})
		return err
	}
}

func (g *failGate) state(t *testing.T, id string) host.TaskState {
	t.Helper()
	return g.b.Task(t, id).State
}

func (g *failGate) queueCount(t *testing.T, state host.TaskState) int64 {
	t.Helper()
	var qs store.QueueStats
	if err := g.st.View(context.Background(), func(r store.Reader) error {
		var err error
		qs, err = r.QueueStats(context.Background(), "acme")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return qs.ByState[state]
}

// TestAnEnqueueAfterAWaiterSeesTheBatchsSettlements: a dependency's success
// settles its waiters when the batch's rows go out (writeSettles), and an
// enqueue's read of what it waits on does not make them go out unless a
// task it names is waiting. Here the enqueue names the waiter whose
// dependency succeeded earlier in its batch: it must find it queued, as it
// would after the completion alone, and so wait on it at depth 1, not on a
// waiting task at depth 2.
func TestAnEnqueueAfterAWaiterSeesTheBatchsSettlements(t *testing.T) {
	g := newFailGate(t)
	waiter, dep := g.pair(t)
	var third string
	enqueueAfter := func() error {
		r, err := g.b.Engine.Enqueue(g.b.Ctx, g.b.Agent, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{}`), After: []string{waiter}})
		if r != nil {
			third = r.TaskID
		}
		return err
	}
	for i, err := range g.oneBatch(t, g.complete(dep), enqueueAfter) {
		if err != nil {
			t.Fatalf("update %d of the batch: %v", i, err)
		}
	}
	if s := g.state(t, waiter); s != host.StateQueued {
		t.Fatalf("the waiter whose dependency completed is %s, want queued", s)
	}
	if s := g.state(t, third); s != host.StateWaiting {
		t.Fatalf("the task enqueued after the waiter is %s, want waiting", s)
	}
	if n := g.count(t, `SELECT count(*) FROM task_dependencies WHERE waiter_id = '`+third+`'`); n != 1 {
		t.Fatalf("the new task has %d edges, want 1", n)
	}
	if d := g.count(t, `SELECT depth FROM task_dependencies WHERE waiter_id = '`+third+`'`); d != 1 {
		t.Fatalf("the new task's edge is at depth %d; want 1 (what it waits on was queued, not waiting)", d)
	}
	if q, w := g.queueCount(t, host.StateQueued), g.queueCount(t, host.StateWaiting); q != 1 || w != 1 {
		t.Fatalf("queue counts: %d queued, %d waiting; want 1 and 1", q, w)
	}
}

// TestAnUpdateFencedOnWaitingSeesTheBatchsSettlements: an update of a task
// fenced on its waiting state, in the batch where its dependency succeeded,
// is fenced out: the success made the task queued first, as it would have
// in an update of its own.
func TestAnUpdateFencedOnWaitingSeesTheBatchsSettlements(t *testing.T) {
	g := newFailGate(t)
	waiter, dep := g.pair(t)
	copyOf := g.b.Task(t, waiter)
	ctx := context.Background()
	err := g.st.Update(ctx, func(tx store.Tx) error {
		ready, rest, err := tx.(store.WaiterReadier).SettleReadyWaiters(ctx, "acme", dep.Task.ID, host.StateSucceeded, copyOf.UpdatedAt)
		if err != nil || len(ready)+len(rest) != 0 {
			t.Errorf("settling a success answered %d ready, %d to decide, %v; want it noted for the batch's end", len(ready), len(rest), err)
		}
		copyOf.State, copyOf.LastError = host.StateCanceled, "canceled while waiting"
		err = tx.UpdateTask(ctx, copyOf, store.Fence{State: host.StateWaiting})
		if !errors.Is(err, store.ErrFenced) {
			t.Errorf("an update fenced on waiting after its dependency's success: %v; want fenced (the task is queued)", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := g.state(t, waiter); s != host.StateQueued {
		t.Fatalf("the waiter is %s, want queued", s)
	}
}

// TestASettlementOfABatchRunAgainCountsOnce: a batch whose rows a committed
// one refuses runs again with a savepoint per update; the completion's
// settlement is written inside its own update's savepoint then, once: the
// waiter is queued and counted queued once, nothing is left waiting, and
// the ledger verifies.
func TestASettlementOfABatchRunAgainCountsOnce(t *testing.T) {
	g := newFailGate(t)
	if err := g.appendProgress("agent.kee", "taken")(); err != nil {
		t.Fatal(err)
	}
	waiter, dep := g.pair(t)
	errs := g.oneBatch(t, g.complete(dep), g.appendProgress("agent.kee", "taken"))
	if errs[0] != nil {
		t.Fatalf("the completion shared a batch with a clashing update and failed: %v", errs[0])
	}
	if !host.IsCode(errs[1], host.CodeConflict) {
		t.Fatalf("the clashing update: %v, want conflict", errs[1])
	}
	if s := g.state(t, waiter); s != host.StateQueued {
		t.Fatalf("the waiter is %s, want queued", s)
	}
	if q, w := g.queueCount(t, host.StateQueued), g.queueCount(t, host.StateWaiting); q != 1 || w != 0 {
		t.Fatalf("queue counts: %d queued, %d waiting; want 1 and 0", q, w)
	}
	g.b.VerifyAfter(t)
}

// TestAClaimAfterASuccessInItsBatchSeesTheWaiterItReadied: a claim sees the
// batch's earlier updates, the settling of their successes included. Here a
// success readies the older waiter, a later update of the batch queues a
// newer task, and a claim of one task follows: it takes the older waiter,
// as it would after the two updates alone, not the newer task alone.
func TestAClaimAfterASuccessInItsBatchSeesTheWaiterItReadied(t *testing.T) {
	g := newFailGate(t)
	waiter, dep := g.pair(t)
	ctx := context.Background()
	newer := &host.Task{ID: host.NewID(host.PrefixTask), Tenant: "acme", Type: "work", CreatedBy: "agent.kee", Recipient: "agent.kee",
		State: host.StateQueued, Params: json.RawMessage(`{}`), CreatedAt: storetest.Epoch, UpdatedAt: storetest.Epoch, AvailableAt: storetest.Epoch}
	insert := func() error {
		return g.st.Update(ctx, func(tx store.Tx) error { return tx.InsertTask(ctx, newer) })
	}
	var claimed []*host.Task
	claim := func() error {
		return g.st.Update(ctx, func(tx store.Tx) error {
			var err error
			claimed, err = tx.ClaimTasks(ctx, store.ClaimQuery{Tenant: "acme", Types: []string{"work"}, Now: time.Now().Add(time.Hour), Limit: 1,
				Grant: func(t *host.Task) {
					t.State, t.LeaseID, t.WorkerID = host.StateLeased, host.NewLeaseID(t.ID), "worker.two"
					at, until := time.Now(), time.Now().Add(time.Hour)
					t.LeasedAt, t.LeaseExpiresAt = &at, &until
				}})
			return err
		})
	}
	for i, err := range g.oneBatch(t, g.complete(dep), insert, claim) {
		if err != nil {
			t.Fatalf("update %d of the batch: %v", i, err)
		}
	}
	if len(claimed) != 1 || claimed[0].ID != waiter {
		ids := []string{}
		for _, c := range claimed {
			ids = append(ids, c.ID)
		}
		t.Fatalf("the claim took %v; want the waiter %s its batch's success readied (older than %s)", ids, waiter, newer.ID)
	}
}
