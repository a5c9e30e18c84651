package engine

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
)

// rerunStore runs the next armed Update's function once in a transaction it
// rolls back, calls between, then runs the function again for real: what a
// driver may do (a batch run again), and what PostgreSQL's writer does, with
// another host's write landing in between.
type rerunStore struct {
	store.Store
	armed   atomic.Bool
	between func()
}

var errRolledBack = errors.New("rolled back to run again")

func (s *rerunStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	if s.armed.CompareAndSwap(true, false) {
		_ = s.Store.Update(ctx, func(tx store.Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			return errRolledBack
		})
		s.between()
	}
	return s.Store.Update(ctx, fn)
}

// A failure whose first run took the retry branch, rolled back, and ran
// again after another host canceled the task answers what the committed run
// did (canceled, no retry) and emits no retry event.
func TestFailAnswersTheRunThatCommits(t *testing.T) {
	ctx := context.Background()
	raw := openSQLite(t)
	st := &rerunStore{Store: raw}
	var retried atomic.Int64
	eng, err := New(Config{Store: st, ExpiryJitter: -1, OnEvent: func(ev Event) {
		if ev.Kind == EvRetried || ev.Kind == EvDeadLettered {
			retried.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	other, err := New(Config{Store: raw, ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	agent := Actor{Tenant: "acme", Principal: "agent.kee", Role: RoleAgent}
	tt := host.NewTaskType("work")
	tt.Tenant, tt.LeaseSeconds, tt.DefaultMaxRetries = "acme", 60, 3
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	res, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := eng.Lease(ctx, LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"work"}})
	if err != nil || len(offers) != 1 {
		t.Fatal(offers, err)
	}
	canceled := false
	st.between = func() {
		_, err := other.Cancel(ctx, agent, res.TaskID, "stop")
		canceled = err == nil
	}
	st.armed.Store(true)
	fr, err := eng.Fail(ctx, FailRequest{WorkerCall: WorkerCall{Tenant: "acme", WorkerID: "w.1", LeaseID: offers[0].LeaseID}, Error: "boom", Retryable: true})
	if err != nil {
		t.Fatal(err)
	}
	if !canceled || fr.Status != "canceled" || fr.Task.State != host.StateCanceled {
		t.Fatalf("setup: cancel between the runs %v; Fail answered %q, task %s", canceled, fr.Status, fr.Task.State)
	}
	if fr.WillRetry || fr.RetryScheduledAt != nil || retried.Load() != 0 {
		t.Fatalf("Fail of a task canceled before the committed run: will_retry %v, retry_scheduled_at %v, %d retry or dead-letter events",
			fr.WillRetry, fr.RetryScheduledAt, retried.Load())
	}
}

// openSQLite opens a store in a file of the test's own, closed when it ends.
func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// workEngine is an engine on a store of the test's own (openSQLite) with
// the task type "work" in tenant acme, closed when the test ends.
func workEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	cfg.Store = openSQLite(t)
	if cfg.ExpiryJitter == 0 {
		cfg.ExpiryJitter = -1
	}
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	tt := host.NewTaskType("work")
	tt.Tenant = "acme"
	if _, err := eng.PutTaskType(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	return eng
}
