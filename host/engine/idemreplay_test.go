package engine

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// A repeat of an accepted enqueue under its idempotency key is its
// duplicate whatever changed in the gate since: its recipient left with
// worker keys only, its type given a schema its params break, disabled,
// deleted. A different task under the key is still idempotency_conflict,
// and a new key (or none) is still refused by today's state.
func TestIdempotencyKeyReplayIgnoresChangedState(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	eng, err := New(Config{Store: st, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	tt := host.NewTaskType("work")
	tt.Tenant = "acme"
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	agent := Actor{Tenant: "acme", Principal: "agent.a", Role: RoleAgent}
	req := EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{"n":1}`), Recipient: "job.w1", IdempotencyKey: "K"}
	first, err := eng.Enqueue(ctx, agent, req)
	if err != nil || first.IsDuplicate {
		t.Fatalf("first enqueue: %+v, %v", first, err)
	}
	replayed := func(step string) {
		t.Helper()
		res, err := eng.Enqueue(ctx, agent, req)
		if err != nil || !res.IsDuplicate || res.TaskID != first.TaskID || res.ReceiptID != first.ReceiptID {
			t.Fatalf("%s: the repeat got %+v, %v; want the duplicate %s", step, res, err, first.TaskID)
		}
		other := req
		other.Params = json.RawMessage(`{"n":2}`)
		if res, err := eng.Enqueue(ctx, agent, other); !host.IsCode(err, host.CodeIdempotencyConflict) {
			t.Fatalf("%s: other params under the key got %+v, %v; want idempotency_conflict", step, res, err)
		}
	}
	refused := func(step, code string) {
		t.Helper()
		fresh := req
		fresh.IdempotencyKey = "K2"
		if res, err := eng.Enqueue(ctx, agent, fresh); !host.IsCode(err, code) {
			t.Fatalf("%s: a new key got %+v, %v; want %s", step, res, err, code)
		}
		fresh.IdempotencyKey = ""
		if res, err := eng.Enqueue(ctx, agent, fresh); !host.IsCode(err, code) {
			t.Fatalf("%s: no key got %+v, %v; want %s", step, res, err, code)
		}
	}

	// job.w1, keyless when the task was accepted, now holds a worker key.
	now := time.Now()
	k := store.Key{ID: "k-w", Hash: "h-w", Prefix: "p", Role: RoleWorker, Tenant: "acme", Principal: "job.w1", CreatedAt: now}
	if err := st.Update(ctx, func(tx store.Tx) error { return tx.PutKey(ctx, k) }); err != nil {
		t.Fatal(err)
	}
	refused("recipient a worker", host.CodeBadRequest)
	replayed("recipient a worker")

	// The type's schema now requires what the params lack.
	tt.ParamsSchema = json.RawMessage(`{"type":"object","required":["m"]}`)
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	replayed("schema changed")

	// The type is disabled.
	tt.Enabled = false
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	refused("type disabled", host.CodeTaskTypeDisabled)
	replayed("type disabled")

	// The task ended and its type was deleted.
	if _, err := eng.Cancel(ctx, agent, first.TaskID, "done with it"); err != nil {
		t.Fatal(err)
	}
	if err := eng.DeleteTaskType(ctx, "acme", "work"); err != nil {
		t.Fatal(err)
	}
	refused("type deleted", host.CodeUnknownTaskType)
	replayed("type deleted")
}

// A repeat of an accepted workflow submission under its idempotency key is
// its duplicate whatever changed since: a step's type disabled or deleted.
// A different request under the key is still idempotency_conflict, and a
// new key is still refused by today's state.
func TestWorkflowIdempotencyKeyReplayIgnoresChangedState(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	eng, err := New(Config{Store: st, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	tt := host.NewTaskType("work")
	tt.Tenant = "acme"
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	agent := Actor{Tenant: "acme", Principal: "agent.a", Role: RoleAgent}
	req := WorkflowRequest{Name: " two steps ", FinalStep: "b", IdempotencyKey: "K", Steps: []WorkflowStepRequest{
		{Name: "a", TaskType: "work", Params: json.RawMessage(`{"n":1}`)},
		{Name: "b", TaskType: "work", Params: json.RawMessage(`{"n":2}`), After: []string{"a"}},
	}}
	first, err := eng.SubmitWorkflow(ctx, agent, req)
	if err != nil || first.IsDuplicate {
		t.Fatalf("first submission: %+v, %v", first, err)
	}
	replayed := func(step string) {
		t.Helper()
		res, err := eng.SubmitWorkflow(ctx, agent, req)
		if err != nil || !res.IsDuplicate || res.WorkflowID != first.WorkflowID || res.ReceiptID != first.ReceiptID ||
			res.Steps["a"] != first.Steps["a"] || res.Steps["b"] != first.Steps["b"] {
			t.Fatalf("%s: the repeat got %+v, %v; want the duplicate of %+v", step, res, err, first)
		}
		other := req
		other.Steps = []WorkflowStepRequest{req.Steps[0], req.Steps[1]}
		other.Steps[1].Params = json.RawMessage(`{"n":3}`)
		if res, err := eng.SubmitWorkflow(ctx, agent, other); !host.IsCode(err, host.CodeIdempotencyConflict) {
			t.Fatalf("%s: another request under the key got %+v, %v; want idempotency_conflict", step, res, err)
		}
	}
	refused := func(step, code string) {
		t.Helper()
		fresh := req
		fresh.IdempotencyKey = "K2"
		if res, err := eng.SubmitWorkflow(ctx, agent, fresh); !host.IsCode(err, code) {
			t.Fatalf("%s: a new key got %+v, %v; want %s", step, res, err, code)
		}
	}
	replayed("nothing changed")

	tt.Enabled = false
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	refused("type disabled", host.CodeTaskTypeDisabled)
	replayed("type disabled")

	if _, err := eng.CancelWorkflow(ctx, agent, first.WorkflowID, "done with it"); err != nil {
		t.Fatal(err)
	}
	if err := eng.DeleteTaskType(ctx, "acme", "work"); err != nil {
		t.Fatal(err)
	}
	refused("type deleted", host.CodeUnknownTaskType)
	replayed("type deleted")
}

// A repeat naming resource intents is compared on the intents it names, not
// on the type's: the type's intents changed or the type deleted since the
// task was accepted, the repeat is still its duplicate. Intents the task
// does not hold as asked are idempotency_conflict.
func TestIdempotencyKeyReplayComparesTheRequestsIntents(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	eng, err := New(Config{Store: st, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	tt := host.NewTaskType("work")
	tt.Tenant = "acme"
	tt.ResourceIntents = []host.ResourceIntent{{Resource: "REPO:shared", Predicate: host.PredicateReads}}
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	agent := Actor{Tenant: "acme", Principal: "agent.a", Role: RoleAgent}
	req := EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{"n":1}`), IdempotencyKey: "K",
		ResourceIntents: []host.ResourceIntent{{Resource: "REPO:mine", Predicate: host.PredicateMutates}}}
	first, err := eng.Enqueue(ctx, agent, req)
	if err != nil || first.IsDuplicate {
		t.Fatalf("first enqueue: %+v, %v", first, err)
	}
	if got := host.IntentsJSON(first.Task.ResourceIntents); got != `[{"resource":"REPO:mine","predicate":"MUTATES"},{"resource":"REPO:shared","predicate":"READS"}]` {
		t.Fatalf("the task holds %s", got)
	}
	replayed := func(step string) {
		t.Helper()
		res, err := eng.Enqueue(ctx, agent, req)
		if err != nil || !res.IsDuplicate || res.TaskID != first.TaskID {
			t.Fatalf("%s: the repeat got %+v, %v; want the duplicate %s", step, res, err, first.TaskID)
		}
		for _, other := range [][]host.ResourceIntent{
			{{Resource: "REPO:elsewhere", Predicate: host.PredicateMutates}},
			{{Resource: "REPO:shared", Predicate: host.PredicateMutates}},
			{{Resource: "REPO:mine", Predicate: host.PredicateMutates}, {Resource: "REPO:more", Predicate: host.PredicateReads}},
		} {
			o := req
			o.ResourceIntents = other
			if res, err := eng.Enqueue(ctx, agent, o); !host.IsCode(err, host.CodeIdempotencyConflict) {
				t.Fatalf("%s: intents %s under the key got %+v, %v; want idempotency_conflict", step, host.IntentsJSON(other), res, err)
			}
		}
	}
	replayed("nothing changed")

	tt.ResourceIntents = []host.ResourceIntent{{Resource: "REPO:other", Predicate: host.PredicateMutates}}
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	replayed("the type's intents changed")

	if _, err := eng.Cancel(ctx, agent, first.TaskID, "done with it"); err != nil {
		t.Fatal(err)
	}
	if err := eng.DeleteTaskType(ctx, "acme", "work"); err != nil {
		t.Fatal(err)
	}
	replayed("type deleted")
}
