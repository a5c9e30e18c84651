package engine

import (
	"context"
	"slices"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Visible reports whether actor may see task t, by the rule every read of a
// task follows (visible).
func Visible(a Actor, t *host.Task) bool { return visible(a, t) }

// visible reports whether actor may see task t. Admins see their whole tenant;
// agents see the tasks they queued or that are addressed to them; workers see
// the tasks they hold, while they hold them: a task a worker completed (its
// worker_id stays, as who did it) is no more its to read, or to address
// receipts about, than one whose lease expired. Another tenant's task is
// never visible.
func visible(a Actor, t *host.Task) bool {
	if t == nil || t.Tenant != a.Tenant {
		return false
	}
	switch a.Role {
	case RoleAdmin:
		return true
	case RoleWorker:
		return t.WorkerID == a.Principal && t.State == host.StateLeased
	default:
		return t.CreatedBy == a.Principal || t.Recipient == a.Principal
	}
}

// GetTask returns a task the actor may see, or not_found, with what it
// waits (or waited) on: After and AfterRule.
func (e *Engine) GetTask(ctx context.Context, actor Actor, id string) (*host.Task, error) {
	return e.getTask(ctx, actor, id, true)
}

// PeekTask is GetTask without the task's dependency edges (After and
// AfterRule stay empty): one read (two when its cancel is requested or it
// is canceled: who asked and why, as GetTask fills them), for callers that
// check a task's visibility or state and never show what it waits on — an
// MCP task's status polls, a receipt's addressees, a result's channel.
func (e *Engine) PeekTask(ctx context.Context, actor Actor, id string) (*host.Task, error) {
	return e.getTask(ctx, actor, id, false)
}

func (e *Engine) getTask(ctx context.Context, actor Actor, id string, edges bool) (*host.Task, error) {
	var t *host.Task
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		if t, err = r.GetTask(ctx, actor.Tenant, id); err != nil || !visible(actor, t) {
			return err
		}
		if edges {
			// What the task waits (or waited) on: its edges, in after order.
			deps, err := r.ListDependencies(ctx, actor.Tenant, id)
			for _, d := range deps {
				t.After = append(t.After, d.DependsOn)
				t.AfterRule = d.Rule
			}
			if err != nil {
				return err
			}
		}
		// Who asked for its cancel and why, from the receipt that recorded it.
		return fillCancel(ctx, r, t)
	})
	if err != nil {
		return nil, err
	}
	if !visible(actor, t) {
		return nil, host.Errorf(host.CodeNotFound, "no task %s", id)
	}
	t.State = t.Presented(e.now())
	return t, nil
}

