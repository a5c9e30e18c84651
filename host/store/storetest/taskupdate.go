package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// UpdateTask writes a whole task. A driver may name in its statement only
// the columns that differ from the row as its transaction last saw it (a
// shape measured in RATIONALE.md, "What the SQLite writer does not wait
// on"); these cases hold any such driver to the Tx contract: the row an
// update leaves is the task it was given, whatever the transaction did to
// the row before.

// taskMutations change one mutable field each, to a value no other step
// sets, and between nil and set for the optional ones.
var taskMutations = []struct {
	field string
	set   func(t *host.Task)
}{
	{"state", func(t *host.Task) { t.State = host.StateLeased }},
	{"priority", func(t *host.Task) { t.Priority = 9 }},
	{"available_at", func(t *host.Task) { t.AvailableAt = Epoch.Add(time.Minute) }},
	{"updated_at", func(t *host.Task) { t.UpdatedAt = Epoch.Add(2 * time.Minute) }},
	{"lease_id", func(t *host.Task) { t.LeaseID = "L-UPD" }},
	{"worker_id", func(t *host.Task) { t.WorkerID = "w.upd" }},
	{"leased_at", func(t *host.Task) { t.LeasedAt = new(Epoch.Add(3 * time.Minute)) }},
	{"lease_expires_at", func(t *host.Task) { t.LeaseExpiresAt = new(Epoch.Add(4 * time.Minute)) }},
	{"accepted_at", func(t *host.Task) { t.AcceptedAt = new(Epoch.Add(5 * time.Minute)) }},
	{"accept_receipt", func(t *host.Task) { t.AcceptReceipt = "R-ACC" }},
	{"cancel_requested", func(t *host.Task) { t.CancelRequested = true }},
	{"attempts", func(t *host.Task) { t.Attempts = 2 }},
	{"max_retries", func(t *host.Task) { t.MaxRetries = 11 }},
	{"lease_count", func(t *host.Task) { t.LeaseCount = 4 }},
	{"lease_expiries", func(t *host.Task) { t.LeaseExpiries = 1 }},
	{"started_at", func(t *host.Task) { t.StartedAt = new(Epoch.Add(6 * time.Minute)) }},
	{"completed_at", func(t *host.Task) { t.CompletedAt = new(Epoch.Add(7 * time.Minute)) }},
	{"progress_percent", func(t *host.Task) { t.ProgressPercent = new(42.5) }},
	{"progress_message", func(t *host.Task) { t.ProgressMessage = "halfway" }},
	{"result", func(t *host.Task) {
		t.Result = &host.Result{Channel: "file", Pointer: "file://x/1", Metadata: json.RawMessage(`{"ok":true}`)}
	}},
	{"last_error", func(t *host.Task) { t.LastError = "boom" }},
	{"dead_reason", func(t *host.Task) { t.DeadReason = host.ReasonPolicy }},
	{"assign_receipt", func(t *host.Task) { t.AssignReceipt = "R-ASSIGN2" }},
	{"lease_seconds", func(t *host.Task) { t.LeaseSeconds = 90 }},
	// And back: a field set earlier in the same transaction, cleared.
	{"leased_at cleared", func(t *host.Task) { t.LeasedAt = nil }},
	{"progress_percent cleared", func(t *host.Task) { t.ProgressPercent = nil }},
	{"result cleared", func(t *host.Task) { t.Result = nil }},
	{"cancel_requested cleared", func(t *host.Task) { t.CancelRequested = false }},
}

// sameTask reports how got differs from want, or "".
func sameTask(got, want *host.Task) string {
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) || got.Version != want.Version {
		return fmt.Sprintf("\n got %s (version %d)\nwant %s (version %d)", g, got.Version, w, want.Version)
	}
	return ""
}

