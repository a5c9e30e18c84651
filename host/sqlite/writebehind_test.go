package sqlite

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// appendProgress is an update appending one progress receipt from principal
// with the dedupe key.
func (g *failGate) appendProgress(from, dedupe string) func() error {
	return func() error {
		return g.st.Update(context.Background(), func(tx store.Tx) error {
			return tx.AppendReceipt(context.Background(), &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: "acme", Type: host.ReceiptProgress,
				From: from, To: "agent.kee", Parents: []string{}, Body: json.RawMessage(`{}`), DedupeKey: dedupe, CreatedAt: storetest.Epoch})
		})
	}
}

// TestBatchRowClashWithCommittedRowFailsOnlyItsUpdate: the batch's tasks and
// receipts are written behind, so a receipt reusing a committed dedupe key
// is refused only when the batch writes its rows. The writer then reruns the
// batch with a savepoint per update: that update alone gets a conflict and
// leaves nothing; the others in the batch commit.
func TestBatchRowClashWithCommittedRowFailsOnlyItsUpdate(t *testing.T) {
	g := newFailGate(t)
	if err := g.appendProgress("agent.kee", "taken")(); err != nil {
		t.Fatal(err)
	}
	errs := g.oneBatch(t,
		g.enqueue("agent.kee", "a-1"),
		g.appendProgress("agent.kee", "taken"),
		g.enqueue("agent.kee", "a-2"),
		g.appendProgress("agent.kee", "fresh"),
	)
	if !host.IsCode(errs[1], host.CodeConflict) {
		t.Fatalf("the update reusing a committed dedupe key: %v, want conflict", errs[1])
	}
	for _, i := range []int{0, 2, 3} {
		if errs[i] != nil {
			t.Fatalf("update %d shared a batch with a clashing one and failed too: %v", i, errs[i])
		}
	}
	if n := g.tasksKeyed(t, "a-"); n != 2 {
		t.Fatalf("%d of the batch's 2 tasks committed", n)
	}
	if n := g.count(t, `SELECT count(*) FROM receipts WHERE dedupe_key = 'taken'`); n != 1 {
		t.Fatalf("%d receipts hold dedupe key taken, want 1", n)
	}
	// 1 before the batch, 2 task.assigned and 1 progress in it, 1 after.
	g.afterwards(t, "after", 5)
}

// TestBatchRowRefusedFailsOnlyItsUpdate: the database refuses one receipt
// when the batch writes its rows (a trigger): that update gets the
// database's error, its task is not written, and the batch's other updates
// commit.
func TestBatchRowRefusedFailsOnlyItsUpdate(t *testing.T) {
	g := newFailGate(t)
	g.exec(t, `CREATE TRIGGER refuse_poison BEFORE INSERT ON receipts WHEN NEW.from_p = 'poison'
		BEGIN SELECT RAISE(ABORT, 'poison receipt refused'); END`)
	errs := g.oneBatch(t,
		g.enqueue("agent.kee", "a-1"),
		g.appendProgress("poison", ""),
		g.enqueue("agent.kee", "a-2"),
	)
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "poison receipt refused") {
		t.Fatalf("the refused update: %v, want the database's error", errs[1])
	}
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("the batch's other updates failed too: %v / %v", errs[0], errs[2])
	}
	if n := g.tasksKeyed(t, "a-"); n != 2 {
		t.Fatalf("%d of the batch's 2 tasks committed", n)
	}
	g.afterwards(t, "after", 3)
}

// TestBatchRowRefusedMidStatementLeavesNoneOfItsRows: the rows written
// behind go out as multi-row INSERT OR FAIL statements, which keep the rows
// before a refused one. An update appends a good receipt and then a refused
// one, reads (which writes its rows first) and ignores the error it gets:
// the refusal still fails that update alone with the database's error, none
// of its rows remain, and the batch's other updates commit once each.
func TestBatchRowRefusedMidStatementLeavesNoneOfItsRows(t *testing.T) {
	g := newFailGate(t)
	g.exec(t, `CREATE TRIGGER refuse_poison BEFORE INSERT ON receipts WHEN NEW.from_p = 'poison'
		BEGIN SELECT RAISE(ABORT, 'poison receipt refused'); END`)
	ctx := context.Background()
	good := host.NewID(host.PrefixReceipt)
	ignoring := func() error {
		return g.st.Update(ctx, func(tx store.Tx) error {
			for _, from := range []string{"agent.kee", "poison"} {
				id := good
				if from == "poison" {
					id = host.NewID(host.PrefixReceipt)
				}
				if err := tx.AppendReceipt(ctx, &host.Receipt{ID: id, Tenant: "acme", Type: host.ReceiptProgress, From: from,
					To: "agent.kee", Parents: []string{}, Body: json.RawMessage(`{}`), CreatedAt: storetest.Epoch}); err != nil {
					return err
				}
			}
			_, _ = tx.GetReceipt(ctx, "acme", good) // writes the kept rows first; its error is ignored
			return nil
		})
	}
	errs := g.oneBatch(t,
		g.enqueue("agent.kee", "a-1"),
		g.appendProgress("agent.kee", ""),
		ignoring,
		g.enqueue("agent.kee", "a-2"),
	)
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "poison receipt refused") || host.IsCode(errs[2], host.CodeDatabaseUnavailable) {
		t.Fatalf("the update whose receipt was refused: %v, want the database's error", errs[2])
	}
	for _, i := range []int{0, 1, 3} {
		if errs[i] != nil {
			t.Fatalf("update %d shared a batch with the refused one and failed too: %v", i, errs[i])
		}
	}
	if n := g.count(t, `SELECT count(*) FROM receipts WHERE id = '`+good+`'`); n != 0 {
		t.Fatal("the refused update's first receipt was committed (half-written)")
	}
	if n := g.tasksKeyed(t, "a-"); n != 2 {
		t.Fatalf("%d of the batch's 2 tasks committed", n)
	}
	// 2 task.assigned and 1 progress in the batch, 1 after.
	g.afterwards(t, "after", 4)
}

