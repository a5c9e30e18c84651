package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// behindRows writes, through tx, a receipt that opens an obligation, the
// termination of an earlier obligation and an inbox row: every kind of row
// written behind.
func behindRows(ctx context.Context, tx store.Tx, rc *host.Receipt, ends string, inboxID string) error {
	if ends == "" {
		if err := behindAssigned(ctx, tx, rc); err != nil {
			return err
		}
	} else {
		// A receipt that terminates an obligation names it as its parent
		// and is of a type that can (the ledger verifier checks both).
		rc.Type, rc.Parents = host.ReceiptCompleted, []string{ends}
		if err := tx.AppendReceipt(ctx, rc); err != nil {
			return err
		}
		if err := tx.Terminate(ctx, rc.Tenant, ends, rc.ID); err != nil {
			return err
		}
	}
	return tx.InsertInbox(ctx, host.InboxItem{ID: inboxID, Tenant: rc.Tenant, Recipient: rc.To, Kind: host.InboxKind("result"),
		TaskID: rc.TaskID, ReceiptID: rc.ID, Summary: "s", CreatedAt: rc.CreatedAt})
}

// behindAssigned appends rc, a task.assigned receipt, and opens its
// obligation, as the engine does.
func behindAssigned(ctx context.Context, tx store.Tx, rc *host.Receipt) error {
	if err := tx.AppendReceipt(ctx, rc); err != nil {
		return err
	}
	return tx.OpenObligation(ctx, host.Obligation{ReceiptID: rc.ID, Tenant: rc.Tenant, Type: rc.Type, Obligor: rc.From,
		Obligee: rc.To, TaskID: rc.TaskID, CreatedAt: rc.CreatedAt, Seq: rc.Seq})
}

func behindReceipt(b *storetest.Bundle) *host.Receipt {
	rc := &host.Receipt{ID: host.NewID("R"), Tenant: "acme", Type: host.ReceiptAssigned, From: "agent.kee", To: "worker.one",
		TaskID: "T-" + host.NewID("x"), Body: []byte(`{}`), Parents: []string{}, CreatedAt: b.Clock.Now()}
	return rc
}

// runHeld runs fns as one batch, queued in their order behind a held batch,
// and returns their errors.
func runHeld(t *testing.T, st *Store, fns ...func(store.Tx) error) []error {
	t.Helper()
	ctx := context.Background()
	hold, held := make(chan struct{}), make(chan struct{})
	go st.Update(ctx, func(store.Tx) error { close(held); <-hold; return nil })
	<-held
	var wg sync.WaitGroup
	errs := make([]error, len(fns))
	for i, fn := range fns {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = st.Update(ctx, fn) }()
		waitQueued(t, st, i+1, "an update never queued behind the held batch")
	}
	close(hold)
	wg.Wait()
	return errs
}

