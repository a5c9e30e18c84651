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
}

func (r *RetentionReport) add(o RetentionReport) {
	r.Archived += o.Archived
	r.Purged += o.Purged
	r.ChannelErrors += o.ChannelErrors
	r.WorkflowsArchived += o.WorkflowsArchived
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
	if total.Archived > 0 || total.ChannelErrors > 0 {
		e.log.Info("retention sweep", "archived", total.Archived, "payloads_purged", total.Purged, "channel_errors", total.ChannelErrors,
			"workflows_archived", total.WorkflowsArchived)
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

// archiveTasks archives ts: payloads first, through their channels, outside
// any transaction (a slow channel holds no write); then one transaction
// moves every task whose payload is gone to archived, fenced on the version
// read, so a task redriven meanwhile is left alone. A task that is a
// workflow's final step archives its workflow in that transaction.
func (e *Engine) archiveTasks(ctx context.Context, ts []*host.Task, now time.Time) (RetentionReport, error) {
	var rep RetentionReport
	var workflows int
	var ready []*host.Task
	purged := map[string]bool{}
	for _, t := range ts {
		ch, name, managed := e.managedChannel(t.Result)
		if ch != nil {
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := ch.Ack(actx, t.Result.Pointer)
			cancel()
			if err != nil {
				rep.ChannelErrors++
				e.log.Warn("retention: the channel did not archive a payload; retrying next sweep", "task_id", t.ID, "channel", name, "err", err)
				e.emit(Event{Kind: EvRetentionError, Tenant: t.Tenant, TaskType: t.Type, Detail: name})
				continue
			}
		}
		purged[t.ID] = managed
		ready = append(ready, t)
	}
	if len(ready) == 0 {
		return rep, nil
	}
	var moved []*host.Task
	err := e.update(ctx, func(tx store.Tx) error {
		moved, workflows = moved[:0], 0
		for _, t := range ready {
			cur := *t
			if cur.Result != nil {
				r := *cur.Result
				cur.Result = &r
				if purged[t.ID] {
					cur.Result.Pointer, cur.Result.PurgedAt = "", ptr(now)
				}
				if cur.Result.ArchivedAt == nil {
					cur.Result.ArchivedAt = ptr(now)
				}
			}
			cur.State, cur.UpdatedAt = host.StateArchived, now
			err := tx.UpdateTask(ctx, &cur, store.Fence{State: t.State, Version: t.Version})
			if err == store.ErrFenced {
				continue // changed since it was read (redriven): the next sweep decides again
			}
			if err != nil {
				return err
			}
			moved = append(moved, &cur)
			if _, final := host.WorkflowOf(&cur); final {
				done, err := archiveWorkflow(ctx, tx, &cur, purged[t.ID], now)
				if err != nil {
					return err
				}
				if done {
					workflows++
				}
			}
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	rep.WorkflowsArchived = workflows
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
