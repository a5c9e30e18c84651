package main

import (
	"context"
	"sync"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// leaseIndexStore works around a full table scan in host/sqlite (reported to
// the lead; remove this once the driver is fixed): GetTaskByLease queries
// "WHERE lease_id = ?", which SQLite cannot answer from the partial index
// tasks_lease_id (partial: non-empty lease ids only), so every heartbeat, complete and
// fail scans the whole tasks table and throughput falls as the table grows.
// The fix there is to repeat the index condition (non-empty lease_id) in the query.
//
// Until then this decorator remembers which task each lease it granted
// belongs to and answers GetTaskByLease with an indexed GetTask, checking
// that the task still carries that lease (the same answer the query gives).
// Leases it does not know (granted before a restart or by another gate) fall
// through to the driver.
type leaseIndexStore struct {
	store.Store
	mu       sync.RWMutex
	cur, old map[string]leaseRef // two generations bound the memory
}

type leaseRef struct{ tenant, taskID string }

const leaseIndexGeneration = 200_000

func newLeaseIndexStore(s store.Store) *leaseIndexStore {
	return &leaseIndexStore{Store: s, cur: map[string]leaseRef{}, old: map[string]leaseRef{}}
}

// LedgerHead forwards to the driver, so ledger verification still checks the head.
func (s *leaseIndexStore) LedgerHead(ctx context.Context) (int64, string, error) {
	if hk, ok := s.Store.(interface {
		LedgerHead(ctx context.Context) (int64, string, error)
	}); ok {
		return hk.LedgerHead(ctx)
	}
	return 0, "", nil
}

func (s *leaseIndexStore) remember(ts []*host.Task) {
	s.mu.Lock()
	for _, t := range ts {
		if t.LeaseID == "" {
			continue
		}
		if len(s.cur) >= leaseIndexGeneration {
			s.old, s.cur = s.cur, make(map[string]leaseRef, leaseIndexGeneration)
		}
		s.cur[t.LeaseID] = leaseRef{t.Tenant, t.ID}
	}
	s.mu.Unlock()
}

func (s *leaseIndexStore) lookup(leaseID string) (leaseRef, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r, ok := s.cur[leaseID]; ok {
		return r, true
	}
	r, ok := s.old[leaseID]
	return r, ok
}

func (s *leaseIndexStore) byLease(ctx context.Context, r store.Reader, leaseID string) (*host.Task, error) {
	ref, ok := s.lookup(leaseID)
	if !ok {
		return r.GetTaskByLease(ctx, leaseID)
	}
	t, err := r.GetTask(ctx, ref.tenant, ref.taskID)
	if err != nil {
		return nil, err
	}
	if t.LeaseID != leaseID {
		return nil, host.Errorf(host.CodeNotFound, "no lease %s", leaseID)
	}
	return t, nil
}

// Update implements store.Store.
func (s *leaseIndexStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(&leaseIndexTx{Tx: tx, s: s}) })
}

// View implements store.Store.
func (s *leaseIndexStore) View(ctx context.Context, fn func(store.Reader) error) error {
	return s.Store.View(ctx, func(r store.Reader) error { return fn(&leaseIndexReader{Reader: r, s: s}) })
}

type leaseIndexTx struct {
	store.Tx
	s *leaseIndexStore
}

func (t *leaseIndexTx) GetTaskByLease(ctx context.Context, leaseID string) (*host.Task, error) {
	return t.s.byLease(ctx, t.Tx, leaseID)
}

func (t *leaseIndexTx) ClaimTasks(ctx context.Context, q store.ClaimQuery) ([]*host.Task, error) {
	ts, err := t.Tx.ClaimTasks(ctx, q)
	if err == nil {
		t.s.remember(ts)
	}
	return ts, err
}

type leaseIndexReader struct {
	store.Reader
	s *leaseIndexStore
}

func (r *leaseIndexReader) GetTaskByLease(ctx context.Context, leaseID string) (*host.Task, error) {
	return r.s.byLease(ctx, r.Reader, leaseID)
}
