package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Task dependencies (issue 39): a task enqueued with an after list waits
// (state waiting, never offered) until its rule is met, and is settled in
// the transaction that writes the terminal state of the dependency that
// decides it:
//
//   - Enqueue reads the dependencies with store.LockDependencies (PostgreSQL:
//     FOR SHARE), refuses unknown, foreign and invisible ids, decides at once
//     when their states already decide the rule, and otherwise inserts the
//     task waiting with its edges.
//   - The enqueue first marks its unfinished dependencies
//     (store.MarkWaitedOn: host.Task.HasWaiters), so a task none waits on
//     pays nothing when it finishes.
//   - Every terminal write of a marked task goes through
//     deliveryTx.UpdateTask, which records the state on the task's open
//     edges and, for each waiter, locks the waiter's row and counts its
//     edges by state (store.SettleWaiters: on PostgreSQL one round trip,
//     one aggregate however large the fan-in) and applies the rule:
//     queued (ready), canceled (with a task.canceled receipt from the gate
//     naming the dependency), or still waiting. A store that implements
//     store.WaiterReadier (SQLite) moves the ready ones to queued itself,
//     in the statement that checks their rule, and hands over only the
//     waiters this end may cancel. A cancel is itself a
//     terminal write, so it settles the waiter's own waiters in turn: the
//     finished tasks go on a work-list drained in a loop (settleAll), so
//     a long chain costs no stack. An update settles a bounded number of
//     waiters (Config.SettleBudget) and records the rest of its list as
//     pending settlements in its transaction, which the drainer settles
//     in later ones (settlements.go).
//
// Both writes are fenced (a waiter is changed only while it is waiting), so
// a waiter is settled once whatever the number of writers. On PostgreSQL the
// locks order an enqueue and a concurrent terminal write of its dependency
// (whichever commits second sees the other's rows), and two dependencies of
// one waiter finishing at once on two writers meet at the waiter's row lock,
// so the second sees the first's edge. Cycles cannot be made: every
// dependency must exist when its waiter is enqueued, and a task's edges are
// written only with its own insert.

// checkAfter validates an enqueue's after list and rule, and returns the
// rule to store.
func checkAfter(req *EnqueueRequest) (host.DependencyRule, error) {
	if len(req.After) == 0 {
		if req.AfterRule != "" {
			return "", host.Errorf(host.CodeBadRequest, "after_rule is given without after")
		}
		return "", nil
	}
	if len(req.After) > host.MaxDependencies {
		return "", host.Errorf(host.CodeTooLarge, "after names %d tasks, the limit is %d", len(req.After), host.MaxDependencies)
	}
	rule := req.AfterRule
	if rule == "" {
		rule = host.RuleAllSucceeded
	}
	if !rule.Valid() {
		return "", host.Errorf(host.CodeBadRequest, "after_rule must be all_succeeded, any_succeeded or all_finished, got %q", rule)
	}
	seen := make(map[string]bool, len(req.After))
	for i, id := range req.After {
		if id == "" || len(id) > 100 || !printable(id) {
			return "", host.Errorf(host.CodeBadRequest, "after[%d] is not a task id", i)
		}
		if seen[id] {
			return "", host.Errorf(host.CodeBadRequest, "after names task %s twice", id)
		}
		seen[id] = true
	}
	return rule, nil
}

