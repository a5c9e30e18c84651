package engine

import (
	"context"
	"encoding/json"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Delivery is what the engine writes beside the work itself so that its
// outcomes reach the people waiting for them and other ledgers (issue 13).
//
// Every engine transaction (Engine.update, and the outbox dispatcher's
// bookkeeping) runs on a deliveryTx, and every receipt appended through it
// brings, in the same transaction:
//
//   - an inbox item for the receipt's addressee, when the receipt is one to
//     act on: a completion, a final failure or an escalation (inboxItemFor,
//     inbox.go);
//   - an outbox entry carrying the receipt, seq included, to the external
//     ledger, when the outbox is on (Delivery.Outbox or a Sink; outbox.go
//     delivers it at least once).
//
// So a receipt and its delivery rows commit together or not at all, and no
// verb writes them itself. The other rows of these tables are written where
// they are made: a heartbeat's milestone writes its inbox item (inbox.go),
// an email and a promotion to memory queue their own outbox entries
// (email.go, PromoteToMemory in outbox.go).

// DeliveryConfig configures what happens after the work (issue 13).
type DeliveryConfig struct {
	// Outbox, when set, queues every appended receipt in the outbox in the
	// transaction that appends it, for delivery to an external ledger.
	Outbox bool
	// OutboxConfig is the dispatcher's; with a Sink the outbox is on and
	// Start runs the dispatcher.
	OutboxConfig OutboxConfig
	// Retention says how long finished tasks keep their payloads.
	Retention RetentionConfig
	// Mail is the gate's mail client (email.go): send_email queues outbox
	// entries of kind email that it sends; fetch_task_email reads back
	// through it. With it the outbox dispatcher runs even without a Sink.
	Mail Mailer
	// EmailLimit bounds send_email per principal and per tenant.
	EmailLimit EmailLimit
}

// deliveryTx is the transaction every engine update runs in (withDelivery):
// it passes everything to the driver's, and after each appended receipt
// writes, in the same transaction, the inbox item the receipt makes (if it
// is actionable) and its outbox entry (if the outbox is on). It remembers
// the last task the update wrote, so an inbox item can name the task's type
// and result summary without reading the task again.
type deliveryTx struct {
	store.Tx
	e    *Engine
	last *host.Task
	// outboxed is set when the update queued outbox entries.
	outboxed bool
	// readied and canceled are the waiters the update settled
	// (dependencies.go): long-polls are woken for the first, events
	// emitted for the second, once the update committed.
	readied, canceled []*host.Task
	// reoffered are the tasks the update made available again
	// (resourcesFreed), whose workers are woken once it commits.
	reoffered []taskWake
	// settle is the work-list of tasks whose terminal write this update
	// made and whose waiters are not yet settled; settling is set while
	// it is drained (dependencies.go), so a cascade of cancels is a loop,
	// never a recursion however long the chain.
	settle   []finished
	settling bool
	// spent counts the waiters the update settled; once it reaches the
	// budget (Config.SettleBudget) the work-list's rest goes to pending,
	// which the update records for the drainer (settlements.go).
	spent   int
	pending []finished
	// cause is set while settleWaiters writes the cancel of a waiter
	// whose rule a dependency's end broke: the end that started the
	// cascade, which the waiter's own end passes on (endCause).
	cause *endCause
	// ends are the workflows' final steps the update finished
	// (workflows.go): their workflows end once fn's writes are done.
	ends []workflowEnd
	// settled are the tasks whose terminal write settled their waiters:
	// dropped from the engine's waitedOn once the update committed (not
	// before: a batch rolled back and run again builds the write again,
	// and must find the hint again).
	settled []waitedKey
}

// deliveryOut is what an update's deliveryTx did that matters once the
// update committed.
type deliveryOut struct {
	// outboxed: the update queued outbox entries (the dispatcher is woken
	// for them).
	outboxed bool
	// readied and canceled are the waiting tasks it settled.
	readied, canceled []*host.Task
	// reoffered are the tasks it made available again.
	reoffered []taskWake
	// settled are the tasks whose waiters it settled (deliveryTx.settled).
	settled []waitedKey
	// pending: it left settlements for the drainer (settlements.go).
	pending bool
}

// withDelivery returns fn run on a deliveryTx; *out says, once the update
// committed, what it did besides fn's own writes.
func (e *Engine) withDelivery(fn func(store.Tx) error, out *deliveryOut) func(store.Tx) error {
	return func(tx store.Tx) error {
		d := &deliveryTx{Tx: tx, e: e}
		err := fn(d)
		if err == nil {
			err = d.endWorkflows(context.Background())
		}
		if err == nil && len(d.pending) > 0 {
			err = d.savePending(context.Background())
		}
		*out = deliveryOut{}
		if err == nil {
			*out = deliveryOut{outboxed: d.outboxed, readied: d.readied, canceled: d.canceled, reoffered: d.reoffered, settled: d.settled,
				pending: len(d.pending) > 0}
		}
		return err
	}
}

// afterCommit wakes the long-polls for the waiters an update made ready and
// the tasks it re-offered, and reports the waiters it canceled.
func (e *Engine) afterCommit(out *deliveryOut) {
	if out.outboxed {
		e.wakeOutbox()
	}
	for _, k := range out.settled {
		e.waited.drop(k.tenant, k.id)
	}
	for _, t := range out.readied {
		e.waiters.wake(t.Tenant, t.Type, 1)
	}
	for _, t := range out.canceled {
		e.emit(Event{Kind: EvCanceled, Tenant: t.Tenant, TaskType: t.Type, Detail: t.LastError})
	}
	for _, w := range out.reoffered {
		e.waiters.wake(w.tenant, w.typ, 1)
	}
	if out.pending {
		e.wakeSettler()
	}
}

// InsertTask implements store.Tx.
func (d *deliveryTx) InsertTask(ctx context.Context, t *host.Task) error {
	err := d.Tx.InsertTask(ctx, t)
	if err == nil {
		d.last = t
	}
	return err
}

// UpdateTask implements store.Tx. A write that finishes a task (from a
// state that is not terminal to one that is) settles the tasks waiting on
// it in the same transaction (dependencies.go).
//
// Only a task that may have waiters pays for that: one whose row carries
// the has_waiters marker (t.HasWaiters, read with the task) or that an
// enqueue on this engine marked since (waitedOn: the copy a completion is
// built from may predate the marker). Any other terminal write is fenced
// on the marker's absence (store.Fence.NoWaiters), so a marker another
// writer wrote after the copy was read fences the write out and it is
// built again from the row.
func (d *deliveryTx) UpdateTask(ctx context.Context, t *host.Task, f store.Fence) error {
	finishing := t.State.Terminal() && f.State != "" && !f.State.Terminal()
	if finishing && !t.HasWaiters && !d.e.waited.has(t.Tenant, t.ID) {
		f.NoWaiters = true
	}
	err := d.Tx.UpdateTask(ctx, t, f)
	if err != nil {
		return err
	}
	d.last = t
	var cause *endCause
	if finishing {
		if cause = d.cause; cause == nil {
			state := host.FinishedAs(t)
			cause = &endCause{tenant: t.Tenant, task: t.ID, state: state, canceled: state == host.StateCanceled}
		}
		if wf, final := host.WorkflowOf(t); final {
			d.ends = append(d.ends, workflowEnd{tenant: t.Tenant, workflow: wf, step: t, cause: cause})
		}
	}
	if finishing && !f.NoWaiters {
		d.settled = append(d.settled, waitedKey{t.Tenant, t.ID})
		d.settle = append(d.settle, finished{tenant: t.Tenant, id: t.ID, state: host.FinishedAs(t), cause: cause})
		if !d.settling {
			return d.settleAll(ctx)
		}
	}
	return nil
}

// AppendReceipt implements store.Tx.
func (d *deliveryTx) AppendReceipt(ctx context.Context, r *host.Receipt) error {
	if err := d.Tx.AppendReceipt(ctx, r); err != nil {
		return err
	}
	var t *host.Task
	if d.last != nil && d.last.ID == r.TaskID && d.last.Tenant == r.Tenant {
		t = d.last
	}
	if it, ok := inboxItemFor(r, t); ok {
		if err := d.Tx.InsertInbox(ctx, it); err != nil {
			return err
		}
	}
	if (len(d.ends) > 0 || len(d.pending) > 0) && (r.Type == host.ReceiptFailed || r.Type == host.ReceiptCanceled) {
		d.noteErrorBy(r)
	}
	if d.e.outboxOn() {
		d.outboxed = true
		if r.Seq == 0 {
			// The store sends the receipt with its batch: the entry
			// carries the receipt as the ledger holds it, seq included.
			if err := d.Tx.Flush(ctx); err != nil {
				return err
			}
		}
		body, err := json.Marshal(r)
		if err != nil {
			return err
		}
		return d.Tx.InsertOutbox(ctx, []store.OutboxEntry{{Tenant: r.Tenant, TaskID: r.TaskID, Kind: OutboxKindReceipt,
			Key: "receipt:" + r.ID, Body: body, NextAt: r.CreatedAt, CreatedAt: r.CreatedAt}})
	}
	return nil
}