// TestAClaimWritesOnlyTheBatchsKeptTasksFirst: a claim reads and writes the
// tasks table alone, so it writes the batch's kept tasks before it reads (a
// task kept earlier in the batch is claimable) and leaves the kept receipts
// to the batch's multi-row statements at its end. A trigger records what the
// claim's update sees: the task kept in the batch, none of the batch's
// receipts. Afterwards every receipt is committed and the ledger verifies.
func TestAClaimWritesOnlyTheBatchsKeptTasksFirst(t *testing.T) {
	g := newFailGate(t)
	g.exec(t, `CREATE TABLE claim_saw (receipts INTEGER, tasks INTEGER)`)
	g.exec(t, `CREATE TRIGGER claim_seen AFTER UPDATE OF state ON tasks WHEN NEW.state = 'leased'
		BEGIN INSERT INTO claim_saw VALUES ((SELECT count(*) FROM receipts), (SELECT count(*) FROM tasks)); END`)
	before := g.count(t, `SELECT count(*) FROM receipts`)
	ctx := context.Background()
	var claimed []*host.Task
	claim := func() error {
		return g.st.Update(ctx, func(tx store.Tx) error {
			var err error
			claimed, err = tx.ClaimTasks(ctx, store.ClaimQuery{Tenant: "acme", Types: []string{"work"}, Now: storetest.Epoch, Limit: 10,
				Grant: func(t *host.Task) {
					t.State, t.LeaseID, t.WorkerID = host.StateLeased, host.NewLeaseID(t.ID), "worker.one"
					at, until := storetest.Epoch, storetest.Epoch.Add(time.Minute)
					t.LeasedAt, t.LeaseExpiresAt = &at, &until
				}})
			return err
		})
	}
	// Enqueues are bulk requests, which a batch serves after the prompt
	// ones; this update keeps a task and a receipt as an enqueue does, as
	// a prompt request, so that it runs before the claim.
	keep := func() error {
		return g.st.Update(ctx, func(tx store.Tx) error {
			if err := tx.InsertTask(ctx, &host.Task{ID: host.NewID(host.PrefixTask), Tenant: "acme", Type: "work", CreatedBy: "agent.kee",
				Recipient: "agent.kee", State: host.StateQueued, Params: json.RawMessage(`{}`), IdempotencyKey: "a-1",
				CreatedAt: storetest.Epoch, UpdatedAt: storetest.Epoch, AvailableAt: storetest.Epoch}); err != nil {
				return err
			}
			return tx.AppendReceipt(ctx, &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: "acme", Type: host.ReceiptProgress,
				From: "agent.kee", To: "agent.kee", Parents: []string{}, Body: json.RawMessage(`{}`), CreatedAt: storetest.Epoch})
		})
	}
	errs := g.oneBatch(t, keep, g.appendProgress("agent.kee", ""), claim)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("update %d of the batch: %v", i, err)
		}
	}
	if len(claimed) != 1 || g.count(t, `SELECT count(*) FROM tasks WHERE idempotency_key = 'a-1' AND state = 'leased' AND id = '`+claimed[0].ID+`'`) != 1 {
		t.Fatalf("the claim took %d tasks, want the one kept earlier in its batch", len(claimed))
	}
	var sawReceipts, sawTasks int
	if err := g.db.QueryRow(`SELECT receipts, tasks FROM claim_saw`).Scan(&sawReceipts, &sawTasks); err != nil {
		t.Fatal(err)
	}
	if sawTasks != 1 {
		t.Fatalf("the claim's update saw %d tasks, want the batch's kept one written", sawTasks)
	}
	if sawReceipts != before {
		t.Fatalf("the claim's update saw %d receipts, want %d: it wrote the batch's %d kept receipts first", sawReceipts, before, sawReceipts-before)
	}
	// Two progress receipts in the batch, the task.assigned of afterwards'.
	g.afterwards(t, "after", int64(before)+3)
}