// testUpdateWritesEachField: one transaction changes a task one field at a
// time, each update fenced on the row it read; every read in between, and
// the committed row, is the task last given.
func testUpdateWritesEachField(t *testing.T, b *Bundle) {
	ctx := b.Ctx
	if err := b.Store.Update(ctx, func(tx store.Tx) error { return tx.InsertTask(ctx, wbTask("T-UPD", "")) }); err != nil {
		t.Fatal(err)
	}
	var want *host.Task
	err := b.Store.Update(ctx, func(tx store.Tx) error {
		for _, m := range taskMutations {
			cur, err := tx.GetTask(ctx, "acme", "T-UPD")
			if err != nil {
				return err
			}
			from := cur.State
			m.set(cur)
			if err := tx.UpdateTask(ctx, cur, store.Fence{State: from, Version: cur.Version}); err != nil {
				return fmt.Errorf("%s: %v", m.field, err)
			}
			got, err := tx.GetTask(ctx, "acme", "T-UPD")
			if err != nil {
				return err
			}
			if d := sameTask(got, cur); d != "" {
				return fmt.Errorf("after the update of %s, the row read back is not the task written:%s", m.field, d)
			}
			want = cur
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Several fields at once, on the task the last update returned (no read
	// in between).
	err = b.Store.Update(ctx, func(tx store.Tx) error {
		cur, err := tx.GetTask(ctx, "acme", "T-UPD")
		if err != nil {
			return err
		}
		cur.Priority, cur.LeaseID, cur.LeasedAt = 3, "", new(Epoch)
		if err := tx.UpdateTask(ctx, cur, store.Fence{State: cur.State}); err != nil {
			return err
		}
		cur.Attempts, cur.LastError, cur.LeasedAt = 0, "", nil
		if err := tx.UpdateTask(ctx, cur, store.Fence{State: cur.State, Version: cur.Version}); err != nil {
			return err
		}
		want = cur
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := sameTask(b.Task(t, "T-UPD"), want); d != "" {
		t.Fatalf("the committed row is not the task last written:%s", d)
	}
}

// testUpdateWritesTheTaskGiven: an update given a task read before another
// update of the same transaction changed the row leaves the row it was
// given, not a mix of the two (an update writes a whole task).
func testUpdateWritesTheTaskGiven(t *testing.T, b *Bundle) {
	ctx := b.Ctx
	if err := b.Store.Update(ctx, func(tx store.Tx) error { return tx.InsertTask(ctx, wbTask("T-GIVEN", "")) }); err != nil {
		t.Fatal(err)
	}
	var firstVersion int64
	err := b.Store.Update(ctx, func(tx store.Tx) error {
		first, err := tx.GetTask(ctx, "acme", "T-GIVEN")
		if err != nil {
			return err
		}
		second := *first
		first.Priority, first.ProgressMessage = 8, "first"
		if err := tx.UpdateTask(ctx, first, store.Fence{State: host.StateQueued}); err != nil {
			return err
		}
		firstVersion = first.Version
		// second still has the priority the row had before first.
		second.ProgressMessage, second.LastError = "second", "e"
		return tx.UpdateTask(ctx, &second, store.Fence{State: host.StateQueued})
	})
	if err != nil {
		t.Fatal(err)
	}
	got := b.Task(t, "T-GIVEN")
	if got.Priority != 5 || got.ProgressMessage != "second" || got.LastError != "e" || got.Version != firstVersion+1 {
		t.Fatalf("row after two updates: priority %d, progress %q, error %q, version %d; want 5, second, e (the second task as given), %d",
			got.Priority, got.ProgressMessage, got.LastError, got.Version, firstVersion+1)
	}
}

// fullTask is a new task with every field set to a value other than its
// zero, so that a column an insert leaves out shows as a difference.
func fullTask(id string) *host.Task {
	t := wbTask(id, "k-"+id)
	for _, m := range taskMutations {
		if !strings.HasSuffix(m.field, " cleared") {
			m.set(t)
		}
	}
	t.Summary = "every field"
	t.ResourceIntents = []host.ResourceIntent{{Resource: "db/main", Predicate: host.PredicateMutates}}
	t.Traceparent, t.Tracestate = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=x"
	return t
}

// testInsertWritesEveryField: an inserted task reads back as it was given,
// every field, whether the batch inserts it alone or with others, read in
// the same transaction or after the commit.
func testInsertWritesEveryField(t *testing.T, b *Bundle) {
	ctx := b.Ctx
	for _, ids := range [][]string{{"T-FULL1"}, {"T-FULL2", "T-FULL3", "T-FULL4"}} {
		var want []*host.Task
		err := b.Store.Update(ctx, func(tx store.Tx) error {
			want = want[:0]
			for _, id := range ids {
				tk := fullTask(id)
				if err := tx.InsertTask(ctx, tk); err != nil {
					return err
				}
				want = append(want, tk)
			}
			for _, w := range want {
				got, err := tx.GetTask(ctx, "acme", w.ID)
				if err != nil {
					return err
				}
				if d := sameTask(got, w); d != "" {
					return fmt.Errorf("%s read back in its transaction is not the task inserted:%s", w.ID, d)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if d := sameTask(b.Task(t, w.ID), w); d != "" {
				t.Fatalf("%s committed is not the task inserted:%s", w.ID, d)
			}
		}
	}
}
