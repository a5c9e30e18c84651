package engine

import (
	"context"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// RetentionConfig says how long finished tasks keep their payloads.
type RetentionConfig struct {
	// DefaultDays applies to finished tasks whose task type is no longer
	// registered (registered types carry their own retention_days, which
	// defaults to the seed's 30). Default host.DefaultRetentionDays.
	DefaultDays int
	// DeadLetterDays is how long dead letters are kept for an operator to
	// look at or redrive, whatever their type (default 90).
	DeadLetterDays int
	// Batch is how many tasks one transaction archives (default 100);
	// MaxBatches bounds the batches of one task type per sweep (default 10),
	// so one sweep's work is bounded whatever the backlog.
	Batch      int
	MaxBatches int
	// Interval is how often the background sweeper runs (default 1 min);
	// negative: never (RetentionSweep still works when called).
	Interval time.Duration
}

// DefaultDeadLetterDays is how long dead letters are kept by default.
const DefaultDeadLetterDays = 90

// DefaultRetentionInterval is how often the retention sweeper runs by default.
const DefaultRetentionInterval = time.Minute

func (c *RetentionConfig) defaults() {
	if c.DefaultDays <= 0 {
		c.DefaultDays = host.DefaultRetentionDays
	}
	if c.DeadLetterDays <= 0 {
		c.DeadLetterDays = DefaultDeadLetterDays
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	if c.MaxBatches <= 0 {
		c.MaxBatches = 10
	}
	if c.Interval == 0 {
		c.Interval = DefaultRetentionInterval
	}
}

// Event kinds of retention.
const (
	EvArchived       EventKind = "archived"        // a finished task past its retention moved to archived
	EvPayloadPurged  EventKind = "payload_purged"  // its payload was archived through its channel and purged
	EvRetentionError EventKind = "retention_error" // a channel refused to archive a payload; retried next sweep
)

// RetentionReport says what one sweep did.
type RetentionReport struct {
	Archived      int `json:"archived"`
	Purged        int `json:"payloads_purged"`
	ChannelErrors int `json:"channel_errors"`
	// WorkflowsArchived counts the workflows archived with their final
	// step (archiveWorkflow).
	WorkflowsArchived int `json:"workflows_archived"`
	// Held counts the tasks left for a later sweep because a task enqueued
	// after one since the sweep read it had not finished (heldForWaiters);
	// the owed tasks the read passed by (store RetentionDue) are not
	// counted.
	Held int `json:"held_for_waiters"`
}

func (r *RetentionReport) add(o RetentionReport) {
	r.Archived += o.Archived
	r.Purged += o.Purged
	r.ChannelErrors += o.ChannelErrors
	r.WorkflowsArchived += o.WorkflowsArchived
	r.Held += o.Held
}

var (
	finishedStates = []host.TaskState{host.StateSucceeded, host.StateCanceled}
	deadStates     = []host.TaskState{host.StateDeadLetter}
)

// RetentionSweep archives every finished task past its retention: each task
// type's retention_days for succeeded and canceled tasks, DeadLetterDays for
// dead letters, DefaultDays for tasks of types no longer registered. A
// payload held by a channel the gate manages is archived through that
// channel (its ack) and its pointer purged; the task moves to archived;
// receipts and inbox items stay. A workflow's final step takes its ended
// workflow with it (archiveWorkflow). Work is done in bounded batches.
func (e *Engine) RetentionSweep(ctx context.Context) (RetentionReport, error) {
	cfg := e.cfg.Delivery.Retention
	cfg.defaults()
	now := e.now()
	days := func(d int) time.Time { return now.Add(-time.Duration(d) * 24 * time.Hour) }
	var keys []store.TaskTypeKey
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		keys, err = r.ListTaskTypeKeys(ctx)
		return err
	}); err != nil {
		return RetentionReport{}, err
	}
	var total RetentionReport
	var queries []store.RetentionQuery
	for _, k := range keys {
		d := cfg.DefaultDays
		if ct, err := e.types.get(ctx, k.Tenant, k.Name); err == nil && ct.tt.DefaultRetentionDays > 0 {
			d = ct.tt.DefaultRetentionDays
		}
		queries = append(queries,
			store.RetentionQuery{Tenant: k.Tenant, Type: k.Name, States: finishedStates, Before: days(d)},
			store.RetentionQuery{Tenant: k.Tenant, Type: k.Name, States: deadStates, Before: days(cfg.DeadLetterDays)})
	}
	queries = append(queries,
		store.RetentionQuery{Orphans: true, States: finishedStates, Before: days(cfg.DefaultDays)},
		store.RetentionQuery{Orphans: true, States: deadStates, Before: days(cfg.DeadLetterDays)})
	for _, q := range queries {
		q.Limit = cfg.Batch
		for i := 0; i < cfg.MaxBatches; i++ {
			var ts []*host.Task
			if err := e.view(ctx, func(r store.Reader) error {
				var err error
				ts, err = r.RetentionDue(ctx, q)
				return err
			}); err != nil {
				return total, err
			}
			rep, err := e.archiveTasks(ctx, ts, now)
			total.add(rep)
			if err != nil {
				return total, err
			}
			if len(ts) < q.Limit || rep.Archived == 0 {
				break // drained, or nothing in this batch could move (a channel is down)
			}
		}
	}
	if total.Archived > 0 || total.ChannelErrors > 0 || total.Held > 0 {
		e.log.Info("retention sweep", "archived", total.Archived, "payloads_purged", total.Purged, "channel_errors", total.ChannelErrors,
			"workflows_archived", total.WorkflowsArchived, "held_for_waiters", total.Held)
	}
	return total, nil
}

