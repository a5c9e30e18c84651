package engine

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// hideKeyStore hides committed idempotency keys from the lookup inside the
// enqueue's transaction while armed: what that transaction sees when another
// writer or host commits the same key between its lookup and its insert.
type hideKeyStore struct {
	store.Store
	armed atomic.Bool
}

type hideKeyTx struct {
	store.Tx
	s *hideKeyStore
}

func (t hideKeyTx) FindTaskByIdempotency(ctx context.Context, k store.IdempotencyKey) (*host.Task, error) {
	if t.s.armed.Load() {
		return nil, nil
	}
	return t.Tx.FindTaskByIdempotency(ctx, k)
}

func (s *hideKeyStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(hideKeyTx{tx, s}) })
}

// An enqueue that loses the race for its idempotency key to another writer
// is answered by the same rule as one that found the key at once: the same
// task is a duplicate, a different one 409 idempotency_conflict.
func TestIdempotencyKeyLostInARaceKeepsTheRule(t *testing.T) {
	ctx := context.Background()
	st := &hideKeyStore{Store: openSQLite(t)}
	eng, err := New(Config{Store: st, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	tt := host.NewTaskType("code.gen")
	tt.Tenant = "acme"
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	agent := Actor{Tenant: "acme", Principal: "agent.kee", Role: RoleAgent}
	first, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "code.gen", Params: json.RawMessage(`{"a":1}`), IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	st.armed.Store(true)
	defer st.armed.Store(false)
	if res, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "code.gen", Params: json.RawMessage(`{"a":2}`), IdempotencyKey: "k"}); !host.IsCode(err, host.CodeIdempotencyConflict) {
		t.Fatalf("different params under a key lost in a race: %+v, %v; want idempotency_conflict", res, err)
	}
	res, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "code.gen", Params: json.RawMessage(`{ "a": 1 }`), IdempotencyKey: "k"})
	if err != nil || !res.IsDuplicate || res.TaskID != first.TaskID {
		t.Fatalf("the same task under a key lost in a race: %+v, %v; want a duplicate of %s", res, err, first.TaskID)
	}
}
