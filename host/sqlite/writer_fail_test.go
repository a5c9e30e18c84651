package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// The writer's failure paths, driven by real SQL errors: each test adds a
// trigger to the gate's database from a second connection (as an operator's
// tool or a damaged schema would) that refuses one specific row, and lines
// up several updates behind one that holds the writer, so they share one
// batch.

// failGate is a store and an engine on it whose lease sweep never runs during
// the test, so the only updates in the writer's queue are the test's own.
type failGate struct {
	st *Store
	b  *storetest.Bundle
	db *sql.DB // a second connection to the same file
}

func newFailGate(t *testing.T) *failGate {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gate.db")
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng, err := engine.New(engine.Config{Store: st, Clock: host.NewManualClock(storetest.Epoch), ExpiryJitter: -1,
		MaxLeaseSeconds: 3600, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	b := &storetest.Bundle{Store: st, Engine: eng, Ctx: context.Background(),
		Agent: engine.Actor{Tenant: "acme", Principal: "agent.kee", Role: engine.RoleAgent},
		Admin: engine.Actor{Tenant: "acme", Principal: "ops", Role: engine.RoleAdmin}}
	work := host.NewTaskType("work")
	work.Tenant = "acme"
	work.ParamsSchema = json.RawMessage(`{"type":"object"}`)
	b.MustPutType(t, work)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &failGate{st: st, b: b, db: db}
}

func (g *failGate) exec(t *testing.T, q string) {
	t.Helper()
	if _, err := g.db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// oneBatch runs calls (each makes exactly one store update) in one writer
// batch, queued in the order given, and returns their errors.
func (g *failGate) oneBatch(t *testing.T, calls ...func() error) []error {
	t.Helper()
	ctx := context.Background()
	hold, holding := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- g.st.Update(ctx, func(store.Tx) error {
			close(holding)
			<-hold
			return nil
		})
	}()
	select {
	case <-holding:
	case <-time.After(30 * time.Second):
		t.Fatal("the holding update did not start within 30 s")
	}
	errs := make([]error, len(calls))
	done := make(chan int, len(calls))
	for i, call := range calls {
		go func() { errs[i] = call(); done <- i }()
		deadline := time.Now().Add(30 * time.Second)
		for g.st.queue.Len() < i+1 {
			if time.Now().After(deadline) {
				close(hold)
				t.Fatalf("update %d of %d was not queued within 30 s (%d queued)", i+1, len(calls), g.st.queue.Len())
			}
			time.Sleep(time.Millisecond)
		}
	}
	batches := g.st.WriterStats().Batches
	close(hold)
	if err := <-held; err != nil {
		t.Fatalf("holding update: %v", err)
	}
	for range calls {
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("the batch's updates did not all return within 60 s")
		}
	}
	if after := g.st.WriterStats().Batches; after != batches+1 {
		t.Fatalf("the %d updates ran in %d batches, want 1", len(calls), after-batches)
	}
	return errs
}

func (g *failGate) enqueue(principal, key string) func() error {
	return func() error {
		a := g.b.Agent
		a.Principal = principal
		_, err := g.b.Engine.Enqueue(g.b.Ctx, a, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{}`), IdempotencyKey: key})
		return err
	}
}

// putTypes writes the task types names in one update, in order.
func (g *failGate) putTypes(names ...string) func() error {
	return func() error {
		return g.st.Update(context.Background(), func(tx store.Tx) error {
			for _, n := range names {
				tt := host.NewTaskType(n)
				tt.Tenant = "acme"
				if err := tx.PutTaskType(context.Background(), &tt); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

func (g *failGate) count(t *testing.T, q string) int {
	t.Helper()
	var n int
	if err := g.db.QueryRow(q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (g *failGate) hasType(t *testing.T, name string) bool {
	t.Helper()
	return g.count(t, fmt.Sprintf(`SELECT count(*) FROM task_types WHERE tenant = 'acme' AND name = '%s'`, name)) == 1
}

// tasksKeyed is how many tasks exist with idempotency keys starting with prefix.
func (g *failGate) tasksKeyed(t *testing.T, prefix string) int {
	t.Helper()
	return g.count(t, fmt.Sprintf(`SELECT count(*) FROM tasks WHERE idempotency_key LIKE '%s%%'`, prefix))
}

// afterwards checks that the writer works and its chain is whole: a new task
// (idempotency key key) commits and the ledger verifies with want receipts.
func (g *failGate) afterwards(t *testing.T, key string, want int64) {
	t.Helper()
	if err := g.enqueue("agent.kee", key)(); err != nil {
		t.Fatalf("an update after the failed batch: %v", err)
	}
	if rep := g.b.Verify(t); rep.Receipts != want {
		t.Fatalf("ledger holds %d receipts, want %d", rep.Receipts, want)
	}
}

// TestBatchUpdateFailingAfterItWroteUndoesOnlyItself: one update in a batch
// writes a row and then has its second statement refused by the database.
// The writer reruns the batch with a savepoint per update: that caller gets
// its own error and its first row is gone; the others in the batch commit.
func TestBatchUpdateFailingAfterItWroteUndoesOnlyItself(t *testing.T) {
	g := newFailGate(t)
	g.exec(t, `CREATE TRIGGER refuse_poison BEFORE INSERT ON task_types WHEN NEW.name = 'poison'
		BEGIN SELECT RAISE(ABORT, 'poison row refused'); END`)
	errs := g.oneBatch(t,
		g.enqueue("agent.kee", "a-1"),
		g.putTypes("half", "poison"),
		g.enqueue("agent.kee", "a-2"),
		g.putTypes("whole"),
		g.enqueue("agent.kee", "a-3"),
	)
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "poison row refused") || host.IsCode(errs[1], host.CodeDatabaseUnavailable) {
		t.Fatalf("the failing update: %v, want its own error (poison row refused)", errs[1])
	}
	for _, i := range []int{0, 2, 3, 4} {
		if errs[i] != nil {
			t.Fatalf("update %d shared a batch with a failing one and failed too: %v", i, errs[i])
		}
	}
	if g.hasType(t, "half") || g.hasType(t, "poison") {
		t.Fatal("the failed update's first write was committed (half-written)")
	}
	if !g.hasType(t, "whole") || g.tasksKeyed(t, "a-") != 3 {
		t.Fatalf("the batch's other updates are missing: type whole %v, %d of 3 tasks", g.hasType(t, "whole"), g.tasksKeyed(t, "a-"))
	}
	g.afterwards(t, "after", 4)
}

// TestBatchFailingAtItsCloseWritesNothing: the batch's closing writes (the
// ledger chain's head, written once per batch just before COMMIT) are
// refused because of a row one of its updates wrote. The whole batch rolls
// back: every caller gets database_unavailable, none of its tasks, receipts or
// rows remain, and the writer's view of its chain is rolled back with it, so
// the next batch chains on what was committed and the ledger verifies.
func TestBatchFailingAtItsCloseWritesNothing(t *testing.T) {
	g := newFailGate(t)
	g.afterwards(t, "before", 1) // one committed receipt ahead of the batch
	g.exec(t, `CREATE TRIGGER refuse_head BEFORE UPDATE ON ledger_chains
		WHEN EXISTS (SELECT 1 FROM task_types WHERE name = 'poison')
		BEGIN SELECT RAISE(ABORT, 'chain head refused'); END`)
	errs := g.oneBatch(t,
		g.enqueue("agent.kee", "b-1"),
		g.enqueue("agent.kee", "b-2"),
		g.putTypes("poison"),
		g.enqueue("agent.kee", "b-3"),
	)
	for i, err := range errs {
		if !host.IsCode(err, host.CodeDatabaseUnavailable) || !strings.Contains(err.Error(), "chain head refused") {
			t.Fatalf("update %d: %v, want database_unavailable (chain head refused)", i, err)
		}
	}
	if g.hasType(t, "poison") || g.tasksKeyed(t, "b-") != 0 {
		t.Fatalf("the rolled-back batch left rows: poison type %v, %d tasks", g.hasType(t, "poison"), g.tasksKeyed(t, "b-"))
	}
	if n := g.count(t, `SELECT count(*) FROM receipts`); n != 1 {
		t.Fatalf("%d receipts after the rolled-back batch, want the 1 committed before it", n)
	}
	g.afterwards(t, "after", 2)
}

// TestBatchFailingInsideASavepointWritesNothing: one update fails after it
// wrote, so the batch reruns with a savepoint per update; then, inside a
// later update's savepoint, the database refuses that update's obligation
// rows. The writer cannot trust the transaction any more and rolls it all
// back: the first update keeps its own error, every other caller gets
// database_unavailable, nothing of the batch remains, and the next batch
// commits on an intact chain.
func TestBatchFailingInsideASavepointWritesNothing(t *testing.T) {
	g := newFailGate(t)
	g.exec(t, `CREATE TRIGGER refuse_poison BEFORE INSERT ON task_types WHEN NEW.name = 'poison'
		BEGIN SELECT RAISE(ABORT, 'poison row refused'); END`)
	g.exec(t, `CREATE TRIGGER refuse_obligation BEFORE INSERT ON obligations
		WHEN NEW.obligor = 'agent.poison' OR NEW.obligee = 'agent.poison'
		BEGIN SELECT RAISE(ABORT, 'obligation refused'); END`)
	errs := g.oneBatch(t,
		g.enqueue("agent.kee", "c-1"),
		g.putTypes("half", "poison"),
		g.enqueue("agent.kee", "c-2"),
		g.enqueue("agent.poison", "c-3"),
		g.enqueue("agent.kee", "c-4"),
	)
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "poison row refused") {
		t.Fatalf("the update that failed first: %v, want its own error", errs[1])
	}
	for _, i := range []int{0, 2, 3, 4} {
		if !host.IsCode(errs[i], host.CodeDatabaseUnavailable) || !strings.Contains(errs[i].Error(), "obligation refused") {
			t.Fatalf("update %d: %v, want database_unavailable (obligation refused)", i, errs[i])
		}
	}
	if g.hasType(t, "half") || g.tasksKeyed(t, "c-") != 0 {
		t.Fatalf("the rolled-back batch left rows: type half %v, %d tasks", g.hasType(t, "half"), g.tasksKeyed(t, "c-"))
	}
	if n := g.count(t, `SELECT count(*) FROM receipts`) + g.count(t, `SELECT count(*) FROM obligations`); n != 0 {
		t.Fatalf("%d receipts and obligations after the rolled-back batch, want none", n)
	}
	g.afterwards(t, "after", 1)
}

// An update that keeps a new task, marks inbox items (which writes the kept
// rows first) matching none, then fails, must leave nothing: the mark
// matched nothing, but the rows written before it are a write its failure
// must undo, while the other update of the batch commits.
func TestAFailedUpdateIsUndoneAfterAMarkThatMatchedNothing(t *testing.T) {
	g := newFailGate(t)
	ctx := context.Background()
	errFail := errors.New("the update fails on purpose")
	failing := func() error {
		return g.st.Update(ctx, func(tx store.Tx) error {
			tk := &host.Task{ID: "T-MARKED", Tenant: "acme", Type: "work", CreatedBy: "agent.kee", Recipient: "agent.kee",
				State: host.StateQueued, Priority: 5, Params: json.RawMessage(`{}`), CreatedAt: storetest.Epoch,
				UpdatedAt: storetest.Epoch, AvailableAt: storetest.Epoch, MaxRetries: 3}
			if err := tx.InsertTask(ctx, tk); err != nil {
				return err
			}
			if n, err := tx.MarkInbox(ctx, store.InboxMark{Tenant: "acme", TaskID: "T-NONE", Field: host.InboxRead, At: storetest.Epoch}); err != nil || n != 0 {
				return fmt.Errorf("marking no item: %d, %v", n, err)
			}
			return errFail
		})
	}
	errs := g.oneBatch(t, failing, g.putTypes("other"))
	if !errors.Is(errs[0], errFail) || errs[1] != nil {
		t.Fatalf("errors %v, want %v and nil", errs, errFail)
	}
	if n := g.count(t, `SELECT count(*) FROM tasks WHERE id = 'T-MARKED'`); n != 0 {
		t.Errorf("the failed update's task was committed (%d rows)", n)
	}
	if !g.hasType(t, "other") {
		t.Error("the other update of the batch did not commit")
	}
	tasks := g.count(t, `SELECT count(*) FROM tasks WHERE tenant = 'acme' AND task_type = 'work'`)
	counted := g.count(t, `SELECT coalesce(sum(n), 0) FROM queue_counts WHERE tenant = 'acme' AND task_type = 'work'`)
	if tasks != counted {
		t.Errorf("tasks holds %d tasks of type work, queue_counts %d", tasks, counted)
	}
}

// An update that terminates an obligation an earlier update of its batch
// opened (still kept in memory) and then fails must leave the obligation
// open: its termination is undone with it.
func TestAFailedUpdatesTerminationOfAnObligationOpenedEarlierInTheBatchIsUndone(t *testing.T) {
	g := newFailGate(t)
	ctx := context.Background()
	errFail := errors.New("the update fails on purpose")
	opener := func() error {
		return g.st.Update(ctx, func(tx store.Tx) error {
			rc := &host.Receipt{ID: "R-OPENED", Tenant: "acme", Type: host.ReceiptAssigned, From: "a", To: "b", Parents: []string{},
				Body: json.RawMessage(`{}`), CreatedAt: storetest.Epoch}
			if err := tx.AppendReceipt(ctx, rc); err != nil {
				return err
			}
			return tx.OpenObligation(ctx, host.Obligation{ReceiptID: rc.ID, Tenant: "acme", Type: rc.Type, Obligor: "b", Obligee: "a",
				CreatedAt: storetest.Epoch, Seq: rc.Seq})
		})
	}
	terminator := func() error {
		return g.st.Update(ctx, func(tx store.Tx) error {
			if err := tx.Terminate(ctx, "acme", "R-OPENED", "R-NEVER"); err != nil {
				return err
			}
			return errFail
		})
	}
	errs := g.oneBatch(t, opener, terminator, g.putTypes("other"))
	if errs[0] != nil || !errors.Is(errs[1], errFail) || errs[2] != nil {
		t.Fatalf("errors %v, want nil, %v, nil", errs, errFail)
	}
	var term string
	if err := g.db.QueryRow(`SELECT coalesce(terminated_by, '') FROM obligations WHERE receipt_id = 'R-OPENED'`).Scan(&term); err != nil {
		t.Fatal(err)
	}
	if term != "" {
		t.Errorf("obligation R-OPENED is terminated by %q, which a failed update wrote", term)
	}
}