// Rows written behind by requests that have ended are not undone with a
// later request of the same batch: they reach the server in front of its
// savepoint. A failed request's own rows are undone with it, whether its read
// had sent them before it failed or they were still waiting.
func TestRowsWrittenBehindSurviveALaterRequestsUndo(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	task := b.Enqueue(t, "work")
	first, undone, last, dropped := behindReceipt(b), behindReceipt(b), behindReceipt(b), behindReceipt(b)
	giveUp := errors.New("give up")
	errs := runHeld(t, st,
		func(tx store.Tx) error { return behindRows(ctx, tx, first, "", "I-first") },
		func(tx store.Tx) error {
			if err := behindRows(ctx, tx, undone, first.ID, "I-undone"); err != nil {
				return err
			}
			// A read sends the pipeline: the first request's rows and this
			// one's reach the server before this request fails.
			if _, err := tx.GetTask(ctx, "acme", task.TaskID); err != nil {
				return err
			}
			return giveUp
		},
		func(tx store.Tx) error { return behindRows(ctx, tx, last, "", "I-last") },
		func(tx store.Tx) error {
			// Fails before anything of its own was sent.
			if err := behindRows(ctx, tx, dropped, last.ID, "I-dropped"); err != nil {
				return err
			}
			return giveUp
		},
	)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("the sound requests failed: %v, %v", errs[0], errs[2])
	}
	if !errors.Is(errs[1], giveUp) || !errors.Is(errs[3], giveUp) {
		t.Fatalf("the failing requests: %v, %v, want their own errors", errs[1], errs[3])
	}
	if first.Seq == 0 || last.Seq == 0 {
		t.Fatalf("committed receipts without a seq: %d, %d", first.Seq, last.Seq)
	}
	err := st.View(ctx, func(r store.Reader) error {
		for _, c := range []struct {
			rc   *host.Receipt
			want bool
		}{{first, true}, {undone, false}, {last, true}, {dropped, false}} {
			got, err := r.GetReceipt(ctx, "acme", c.rc.ID)
			switch {
			case c.want && err != nil:
				t.Errorf("receipt %s of a committed request: %v", c.rc.ID, err)
			case c.want && got.Seq != c.rc.Seq:
				t.Errorf("receipt %s: stored seq %d, reported %d", c.rc.ID, got.Seq, c.rc.Seq)
			case !c.want && err == nil:
				t.Errorf("receipt %s of the undone request was written", c.rc.ID)
			}
		}
		// The failed requests' terminations are undone too: the first and
		// the last obligation are still open.
		for _, rc := range []*host.Receipt{first, last} {
			if by, err := r.Terminator(ctx, "acme", rc.ID); err != nil || by != "" {
				t.Errorf("obligation %s: terminator %q (%v), want none", rc.ID, by, err)
			}
		}
		obs, _, err := r.ListOpenObligations(ctx, store.ObligationFilter{Tenant: "acme", Principal: "worker.one", Limit: 10})
		if err != nil {
			return err
		}
		open := map[string]int64{}
		for _, o := range obs {
			open[o.ReceiptID] = o.Seq
		}
		if len(open) != 2 || open[first.ID] != first.Seq || open[last.ID] != last.Seq {
			t.Errorf("open obligations %v, want the first (seq %d) and the last (seq %d)", open, first.Seq, last.Seq)
		}
		items, _, err := r.ListInbox(ctx, store.InboxFilter{Tenant: "acme", Recipient: "worker.one", Limit: 10})
		if err != nil {
			return err
		}
		var ids []string
		for _, it := range items {
			ids = append(ids, it.ID)
		}
		if len(ids) != 2 || ids[0] != "I-first" || ids[1] != "I-last" {
			t.Errorf("inbox %v, want [I-first I-last]", ids)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Verify(t)
}

// A batch's receipts, obligations, terminations and inbox rows cost the same
// statements however many requests wrote them: a batch of six such requests
// sends no more than a batch of one. Of the six terminations of one
// obligation, the first request's is written, as when each was its own
// statement.
func TestRowsWrittenBehindCostNoMoreInALargerBatch(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	batch := func(n int) int64 {
		opener := behindReceipt(b)
		if err := st.Update(ctx, func(tx store.Tx) error { return behindRows(ctx, tx, opener, "", "I-"+opener.ID) }); err != nil {
			t.Fatal(err)
		}
		var fns []func(store.Tx) error
		var rcs []*host.Receipt
		for range n {
			rc := behindReceipt(b)
			rcs = append(rcs, rc)
			fns = append(fns, func(tx store.Tx) error { return behindRows(ctx, tx, rc, opener.ID, "I-"+rc.ID) })
		}
		before := st.WriterStatements()
		for i, err := range runHeld(t, st, fns...) {
			if err != nil {
				t.Fatalf("request %d of %d: %v", i, n, err)
			}
		}
		sent := st.WriterStatements() - before
		err := st.View(ctx, func(r store.Reader) error {
			for i, rc := range rcs {
				got, err := r.GetReceipt(ctx, "acme", rc.ID)
				if err != nil {
					return err
				}
				if rc.Seq == 0 || got.Seq != rc.Seq {
					t.Errorf("batch of %d, receipt %d: stored seq %d, reported %d", n, i, got.Seq, rc.Seq)
				}
			}
			by, err := r.Terminator(ctx, "acme", opener.ID)
			if err != nil {
				return err
			}
			if by != rcs[0].ID {
				t.Errorf("batch of %d: the obligation was terminated by %q, want the first request's %s", n, by, rcs[0].ID)
			}
			items, _, err := r.ListInbox(ctx, store.InboxFilter{Tenant: "acme", Recipient: "worker.one", Limit: 100})
			if err != nil {
				return err
			}
			have := map[string]bool{}
			for _, it := range items {
				have[it.ID] = true
			}
			for _, rc := range rcs {
				if !have["I-"+rc.ID] {
					t.Errorf("batch of %d: inbox row of %s missing", n, rc.ID)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return sent
	}
	one := batch(1)
	six := batch(6)
	// The receipts, obligations, terminations and inbox rows of all six
	// cost what one request's do.
	if six != one {
		t.Errorf("a batch of six requests sent %d statements, a batch of one %d: want as many", six, one)
	}
	b.Verify(t)
}

// behindTask is a new queued task of tenant acme created by agent.kee.
func behindTask(b *storetest.Bundle, key string) *host.Task {
	now := b.Clock.Now()
	return &host.Task{ID: host.NewID(host.PrefixTask), Tenant: "acme", Type: "work", CreatedBy: "agent.kee", Recipient: "worker.one",
		State: host.StateQueued, Priority: 5, Params: []byte(`{"n":1}`), IdempotencyKey: key, CreatedAt: now, UpdatedAt: now,
		AvailableAt: now, MaxRetries: 3}
}

// A batch's new tasks cost one statement however many requests inserted
// them, and a request that only inserted rows written behind needs no
// savepoint: a batch of six enqueueing requests sends as many statements as a
// batch of one. Every task is stored with its listing row, in the order its
// request ran.
func TestTasksWrittenBehindCostOneStatementABatch(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	var all []*host.Task
	batch := func(n int) int64 {
		var fns []func(store.Tx) error
		for range n {
			tk := behindTask(b, "")
			all = append(all, tk)
			fns = append(fns, func(tx store.Tx) error {
				if err := tx.InsertTask(ctx, tk); err != nil {
					return err
				}
				return behindAssigned(ctx, tx, &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: "acme", Type: host.ReceiptAssigned,
					From: tk.CreatedBy, To: tk.Recipient, TaskID: tk.ID, Body: []byte(`{}`), Parents: []string{}, CreatedAt: tk.CreatedAt})
			})
		}
		before, reruns := st.WriterStatements(), st.StrictReruns()
		for i, err := range runHeld(t, st, fns...) {
			if err != nil {
				t.Fatalf("request %d of %d: %v", i, n, err)
			}
		}
		if st.StrictReruns() != reruns {
			t.Fatalf("a batch of %d new tasks ran again in strict mode", n)
		}
		return st.WriterStatements() - before
	}
	batch(1) // the writer's first batch also registers its ledger chain
	one := batch(1)
	six := batch(6)
	if six != one {
		t.Errorf("a batch of six enqueueing requests sent %d statements, a batch of one %d: want the same", six, one)
	}
	err := st.View(ctx, func(r store.Reader) error {
		// Listing by creator walks the listing rows (task_list).
		ts, _, err := r.ListTasks(ctx, store.TaskFilter{Tenant: "acme", CreatedBy: "agent.kee", Limit: 100})
		if err != nil {
			return err
		}
		if len(ts) != len(all) {
			t.Fatalf("listed %d tasks, want %d", len(ts), len(all))
		}
		for i, tk := range ts {
			if tk.ID != all[i].ID || tk.Version != 1 || tk.State != host.StateQueued || string(tk.Params) != `{"n":1}` {
				t.Errorf("task %d: %s v%d %s %s, want %s v1 queued {\"n\":1}", i, tk.ID, tk.Version, tk.State, tk.Params, all[i].ID)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Verify(t)
}

// A second insert of a task id, idempotency key, receipt id or dedupe key in
// one batch is a conflict at once, for the request that made it alone; the
// batch does not run again in strict mode. A key of a request that failed is
// free again. A task inserted and then updated by the same request without a
// read between is written before its update.
func TestClashWithinTheBatchIsAConflictAtOnce(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	first, again := behindTask(b, "k1"), behindTask(b, "k1")
	sameID := behindTask(b, "")
	sameID.ID = first.ID
	updated := behindTask(b, "")
	failedFirst, freeAgain := behindTask(b, "k2"), behindTask(b, "k2")
	giveUp := errors.New("give up")
	rc := func(id, dedupe string) *host.Receipt {
		return &host.Receipt{ID: id, Tenant: "acme", Type: host.ReceiptProgress, From: "worker.one", To: "agent.kee", Body: []byte(`{}`),
			Parents: []string{}, DedupeKey: dedupe, CreatedAt: b.Clock.Now()}
	}
	r1 := rc(host.NewID(host.PrefixReceipt), "d1")
	reruns := st.StrictReruns()
	errs := runHeld(t, st,
		func(tx store.Tx) error {
			if err := tx.InsertTask(ctx, first); err != nil {
				return err
			}
			return tx.AppendReceipt(ctx, r1)
		},
		func(tx store.Tx) error { return tx.InsertTask(ctx, again) },
		func(tx store.Tx) error { return tx.InsertTask(ctx, sameID) },
		func(tx store.Tx) error { return tx.AppendReceipt(ctx, rc(host.NewID(host.PrefixReceipt), "d1")) },
		func(tx store.Tx) error { return tx.AppendReceipt(ctx, rc(r1.ID, "")) },
		func(tx store.Tx) error {
			if err := tx.InsertTask(ctx, updated); err != nil {
				return err
			}
			updated.Priority = 9
			return tx.UpdateTask(ctx, updated, store.Fence{State: host.StateQueued, Version: 1})
		},
		func(tx store.Tx) error {
			if err := tx.InsertTask(ctx, failedFirst); err != nil {
				return err
			}
			return giveUp
		},
		func(tx store.Tx) error { return tx.InsertTask(ctx, freeAgain) },
	)
	if errs[0] != nil || errs[5] != nil || errs[7] != nil {
		t.Fatalf("the sound requests failed: %v, %v, %v", errs[0], errs[5], errs[7])
	}
	if !errors.Is(errs[6], giveUp) {
		t.Fatalf("the failing request: %v, want its own error", errs[6])
	}
	for i, what := range []string{"", "a second idempotency key", "a second task id", "a second dedupe key", "a second receipt id"} {
		if i > 0 && !host.IsCode(errs[i], host.CodeConflict) {
			t.Errorf("%s in the batch: %v, want conflict", what, errs[i])
		}
	}
	if n := st.StrictReruns() - reruns; n != 0 {
		t.Errorf("the batch ran again in strict mode %d times, want none", n)
	}
	err := st.View(ctx, func(r store.Reader) error {
		if got, err := r.GetTask(ctx, "acme", updated.ID); err != nil || got.Priority != 9 || got.Version != 2 {
			t.Errorf("task inserted and updated in one request: %+v %v, want priority 9, version 2", got, err)
		}
		if _, err := r.GetTask(ctx, "acme", again.ID); !host.IsCode(err, host.CodeNotFound) {
			t.Errorf("the clashing task was written: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Verify(t)
}

// The statement that writes a batch's receipts and obligations runs on its
// generic plan, planned once per connection: left to plan_cache_mode=auto,
// the server planned it afresh at every execution (arrays of known length
// look cheaper to a custom plan), which cost more than the insert.
func TestReceiptsWrittenBehindKeepOnePlan(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	const runs = 12
	for range runs {
		rc := behindReceipt(b)
		if err := st.Update(ctx, func(tx store.Tx) error { return behindRows(ctx, tx, rc, "", "I-"+rc.ID) }); err != nil {
			t.Fatal(err)
		}
	}
	var found bool
	var generic, custom int64
	err := st.Update(ctx, func(tx store.Tx) error {
		found = false
		return tx.(*writeTx).ss.query(ctx, func(r pgx.Rows) error {
			found = true
			return r.Scan(&generic, &custom)
		}, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, receiptsBehind)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("the receipts statement is not among the writer connection's prepared statements")
	}
	if custom != 0 || generic < runs {
		t.Errorf("after %d batches the receipts statement ran on %d generic and %d custom plans: want %d or more generic, no custom", runs, generic, custom, runs)
	}
	b.Verify(t)
}

// A request that updates a task an ended request of its batch inserted
// queues that request's rows (still written behind) in front of its own
// SAVEPOINT before anything is sent. Should it then fail, undoing it must
// drop only its own statements: the ended request was told it committed,
// and its task, its receipt and the queue counts must say so.
func TestAFailedUpdateOfATaskInsertedEarlierInTheBatchKeepsTheInsert(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	task := func(id string) *host.Task {
		now := b.Clock.Now()
		return &host.Task{ID: id, Tenant: "acme", Type: "work", CreatedBy: "agent.kee", Recipient: "agent.kee", State: host.StateQueued,
			Priority: 5, Params: []byte(`{}`), CreatedAt: now, UpdatedAt: now, AvailableAt: now, MaxRetries: 3}
	}
	inserted, assigned := task("T-WBKEPT"), behindReceipt(b)
	// The writer's chain is loaded first, so that nothing the batch below
	// does before the failing update sends anything.
	if err := st.Update(ctx, func(tx store.Tx) error { return behindAssigned(ctx, tx, behindReceipt(b)) }); err != nil {
		t.Fatal(err)
	}
	giveUp := errors.New("give up")
	errs := runHeld(t, st,
		func(tx store.Tx) error {
			if err := tx.InsertTask(ctx, inserted); err != nil {
				return err
			}
			return behindRows(ctx, tx, assigned, "", "I-kept")
		},
		func(tx store.Tx) error {
			// No read first: the update itself puts the insert ahead of it.
			u := task(inserted.ID)
			u.Priority = 9
			if err := tx.UpdateTask(ctx, u, store.Fence{State: host.StateQueued}); err != nil {
				return err
			}
			return giveUp
		},
		func(tx store.Tx) error { return tx.InsertTask(ctx, task("T-WBLAST")) },
	)
	if errs[0] != nil || !errors.Is(errs[1], giveUp) || errs[2] != nil {
		t.Fatalf("errors %v, want nil, %v, nil", errs, giveUp)
	}
	err := st.View(ctx, func(r store.Reader) error {
		for _, id := range []string{inserted.ID, "T-WBLAST"} {
			got, err := r.GetTask(ctx, "acme", id)
			if err != nil {
				t.Errorf("task %s of a committed request: %v", id, err)
			} else if got.Priority != 5 {
				t.Errorf("task %s: priority %d, want 5 (the failed update undone)", id, got.Priority)
			}
		}
		if got, err := r.GetReceipt(ctx, "acme", assigned.ID); err != nil || got.Seq != assigned.Seq || got.Seq == 0 {
			t.Errorf("receipt of the committed request: %+v, %v (reported seq %d)", got, err, assigned.Seq)
		}
		qs, err := r.QueueStats(ctx, "acme")
		if err != nil {
			return err
		}
		ts, _, err := r.ListTasks(ctx, store.TaskFilter{Tenant: "acme", States: []host.TaskState{host.StateQueued}, Limit: 10})
		if err != nil {
			return err
		}
		if qs.ByState[host.StateQueued] != int64(len(ts)) || len(ts) != 2 {
			t.Errorf("queue counts say %d queued, the table holds %d, want 2", qs.ByState[host.StateQueued], len(ts))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Verify(t)
}

// A batch that runs again after a serialization failure runs its requests
// again with the same receipts, whose Seq the first run set when a read sent
// them. The obligation a receipt opens must take the seq its receipt is
// given in the run that commits, not the first run's.
func TestAnObligationTakesItsReceiptsSeqFromTheRunThatCommits(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	ctx := b.Ctx
	rc := behindReceipt(b)
	runs, firstSeq := 0, int64(0)
	err := st.Update(ctx, func(tx store.Tx) error {
		runs++
		if err := tx.AppendReceipt(ctx, rc); err != nil {
			return err
		}
		if err := tx.OpenObligation(ctx, host.Obligation{ReceiptID: rc.ID, Tenant: rc.Tenant, Type: rc.Type, Obligor: rc.From,
			Obligee: rc.To, TaskID: rc.TaskID, CreatedAt: rc.CreatedAt, Seq: rc.Seq}); err != nil {
			return err
		}
		if runs > 1 {
			return nil
		}
		// A read sends the receipt (its seq is read), then the
		// transaction fails as a serialization failure would.
		if _, err := tx.GetTask(ctx, "acme", "T-none"); !host.IsCode(err, host.CodeNotFound) {
			return fmt.Errorf("reading a missing task: %v", err)
		}
		firstSeq = rc.Seq
		_, err := tx.(*writeTx).ss.exec(context.Background(), `DO $$BEGIN RAISE EXCEPTION USING ERRCODE = '40001'; END$$`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 || firstSeq == 0 || rc.Seq == firstSeq {
		t.Fatalf("runs %d, seq %d in the first and %d in the last: the test did not run the batch twice with a new seq", runs, firstSeq, rc.Seq)
	}
	err = st.View(ctx, func(r store.Reader) error {
		obs, _, err := r.ListOpenObligations(ctx, store.ObligationFilter{Tenant: "acme", Principal: rc.To, Limit: 10})
		if err != nil {
			return err
		}
		if len(obs) != 1 || obs[0].ReceiptID != rc.ID || obs[0].Seq != rc.Seq {
			t.Errorf("open obligations %+v, want one for %s at seq %d", obs, rc.ID, rc.Seq)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
