package engine

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Bounded cascades, carried durably (RATIONALE.md, "A cascade is settled
// a budget at a time"). A terminal write settles its task's waiters in its
// own transaction, and a waiter it cancels settles its own in turn
// (dependencies.go). Up to 32 levels of up to 1,000 waiters are too much
// for one transaction: it held SQLite's writer for seconds and, on
// PostgreSQL, outlived the store timeout, so such a cancel could never
// commit. So an update settles waiters until it has settled its budget
// (Config.SettleBudget) and records what is left of its work-list in
// pending_settlements, in the same transaction (savePending): the finished
// task, the state it finished in and the cause the cascade carries. The
// drainer (settleLoop, one per engine) settles those rows in later
// transactions of the same budget, each row deleted in the transaction
// that settles it, so a crash or a restart resumes from the table. A
// cascade under the budget writes no row and runs no statement more.
//
// Settling an entry is what the terminal write would have done: its open
// edges are settled and each waiter still waiting is decided, fenced on
// waiting, with a cancel receipt under the waiter's dedupe key. A waiter
// its owner canceled meanwhile, or one another end readied, is no longer
// waiting and is skipped, as it is in the write's own transaction. A task
// a redrive made unfinished again is dropped from the table: its marker
// stays, so its next end settles its waiters.

// DefaultSettleBudget is the number of waiters one transaction settles
// before it leaves the rest of a dependency cascade to the drainer
// (Config.SettleBudget). The settling of one finished task is never cut:
// a transaction settles at most the budget plus one task's waiters
// (Config.MaxWaiters) less one.
const DefaultSettleBudget = 256

// settleClaim is how many pending settlements one drainer transaction
// takes; it settles them while its budget lasts and leaves the rest.
const settleClaim = 16

// settleIdle is how often an idle drainer looks for pending settlements
// no wake-up announced: another host's left on PostgreSQL, or ones left
// when this engine started. The look is a read, outside the writer.
const settleIdle = time.Second

// overBudget says the update has settled its budget of waiters.
func (d *deliveryTx) overBudget() bool {
	b := d.e.cfg.SettleBudget
	return b > 0 && d.spent >= b
}

// causeJSON is an endCause as a pending settlement keeps it.
type causeJSON struct {
	Tenant   string         `json:"tenant"`
	Task     string         `json:"task"`
	State    host.TaskState `json:"state"`
	Canceled bool           `json:"canceled,omitempty"`
	By       string         `json:"by,omitempty"`
}

func encodeCause(c *endCause) string {
	if c == nil {
		return ""
	}
	return string(mustJSON(causeJSON{Tenant: c.tenant, Task: c.task, State: c.state, Canceled: c.canceled, By: c.by}))
}

func decodeCause(s string) *endCause {
	var c causeJSON
	if s == "" || json.Unmarshal([]byte(s), &c) != nil || c.Task == "" {
		return nil
	}
	return &endCause{tenant: c.Tenant, task: c.Task, state: c.State, canceled: c.Canceled, by: c.By}
}

// savePending records what the update's budget left of its cascades, once
// fn and the workflows' ends are done (a cause's canceled_by is known by
// then: the cancel's receipt follows its write).
func (d *deliveryTx) savePending(ctx context.Context) error {
	now := d.e.now()
	ps := make([]store.PendingSettlement, 0, len(d.pending))
	for _, f := range d.pending {
		ps = append(ps, store.PendingSettlement{Tenant: f.tenant, TaskID: f.id, State: f.state, Cause: encodeCause(f.cause), CreatedAt: now})
	}
	return d.Tx.AddPendingSettlements(ctx, ps)
}

// notePendingBy notes who asked for a cancel that started a cascade the
// update left pending: the cancel's receipt follows the write that
// started the cascade.
func (d *deliveryTx) notePendingBy(r *host.Receipt) {
	if r.Type != host.ReceiptCanceled {
		return
	}
	var b struct {
		CanceledBy string `json:"canceled_by"`
		Dependency string `json:"dependency"`
	}
	if json.Unmarshal(r.Body, &b) != nil || b.Dependency != "" || b.CanceledBy == "" {
		return
	}
	for _, f := range d.pending {
		if c := f.cause; c != nil && c.canceled && c.task == r.TaskID && c.tenant == r.Tenant {
			c.by = b.CanceledBy
		}
	}
}

// wakeSettler wakes the drainer after a commit that left settlements.
func (e *Engine) wakeSettler() {
	select {
	case e.settleWake <- struct{}{}:
	default:
	}
}

// DrainSettlements settles pending settlements in one transaction of the
// settle budget and returns how many it took off the table; more says
// some are left (the budget ran out, or the transaction left new ones).
// The drainer (Start) calls it; tests may too.
func (e *Engine) DrainSettlements(ctx context.Context) (done int, more bool, err error) {
	done, more, _, err = e.drainOnce(ctx, settleClaim)
	return done, more, err
}

// drainOnce settles up to limit pending settlements in one transaction,
// passing over those held back after failing alone (settleHolds), and
// answers which it tried as well.
func (e *Engine) drainOnce(ctx context.Context, limit int) (done int, more bool, tried []settleKey, err error) {
	held := e.settleHeld.holding(e.now())
	err = e.update(ctx, func(tx store.Tx) error {
		done, more, tried = 0, false, tried[:0]
		d, ok := tx.(*deliveryTx)
		if !ok {
			return nil
		}
		// Held rows come first when they are oldest: claim past them.
		ps, err := d.ClaimPendingSettlements(ctx, limit+len(held))
		if err != nil {
			return err
		}
		for _, p := range ps {
			k := settleKey{p.Tenant, p.TaskID}
			if held[k] {
				continue
			}
			if len(tried) == limit || d.overBudget() {
				more = true
				break
			}
			tried = append(tried, k)
			if err := d.DeletePendingSettlement(ctx, p.Tenant, p.TaskID); err != nil {
				return err
			}
			done++
			// The state it finished in, as the row says now: a dead
			// letter redriven since is unfinished again, and its next
			// end settles its waiters. A row gone (purged) settles by
			// the state recorded.
			state := p.State
			t, err := d.GetTask(ctx, p.Tenant, p.TaskID)
			switch {
			case err == nil:
				state = host.FinishedAs(t)
			case !host.IsCode(err, host.CodeNotFound):
				return err
			}
			if state == "" {
				continue
			}
			d.settle = append(d.settle, finished{tenant: p.Tenant, id: p.TaskID, state: state, cause: decodeCause(p.Cause)})
			if err := d.settleAll(ctx); err != nil {
				return err
			}
		}
		if len(d.pending) > 0 {
			more = true
		}
		return nil
	})
	if err == nil {
		e.settleHeld.settled(tried)
	}
	return done, more, tried, err
}

// settleLoop is the drainer: it settles pending settlements until none is
// left, when a commit of this engine left some (wakeSettler), and when its
// idle look finds some.
func (e *Engine) settleLoop() {
	defer e.wg.Done()
	t := time.NewTicker(settleIdle)
	defer t.Stop()
	look := true // at start: what a stopped gate left
	for {
		if look {
			ctx := store.WithTimeout(context.Background(), store.DefaultTimeout)
			var found bool
			err := e.view(ctx, func(r store.Reader) error {
				var err error
				found, err = r.HasPendingSettlements(ctx)
				return err
			})
			if err != nil {
				e.log.Warn("pending settlements: look failed", "err", err)
			}
			if found {
				e.drainSettlements()
			}
		}
		select {
		case <-e.stop:
			return
		case <-e.settleWake:
			e.drainSettlements()
			look = false
		case <-t.C:
			look = true
		}
	}
}

// drainSettlements runs drainOnce until nothing is left, the engine
// stops, or the store fails (the next look tries again). A transaction
// that fails otherwise (a settlement that cannot be settled, whatever the
// cause) is not allowed to stall the rest behind it: the drainer goes on
// one settlement a transaction, and one that fails alone is held back
// (settleHolds) and tried again after a backoff, still in the table.
func (e *Engine) drainSettlements() {
	limit := settleClaim
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		done, more, tried, err := e.drainOnce(store.WithTimeout(context.Background(), store.DefaultTimeout), limit)
		switch {
		case err == nil:
		case len(tried) == 0 || !e.storeReadable():
			// Nothing was tried (the claim failed), or the store fails
			// whatever is asked of it: an outage, not a settlement.
			e.log.Warn("pending settlements: drain failed", "err", err)
			return
		case len(tried) > 1:
			limit = 1 // which one fails: one a transaction from here
			continue
		default:
			k := tried[0]
			n, wait := e.settleHeld.hold(k, e.now())
			e.log.Error("pending settlement: settling failed; held back, still pending",
				"tenant", k.tenant, "task_id", k.task, "failures", n, "retry_in", wait, "err", err)
			continue
		}
		if !more && done == 0 {
			return // none left, or only rows held back or another host's drainer holds
		}
	}
}