// ListTasks lists the tasks the actor may see. Agents see only their own.
func (e *Engine) ListTasks(ctx context.Context, actor Actor, f store.TaskFilter) ([]*host.Task, string, error) {
	f.Tenant = actor.Tenant
	if actor.Role != RoleAdmin {
		f.Principal = actor.Principal
	}
	var err error
	if f.Limit, err = pageSize(f.Limit, MaxPage); err != nil {
		return nil, "", err
	}
	want := map[host.TaskState]bool{}
	var stored []host.TaskState
	for _, s := range f.States {
		if !s.Valid() {
			return nil, "", host.Errorf(host.CodeBadRequest, "unknown status %q", s)
		}
		want[s] = true
		if s == host.StateScheduled {
			s = host.StateQueued // stored as queued; told apart below
		}
		if !slices.Contains(stored, s) {
			stored = append(stored, s)
		}
	}
	f.States = stored
	var out []*host.Task
	var cur string
	err = e.view(ctx, func(r store.Reader) error {
		var err error
		out, cur, err = r.ListTasks(ctx, f)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	// Scheduled and queued (ready) are one stored state: a page asked for
	// one of them drops the other's tasks, and may hold fewer than the limit
	// though more follow (its cursor says so).
	now := e.now()
	kept := out[:0]
	for _, t := range out {
		t.State = t.Presented(now)
		if len(want) == 0 || want[t.State] {
			kept = append(kept, t)
		}
	}
	return kept, cur, nil
}

// FillCancels sets, on tasks the actor read (from ListTasks, which leaves
// them out), who asked for each one's cancel and why
// (Task.CancelRequestedBy, Task.CancelReason) as GetTask does: one read
// per task whose cancel is requested or that is canceled, none for the
// others.
func (e *Engine) FillCancels(ctx context.Context, actor Actor, ts []*host.Task) error {
	var need []*host.Task
	for _, t := range ts {
		if visible(actor, t) && t.CancelRequestedBy == "" &&
			(t.CancelRequested || host.FinishedAs(t) == host.StateCanceled) {
			need = append(need, t)
		}
	}
	if len(need) == 0 {
		return nil
	}
	return e.view(ctx, func(r store.Reader) error {
		for _, t := range need {
			if err := fillCancel(ctx, r, t); err != nil {
				return err
			}
		}
		return nil
	})
}

// Progress returns a visible task's progress history, newest first.
func (e *Engine) Progress(ctx context.Context, actor Actor, id string, limit int) (*host.Task, []store.Progress, error) {
	t, err := e.GetTask(ctx, actor, id)
	if err != nil {
		return nil, nil, err
	}
	if limit, err = pageSize(limit, MaxLongPage); err != nil {
		return nil, nil, err
	}
	var ps []store.Progress
	err = e.view(ctx, func(r store.Reader) error {
		var err error
		ps, err = r.ListProgress(ctx, actor.Tenant, id, limit)
		return err
	})
	return t, ps, err
}

// DeadLetters lists a tenant's dead-lettered tasks.
func (e *Engine) DeadLetters(ctx context.Context, tenant, cursor string, limit int) ([]*host.Task, string, error) {
	return e.ListTasks(ctx, Actor{Tenant: tenant, Role: RoleAdmin}, store.TaskFilter{States: []host.TaskState{host.StateDeadLetter}, Cursor: cursor, Limit: limit})
}

// Redrive puts a dead letter back in the queue with fresh attempts and a new
// task.assigned receipt (the old assignment was discharged by task.failed);
// the tasks still waiting on it wait for its next end.
func (e *Engine) Redrive(ctx context.Context, actor Actor, taskID string) (*host.Task, error) {
	now := e.now()
	var out *host.Task
	err := e.update(ctx, func(tx store.Tx) error {
		t, err := tx.GetTask(ctx, actor.Tenant, taskID)
		if err != nil {
			return err
		}
		if t.State != host.StateDeadLetter {
			return host.Errorf(host.CodeConflict, "task %s is %s, not a dead letter", taskID, t.State)
		}
		if err := checkRedrivable(ctx, tx, t); err != nil {
			return err
		}
		prev := t.AssignReceipt
		r := &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: t.Tenant, Type: host.ReceiptAssigned, From: GatePrincipal,
			To: t.Recipient, TaskID: t.ID, Parents: []string{prev}, CreatedAt: now,
			Body: mustJSON(map[string]any{"task_type": t.Type, "priority": t.Priority, "queued_by": t.CreatedBy,
				"redriven_by": actor.Principal, "previous_dead_reason": t.DeadReason})}
		t.State, t.AvailableAt, t.UpdatedAt = host.StateQueued, now, now
		t.Attempts, t.LeaseExpiries, t.DeadReason, t.LastError, t.CompletedAt = 0, 0, "", "", nil
		t.AssignReceipt = r.ID
		// Tasks still waiting on it count it as unfinished again: its
		// next end settles them (a waiter its dead letter settled stays
		// as it is). Asked whether or not it is marked as waited on: a
		// waiter enqueued after it had dead-lettered leaves no mark on a
		// finished task, and its edge is reopened all the same — and then
		// the task is marked, so that its next end settles the edge.
		reopened, err := tx.ReopenDependency(ctx, t.Tenant, t.ID)
		if err != nil {
			return err
		}
		if err := tx.UpdateTask(ctx, t, store.Fence{State: host.StateDeadLetter}); err != nil {
			return host.Errorf(host.CodeConflict, "task %s changed during redrive; try again", taskID)
		}
		if len(reopened) > 0 && !t.HasWaiters {
			if err := tx.MarkWaitedOn(ctx, t.Tenant, []string{t.ID}); err != nil {
				return err
			}
			t.HasWaiters = true
		}
		out = t
		return appendReceipt(ctx, tx, r, nil)
	})
	if err != nil {
		return nil, err
	}
	e.waiters.wake(out.Tenant, out.Type, 1)
	return out, nil
}

// Workers lists the workers a tenant has seen, with their in-flight leases.
func (e *Engine) Workers(ctx context.Context, tenant string) ([]WorkerInfo, error) {
	var ws []store.Worker
	var leased []*host.Task
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		if ws, err = r.ListWorkers(ctx, tenant); err != nil {
			return err
		}
		cur := ""
		for {
			var page []*host.Task
			page, cur, err = r.ListTasks(ctx, store.TaskFilter{Tenant: tenant, States: []host.TaskState{host.StateLeased}, Cursor: cur, Limit: 500})
			if err != nil {
				return err
			}
			leased = append(leased, page...)
			if cur == "" {
				return nil
			}
		}
	})
	if err != nil {
		return nil, err
	}
	inflight := map[string][]string{}
	for _, t := range leased {
		inflight[t.WorkerID] = append(inflight[t.WorkerID], t.LeaseID)
	}
	out := make([]WorkerInfo, len(ws))
	for i, w := range ws {
		out[i] = WorkerInfo{Worker: w, InFlight: inflight[w.ID]}
		if out[i].InFlight == nil {
			out[i].InFlight = []string{}
		}
	}
	return out, nil
}