// placeAfter decides, inside the enqueue's transaction, whether the new task
// t waits, is ready at once, or is refused, and returns its edges. The
// dependencies are read with their locks; an id the actor may not read is
// refused exactly as an unknown one, so nothing about other principals'
// tasks can be learned from the answer.
func (e *Engine) placeAfter(ctx context.Context, tx store.Tx, actor Actor, t *host.Task, after []string, rule host.DependencyRule) ([]host.Dependency, error) {
	// Mark the unfinished ones first (their terminal writes settle
	// waiters only when marked), then read them under their locks.
	found, err := tx.MarkAndLockDependencies(ctx, actor.Tenant, after)
	if err != nil {
		return nil, err
	}
	e.waited.add(actor.Tenant, after)
	byID := make(map[string]*host.Task, len(found))
	for _, d := range found {
		byID[d.ID] = d
	}
	states := make([]host.TaskState, len(after))
	deps := make([]host.Dependency, len(after))
	for i, id := range after {
		d := byID[id]
		if d == nil || !visible(actor, d) {
			return nil, host.Errorf(host.CodeUnknownDependency, "after[%d]: no task %s that this caller may read", i, id)
		}
		if resultReleased(d) {
			// Its worker would be handed a result it can never read.
			return nil, host.Errorf(host.CodeConflict, "after[%d]: task %s's result was archived at %s and its payload released; "+
				"no task may wait on it now (a waiter's worker could not read it): pass what it needs in the params instead",
				i, id, d.Result.ArchivedAt.UTC().Format(time.RFC3339))
		}
		states[i] = host.FinishedAs(d)
		deps[i] = host.Dependency{Tenant: t.Tenant, Waiter: t.ID, DependsOn: id, Rule: rule, Position: i, DepState: states[i], Depth: 1}
	}
	switch v, at := host.SettleDependencies(rule, states); v {
	case host.VerdictCancel:
		return nil, host.Errorf(host.CodeDependencyFailed, "after: task %s finished %s, so rule %s can never be met", after[at], states[at], rule)
	case host.VerdictReady:
		t.State = host.StateQueued
		return deps, nil
	default:
		t.State = host.StateWaiting
	}
	// The waiter adds an open edge to each unfinished dependency: refuse
	// it when one already has MaxWaiters, so one terminal write settles
	// a bounded number of waiters; and when a waiting dependency is at
	// MaxDependencyDepth, so the cascade it settles is bounded in depth.
	// A dependency another principal created takes this caller's waiter
	// only below MaxWaiters less the creator's reserve
	// (host.CreatorWaiterReserve): the rest is its creator's alone.
	var own, others, waiting []string
	for i, id := range after {
		if states[i] == "" {
			if byID[id].CreatedBy == actor.Principal {
				own = append(own, id)
			} else {
				others = append(others, id)
			}
		}
		if byID[id].State == host.StateWaiting {
			waiting = append(waiting, id)
		}
	}
	depth, err := tx.WaiterDepth(ctx, actor.Tenant, waiting)
	if err != nil {
		return nil, err
	}
	if depth >= e.cfg.MaxDependencyDepth {
		return nil, host.Errorf(host.CodeDependencyTooDeep, "after: a task named is itself waiting at depth %d, the deepest a chain of waiting tasks may be", depth)
	}
	for i := range deps {
		deps[i].Depth = depth + 1
	}
	crowded, err := tx.CrowdedDependency(ctx, actor.Tenant, own, e.cfg.MaxWaiters)
	if err != nil {
		return nil, err
	}
	if crowded != "" {
		return nil, host.Errorf(host.CodeTooManyWaiters, "after: task %s already has %d tasks waiting on it, the limit", crowded, e.cfg.MaxWaiters)
	}
	reserve := host.CreatorWaiterReserve(e.cfg.MaxWaiters)
	crowded, err = tx.CrowdedDependency(ctx, actor.Tenant, others, e.cfg.MaxWaiters-reserve)
	if err != nil {
		return nil, err
	}
	if crowded != "" {
		return nil, host.Errorf(host.CodeTooManyWaiters, "after: task %s already has %d tasks waiting on it, the most a principal other than "+
			"its creator may bring it to (the last %d of the limit of %d are kept for its creator's own waiters)",
			crowded, e.cfg.MaxWaiters-reserve, reserve, e.cfg.MaxWaiters)
	}
	return deps, nil
}

// sameAfter names "after" (or "after_rule") when a repeat of an enqueue
// names other dependencies, in another order, or another rule than the task
// its key holds. It is symmetric: a repeat that leaves after out (or gives
// it empty) for a task that has dependencies differs as much as one that
// names dependencies for a task without. noEdges says old is known to have
// none (it saves the read).
func sameAfter(ctx context.Context, r store.Reader, old *host.Task, after []string, rule host.DependencyRule, noEdges bool) (string, error) {
	if noEdges {
		if len(after) > 0 {
			return "after", nil
		}
		return "", nil
	}
	edges, err := r.ListDependencies(ctx, old.Tenant, old.ID)
	if err != nil {
		return "", err
	}
	if len(edges) != len(after) {
		return "after", nil
	}
	for i, e := range edges {
		if e.DependsOn != after[i] {
			return "after", nil
		}
		if e.Rule != rule {
			return "after_rule", nil
		}
	}
	return "", nil
}

// finished names a task whose terminal write waits for its waiters to be
// settled: only what settling needs, not the task's row.
type finished struct {
	tenant, id string
	state      host.TaskState
	// cause is the end that started the cascade this end is part of:
	// the task's own end, or, for a waiter the gate canceled because a
	// dependency's end broke its rule, that dependency's cause.
	cause *endCause
}

