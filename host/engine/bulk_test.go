package engine

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/groupcommit"
)

// classStore counts the updates that reach the store marked bulk and those
// that do not.
type classStore struct {
	store.Store
	bulk, prompt atomic.Int64
	keys         atomic.Value // the enqueue budget's keys of the last bulk update
}

func (s *classStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	if keys, bulk := store.BulkKeys(ctx); bulk {
		s.bulk.Add(1)
		s.keys.Store(keys)
	} else {
		s.prompt.Add(1)
	}
	return s.Store.Update(ctx, fn)
}

// An enqueue reaches the store as bulk work for its tenant and a lease and
// a completion as prompt work, so the writer serves the latter first when it must choose
// (host/store/groupcommit).
func TestEnqueueIsBulkCompletionIsPrompt(t *testing.T) {
	ctx := context.Background()
	st := &classStore{Store: openSQLite(t)}
	eng, err := New(Config{Store: st, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	agent := Actor{Tenant: "acme", Principal: "agent.kee", Role: RoleAgent}
	tt := host.NewTaskType("work")
	tt.Tenant = "acme"
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	before := st.prompt.Load()
	if _, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "work"}); err != nil {
		t.Fatal(err)
	}
	if st.bulk.Load() != 1 {
		t.Fatalf("an enqueue made %d bulk updates, want 1", st.bulk.Load())
	}
	if keys := st.keys.Load().([]string); !slices.Equal(keys, []string{groupcommit.Key("acme", "work")}) {
		t.Fatalf("an enqueue's budget keys %q, want its tenant's and type's alone", keys)
	}
	offers, err := eng.Lease(ctx, LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"work"}})
	if err != nil || len(offers) != 1 {
		t.Fatal(offers, err)
	}
	if _, err := eng.Complete(ctx, CompleteRequest{WorkerCall: WorkerCall{Tenant: "acme", WorkerID: "w.1", LeaseID: offers[0].LeaseID},
		Result: host.Result{Channel: "inline", Pointer: "inline:b2s="}}); err != nil {
		t.Fatal(err)
	}
	if st.bulk.Load() != 1 || st.prompt.Load()-before < 2 {
		t.Fatalf("after a lease and a completion: %d bulk updates (want 1), %d prompt ones (want at least 2)", st.bulk.Load(), st.prompt.Load()-before)
	}
}