// WorkerInfo is a worker with the leases it holds now.
type WorkerInfo struct {
	store.Worker
	InFlight []string `json:"in_flight_leases"`
}

// Stats returns a snapshot of the queue for monitoring: queued tasks not
// available yet are counted as scheduled, not queued.
func (e *Engine) Stats(ctx context.Context, tenant string) (store.QueueStats, error) {
	var qs store.QueueStats
	now := e.now()
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		qs, err = QueueStats(ctx, r, tenant, now)
		return err
	})
	return qs, err
}

// WorkflowCounts counts a tenant's workflows ("" for every tenant's) by
// state, every state present (0 when none is in it).
func (e *Engine) WorkflowCounts(ctx context.Context, tenant string) (map[host.WorkflowState]int64, error) {
	var out map[host.WorkflowState]int64
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		out, err = r.WorkflowCounts(ctx, tenant)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, st := range host.WorkflowStates {
		if _, ok := out[st]; !ok {
			out[st] = 0
		}
	}
	return out, nil
}

// QueueStats reads r's queue counts of tenant ("" for all) with the
// scheduled tasks at now split from the queued ones.
func QueueStats(ctx context.Context, r store.Reader, tenant string, now time.Time) (store.QueueStats, error) {
	qs, err := r.QueueStats(ctx, tenant)
	if err != nil || qs.ByState[host.StateQueued] == 0 {
		return qs, err
	}
	ds, err := r.ScheduledCounts(ctx, tenant, now)
	if err != nil {
		return qs, err
	}
	qs.SplitScheduled(ds)
	return qs, nil
}

// ArchiveResult archives a visible succeeded task's result: it records when
// it was archived, then, when the payload is held by a channel the gate
// manages (not inline), acknowledges it through that channel, which may
// delete it, and purges the pointer (PurgedAt), as retention does. A result
// whose payload the archive releases is refused (conflict) while a task
// that waits on the task has not finished: its worker reads the payload
// through its lease. Archiving twice is a no-op, save that it finishes an
// archive whose channel failed before the payload was released.
func (e *Engine) ArchiveResult(ctx context.Context, actor Actor, id string) (*host.Task, error) {
	t, err := e.PeekTask(ctx, actor, id) // the answer shows no edges
	if err != nil {
		return nil, err
	}
	return e.archiveResult(ctx, actor, t)
}

