package sqlite

import (
	"context"
	"slices"
	"strings"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/batchkeys"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// Rows written behind. InsertTask and AppendReceipt do not run a statement
// each: they keep the row, and the writer writes the batch's rows with one
// multi-row INSERT per table (up to behindPerStmt rows) when the batch ends,
// when an update ends in savepoint mode, or before any other statement that
// may read them (reader.query, queryRow and exec write them first; only the
// statements known not to read them use the raw forms, and a claim, which
// reads and writes the tasks table alone, writes the kept tasks alone first:
// flushTasks). So there is one way to write, and every read inside a batch
// sees the batch's own rows.
//
// Undo: an update that fails drops the rows it kept (they were never
// written). A clash the writer can see in memory (the same task id,
// idempotency key, receipt id or dedupe key kept twice in a batch) fails the
// call at once. A clash with a committed row shows only when the rows are
// written; the writer then runs the batch again with a savepoint per update,
// in which each update's rows are written at its end, so the error is that
// update's alone (store.Store.Update).
//
// The INSERTs say OR FAIL, not the default OR ABORT. A multi-row statement
// that may abort half-way makes SQLite copy every page it touches into a
// statement journal first, so that it can undo itself; a batch's inserts
// touch hundreds of pages, the journal spills to a temporary file, and those
// copies were about a seventh of the writer's time. OR FAIL needs no
// statement journal. Its price, that a refused statement leaves the rows
// before the refused one, is never paid: every failure of these statements
// sticks (writeTx.failed) and is undone whole, by the rollback of the batch
// in optimistic mode and by the update's savepoint in savepoint mode.

// chunk is how many of n rows the next INSERT writes: 256, 64, 16, 4 or 1,
// so that a handful of statement texts, each prepared once, serve every
// batch (SQLite allows 32,766 variables; a task row has 33).
func chunk(n int) int {
	for _, k := range []int{256, 64, 16, 4} {
		if n >= k {
			return k
		}
	}
	return 1
}

// behind is a write transaction's rows not written yet.
type behind struct {
	newTasks    [][]any // InsertTask's values, in call order
	newReceipts [][]any // AppendReceipt's values, in ledger order
	newInbox    [][]any // InsertInbox's values (delivery.go)
	// newDeps are InsertDependencies' edges, written with one statement
	// before the first statement that reads an edge among them
	// (flushDepsFor) or with the other rows.
	newDeps []host.Dependency
	// settles are the succeeded dependencies whose waiters are not settled
	// yet (SettleReadyWaiters), settled together by writeSettles.
	settles []pendingSettle
	// readied are the waiters writeSettles moved to queued: the writer
	// wakes their long-polls once the batch commits (Store.AddReadyHook).
	readied []*host.Task
	// queuedN counts the tasks the batch's updates inserted or updated as
	// queued, which a claim may take; settleMark is its value when the
	// first of settles was noted (ClaimTasks).
	queuedN, settleMark int
	// keys are the task ids, idempotency keys, receipt ids and dedupe keys
	// the batch inserted, written or not, to refuse a clash among them at
	// once; a failed update forgets its own.
	keys batchkeys.Set
	// failed is the error of a write of the kept rows that failed: the batch
	// runs again with savepoints (or, in savepoint mode, the update fails).
	failed error
}

// behindMark is where an update started in the kept rows.
type behindMark struct{ tasks, receipts, journal, inbox, deps, settles int }

func (b *behind) mark() behindMark {
	return behindMark{len(b.newTasks), len(b.newReceipts), b.keys.Mark(), len(b.newInbox), len(b.newDeps), len(b.settles)}
}

// undo drops the rows kept since m and forgets their keys (the update that
// kept them failed; rows already written are undone by its savepoint).
func (b *behind) undo(m behindMark) {
	b.newTasks = b.newTasks[:min(m.tasks, len(b.newTasks))]
	b.newReceipts = b.newReceipts[:min(m.receipts, len(b.newReceipts))]
	b.newInbox = b.newInbox[:min(m.inbox, len(b.newInbox))]
	b.newDeps = b.newDeps[:min(m.deps, len(b.newDeps))]
	b.settles = b.settles[:min(m.settles, len(b.settles))]
	b.keys.Undo(m.journal)
}

// inserted reports whether the batch inserted task id.
func (b *behind) inserted(id string) bool { return b.keys.HasTask(id) }

func (b *behind) empty() bool {
	return len(b.newTasks) == 0 && len(b.newReceipts) == 0 && len(b.newInbox) == 0 && len(b.newDeps) == 0 && len(b.settles) == 0
}

// receiptN is the number of sqlrows.ReceiptColumns.
var receiptN = len(sqlrows.Names(sqlrows.ReceiptColumns))

// taskInsertN is the number of sqlrows.TaskInsertColumns.
var taskInsertN = len(sqlrows.Names(sqlrows.TaskInsertColumns))

var (
	errTaskClash    = host.Errorf(host.CodeConflict, "a task with this id or idempotency key exists")
	errReceiptClash = host.Errorf(host.CodeConflict, "a receipt with this id or dedupe key exists")
)

// bufferTask keeps t's row to insert, with t.Version 1.
func (w *writeTx) bufferTask(t *host.Task) error {
	a, err := sqlrows.TaskInsertValues(t)
	if err != nil {
		return err
	}
	if !w.keys.Claim(batchkeys.Task(t)) {
		return errTaskClash
	}
	w.newTasks = append(w.newTasks, a)
	if t.State == host.StateQueued {
		w.queuedN++
	}
	t.Version = 1
	w.counts = store.Moved(w.counts, t, "", t.State)
	return nil
}

// bufferReceipt keeps rc's row to insert; rc is complete (seq, chain, hash).
func (w *writeTx) bufferReceipt(rc *host.Receipt) error {
	parents, err := sqlrows.ReceiptParents(rc)
	if err != nil {
		return err
	}
	a := sqlrows.ReceiptValues(rc, parents)
	if !w.keys.Claim(batchkeys.Receipt(rc)) {
		return errReceiptClash
	}
	w.newReceipts = append(w.newReceipts, a)
	return nil
}

// flushBehind writes the kept rows and the pending obligations; a no-op in a
// view.
func (r *reader) flushBehind(ctx context.Context) error {
	if r.wb == nil {
		return nil
	}
	if err := r.wb.flushRows(ctx); err != nil {
		return err
	}
	return r.wb.flushObligations(ctx)
}

// flushTasks writes the batch's kept task rows alone: what a statement that
// reads or writes only the tasks table needs written first (a claim: its
// read of queued tasks and its update of the ones it takes). The kept
// receipts, inbox items, edges and obligation ends stay for the batch's
// multi-row statements; each receipt's seq and chain link were assigned when
// it was kept, so writing them later changes no order. A failure sticks, as
// flushRows'; a no-op in a view.
func (r *reader) flushTasks(ctx context.Context) error {
	if r.wb == nil {
		return nil
	}
	if r.wb.failed != nil {
		return r.wb.failed
	}
	return r.wb.writeKeptTasks(ctx)
}

// writeKeptTasks writes the kept task rows, if any; a failure sticks.
func (w *writeTx) writeKeptTasks(ctx context.Context) error {
	if len(w.newTasks) == 0 {
		return nil
	}
	if err := w.insertRows(ctx, `INSERT OR FAIL INTO tasks (`+sqlrows.TaskInsertColumns+`) VALUES `, taskInsertN, w.newTasks, errTaskClash); err != nil {
		w.failed = err
		return err
	}
	w.newTasks = w.newTasks[:0]
	return nil
}

// flushFor writes the kept rows when one of ids is a task this batch
// inserted: what a statement that reads only those tasks (by id) needs
// written first. Any other read leaves the batch's rows in their multi-row
// statements; a no-op in a view.
func (r *reader) flushFor(ctx context.Context, ids ...string) error {
	if r.wb == nil {
		return nil
	}
	for _, id := range ids {
		if r.wb.inserted(id) {
			return r.wb.flushRows(ctx)
		}
	}
	return nil
}

// flushRows writes the kept tasks, then the kept receipts. A failure sticks
// (failed): the rows stay kept and the update or batch they belong to fails.
func (w *writeTx) flushRows(ctx context.Context) error {
	if w.failed != nil {
		return w.failed
	}
	if w.empty() {
		return nil
	}
	if err := w.writeKeptTasks(ctx); err != nil {
		return err
	}
	if err := w.insertRows(ctx, `INSERT OR FAIL INTO receipts (`+sqlrows.ReceiptColumns+`) VALUES `, receiptN, w.newReceipts, errReceiptClash); err != nil {
		w.failed = err
		return err
	}
	w.newReceipts = w.newReceipts[:0]
	if err := w.insertRows(ctx, `INSERT OR FAIL INTO inbox (`+sqlrows.InboxInsertColumns+`) VALUES `, inboxInsertN, w.newInbox, errInboxClash); err != nil {
		w.failed = err
		return err
	}
	w.newInbox = w.newInbox[:0]
	if err := w.flushDeps(ctx); err != nil {
		return err
	}
	return w.writeSettles(ctx)
}

// flushDeps writes the kept edges with multi-row INSERTs. A failure sticks, as
// flushRows'.
func (w *writeTx) flushDeps(ctx context.Context) error {
	if w.failed != nil {
		return w.failed
	}
	if len(w.newDeps) == 0 {
		return nil
	}
	if err := w.insertDependencies(ctx, w.newDeps); err != nil {
		w.failed = err
		return err
	}
	w.newDeps = w.newDeps[:0]
	return nil
}

// flushDepsFor writes the kept edges first when one of them names one of
// ids (as its waiter or its dependency): what a statement that reads only
// those tasks' edges needs written. A no-op in a view.
//
// It also settles the waiters of the batch's succeeded dependencies first
// (writeSettles): a statement that reads edges must find them settled.
func (r *reader) flushDepsFor(ctx context.Context, ids ...string) error {
	if r.wb != nil && len(r.wb.settles) > 0 {
		return r.wb.flushRows(ctx)
	}
	return r.flushKeptDepsFor(ctx, ids...)
}

// flushKeptDepsFor is flushDepsFor without the settling, for the enqueue's
// read of what it waits on (MarkAndLockDependencies), which decides itself
// when the settling must come first.
func (r *reader) flushKeptDepsFor(ctx context.Context, ids ...string) error {
	if r.wb == nil || len(r.wb.newDeps) == 0 {
		return nil
	}
	for _, d := range r.wb.newDeps {
		if slices.Contains(ids, d.Waiter) || slices.Contains(ids, d.DependsOn) {
			return r.wb.flushDeps(ctx)
		}
	}
	return nil
}

// insertRows writes rows of n values with multi-row INSERTs; a uniqueness
// failure becomes clash.
func (w *writeTx) insertRows(ctx context.Context, head string, n int, rows [][]any, clash error) error {
	row := "(" + placeholders(n) + "),"
	for len(rows) > 0 {
		k := chunk(len(rows))
		args := make([]any, 0, n*k)
		for _, a := range rows[:k] {
			args = append(args, a...)
		}
		if _, err := w.rawExec(ctx, head+strings.TrimSuffix(strings.Repeat(row, k), ","), args...); err != nil {
			if strings.Contains(err.Error(), "UNIQUE") {
				return clash
			}
			return err
		}
		rows = rows[k:]
	}
	return nil
}