// managedChannel returns the channel that holds a result's payload when the
// gate manages it, and whether the payload lives in the pointer itself
// (inline).
func (e *Engine) managedChannel(res *host.Result) (host.Channel, string, bool) {
	if res == nil || res.Pointer == "" || res.PurgedAt != nil {
		return nil, "", false
	}
	name := pointerChannel(res)
	if name == "" {
		return nil, "", false // the worker's own location: not the gate's to purge
	}
	if name == "inline" {
		return nil, name, true
	}
	if e.cfg.Plugins == nil {
		return nil, name, false
	}
	ch, err := e.cfg.Plugins.Channel(name)
	if err != nil {
		return nil, name, false
	}
	return ch, name, true
}

// archiveTasks archives ts, finished tasks as RetentionDue read them, in
// the order of the manual archive (archiveResult), so that no payload is
// released that a waiter may still read:
//
//  1. One transaction locks each task's row (GetTask inside Update) and,
//     when it is still as read (not redriven since), decides. A result
//     whose payload retention would take (heldForWaiters) is left for a
//     later sweep while store.Reader.OwedWaiters counts an unfinished
//     waiter; RetentionDue passes such tasks by already, so this catches
//     a waiter enqueued since the read. A payload a channel holds gets
//     archived_at and its task stays in its state until the payload is
//     released: an enqueue after it from then on is refused (placeAfter),
//     and one committed before was counted. Any other task moves to
//     archived at once (an inline payload, which is its pointer, purged).
//  2. Each such payload is acknowledged through its channel, outside any
//     transaction (a slow channel holds no write). A channel that fails
//     leaves its task archived_at with its pointer; the next sweep finds
//     it again and retries.
//  3. One transaction purges the pointer of each released payload
//     (PurgedAt) and moves its task to archived.
//
// A task that is a workflow's final step archives its workflow with it.
func (e *Engine) archiveTasks(ctx context.Context, ts []*host.Task, now time.Time) (RetentionReport, error) {
	var rep RetentionReport
	type release struct {
		t       *host.Task // as the first transaction wrote it
		ch      host.Channel
		name    string
		pointer string
	}
	var releases []release
	var moved []*host.Task
	purged := map[string]bool{}
	type heldTask struct {
		id      string
		waiters int
		first   string
	}
	var held []heldTask
	err := e.update(ctx, func(tx store.Tx) error {
		releases, moved, held, rep.WorkflowsArchived = releases[:0], moved[:0], held[:0], 0
		clear(purged)
		for _, t := range ts {
			cur, err := tx.GetTask(ctx, t.Tenant, t.ID) // locks it against an enqueue naming it
			if host.IsCode(err, host.CodeNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if cur.State != t.State || cur.Version != t.Version {
				continue // changed since it was read (redriven): the next sweep decides again
			}
			if heldForWaiters(cur.Result) {
				n, first, err := tx.OwedWaiters(ctx, cur.Tenant, cur.ID)
				if err != nil {
					return err
				}
				if n > 0 {
					held = append(held, heldTask{id: cur.ID, waiters: n, first: first})
					continue
				}
			}
			ch, name, managed := e.managedChannel(cur.Result)
			if ch != nil {
				if cur.Result.ArchivedAt == nil {
					r := *cur.Result
					r.ArchivedAt = ptr(now)
					cur.Result, cur.UpdatedAt = &r, now
					err := tx.UpdateTask(ctx, cur, store.Fence{State: t.State, Version: t.Version})
					if err == store.ErrFenced {
						continue // changed since it was read: the next sweep decides again
					}
					if err != nil {
						return err
					}
					if id, final := host.WorkflowOf(cur); final {
						if err := archiveWorkflowResult(ctx, tx, cur, id, now, false); err != nil {
							return err
						}
					}
				}
				releases = append(releases, release{t: cur, ch: ch, name: name, pointer: cur.Result.Pointer})
				continue
			}
			done, err := archiveTask(ctx, tx, cur, store.Fence{State: t.State, Version: t.Version}, managed, now)
			if err != nil {
				return err
			}
			if done >= 0 {
				moved = append(moved, cur)
				purged[cur.ID] = managed
				rep.WorkflowsArchived += done
			}
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	rep.Held = len(held)
	for _, h := range held {
		e.log.Info("retention: a result is still owed to unfinished waiters; left for a later sweep",
			"task_id", h.id, "waiters", h.waiters, "first_waiter", h.first)
	}
	var acked []release
	for _, rl := range releases {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := rl.ch.Ack(actx, rl.pointer)
		cancel()
		if err != nil {
			rep.ChannelErrors++
			e.log.Warn("retention: the channel did not archive a payload; retrying next sweep", "task_id", rl.t.ID, "channel", rl.name, "err", err)
			e.emit(Event{Kind: EvRetentionError, Tenant: rl.t.Tenant, TaskType: rl.t.Type, Detail: rl.name})
			continue
		}
		acked = append(acked, rl)
	}
	if len(acked) > 0 {
		var after []*host.Task
		var workflows int
		err = e.update(ctx, func(tx store.Tx) error {
			after, workflows = after[:0], 0
			for _, rl := range acked {
				cur, err := tx.GetTask(ctx, rl.t.Tenant, rl.t.ID)
				if host.IsCode(err, host.CodeNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				if cur.State != rl.t.State || cur.Result == nil {
					continue // moved on meanwhile (another host's sweep)
				}
				if cur.Result.Pointer != rl.pointer && cur.Result.PurgedAt == nil {
					continue // not the payload released: the next sweep decides again
				}
				done, err := archiveTask(ctx, tx, cur, store.Fence{State: cur.State, Version: cur.Version}, true, now)
				if err != nil {
					return err
				}
				if done >= 0 {
					after = append(after, cur)
					workflows += done
				}
			}
			return nil
		})
		if err != nil {
			return rep, err
		}
		for _, t := range after {
			moved = append(moved, t)
			purged[t.ID] = true
		}
		rep.WorkflowsArchived += workflows
	}
	for _, t := range moved {
		rep.Archived++
		e.emit(Event{Kind: EvArchived, Tenant: t.Tenant, TaskType: t.Type})
		if purged[t.ID] {
			rep.Purged++
			e.emit(Event{Kind: EvPayloadPurged, Tenant: t.Tenant, TaskType: t.Type})
		}
	}
	return rep, nil
}

// heldForWaiters reports whether retention, archiving a task with result
// r, would take from a task that waits on it what its worker reads: a
// payload in a channel the gate stored it through (released by the ack),
// or an inline one (the pointer, which retention purges); and, either way,
// the read through the waiter's lease, which answers only for a succeeded
// task. A pointer the worker gave (or none: artifacts, a delivery proof)
// stays in the waiter's offer after retention, so it holds nothing; the
// manual archive, which leaves the task succeeded and an inline pointer in
// place, waits only for a payload it releases (releasesPayload).
func heldForWaiters(r *host.Result) bool {
	return r != nil && r.Pointer != "" && r.PurgedAt == nil && pointerChannel(r) != ""
}

// archiveTask moves cur, locked in tx, to archived, fenced on fence: its
// pointer cleared when purge (the payload released, or inline), PurgedAt
// and ArchivedAt set, and a workflow whose final step it is archived with
// it. It returns -1 when the fence failed (changed meanwhile: the next
// sweep decides again), else the number of workflows archived (0 or 1).
func archiveTask(ctx context.Context, tx store.Tx, cur *host.Task, fence store.Fence, purge bool, now time.Time) (int, error) {
	if cur.Result != nil {
		r := *cur.Result
		if purge && r.PurgedAt == nil {
			r.Pointer, r.PurgedAt = "", ptr(now)
		}
		if r.ArchivedAt == nil {
			r.ArchivedAt = ptr(now)
		}
		cur.Result = &r
	}
	cur.State, cur.UpdatedAt = host.StateArchived, now
	err := tx.UpdateTask(ctx, cur, fence)
	if err == store.ErrFenced {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	if _, final := host.WorkflowOf(cur); final {
		done, err := archiveWorkflow(ctx, tx, cur, purge, now)
		if err != nil || !done {
			return 0, err
		}
		return 1, nil
	}
	return 0, nil
}

// archiveWorkflow archives, in tx, the workflow whose final step step is,
// once archived: the workflow moves from its end state to archived (Outcome
// keeps the end state) and its copy of the final step's result gets the
// step's treatment (its pointer cleared when the payload was purged,
// PurgedAt and ArchivedAt set), so no workflow hands out a pointer to a
// payload that is gone. A workflow ends in the transaction that finishes
// its final step (endWorkflow), so one whose final step is archived has
// ended; a workflow that has not ended, or whose final step is another
// task, is left as it is. No receipt is written, as none is for the task:
// archiving ends no obligation.
func archiveWorkflow(ctx context.Context, tx store.Tx, step *host.Task, purged bool, now time.Time) (bool, error) {
	id, _ := host.WorkflowOf(step)
	wf, err := tx.GetWorkflow(ctx, step.Tenant, id) // locks it, after the step's row, as an end does
	if host.IsCode(err, host.CodeNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if wf.FinalTaskID != step.ID || !wf.State.Terminal() || wf.State == host.WorkflowArchived {
		return false, nil
	}
	from := wf.State
	if wf.Outcome == "" {
		wf.Outcome = from
	}
	if wf.Result != nil {
		r := *wf.Result
		if purged {
			r.Pointer, r.PurgedAt = "", ptr(now)
		}
		if r.ArchivedAt == nil {
			r.ArchivedAt = ptr(now)
		}
		wf.Result = &r
	}
	wf.State, wf.ArchivedAt, wf.UpdatedAt = host.WorkflowArchived, ptr(now), now
	if err := tx.UpdateWorkflow(ctx, wf, from); err != nil {
		if err == store.ErrFenced {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// retentionLoop runs RetentionSweep every Interval until Close.
func (e *Engine) retentionLoop(every time.Duration) {
	defer e.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			if _, err := e.RetentionSweep(context.Background()); err != nil {
				e.log.Warn("retention sweep failed", "err", err)
			}
		}
	}
}

// startDelivery starts the delivery loops (called by Start).
func (e *Engine) startDelivery() {
	r := e.cfg.Delivery.Retention
	r.defaults()
	if r.Interval > 0 {
		e.wg.Add(1)
		go e.retentionLoop(r.Interval)
	}
	if e.cfg.Delivery.OutboxConfig.Sink != nil || e.cfg.Delivery.Mail != nil {
		e.wg.Add(1)
		go e.outboxLoop()
	}
}