// archiveResult is ArchiveResult of t, the task as PeekTask read it.
//
// The order closes the race with an enqueue after t: the transaction that
// records archived_at first locks t's row (GetTask inside Update) and then
// reads its unfinished waiters (store.Reader.OwedWaiters), and an enqueue
// reads its dependencies under a share lock (LockDependencies) and refuses
// one whose result was released (placeAfter). Whichever commits second sees
// the other's rows, so either the archive is refused or the enqueue is. The
// channel's ack comes only after that commit, so no payload is released
// that a waiter committed before may still read.
func (e *Engine) archiveResult(ctx context.Context, actor Actor, t *host.Task) (*host.Task, error) {
	id := t.ID
	if t.State != host.StateSucceeded || t.Result == nil {
		return nil, host.Errorf(host.CodeConflict, "task %s is %s and has no result to archive", id, t.State)
	}
	if owed := resultOwedTo(t); t.Result.ArchivedAt == nil && releasesPayload(t.Result) && actor.Role != RoleAdmin && owed != actor.Principal {
		return nil, host.Errorf(host.CodeForbidden, "task %s's result is owed to %s (its recipient_ai): archiving releases the payload, "+
			"so only %s or an admin may archive it", id, owed, owed)
	}
	if t.Result.ArchivedAt == nil {
		now := e.now()
		err := e.update(ctx, func(tx store.Tx) error {
			cur, err := tx.GetTask(ctx, actor.Tenant, id) // locks it against an enqueue naming it
			if err != nil {
				return err
			}
			if cur.State != host.StateSucceeded || cur.Result == nil {
				return host.Errorf(host.CodeConflict, "task %s is %s and has no result to archive", id, cur.State)
			}
			if cur.Result.ArchivedAt != nil {
				t = cur
				return nil
			}
			if releasesPayload(cur.Result) {
				n, first, err := tx.OwedWaiters(ctx, cur.Tenant, id)
				if err != nil {
					return err
				}
				if n > 0 {
					return host.Errorf(host.CodeConflict, "task %s's result is still needed by %d unfinished %s that %s on it (first: %s); "+
						"archiving it would delete the payload their workers read, so archive it after they finish", id, n, plural(n, "task", "tasks"), plural(n, "waits", "wait"), first)
				}
			}
			cur.Result.ArchivedAt = ptr(now)
			cur.UpdatedAt = now
			t = cur
			if err := tx.UpdateTask(ctx, cur, store.Fence{State: host.StateSucceeded}); err != nil {
				return err
			}
			// A workflow's final step: the workflow's copy of its result says
			// it was archived too, as the step's does.
			if id, final := host.WorkflowOf(cur); final {
				if err := archiveWorkflowResult(ctx, tx, cur, id, now, false); err != nil {
					return err
				}
			}
			// Only the archiving principal's own items: another's act is not
			// theirs to record (seed 002).
			_, err = tx.MarkInbox(ctx, store.InboxMark{Tenant: cur.Tenant, Recipient: actor.Principal, TaskID: cur.ID, Field: host.InboxFetched, At: now})
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return e.releaseArchived(ctx, t)
}

// resultOwedTo is the principal t's result is owed to: its recipient, or,
// for a workflow's step, the workflow's submitter (who queued the step).
func resultOwedTo(t *host.Task) string {
	if wf, _ := host.WorkflowOf(t); wf != "" || t.Recipient == "" {
		return t.CreatedBy
	}
	return t.Recipient
}

// releasesPayload reports whether archiving r acknowledges its payload
// through a channel that may delete it: a pointer the gate stored through a
// channel other than inline (whose payload is the pointer itself), not
// purged yet. A pointer the worker gave is not the gate's to release.
func releasesPayload(r *host.Result) bool {
	if r == nil || r.Pointer == "" || r.PurgedAt != nil {
		return false
	}
	name := pointerChannel(r)
	return name != "" && name != "inline"
}

// releaseArchived acknowledges an archived result's payload through its
// channel and then purges the pointer (PurgedAt) on the task and on its
// workflow's copy, so no read presents a pointer to a payload that is gone.
// A channel that fails leaves the result archived with its pointer: the
// answer is channel_error, and archiving again retries.
func (e *Engine) releaseArchived(ctx context.Context, t *host.Task) (*host.Task, error) {
	if !releasesPayload(t.Result) {
		return t, nil
	}
	ch, name, managed := e.managedChannel(t.Result)
	if ch == nil || !managed {
		return t, nil // no such channel here: nothing this gate can release
	}
	pointer := t.Result.Pointer
	if err := ch.Ack(ctx, pointer); err != nil {
		return nil, host.WrapError(host.CodeChannelError, err, "task "+t.ID+"'s result is archived, but result channel "+name+
			" failed to release its payload: "+err.Error()+"; archive it again to retry")
	}
	now := e.now()
	err := e.update(ctx, func(tx store.Tx) error {
		cur, err := tx.GetTask(ctx, t.Tenant, t.ID)
		if err != nil {
			return err
		}
		t = cur
		if cur.Result == nil || cur.Result.Pointer != pointer || cur.Result.PurgedAt != nil {
			return nil // purged meanwhile (retention, another archive)
		}
		r := *cur.Result
		r.Pointer, r.PurgedAt = "", ptr(now)
		cur.Result, cur.UpdatedAt = &r, now
		if err := tx.UpdateTask(ctx, cur, store.Fence{State: cur.State, Version: cur.Version}); err != nil {
			return err
		}
		if id, final := host.WorkflowOf(cur); final {
			return archiveWorkflowResult(ctx, tx, cur, id, now, true)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// archiveWorkflowResult sets, in tx, ArchivedAt on the result of workflow id
// when step is its final step and the workflow holds the step's result;
// purged also clears its pointer and sets PurgedAt, as the step's were.
func archiveWorkflowResult(ctx context.Context, tx store.Tx, step *host.Task, id string, now time.Time, purged bool) error {
	wf, err := tx.GetWorkflow(ctx, step.Tenant, id) // locks it, after the step's row, as an end does
	if host.IsCode(err, host.CodeNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if wf.FinalTaskID != step.ID || wf.Result == nil || (wf.Result.ArchivedAt != nil && (!purged || wf.Result.PurgedAt != nil)) {
		return nil
	}
	r := *wf.Result
	if r.ArchivedAt == nil {
		r.ArchivedAt = ptr(now)
	}
	if purged {
		r.Pointer, r.PurgedAt = "", ptr(now)
	}
	wf.Result, wf.UpdatedAt = &r, now
	if err := tx.UpdateWorkflow(ctx, wf, wf.State); err != nil && err != store.ErrFenced {
		return err
	}
	return nil
}
