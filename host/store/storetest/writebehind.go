package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Set-oriented writes: a driver may keep an update's inserted tasks and
// receipts and write a batch's rows with a few multi-row statements. These
// cases hold it to the Tx contract as if every call wrote at once.

func wbTask(id, key string) *host.Task {
	return &host.Task{ID: id, Tenant: "acme", Type: "work", CreatedBy: "agent.kee", Recipient: "agent.kee", State: host.StateQueued,
		Priority: 5, Params: json.RawMessage(`{}`), IdempotencyKey: key, CreatedAt: Epoch, UpdatedAt: Epoch, AvailableAt: Epoch, MaxRetries: 3}
}

// byOther makes t a task agent.mallory produced for agent.kee.
func byOther(t *host.Task) *host.Task {
	t.CreatedBy = "agent.mallory"
	return t
}

func wbReceipt(id, dedupe string) *host.Receipt {
	return &host.Receipt{ID: id, Tenant: "acme", Type: host.ReceiptProgress, From: "x", To: "y", Parents: []string{},
		Body: json.RawMessage(`{}`), DedupeKey: dedupe, CreatedAt: Epoch}
}

// testRowsWithinOneUpdate: inside one update, every read sees the tasks and
// receipts the update inserted, a second insert of the same id or key is a
// conflict at once, a task inserted can be claimed and updated (fenced) in
// the same update, and an update that fails leaves none of its rows.
func testRowsWithinOneUpdate(t *testing.T, b *Bundle) {
	ctx := b.Ctx
	err := b.Store.Update(ctx, func(tx store.Tx) error {
		if err := tx.InsertTask(ctx, wbTask("T-WB1", "k-wb1")); err != nil {
			return err
		}
		if err := tx.AppendReceipt(ctx, wbReceipt("R-WB1", "d-wb1")); err != nil {
			return err
		}
		if got, err := tx.GetTask(ctx, "acme", "T-WB1"); err != nil || got.ID != "T-WB1" || got.Version != 1 {
			return fmt.Errorf("GetTask of a task inserted in this update: %+v %v", got, err)
		}
		if got, err := tx.FindTaskByIdempotency(ctx, store.IdempotencyKeyOf(wbTask("", "k-wb1"))); err != nil || got == nil || got.ID != "T-WB1" {
			return fmt.Errorf("FindTaskByIdempotency within the update: %+v %v", got, err)
		}
		if ts, _, err := tx.ListTasks(ctx, store.TaskFilter{Tenant: "acme", Limit: 10}); err != nil || len(ts) != 1 {
			return fmt.Errorf("ListTasks within the update: %d tasks, %v", len(ts), err)
		}
		if got, err := tx.GetReceipt(ctx, "acme", "R-WB1"); err != nil || got.ID != "R-WB1" {
			return fmt.Errorf("GetReceipt within the update: %+v %v", got, err)
		}
		if got, err := tx.GetReceiptByDedupe(ctx, "acme", "", "d-wb1"); err != nil || got == nil || got.ID != "R-WB1" {
			return fmt.Errorf("GetReceiptByDedupe within the update: %+v %v", got, err)
		}
		// Clashes among the update's own rows, kept or written.
		if err := tx.InsertTask(ctx, wbTask("T-WB1", "")); !host.IsCode(err, host.CodeConflict) {
			return fmt.Errorf("a second task T-WB1: %v, want conflict", err)
		}
		if err := tx.InsertTask(ctx, wbTask("T-WB2", "k-wb2")); err != nil {
			return err
		}
		if err := tx.InsertTask(ctx, wbTask("T-WB3", "k-wb2")); !host.IsCode(err, host.CodeConflict) {
			return fmt.Errorf("a second task under key k-wb2: %v, want conflict", err)
		}
		// The same key produced by another principal, for the same
		// recipient, is that principal's own key: no clash, and each
		// producer's lookup finds its own task.
		if err := tx.InsertTask(ctx, byOther(wbTask("T-WB8", "k-wb2"))); err != nil {
			return fmt.Errorf("another producer's task under key k-wb2: %v, want inserted", err)
		}
		if got, err := tx.FindTaskByIdempotency(ctx, store.IdempotencyKeyOf(wbTask("", "k-wb2"))); err != nil || got == nil || got.ID != "T-WB2" {
			return fmt.Errorf("agent.kee's task under k-wb2: %+v %v, want T-WB2", got, err)
		}
		if got, err := tx.FindTaskByIdempotency(ctx, store.IdempotencyKeyOf(byOther(wbTask("", "k-wb2")))); err != nil || got == nil || got.ID != "T-WB8" {
			return fmt.Errorf("agent.mallory's task under k-wb2: %+v %v, want T-WB8", got, err)
		}
		if err := tx.AppendReceipt(ctx, wbReceipt("R-WB2", "d-wb2")); err != nil {
			return err
		}
		if err := tx.AppendReceipt(ctx, wbReceipt("R-WB3", "d-wb2")); !host.IsCode(err, host.CodeConflict) {
			return fmt.Errorf("a second receipt under dedupe key d-wb2: %v, want conflict", err)
		}
		// A task inserted here is claimed and updated here.
		ts, err := tx.ClaimTasks(ctx, store.ClaimQuery{Tenant: "acme", Now: Epoch, Limit: 10, Grant: func(t *host.Task) {
			t.State, t.LeaseID, t.WorkerID = host.StateLeased, "L-"+t.ID, "w.1"
			t.LeasedAt, t.LeaseExpiresAt = &Epoch, new(Epoch.Add(60e9))
		}})
		if err != nil || len(ts) != 3 {
			return fmt.Errorf("claim within the update: %d tasks, %v", len(ts), err)
		}
		if err := tx.InsertTask(ctx, wbTask("T-WB4", "")); err != nil {
			return err
		}
		t4, err := tx.GetTask(ctx, "acme", "T-WB4")
		if err != nil {
			return err
		}
		t4.Priority = 9
		if err := tx.UpdateTask(ctx, t4, store.Fence{State: host.StateQueued, Version: 1}); err != nil {
			return fmt.Errorf("fenced update of a task inserted in this update: %v", err)
		}
		t5 := wbTask("T-WB5", "")
		if err := tx.InsertTask(ctx, t5); err != nil {
			return err
		}
		if err := tx.UpdateTask(ctx, t5, store.Fence{State: host.StateLeased}); !errors.Is(err, store.ErrFenced) {
			return fmt.Errorf("an update fenced on the wrong state of a task inserted in this update: %v, want fenced", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("fail after inserting")
	err = b.Store.Update(ctx, func(tx store.Tx) error {
		if err := tx.InsertTask(ctx, wbTask("T-WB6", "k-wb6")); err != nil {
			return err
		}
		if err := tx.AppendReceipt(ctx, wbReceipt("R-WB6", "d-wb6")); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("failing update: %v", err)
	}
	// An update that fails after its writes reached the database (a read
	// sends them on PostgreSQL) leaves nothing either.
	err = b.Store.Update(ctx, func(tx store.Tx) error {
		t7 := wbTask("T-WB7", "k-wb7")
		if err := tx.InsertTask(ctx, t7); err != nil {
			return err
		}
		if err := tx.AppendReceipt(ctx, wbReceipt("R-WB7", "d-wb7")); err != nil {
			return err
		}
		got, err := tx.GetTask(ctx, "acme", "T-WB7")
		if err != nil {
			return err
		}
		got.Priority = 8
		if err := tx.UpdateTask(ctx, got, store.Fence{State: host.StateQueued, Version: got.Version}); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("update failing after its writes were sent: %v", err)
	}
	err = b.Store.View(ctx, func(r store.Reader) error {
		for id, want := range map[string]int{"T-WB1": 5, "T-WB2": 5, "T-WB4": 9, "T-WB5": 5, "T-WB8": 5} {
			if got, err := r.GetTask(ctx, "acme", id); err != nil || got.Priority != want {
				t.Errorf("%s after commit: %+v %v, want priority %d", id, got, err, want)
			}
		}
		for _, id := range []string{"T-WB3", "T-WB6", "T-WB7"} {
			if _, err := r.GetTask(ctx, "acme", id); !host.IsCode(err, host.CodeNotFound) {
				t.Errorf("%s after commit: %v, want not found", id, err)
			}
		}
		for _, id := range []string{"R-WB3", "R-WB6", "R-WB7"} {
			if _, err := r.GetReceipt(ctx, "acme", id); !host.IsCode(err, host.CodeNotFound) {
				t.Errorf("%s after commit: %v, want not found", id, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Verify(t)
}

// testClashWithCommittedRow: many concurrent updates (sharing batches) each
// insert a task and a receipt; a few of them reuse a committed idempotency
// or dedupe key, which only the database can see. Those few get a conflict
// and leave nothing; every other update commits whole (among them those
// that use the committed idempotency key as another producing principal:
// keys are per producer), and the ledger verifies.
func testClashWithCommittedRow(t *testing.T, b *Bundle) {
	ctx := b.Ctx
	if err := b.Store.Update(ctx, func(tx store.Tx) error {
		if err := tx.InsertTask(ctx, wbTask("T-CL0", "k-taken")); err != nil {
			return err
		}
		return tx.AppendReceipt(ctx, wbReceipt("R-CL0", "d-taken"))
	}); err != nil {
		t.Fatal(err)
	}
	const n = 60
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, dedupe, other := "", "", false
			switch i % 10 {
			case 3:
				key = "k-taken"
			case 5:
				key, other = "k-taken", true
			case 7:
				dedupe = "d-taken"
			}
			errs[i] = b.Store.Update(ctx, func(tx store.Tx) error {
				// Lookups of committed keys while other updates' rows wait.
				if old, err := tx.FindTaskByIdempotency(ctx, store.IdempotencyKeyOf(wbTask("", "k-taken"))); err != nil || old == nil || old.ID != "T-CL0" {
					return fmt.Errorf("the committed task under k-taken: %+v %v", old, err)
				}
				if old, err := tx.GetReceiptByDedupe(ctx, "acme", "", "d-taken"); err != nil || old == nil || old.ID != "R-CL0" {
					return fmt.Errorf("the committed receipt under d-taken: %+v %v", old, err)
				}
				tk := wbTask(fmt.Sprintf("T-CL%d", i+1), key)
				if other {
					// A producer of its own: the key is free for it.
					tk.CreatedBy = fmt.Sprintf("agent.other%d", i)
				}
				if err := tx.InsertTask(ctx, tk); err != nil {
					return err
				}
				return tx.AppendReceipt(ctx, wbReceipt(fmt.Sprintf("R-CL%d", i+1), dedupe))
			})
		}()
	}
	wg.Wait()
	err := b.Store.View(ctx, func(r store.Reader) error {
		for i, err := range errs {
			_, terr := r.GetTask(ctx, "acme", fmt.Sprintf("T-CL%d", i+1))
			_, rerr := r.GetReceipt(ctx, "acme", fmt.Sprintf("R-CL%d", i+1))
			if i%10 == 3 || i%10 == 7 {
				if !host.IsCode(err, host.CodeConflict) || !host.IsCode(terr, host.CodeNotFound) || !host.IsCode(rerr, host.CodeNotFound) {
					t.Errorf("update %d reusing a committed key: %v (task: %v, receipt: %v), want conflict and nothing written", i, err, terr, rerr)
				}
			} else if err != nil || terr != nil || rerr != nil {
				t.Errorf("update %d: %v (task: %v, receipt: %v), want committed", i, err, terr, rerr)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep, want := b.Verify(t), int64(1+n-2*n/10); rep.Receipts != want {
		t.Fatalf("ledger holds %d receipts, want %d", rep.Receipts, want)
	}
}