// endCause is a task end that was not a dependency's cancel: a task that
// succeeded, failed, dead-lettered or was canceled as a task (by a
// principal, at once or at the end of the lease its cancel flagged). A
// cascade of cancels by the dependency rule, which runs in the
// transaction of that end, passes it from each waiter it cancels to the
// next, so a workflow whose final step the cascade reached ends by what
// started it (workflows.go), not by the last link.
type endCause struct {
	tenant, task string
	state        host.TaskState
	// canceled: the task was canceled as a task, not by the gate's
	// dependency rule; by is who asked, when the cancel's receipt names
	// them (noteErrorBy). A cancel that ends a lease it flagged names them
	// too (endCanceled repeats the task.cancel_requested's asker); only a
	// lease flagged by a gate that wrote no such request leaves by empty.
	canceled bool
	by       string
}

// settleAll drains the update's work-list of finished tasks: settling a
// waiter may cancel it, which puts it on the list in turn. The cascade is
// a loop (a chain of any length costs no stack), and the update's last
// task is the one that started it when it returns. Once the update has
// settled its budget of waiters (Config.SettleBudget), what is left of
// the list is kept for the update to record as pending settlements
// (savePending), which the drainer settles in later transactions
// (settlements.go). The budget is looked at before each finished task,
// never within one, and an update starts with none spent: the first end
// it writes settles its direct waiters with it.
func (d *deliveryTx) settleAll(ctx context.Context) error {
	last := d.last
	d.settling = true
	defer func() { d.last, d.settling, d.settle = last, false, nil }()
	for len(d.settle) > 0 {
		if d.overBudget() {
			d.pending = append(d.pending, d.settle...)
			break
		}
		dep := d.settle[0]
		d.settle[0] = finished{}
		d.settle = d.settle[1:]
		if err := d.settleWaiters(ctx, dep); err != nil {
			return err
		}
	}
	return nil
}

// holdSettling runs fn with the settling of the waiters of the tasks fn
// finishes held back until fn is done, then settles them as one
// work-list (settleAll: the budget, and pending settlements for what it
// leaves). So fn may end several tasks, some waiting on others, each in
// its own name, before any of them is settled by the dependency rule
// (cancelSteps). Inside a settling, or on a nil d (a transaction that is
// not a deliveryTx), it only runs fn.
func (d *deliveryTx) holdSettling(ctx context.Context, fn func() error) error {
	if d == nil || d.settling {
		return fn()
	}
	d.settling = true
	err := fn()
	d.settling = false
	if err != nil {
		return err
	}
	return d.settleAll(ctx)
}

// settleWaiters runs in the transaction that wrote dep's terminal state: it
// records the state on dep's open edges and settles each waiter whose rule
// that decides. A waiter it cancels joins the work-list (settleAll).
func (d *deliveryTx) settleWaiters(ctx context.Context, dep finished) error {
	now := d.e.now()
	var settled []store.SettledWaiter
	var err error
	if r, ok := d.Tx.(store.WaiterReadier); ok {
		// The store moves the waiters the rule lets run to queued itself
		// and hands over only those whose rule this end may break.
		var ready []*host.Task
		ready, settled, err = r.SettleReadyWaiters(ctx, dep.tenant, dep.id, dep.state, now)
		d.readied = append(d.readied, ready...)
		d.spent += len(ready)
	} else {
		settled, err = d.Tx.SettleWaiters(ctx, dep.tenant, dep.id, dep.state)
	}
	d.spent += len(settled)
	if err != nil || len(settled) == 0 {
		return err
	}
	for _, sw := range settled {
		w, tally := sw.Task, sw.Tally // locked, in id order (one lock order for every writer)
		if w.State != host.StateWaiting {
			continue // canceled by its owner meanwhile
		}
		switch tally.Decide() {
		case host.VerdictReady:
			w.State, w.UpdatedAt = host.StateQueued, now
			if w.AvailableAt.Before(now) {
				w.AvailableAt = now
			}
			if err := d.UpdateTask(ctx, w, store.Fence{State: host.StateWaiting}); err != nil {
				return err
			}
			d.readied = append(d.readied, w)
		case host.VerdictCancel:
			// Only this dependency's end can break the rule now: an
			// earlier failure would have settled the waiter already.
			state := dep.state
			reason := "dependency " + dep.id + " finished " + string(state) + "; rule " + string(tally.Rule) + " can no longer be met"
			parents, types := taskParents(w)
			r := &host.Receipt{Type: host.ReceiptCanceled, From: GatePrincipal, Parents: parents,
				Body: mustJSON(map[string]any{"reason": reason, "canceled_by": GatePrincipal,
					"dependency": dep.id, "dependency_status": state, "after_rule": tally.Rule}),
				DedupeKey: cancelDedupe(w.ID)}
			fillTaskReceipt(r, w, "", now)
			w.State, w.CompletedAt, w.UpdatedAt = host.StateCanceled, ptr(now), now
			w.LastError = reason
			d.cause = dep.cause
			err := d.UpdateTask(ctx, w, store.Fence{State: host.StateWaiting})
			d.cause = nil
			if err != nil {
				return err
			}
			if err := appendReceipt(ctx, d, r, types); err != nil {
				return err
			}
			d.canceled = append(d.canceled, w)
		}
	}
	return nil
}