// storeReadable says whether the store answers a read now: a failed
// settlement is held back only when the store itself is working.
func (e *Engine) storeReadable() bool {
	ctx := store.WithTimeout(context.Background(), store.DefaultTimeout)
	return e.view(ctx, func(r store.Reader) error {
		_, err := r.HasPendingSettlements(ctx)
		return err
	}) == nil
}

// settleKey names a pending settlement.
type settleKey struct{ tenant, task string }

// Backoff of a held settlement: doubling from settleBackoffMin up to
// settleBackoffMax. At most maxSettleHolds are remembered; past that the
// oldest hold is forgotten (and its row tried again).
const (
	settleBackoffMin = time.Second
	settleBackoffMax = 5 * time.Minute
	maxSettleHolds   = 1024
)

// settleHolds are the pending settlements this engine failed to settle
// alone (a poison row): each is passed over until its backoff ends, so
// the rows behind it drain. The hold is this engine's memory; the row
// stays in the table, counted by the pending gauge, so a restart or
// another host tries it again.
type settleHolds struct {
	mu   sync.Mutex
	held map[settleKey]settleHold
}

type settleHold struct {
	failures int
	until    time.Time
}

// holding answers the settlements held back at now.
func (h *settleHolds) holding(now time.Time) map[settleKey]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out map[settleKey]bool
	for k, v := range h.held {
		if now.Before(v.until) {
			if out == nil {
				out = map[settleKey]bool{}
			}
			out[k] = true
		}
	}
	return out
}

// hold holds k back after a failure at now and answers how often it has
// failed and how long it is held.
func (h *settleHolds) hold(k settleKey, now time.Time) (int, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[settleKey]settleHold{}
	}
	v := h.held[k]
	v.failures++
	wait := settleBackoffMax
	if v.failures <= 16 {
		wait = min(settleBackoffMin<<(v.failures-1), settleBackoffMax)
	}
	v.until = now.Add(wait)
	if _, ok := h.held[k]; !ok && len(h.held) >= maxSettleHolds {
		var oldest settleKey
		var first time.Time
		for ok, ov := range h.held {
			if first.IsZero() || ov.until.Before(first) {
				oldest, first = ok, ov.until
			}
		}
		delete(h.held, oldest)
	}
	h.held[k] = v
	return v.failures, wait
}

// settled forgets the holds of settlements a committed transaction took.
func (h *settleHolds) settled(ks []settleKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range ks {
		delete(h.held, k)
	}
}
