package engine

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// outcomeReads counts the reads of offered tasks' dependency outcomes.
type outcomeReads struct {
	store.Store
	n atomic.Int64
}

type outcomeReader struct {
	store.Reader
	n *atomic.Int64
}

func (s *outcomeReads) View(ctx context.Context, fn func(store.Reader) error) error {
	return s.Store.View(ctx, func(r store.Reader) error { return fn(outcomeReader{r, &s.n}) })
}

func (r outcomeReader) DependencyTasks(ctx context.Context, tenant string, waiters []string) (map[string][]*host.Task, error) {
	r.n.Add(1)
	return r.Reader.DependencyTasks(ctx, tenant, waiters)
}

// A lease of tasks this engine enqueued without an after list reads no
// dependency outcomes; a waiter's lease still reads them, and another
// engine, which did not enqueue the tasks, reads them too.
func TestLeaseOfTasksWithoutDependenciesReadsNoOutcomes(t *testing.T) {
	ctx := context.Background()
	st := &outcomeReads{Store: openSQLite(t)}
	eng, err := New(Config{Store: st, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	other, err := New(Config{Store: st, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	agent := Actor{Tenant: "acme", Principal: "agent.kee", Role: RoleAgent}
	for _, typ := range []string{"work", "merge"} {
		tt := host.NewTaskType(typ)
		tt.Tenant, tt.LeaseSeconds = "acme", 60
		if _, err := eng.PutTaskType(ctx, tt); err != nil {
			t.Fatal(err)
		}
	}
	lease := func(e *Engine, typ string) host.Offer {
		t.Helper()
		offers, err := e.Lease(ctx, LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{typ}})
		if err != nil || len(offers) != 1 {
			t.Fatalf("lease %s: %d offers, %v", typ, len(offers), err)
		}
		return offers[0]
	}
	dep, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "merge", After: []string{dep.TaskID}}); err != nil {
		t.Fatal(err)
	}
	o := lease(eng, "work")
	if n := st.n.Load(); n != 0 {
		t.Fatalf("a lease of a task enqueued without dependencies read outcomes %d times", n)
	}
	if _, err := eng.Complete(ctx, CompleteRequest{WorkerCall: WorkerCall{Tenant: "acme", WorkerID: "w.1", LeaseID: o.LeaseID}, Result: host.Result{Pointer: "inline:eA=="}}); err != nil {
		t.Fatal(err)
	}
	if w := lease(eng, "merge"); len(w.Dependencies) != 1 || w.Dependencies[0].TaskID != dep.TaskID || st.n.Load() != 1 {
		t.Fatalf("the waiter was offered with %d outcomes after %d reads, want its dependency's after one", len(w.Dependencies), st.n.Load())
	}
	if _, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "work"}); err != nil {
		t.Fatal(err)
	}
	lease(other, "work")
	if n := st.n.Load(); n != 2 {
		t.Fatalf("another engine's lease read outcomes %d times in all, want 2", n)
	}
}

// edgeReads counts the reads of a task's dependency edges.
type edgeReads struct {
	store.Store
	n atomic.Int64
}

type edgeReader struct {
	store.Reader
	n *atomic.Int64
}

func (s *edgeReads) View(ctx context.Context, fn func(store.Reader) error) error {
	return s.Store.View(ctx, func(r store.Reader) error { return fn(edgeReader{r, &s.n}) })
}

func (r edgeReader) ListDependencies(ctx context.Context, tenant, waiter string) ([]host.Dependency, error) {
	r.n.Add(1)
	return r.Reader.ListDependencies(ctx, tenant, waiter)
}

// GetTask shows what a task waits on, from one read of its edges; PeekTask,
// which the doors' status polls use, reads no edges and shows none.
func TestPeekTaskReadsNoEdges(t *testing.T) {
	ctx := context.Background()
	st := &edgeReads{Store: openSQLite(t)}
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
	dep, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "work", After: []string{dep.TaskID}})
	if err != nil {
		t.Fatal(err)
	}
	st.n.Store(0)
	got, err := eng.GetTask(ctx, agent, w.TaskID)
	if err != nil || len(got.After) != 1 || got.After[0] != dep.TaskID || st.n.Load() != 1 {
		t.Fatalf("GetTask: after %v (%v) from %d edge reads, want [%s] from one", got.After, err, st.n.Load(), dep.TaskID)
	}
	peeked, err := eng.PeekTask(ctx, agent, w.TaskID)
	if err != nil || peeked.ID != w.TaskID || len(peeked.After) != 0 || st.n.Load() != 1 {
		t.Fatalf("PeekTask: task %v, after %v (%v), %d edge reads in all, want no edges read", peeked, peeked.After, err, st.n.Load())
	}
	if _, err := eng.PeekTask(ctx, Actor{Tenant: "acme", Principal: "agent.other", Role: RoleAgent}, w.TaskID); host.ErrorCode(err) != host.CodeNotFound {
		t.Fatalf("PeekTask of another agent's task: %v, want not_found", err)
	}
}