// dependencyOutcomes fills each offer's Dependencies from one read of its
// task's dependencies. A task this engine enqueued without dependencies
// (noDeps) is left out of the read, and a lease of only such tasks reads
// nothing; any other task without dependencies costs its share of the read.
func (e *Engine) dependencyOutcomes(ctx context.Context, tenant string, offers []host.Offer) error {
	var ids []string
	for _, o := range offers {
		if !e.noDeps.has(tenant, o.Task.ID) {
			ids = append(ids, o.Task.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var byWaiter map[string][]*host.Task
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		byWaiter, err = r.DependencyTasks(ctx, tenant, ids)
		return err
	}); err != nil {
		return err
	}
	for i := range offers {
		size := 0
		for _, t := range byWaiter[offers[i].Task.ID] {
			o := host.OutcomeOf(t)
			o.Status = host.FinishedAs(t)
			if o.Status == "" {
				o.Status = t.State // any_succeeded: a dependency still running
			}
			if size >= host.MaxOutcomeBytes {
				o.Truncate()
			} else if n := outcomeSize(o); size+n > host.MaxOutcomeBytes {
				o.Truncate()
				size = host.MaxOutcomeBytes // later ones are truncated too: after order stays a prefix
			} else {
				size += n
			}
			offers[i].Dependencies = append(offers[i].Dependencies, o)
		}
	}
	return nil
}

// outcomeSize is the encoded size of o's large parts: its result and its
// errors (the rest is bounded by the task's own limits).
func outcomeSize(o host.DependencyOutcome) int {
	n := len(o.Error) + len(o.DeadReason)
	if o.Result != nil {
		b, err := json.Marshal(o.Result)
		if err != nil {
			return host.MaxOutcomeBytes
		}
		n += len(b)
	}
	return n
}

// resultReleased reports whether d's result was archived with its payload
// released (or being released): a task that waits on d now would be
// offered a pointer its worker can never read.
func resultReleased(d *host.Task) bool {
	r := d.Result
	return r != nil && r.ArchivedAt != nil && (r.PurgedAt != nil || releasesPayload(r))
}

// checkRedrivable refuses the redrive of dead letter t when one of the
// tasks it waited on has had its result archived and its payload released
// since t finished (a dead-lettered waiter no longer holds that result):
// the redriven task's worker would be offered a pointer to a payload that
// is gone, as an enqueue after that result would be (placeAfter). The
// dependencies are read under their locks (PostgreSQL: FOR SHARE), so an
// archive racing the redrive either sees the waiter unfinished again and
// is refused, or is seen here.
func checkRedrivable(ctx context.Context, tx store.Tx, t *host.Task) error {
	edges, err := tx.ListDependencies(ctx, t.Tenant, t.ID)
	if err != nil || len(edges) == 0 {
		return err
	}
	ids := make([]string, len(edges))
	for i, d := range edges {
		ids[i] = d.DependsOn
	}
	deps, err := tx.LockDependencies(ctx, t.Tenant, ids)
	if err != nil {
		return err
	}
	for _, d := range deps {
		if resultReleased(d) {
			return host.Errorf(host.CodeConflict, "task %s waited on task %s, whose result was archived at %s and its payload released: "+
				"redriven, its worker could not read it; queue a new task with what it needs in the params instead",
				t.ID, d.ID, d.Result.ArchivedAt.UTC().Format(time.RFC3339))
		}
	}
	return nil
}
