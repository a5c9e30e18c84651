package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// poisonStore is b's store with the reads of some tasks failing inside its
// write transactions: a pending settlement of one of them cannot be
// settled, whatever the drainer does, until the poison is cleared.
type poisonStore struct {
	store.Store
	mu     sync.Mutex
	poison map[string]bool
}

func (s *poisonStore) poisoned(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.poison[id]
}

func (s *poisonStore) setPoison(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.poison = map[string]bool{}
	for _, id := range ids {
		s.poison[id] = true
	}
}

// Update runs fn on a transaction whose GetTask fails for a poisoned task.
func (s *poisonStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(poisonTx{Tx: tx, s: s}) })
}

type poisonTx struct {
	store.Tx
	s *poisonStore
}

var errPoisoned = errors.New("poisoned task row")

func (t poisonTx) GetTask(ctx context.Context, tenant, id string) (*host.Task, error) {
	if t.s.poisoned(id) {
		return nil, errPoisoned
	}
	return t.Tx.GetTask(ctx, tenant, id)
}

// testDepsCascadePoison: a pending settlement that cannot be settled does
// not stall the ones behind it. Two cut cascades are left pending, the
// older one's rows poisoned; the drainer settles the younger one whole
// while the poisoned rows stay pending, then settles those too once the
// poison is cleared and their backoff has passed.
func testDepsCascadePoison(t *testing.T, b *Bundle) {
	bad, good := buildCascadeTree(t, b), buildCascadeTree(t, b)
	cut := cascadeEngine(t, b, cascadeBudget)
	wantCutCascade(t, b, cut, bad)
	b.Clock.Advance(time.Second) // bad's rows are the older: claimed first
	wantCutCascade(t, b, cut, good)
	cut.Close()

	ps := &poisonStore{Store: b.Store}
	ps.setPoison(append([]string{bad.root}, bad.waiters...))
	eng, err := engine.New(engine.Config{Store: ps, Clock: b.Clock, ExpiryJitter: -1, ScheduleTick: -1, SettleBudget: cascadeBudget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	eng.Start()
	waitFor(t, "every waiter of the healthy cascade canceled past the poisoned one", func() bool {
		return b.countCanceled(t, good.waiters) == len(good.waiters)
	})
	for _, id := range good.waiters {
		if n := countType(b.ReceiptTypes(t, id), host.ReceiptCanceled); n != 1 {
			t.Fatalf("waiter %s has %d task.canceled receipts, want 1", id, n)
		}
	}
	if !b.pendingSettlements(t) {
		t.Fatal("the poisoned settlements left the table though they were never settled")
	}
	if n := b.countCanceled(t, bad.waiters); n == len(bad.waiters) {
		t.Fatal("the poisoned cascade was settled through the poison")
	}

	ps.setPoison(nil)
	b.Clock.Advance(10 * time.Minute) // past any backoff
	wantCascadeDone(t, b, bad)
}

// countType counts the receipts of type typ among types.
func countType(types []host.ReceiptType, typ host.ReceiptType) int {
	n := 0
	for _, x := range types {
		if x == typ {
			n++
		}
	}
	return n
}
