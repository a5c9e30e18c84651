package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// LeaseRequest asks for up to MaxTasks offers.
type LeaseRequest struct {
	Tenant       string
	WorkerID     string
	Capabilities []string
	// Types restricts the offers to these task types (the spec's task_types,
	// the Lease Protocol's preferred_kinds). Empty: any type.
	Types    []string
	MaxTasks int // default 1, at most 100
	// LeaseSeconds overrides the task type's lease length (capped by
	// Config.MaxLeaseSeconds).
	LeaseSeconds int
	// Wait long-polls up to this long (capped by Config.MaxWait) when no task is ready.
	Wait time.Duration
}

// MaxBatch is the most offers one lease call returns.
const MaxBatch = 100

// Lease grants up to MaxTasks offers, priority 10→1 then oldest first. With Wait
// it parks until a matching task is queued or Wait passes. No offer: an empty
// slice and no error.
func (e *Engine) Lease(ctx context.Context, req LeaseRequest) ([]host.Offer, error) {
	if !host.ValidWorkerID(req.WorkerID) {
		return nil, host.Errorf(host.CodeInvalidWorkerID, "must match pattern {type}.{instance}")
	}
	if req.MaxTasks == 0 {
		req.MaxTasks = 1
	}
	if req.MaxTasks < 1 || req.MaxTasks > MaxBatch {
		return nil, host.Errorf(host.CodeBadRequest, "max_tasks must be 1..%d", MaxBatch)
	}
	if req.LeaseSeconds < 0 {
		return nil, host.Errorf(host.CodeBadRequest, "lease_seconds must not be negative")
	}
	if len(req.Types) > 50 {
		return nil, host.Errorf(host.CodeBadRequest, "at most 50 task types per lease call")
	}
	if req.Wait > e.cfg.MaxWait {
		req.Wait = e.cfg.MaxWait
	}
	e.sawWorker(ctx, req.Tenant, req.WorkerID, req.Capabilities)
	var deadline <-chan time.Time
	if req.Wait > 0 {
		t := time.NewTimer(req.Wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		var w *waiter
		if req.Wait > 0 {
			w = e.waiters.add(req.Tenant, req.Types)
		}
		offers, err := e.claim(ctx, req)
		if err != nil && req.Wait > 0 && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// The long-poll's caller stopped waiting (it went away, or the
			// server began shutting down) while a claim ran. A store reports
			// the context's error only for work it did not commit, so nothing
			// was offered: the poll ends empty, as it does when ctx ends
			// while parked below.
			offers, err = nil, nil
		}
		if err != nil || len(offers) > 0 || req.Wait <= 0 {
			if w != nil {
				e.waiters.remove(req.Tenant, w)
			}
			return offers, err
		}
		// Delayed tasks become ready without a wake-up; look again at least every second.
		poll := time.NewTimer(time.Second)
		select {
		case <-w.ch:
		case <-poll.C:
		case <-deadline:
			poll.Stop()
			e.waiters.remove(req.Tenant, w)
			return nil, nil
		case <-ctx.Done():
			poll.Stop()
			e.waiters.remove(req.Tenant, w)
			return nil, nil
		case <-e.stop:
			poll.Stop()
			e.waiters.remove(req.Tenant, w)
			return nil, nil
		}
		poll.Stop()
		e.waiters.remove(req.Tenant, w)
	}
}

func (e *Engine) claim(ctx context.Context, req LeaseRequest) ([]host.Offer, error) {
	now := e.now()
	var tasks []*host.Task
	var typeErr error
	var granted []*host.ResourceLease
	err := e.update(ctx, func(tx store.Tx) error {
		typeErr, granted = nil, nil
		// Tasks whose type names resource intents: their state before the
		// grant, to step them aside when their resources are held.
		var snaps map[string]host.Task
		var intents map[string][]host.ResourceIntent
		q := store.ClaimQuery{
			Tenant: req.Tenant, Types: req.Types, Now: now, Limit: req.MaxTasks,
			Grant: func(t *host.Task) {
				secs := req.LeaseSeconds
				if secs == 0 {
					if ct, err := e.types.getIn(ctx, tx, t.Tenant, t.Type); err == nil {
						secs = ct.tt.LeaseSeconds
					} else {
						typeErr = err
						secs = host.DefaultLeaseSeconds
					}
				}
				if len(t.ResourceIntents) > 0 {
					if snaps == nil {
						snaps, intents = map[string]host.Task{}, map[string][]host.ResourceIntent{}
					}
					snaps[t.ID], intents[t.ID] = *t, t.ResourceIntents
				}
				if secs > e.cfg.MaxLeaseSeconds {
					secs = e.cfg.MaxLeaseSeconds
				}
				t.State = host.StateLeased
				t.LeaseID = host.NewID(host.PrefixLease)
				t.WorkerID = req.WorkerID
				t.LeasedAt = ptr(now)
				t.LeaseExpiresAt = ptr(now.Add(time.Duration(secs) * time.Second))
				t.LeaseSeconds = secs
				t.AcceptedAt, t.AcceptReceipt = nil, ""
				t.LeaseCount++
				t.UpdatedAt = now
				if t.StartedAt == nil {
					t.StartedAt = ptr(now)
				}
			},
		}
		var err error
		tasks, err = tx.ClaimTasks(ctx, q)
		if err != nil || snaps == nil {
			return err
		}
		// Some tasks name resource intents: grant them, or step the task
		// aside and look further down the queue, a bounded number of times.
		var kept []*host.Task
		for round := 1; ; round++ {
			// Lock every resource of the round at once, in one sorted
			// order, before granting any of them.
			var all []string
			for _, t := range tasks {
				all = append(all, intentResources(intents[t.ID])...)
			}
			if len(all) > 0 {
				if _, err := tx.LockResources(ctx, req.Tenant, all); err != nil {
					return err
				}
			}
			stepped := 0
			for _, t := range tasks {
				in := intents[t.ID]
				if in == nil {
					kept = append(kept, t)
					continue
				}
				ls, ok, err := e.grantTaskResources(ctx, tx, t, in)
				if err != nil {
					return err
				}
				if ok {
					granted = append(granted, ls...)
					kept = append(kept, t)
					continue
				}
				back := snaps[t.ID]
				back.AvailableAt, back.UpdatedAt = now.Add(resourceRetryDelay), now
				if err := tx.UpdateTask(ctx, &back, store.Fence{State: host.StateLeased, LeaseID: t.LeaseID}); err != nil {
					return err
				}
				stepped++
			}
			if stepped == 0 || round == claimRounds {
				break
			}
			q.Limit = stepped
			if tasks, err = tx.ClaimTasks(ctx, q); err != nil {
				return err
			}
		}
		tasks = kept
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, l := range granted {
		e.emit(Event{Kind: EvResourceGranted, Tenant: l.Tenant, WorkerID: l.Holder, Detail: string(l.Predicate)})
	}
	if typeErr != nil && !host.IsCode(typeErr, host.CodeUnknownTaskType) {
		e.log.Warn("lease used the default lease length", "err", typeErr)
	}
	offers := make([]host.Offer, len(tasks))
	for i, t := range tasks {
		e.leases.put(t, now)
		offers[i] = host.Offer{LeaseID: t.LeaseID, RunID: t.LeaseID, LeaseExpiresAt: *t.LeaseExpiresAt, Attempt: t.Attempts + 1, Task: t,
			LeaseSeconds: int(t.LeaseExpiresAt.Sub(now) / time.Second), ServerTime: now}
		for _, l := range granted {
			if l.TaskID == t.ID {
				offers[i].ResourceLeases = append(offers[i].ResourceLeases, l)
			}
		}
		e.emit(Event{Kind: EvLeased, Tenant: t.Tenant, TaskType: t.Type, WorkerID: req.WorkerID, Duration: now.Sub(t.AvailableAt)})
	}
	return offers, nil
}

// sawWorker records a worker sighting at most every few seconds per worker.
func (e *Engine) sawWorker(ctx context.Context, tenant, id string, caps []string) {
	k := tenant + "\x00" + id
	now := e.now()
	e.seenMu.Lock()
	last, ok := e.seen[k]
	if ok && now.Sub(last) < 5*time.Second && now.After(last) {
		e.seenMu.Unlock()
		return
	}
	e.seen[k] = now
	e.seenMu.Unlock()
	var capsJSON json.RawMessage
	if caps != nil {
		capsJSON = mustJSON(caps)
	}
	err := e.update(ctx, func(tx store.Tx) error {
		return tx.UpsertWorker(ctx, store.Worker{Tenant: tenant, ID: id, Capabilities: capsJSON, FirstSeen: now, LastSeen: now})
	})
	if err != nil {
		e.log.Warn("could not record worker sighting", "worker_id", id, "err", err)
	}
}

// WorkerCall identifies the lease a worker call is about.
type WorkerCall struct {
	Tenant   string
	WorkerID string // "" skips the holder check (admin tools)
	LeaseID  string
	// TaskID, when set, must match the lease's task (the spec's task_id + run_id).
	TaskID string
}

// liveLease loads the task the lease belongs to and checks that it is still
// held: leased, same lease, same worker, and strictly before its expiry by the
// server clock.
func liveLease(ctx context.Context, r store.Reader, c WorkerCall, now time.Time) (*host.Task, error) {
	if c.LeaseID == "" {
		return nil, host.Errorf(host.CodeBadRequest, "lease_id (run_id) is required")
	}
	t, err := r.GetTaskByLease(ctx, c.LeaseID)
	if err != nil {
		if host.IsCode(err, host.CodeNotFound) {
			return nil, host.Errorf(host.CodeLeaseExpired, "no live lease %s: it expired, was released or never existed", c.LeaseID)
		}
		return nil, err
	}
	return checkLive(t, c, now)
}

// leasedTask returns a copy of the task under c's live lease, to build a
// change outside the writer: the one this engine remembers leasing, or else
// one read now; nil when neither is live. The change must be written fenced
// on the copy's version (a remembered copy may be stale).
func (e *Engine) leasedTask(ctx context.Context, c WorkerCall, now time.Time) *host.Task {
	if t, ok := e.leases.get(c.LeaseID); ok && c.LeaseID != "" {
		if _, err := checkLive(t, c, now); err == nil {
			return t // leased here: no read needed
		}
	}
	var live *host.Task
	_ = e.view(ctx, func(r store.Reader) error {
		if t, err := liveLease(ctx, r, c, now); err == nil {
			live = t
		}
		return nil
	})
	return live
}

// checkLive reports whether t is the live lease c names at now.
func checkLive(t *host.Task, c WorkerCall, now time.Time) (*host.Task, error) {
	if t.Tenant != c.Tenant || (c.TaskID != "" && c.TaskID != t.ID) {
		return nil, host.Errorf(host.CodeLeaseExpired, "no live lease %s for this task", c.LeaseID)
	}
	if t.State != host.StateLeased || t.LeaseID != c.LeaseID {
		return t, host.Errorf(host.CodeLeaseExpired, "lease %s is no longer held: the task is %s", c.LeaseID, t.State)
	}
	if c.WorkerID != "" && t.WorkerID != c.WorkerID {
		return t, host.Errorf(host.CodeLeaseExpired, "lease %s is held by another worker", c.LeaseID)
	}
	if !now.Before(*t.LeaseExpiresAt) {
		return t, host.Errorf(host.CodeLeaseExpired, "lease %s expired at %s (server time %s)", c.LeaseID,
			t.LeaseExpiresAt.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	return t, nil
}

func liveFence(t *host.Task, now time.Time) store.Fence {
	return store.Fence{State: host.StateLeased, LeaseID: t.LeaseID, LiveAt: ptr(now)}
}

// fenced maps a fenced update to lease_expired: someone else moved the task.
func fenced(err error, leaseID string) error {
	if errors.Is(err, store.ErrFenced) {
		return host.Errorf(host.CodeLeaseExpired, "lease %s was lost to a concurrent change", leaseID)
	}
	return err
}

// Accept turns an offer into the worker's obligation: it writes task.accepted.
// Accepting twice is idempotent.
func (e *Engine) Accept(ctx context.Context, c WorkerCall) (*host.Task, string, error) {
	now := e.now()
	var out *host.Task
	var rid string
	// Fast path as in Complete: build the change outside the writer and write
	// it fenced on the version read.
	var pre *host.Task
	var preTask host.Task
	var preReceipt *host.Receipt
	prebuild := func(t *host.Task) {
		if t.AcceptReceipt == "" {
			pre, preTask = t, *t
			preReceipt = acceptTask(&preTask, now)
			if preReceipt.Validate() != nil {
				pre = nil // the writer builds it again and reports why
			}
		}
	}
	if t := e.leasedTask(ctx, c, now); t != nil {
		prebuild(t)
	}
	err := e.update(ctx, func(tx store.Tx) error {
		if pre != nil {
			t := preTask
			fence := liveFence(pre, now)
			fence.Version = pre.Version
			err := tx.UpdateTask(ctx, &t, fence)
			if err == nil {
				out, rid = &t, preReceipt.ID
				return appendValid(ctx, tx, preReceipt, map[string]host.ReceiptType{t.AssignReceipt: host.ReceiptAssigned})
			}
			if !errors.Is(err, store.ErrFenced) {
				return err
			}
		}
		t, err := liveLease(ctx, tx, c, now)
		if err != nil {
			return err
		}
		if t.AcceptReceipt != "" {
			out, rid = t, t.AcceptReceipt
			return nil
		}
		fence := liveFence(t, now)
		r := acceptTask(t, now)
		if err := tx.UpdateTask(ctx, t, fence); err != nil {
			return fenced(err, c.LeaseID)
		}
		out, rid = t, r.ID
		return appendReceipt(ctx, tx, r, map[string]host.ReceiptType{t.AssignReceipt: host.ReceiptAssigned})
	})
	if err != nil {
		return nil, "", err
	}
	e.leases.put(out, now)
	e.emit(Event{Kind: EvAccepted, Tenant: out.Tenant, TaskType: out.Type, WorkerID: out.WorkerID})
	return out, rid, nil
}

// acceptTask marks a live lease accepted and returns its task.accepted receipt.
func acceptTask(t *host.Task, now time.Time) *host.Receipt {
	r := &host.Receipt{
		ID: host.NewID(host.PrefixReceipt), Tenant: t.Tenant, Type: host.ReceiptAccepted,
		From: t.WorkerID, To: t.Recipient, TaskID: t.ID, LeaseID: t.LeaseID,
		Parents:   []string{t.AssignReceipt},
		Body:      mustJSON(map[string]any{"lease_id": t.LeaseID, "attempt": t.Attempts + 1, "lease_expires_at": t.LeaseExpiresAt}),
		CreatedAt: now,
	}
	t.AcceptedAt, t.AcceptReceipt, t.UpdatedAt = ptr(now), r.ID, now
	return r
}

// HeartbeatRequest extends a lease and reports progress.
type HeartbeatRequest struct {
	WorkerCall
	ProgressPercent *float64
	ProgressMessage string
	// ExtendSeconds is the new lease length from now; 0 means the lease's own
	// TTL, the length it was granted with (KLIS-3 §3.2). Either is capped by
	// Config.MaxLeaseSeconds.
	ExtendSeconds int
	// Milestone marks the progress report as worth the recipient's
	// attention: it becomes an inbox item (plain progress never does).
	Milestone bool
}

// HeartbeatResult tells the worker its new expiry and whether to stop.
type HeartbeatResult struct {
	Status          string    `json:"status"`
	LeaseExpiresAt  time.Time `json:"lease_expires_at"`
	CancelRequested bool      `json:"cancel_requested"`
	// ServerTime is the gate's clock when it extended the lease.
	ServerTime time.Time `json:"server_time"`
}

// Heartbeat extends a live lease to now + extension (capped) and records
// progress. A heartbeat at or after lease_expires_at is refused (lease_expired).
func (e *Engine) Heartbeat(ctx context.Context, req HeartbeatRequest) (*HeartbeatResult, error) {
	if req.ProgressPercent != nil && (*req.ProgressPercent < 0 || *req.ProgressPercent > 100 || *req.ProgressPercent != *req.ProgressPercent) {
		return nil, host.Errorf(host.CodeBadRequest, "progress_percent must be 0..100")
	}
	if len(req.ProgressMessage) > 4096 {
		return nil, host.Errorf(host.CodeTooLarge, "progress_message is longer than 4096 bytes")
	}
	if req.ExtendSeconds < 0 {
		return nil, host.Errorf(host.CodeBadRequest, "extend_lease_seconds must not be negative")
	}
	now := e.now()
	var res HeartbeatResult
	var written *host.Task
	err := e.update(ctx, func(tx store.Tx) error {
		written = nil
		t, err := liveLease(ctx, tx, req.WorkerCall, now)
		if err != nil {
			return err
		}
		ext := req.ExtendSeconds
		if ext == 0 {
			ext = t.LeaseSeconds
		}
		if ext == 0 {
			// A lease granted before its TTL was recorded: the task type's length.
			ext = int(t.LeaseExpiresAt.Sub(*t.LeasedAt).Seconds())
			if ct, err := e.types.getIn(ctx, tx, t.Tenant, t.Type); err == nil {
				ext = ct.tt.LeaseSeconds
			}
		}
		if ext > e.cfg.MaxLeaseSeconds {
			ext = e.cfg.MaxLeaseSeconds
		}
		fence := liveFence(t, now)
		newExp := now.Add(time.Duration(ext) * time.Second)
		if newExp.After(*t.LeaseExpiresAt) {
			t.LeaseExpiresAt = &newExp
		}
		if req.ProgressPercent != nil || req.ProgressMessage != "" {
			if req.ProgressPercent != nil {
				t.ProgressPercent = ptr(*req.ProgressPercent)
			}
			if req.ProgressMessage != "" {
				t.ProgressMessage = req.ProgressMessage
			}
			if err := tx.InsertProgress(ctx, store.Progress{Tenant: t.Tenant, TaskID: t.ID, LeaseID: t.LeaseID,
				Percent: req.ProgressPercent, Message: req.ProgressMessage, At: now}); err != nil {
				return err
			}
		}
		if req.Milestone {
			if err := milestone(ctx, tx, t, req.ProgressMessage, now); err != nil {
				return err
			}
		}
		t.UpdatedAt = now
		if err := tx.UpdateTask(ctx, t, fence); err != nil {
			return fenced(err, req.LeaseID)
		}
		if err := e.extendTaskResources(ctx, tx, t); err != nil {
			return err
		}
		res = HeartbeatResult{Status: "ok", LeaseExpiresAt: *t.LeaseExpiresAt, CancelRequested: t.CancelRequested, ServerTime: now}
		written = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.leases.put(written, now)
	e.sawWorker(ctx, req.Tenant, req.WorkerID, nil)
	return &res, nil
}

// CompleteRequest reports success. The result must be locatable: a pointer,
// artifacts or a delivery proof, or a Payload the gate stores through a channel.
type CompleteRequest struct {
	WorkerCall
	Result host.Result
	// Payload, when set, is stored through Result.Channel (or the task type's
	// default channel, or by size) and its pointer and checksum recorded.
	Payload []byte
}

// CompleteResult is the outcome of Complete.
type CompleteResult struct {
	Task      *host.Task `json:"-"`
	Status    string     `json:"status"`
	ReceiptID string     `json:"receipt_id"`
	// Duplicate is set when this lease had already completed with this call.
	Duplicate bool `json:"duplicate"`
}

func completeDedupe(leaseID string) string { return "complete:" + leaseID }

var (
	checksumPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,15}:[0-9a-fA-F]{1,128}$`)
	channelPattern  = regexp.MustCompile(`^[a-z0-9][a-z0-9_.\-]{0,63}$`)
)

// ownOutcome reports whether prev is the outcome receipt the engine wrote for
// this very lease (and, when the call names them, this worker and task): only
// then may a repeated call be answered with it.
func ownOutcome(prev *host.Receipt, c WorkerCall, types ...host.ReceiptType) bool {
	if prev == nil || prev.LeaseID != c.LeaseID || (c.TaskID != "" && prev.TaskID != c.TaskID) {
		return false
	}
	if c.WorkerID != "" {
		var b struct {
			WorkerID string `json:"worker_id"`
		}
		_ = json.Unmarshal(prev.Body, &b)
		if b.WorkerID != c.WorkerID {
			return false
		}
	}
	for _, t := range types {
		if prev.Type == t {
			return true
		}
	}
	return false
}

// Complete marks the leased task succeeded and writes task.completed, which
// discharges the assignment and the acceptance. Completing the same lease again
// returns the first outcome.
func (e *Engine) Complete(ctx context.Context, req CompleteRequest) (*CompleteResult, error) {
	if len(req.Payload) > 0 {
		// The payload is stored only for a live lease. A repeat of a
		// completion that already committed finds the lease gone: it is
		// answered with the first outcome before anything is stored.
		if err := e.storePayload(ctx, &req); err != nil {
			if host.IsCode(err, host.CodeLeaseExpired) {
				if dup := e.completeDuplicate(ctx, req); dup != nil {
					return dup, nil
				}
			}
			return nil, err
		}
	} else if err := e.checkWorkerPointer(req.Result); err != nil {
		return nil, err
	}
	res := req.Result
	if !res.Locatable() {
		return nil, host.Errorf(host.CodeNotLocatable, "a success must be locatable: give result_pointer, artifacts or delivery_proof (or a payload to store)")
	}
	if len(res.Artifacts) > host.MaxArtifacts {
		return nil, host.Errorf(host.CodeTooLarge, "%d artifacts, the limit is %d. %s", len(res.Artifacts), host.MaxArtifacts, host.ContractsNotChat)
	}
	if len(res.Pointer) > 8192 || len(res.Checksum) > 200 || len(res.Summary) > 8192 {
		return nil, host.Errorf(host.CodeTooLarge, "result_pointer, result_checksum or summary is too long")
	}
	if res.Checksum != "" && !checksumPattern.MatchString(res.Checksum) {
		return nil, host.Errorf(host.CodeBadRequest, "result_checksum must look like algorithm:hex (sha256:…)")
	}
	if res.Channel != "" && !channelPattern.MatchString(res.Channel) {
		return nil, host.Errorf(host.CodeBadRequest, "result_channel must match %s", channelPattern)
	}
	if m := bytes.TrimSpace(res.Metadata); len(m) > 0 && string(m) != "null" && m[0] != '{' {
		return nil, host.Errorf(host.CodeBadRequest, "metadata must be a JSON object")
	}
	for _, raw := range []*json.RawMessage{&res.Metadata, &res.DeliveryProof} {
		if len(*raw) > 0 {
			c, err := compactJSON(*raw)
			if err != nil {
				return nil, host.Errorf(host.CodeBadRequest, "metadata and delivery_proof must be valid JSON")
			}
			*raw = c
		}
	}
	now := e.now()
	out := &CompleteResult{}
	var leasedAt time.Time
	// Fast path: read the lease and build the change outside the single
	// writer, then write it fenced on the row version read. Only if something
	// wrote the task in between does the writer read it again itself.
	var pre *host.Task
	var preTask host.Task
	var preReceipt *host.Receipt
	var preTypes map[string]host.ReceiptType
	prebuild := func(t *host.Task) {
		pre = t
		preTask = *t
		preReceipt, preTypes = completeTask(&preTask, res, now)
		if preReceipt.Validate() != nil {
			pre = nil // the writer builds it again and reports why
		}
	}
	if t := e.leasedTask(ctx, req.WorkerCall, now); t != nil {
		prebuild(t)
	}
	defer e.leases.drop(req.LeaseID)
	var rsReleased, rsExpired int
	err := e.update(ctx, func(tx store.Tx) error {
		rsReleased, rsExpired = 0, 0
		if pre != nil {
			t := preTask
			fence := liveFence(pre, now)
			fence.Version = pre.Version
			err := tx.UpdateTask(ctx, &t, fence)
			if err == nil {
				if err := appendValid(ctx, tx, preReceipt, preTypes); err != nil {
					return err
				}
				if rsReleased, rsExpired, err = e.endTaskResources(ctx, tx, refOf(pre)); err != nil {
					return err
				}
				leasedAt = *pre.LeasedAt
				out.Task, out.ReceiptID, out.Duplicate = &t, preReceipt.ID, false
				return nil
			}
			if !errors.Is(err, store.ErrFenced) {
				return err
			}
		}
		t, err := liveLease(ctx, tx, req.WorkerCall, now)
		if err != nil {
			if host.IsCode(err, host.CodeLeaseExpired) {
				if prev, _ := tx.GetReceiptByDedupe(ctx, req.Tenant, "", completeDedupe(req.LeaseID)); ownOutcome(prev, req.WorkerCall, host.ReceiptCompleted) {
					out.Task, out.ReceiptID, out.Duplicate = t, prev.ID, true
					if t == nil {
						out.Task, _ = tx.GetTask(ctx, prev.Tenant, prev.TaskID)
					}
					return nil
				}
			}
			return err
		}
		fence := liveFence(t, now)
		leasedAt = *t.LeasedAt
		ref := refOf(t)
		r, types := completeTask(t, res, now)
		if err := tx.UpdateTask(ctx, t, fence); err != nil {
			return fenced(err, req.LeaseID)
		}
		if err := appendReceipt(ctx, tx, r, types); err != nil {
			return err
		}
		if rsReleased, rsExpired, err = e.endTaskResources(ctx, tx, ref); err != nil {
			return err
		}
		out.Task, out.ReceiptID, out.Duplicate = t, r.ID, false
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.Status = "completed"
	e.emitTaskResources(out.Task.Tenant, rsReleased, rsExpired)
	if !out.Duplicate {
		e.emit(Event{Kind: EvCompleted, Tenant: out.Task.Tenant, TaskType: out.Task.Type, WorkerID: req.WorkerID, Duration: now.Sub(leasedAt)})
	}
	return out, nil
}

// completeDuplicate returns the first outcome of a completion of this lease
// by this caller, or nil when there is none.
func (e *Engine) completeDuplicate(ctx context.Context, req CompleteRequest) *CompleteResult {
	var out *CompleteResult
	_ = e.view(ctx, func(r store.Reader) error {
		prev, err := r.GetReceiptByDedupe(ctx, req.Tenant, "", completeDedupe(req.LeaseID))
		if err != nil || !ownOutcome(prev, req.WorkerCall, host.ReceiptCompleted) {
			return err
		}
		t, err := r.GetTask(ctx, prev.Tenant, prev.TaskID)
		if err != nil {
			return err
		}
		out = &CompleteResult{Task: t, Status: "completed", ReceiptID: prev.ID, Duplicate: true}
		return nil
	})
	return out
}

// checkWorkerPointer refuses a result_pointer the worker made up for a
// channel this gate manages. Such a channel's pointers name objects the gate
// stores and later reads with its own grants (a folder, an endpoint's
// credentials), so a pointer is only ever recorded when the gate stored the
// payload itself in this very completion; a pointer naming another task's or
// another tenant's object must not become this task's result. Pointers of
// channels the gate does not have (s3://…, a URL the worker owns) are the
// worker's to give, and inline pointers carry their content.
//
// Whether a channel is the gate's does not hang on its plugin being loaded:
// a gate with a mailbox reads email: pointers back through fetch_task_email
// with its own grants, mail.channel or not, so there an email: pointer from a
// worker is refused (issue 37). A gate without mail cannot read such a
// pointer back: it is the worker's own (seed 001's worker that mailed its
// result itself), recorded as given.
func (e *Engine) checkWorkerPointer(res host.Result) error {
	if res.Pointer == "" {
		return nil
	}
	prefix, rest, _ := strings.Cut(res.Pointer, ":")
	if strings.HasPrefix(rest, "//") {
		prefix = "" // a URL (http://…, s3://…), not a channel:data pointer
	}
	for _, name := range []string{res.Channel, prefix} {
		if name == "" || name == "inline" {
			continue
		}
		if name == EmailChannel && e.hasMailbox() {
			return host.Errorf(host.CodeForeignPointer, "result_pointer names channel %q, which is the gate's own: its pointers are made by the gate when it stores a payload, never taken from a worker; send the payload as result or result_base64", name)
		}
		if e.cfg.Plugins == nil {
			continue
		}
		if _, err := e.cfg.Plugins.Channel(name); err == nil {
			return host.Errorf(host.CodeForeignPointer, "result_pointer names channel %q, which this gate manages: its pointers are made by the gate when it stores a payload, never taken from a worker; send the payload as result or result_base64", name)
		}
	}
	return nil
}

// hasMailbox reports whether this gate reads mail back (fetch_task_email):
// then email: pointers name messages in its own mailbox.
func (e *Engine) hasMailbox() bool {
	m := e.cfg.Delivery.Mail
	return m != nil && m.CanRead()
}

// completeTask moves a live leased task to succeeded with result res and
// returns the task.completed receipt that records it.
func completeTask(t *host.Task, res host.Result, now time.Time) (*host.Receipt, map[string]host.ReceiptType) {
	parents, types := taskParents(t)
	body := map[string]any{
		"lease_id": t.LeaseID, "worker_id": t.WorkerID, "attempt": t.Attempts + 1,
		"result_channel": res.Channel, "result_pointer": res.Pointer, "result_checksum": res.Checksum,
		"summary": res.Summary,
	}
	if len(res.Artifacts) > 0 {
		body["artifacts"] = res.Artifacts
	}
	if len(res.DeliveryProof) > 0 {
		body["delivery_proof"] = res.DeliveryProof
	}
	if len(res.Metadata) > 0 {
		body["metadata"] = res.Metadata
	}
	r := &host.Receipt{
		ID: host.NewID(host.PrefixReceipt), Tenant: t.Tenant, Type: host.ReceiptCompleted,
		From: t.WorkerID, To: t.Recipient, TaskID: t.ID, LeaseID: t.LeaseID, Parents: parents,
		Body: mustJSON(body), DedupeKey: completeDedupe(t.LeaseID), CreatedAt: now,
	}
	t.State, t.UpdatedAt, t.CompletedAt = host.StateSucceeded, now, ptr(now)
	rc := res
	t.Result = &rc
	t.CancelRequested = false
	t.LeaseExpiresAt = nil
	return r, types
}

// FailRequest reports a failed attempt.
type FailRequest struct {
	WorkerCall
	Error     string
	Retryable bool
	Metadata  json.RawMessage
}

// FailResult is the outcome of Fail, in the spec's shape.
type FailResult struct {
	Task             *host.Task `json:"-"`
	Status           string     `json:"status"` // "failed" (will retry), "dead_letter" or "canceled"
	WillRetry        bool       `json:"will_retry"`
	RetryScheduledAt *time.Time `json:"retry_scheduled_at,omitempty"`
	ReceiptID        string     `json:"receipt_id"`
	Duplicate        bool       `json:"duplicate"`
}

func failDedupe(leaseID string) string { return "fail:" + leaseID }

// Fail records a failed attempt: it uses up one attempt and asks the task type's
// retry policy whether to retry after a delay or dead-letter the task. A
// failure on a task whose cancel was requested cancels it. Failing the same lease
// again returns the first outcome.
func (e *Engine) Fail(ctx context.Context, req FailRequest) (*FailResult, error) {
	defer e.leases.drop(req.LeaseID) // the lease ends here, or was not live
	if len(req.Error) > 8192 {
		req.Error = req.Error[:8192]
	}
	if len(req.Metadata) > 0 {
		c, err := compactJSON(req.Metadata)
		if err != nil || (string(c) != "null" && c[0] != '{') {
			return nil, host.Errorf(host.CodeBadRequest, "metadata must be a JSON object")
		}
		req.Metadata = c
	}
	now := e.now()
	// The policy runs outside the transaction (it may be a plugin): read first,
	// decide, then write fenced on the lease we read.
	var t *host.Task
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		t, err = liveLease(ctx, r, req.WorkerCall, now)
		return err
	})
	if err != nil {
		if host.IsCode(err, host.CodeLeaseExpired) {
			if dup := e.failDuplicate(ctx, req); dup != nil {
				return dup, nil
			}
		}
		return nil, err
	}
	decision, fault, err := e.decide(ctx, t, host.FailureInput{
		TaskID: t.ID, TaskType: t.Type, Kind: host.FailureError, Retryable: req.Retryable,
		Attempts: t.Attempts + 1, MaxRetries: t.MaxRetries, LeaseExpiries: t.LeaseExpiries, Error: req.Error,
	})
	if err != nil {
		// The task type's policy is still loading: nothing is decided or
		// written, the lease stays live, and the worker retries the fail.
		return nil, err
	}
	out := &FailResult{}
	var leasedAt time.Time
	var dead bool
	var rsReleased, rsExpired int
	err = e.update(ctx, func(tx store.Tx) error {
		// The store may run this again (a batch rerun): nothing of a run
		// that did not commit may reach the answer or the events.
		*out, dead, rsReleased, rsExpired = FailResult{}, false, 0, 0
		t, err := liveLease(ctx, tx, req.WorkerCall, now)
		if err != nil {
			return err
		}
		leasedAt = *t.LeasedAt
		fence := liveFence(t, now)
		ref := refOf(t)
		t.Attempts++
		t.LastError = req.Error
		t.UpdatedAt = now
		body := map[string]any{"lease_id": t.LeaseID, "worker_id": t.WorkerID, "attempt": t.Attempts,
			"error_message": req.Error, "retryable": req.Retryable}
		if len(req.Metadata) > 0 {
			body["metadata"] = req.Metadata
		}
		var rs []*host.Receipt
		var rtypes map[string]host.ReceiptType
		switch {
		case t.CancelRequested:
			parents, types := taskParents(t)
			rtypes = types
			body["reason"] = "cancel_requested"
			rs = append(rs, &host.Receipt{Type: host.ReceiptCanceled, From: t.WorkerID, Parents: parents, Body: mustJSON(body)})
			clearLease(t)
			t.State, t.CompletedAt = host.StateCanceled, ptr(now)
			out.Status = "canceled"
		case decision.Action == host.ActionRetry:
			parents, types := acceptParents(t)
			rtypes = types
			at := now.Add(time.Duration(decision.DelaySeconds * float64(time.Second)))
			body["retry_scheduled_at"] = at
			body["delay_seconds"] = decision.DelaySeconds
			rs = append(rs, &host.Receipt{Type: host.ReceiptRetryScheduled, From: GatePrincipal, Parents: parents, Body: mustJSON(body)})
			clearLease(t)
			t.State, t.AvailableAt = host.StateQueued, at
			out.Status, out.WillRetry, out.RetryScheduledAt = "failed", true, &at
		default:
			parents, types := taskParents(t)
			rtypes = types
			reason := decision.Reason
			if reason == "" {
				reason = host.ReasonPolicy
			}
			body["dead_reason"] = reason
			failed := &host.Receipt{ID: host.NewID(host.PrefixReceipt), Type: host.ReceiptFailed, From: t.WorkerID, Parents: parents, Body: mustJSON(body)}
			rs = append(rs, failed)
			if reason == host.ReasonMaxRetriesExceeded || decision.Action == host.ActionEscalate {
				to := t.Recipient
				if decision.EscalateTo != "" {
					to = decision.EscalateTo
				}
				rs = append(rs, &host.Receipt{Type: host.ReceiptEscalated, From: GatePrincipal, To: to, Parents: []string{failed.ID},
					Body: mustJSON(map[string]any{"escalation_class": "policy", "escalation_reason": reason, "attempts": t.Attempts, "error_message": req.Error})})
			}
			clearLease(t)
			t.State, t.DeadReason, t.CompletedAt = host.StateDeadLetter, reason, ptr(now)
			out.Status = "dead_letter"
			dead = true
		}
		if fault != nil {
			rs = append(rs, policyFaultReceipt(t, fault))
		}
		if err := tx.UpdateTask(ctx, t, fence); err != nil {
			return fenced(err, req.LeaseID)
		}
		if rsReleased, rsExpired, err = e.endTaskResources(ctx, tx, ref); err != nil {
			return err
		}
		for i, r := range rs {
			fillTaskReceipt(r, t, req.LeaseID, now)
			if i == 0 {
				r.DedupeKey = failDedupe(req.LeaseID)
			}
			if err := appendReceipt(ctx, tx, r, rtypes); err != nil {
				return err
			}
		}
		out.Task, out.ReceiptID = t, rs[0].ID
		return nil
	})
	if err != nil {
		if host.IsCode(err, host.CodeLeaseExpired) {
			if dup := e.failDuplicate(ctx, req); dup != nil {
				return dup, nil
			}
		}
		return nil, err
	}
	e.emitTaskResources(out.Task.Tenant, rsReleased, rsExpired)
	ev := Event{Tenant: out.Task.Tenant, TaskType: out.Task.Type, WorkerID: req.WorkerID, Duration: now.Sub(leasedAt), Detail: req.Error}
	ev.Kind = EvFailed
	e.emit(ev)
	switch {
	case dead:
		ev.Kind = EvDeadLettered
		e.emit(ev)
	case out.WillRetry:
		ev.Kind = EvRetried
		e.emit(ev)
		if !out.RetryScheduledAt.After(now) {
			e.waiters.wake(out.Task.Tenant, out.Task.Type, 1)
		}
	case out.Status == "canceled":
		ev.Kind = EvCanceled
		e.emit(ev)
	}
	if fault != nil {
		e.emit(Event{Kind: EvPolicyFault, Tenant: out.Task.Tenant, TaskType: out.Task.Type, Detail: fault.Error()})
	}
	return out, nil
}

// failDuplicate answers a repeated fail call for a lease that already failed.
func (e *Engine) failDuplicate(ctx context.Context, req FailRequest) *FailResult {
	var out *FailResult
	_ = e.view(ctx, func(r store.Reader) error {
		prev, err := r.GetReceiptByDedupe(ctx, req.Tenant, "", failDedupe(req.LeaseID))
		if err != nil || !ownOutcome(prev, req.WorkerCall, host.ReceiptRetryScheduled, host.ReceiptFailed, host.ReceiptCanceled) {
			return err
		}
		t, err := r.GetTask(ctx, prev.Tenant, prev.TaskID)
		if err != nil {
			return err
		}
		out = &FailResult{Task: t, ReceiptID: prev.ID, Duplicate: true}
		switch prev.Type {
		case host.ReceiptRetryScheduled:
			out.Status, out.WillRetry = "failed", true
			var b struct {
				At *time.Time `json:"retry_scheduled_at"`
			}
			_ = json.Unmarshal(prev.Body, &b)
			out.RetryScheduledAt = b.At
		case host.ReceiptCanceled:
			out.Status = "canceled"
		default:
			out.Status = "dead_letter"
		}
		return nil
	})
	return out
}

func fillTaskReceipt(r *host.Receipt, t *host.Task, leaseID string, now time.Time) {
	if r.ID == "" {
		r.ID = host.NewID(host.PrefixReceipt)
	}
	r.Tenant, r.TaskID, r.LeaseID, r.CreatedAt = t.Tenant, t.ID, leaseID, now
	if r.To == "" {
		r.To = t.Recipient
	}
	if r.From == "" {
		r.From = GatePrincipal
	}
}

func policyFaultReceipt(t *host.Task, fault error) *host.Receipt {
	return &host.Receipt{Type: host.ReceiptEscalated, From: GatePrincipal, To: t.Recipient, Parents: []string{t.AssignReceipt},
		Body: mustJSON(map[string]any{"escalation_class": "system", "escalation_reason": host.ReasonPolicyFault,
			"detail": "the task type's retry policy failed; the built-in default decided instead: " + fault.Error()})}
}

// decide asks the task type's policy; on a policy fault it falls back to the
// default policy and returns the fault so an escalation receipt is written.
// A policy that is still loading (host.CodePluginNotReady, after the
// plugins' own bounded wait) is no fault: decide returns it as err and
// decides nothing, since no other policy may decide for the task type's.
func (e *Engine) decide(ctx context.Context, t *host.Task, in host.FailureInput) (_ host.Decision, fault, err error) {
	pol := e.policy
	if e.cfg.Plugins != nil {
		if ct, err := e.types.get(ctx, t.Tenant, t.Type); err == nil && ct.tt.Policy != nil {
			in.Config = ct.tt.Policy.Config
			p, err := e.cfg.Plugins.Policy(ct.tt)
			switch {
			case host.IsCode(err, host.CodePluginNotReady):
				return host.Decision{}, nil, err
			case err != nil:
				fault = err
			case p != nil:
				pol = p
			}
		}
	}
	if fault == nil {
		d, err := pol.Decide(ctx, in)
		if pol != e.policy && host.IsCode(err, host.CodePluginNotReady) {
			return host.Decision{}, nil, err
		}
		if err == nil {
			err = checkDecision(d)
		}
		if err == nil {
			return d, nil, nil
		}
		if pol == e.policy {
			// The built-in policy itself failed: dead-letter, never lose the task.
			return host.Decision{Action: host.ActionDeadLetter, Reason: host.ReasonPolicyFault}, err, nil
		}
		fault = err
	}
	e.log.Warn("retry policy failed; using the built-in default", "task_id", t.ID, "task_type", t.Type, "err", fault)
	in.Config = nil
	d, err := e.policy.Decide(ctx, in)
	if err != nil || checkDecision(d) != nil {
		d = host.Decision{Action: host.ActionDeadLetter, Reason: host.ReasonPolicyFault}
	}
	return d, fault, nil
}

// MaxReasonLen bounds a policy's reason, which becomes a dead letter's reason.
const MaxReasonLen = 200

// checkDecision refuses a decision the engine must not act on: an unknown
// action, a delay outside 0 s..1 year, an escalate_to that is not a valid
// principal (it becomes a receipt's "to", read by agents and ledger tools),
// or a reason with control characters. The error names what was wrong,
// quoted, so no raw control character reaches a log or a receipt.
func checkDecision(d host.Decision) error {
	switch d.Action {
	case host.ActionRetry:
		if !(d.DelaySeconds >= 0 && d.DelaySeconds <= 366*24*3600) {
			return host.Errorf(host.CodeInternal, "policy returned retry with delay_seconds %v, outside 0..31622400", d.DelaySeconds)
		}
	case host.ActionDeadLetter, host.ActionEscalate:
	default:
		return host.Errorf(host.CodeInternal, "policy returned an unknown action %.64q", string(d.Action))
	}
	if d.EscalateTo != "" && !host.ValidPrincipal(d.EscalateTo) {
		return host.Errorf(host.CodeInternal, "policy returned escalate_to %.80q, which is not a valid principal (it must match %s)", d.EscalateTo, host.PrincipalPattern)
	}
	if len(d.Reason) > MaxReasonLen || !printable(d.Reason) {
		return host.Errorf(host.CodeInternal, "policy returned a reason %.80q with control characters or over %d bytes", d.Reason, MaxReasonLen)
	}
	return nil
}

// Release gives a leased task back to the queue at once without using an
// attempt. Releasing a lease of the caller's tenant that is already gone is
// a no-op (KLIS-3 §5.3); a lease id no task of the tenant holds or last held
// (unknown, another tenant's, or replaced by a later lease of its task) is
// 404 not_found, the same answer for each.
func (e *Engine) Release(ctx context.Context, c WorkerCall, reason string) (*host.Task, error) {
	defer e.leases.drop(c.LeaseID) // the lease ends here, or was not live
	now := e.now()
	var out *host.Task
	var released bool
	var rsReleased, rsExpired int
	err := e.update(ctx, func(tx store.Tx) error {
		released, rsReleased, rsExpired = false, 0, 0
		t, err := liveLease(ctx, tx, c, now)
		if err != nil {
			if host.IsCode(err, host.CodeLeaseExpired) {
				if t != nil && t.State == host.StateLeased && t.LeaseID == c.LeaseID && c.WorkerID != "" && t.WorkerID != c.WorkerID {
					return err // someone else's live lease: not this caller's to release
				}
				if t == nil {
					// A lease no task of this tenant has (had): unknown, or
					// another tenant's. Both are 404 with the same words, so
					// the answer says nothing of other tenants' leases.
					cur, gerr := tx.GetTaskByLease(ctx, c.LeaseID)
					if host.IsCode(gerr, host.CodeNotFound) || (gerr == nil && cur.Tenant != c.Tenant) {
						return host.Errorf(host.CodeNotFound, "no lease %s", c.LeaseID)
					} else if gerr != nil {
						return gerr
					}
				}
				out = nil // idempotent: already released or expired; say nothing of the task
				return nil
			}
			return err
		}
		fence := liveFence(t, now)
		ref := refOf(t)
		var r *host.Receipt
		if t.CancelRequested {
			parents, types := taskParents(t)
			r = &host.Receipt{Type: host.ReceiptCanceled, From: t.WorkerID, Parents: parents, Body: mustJSON(map[string]any{"reason": "cancel_requested", "lease_id": t.LeaseID})}
			fillTaskReceipt(r, t, t.LeaseID, now)
			clearLease(t)
			t.State, t.CompletedAt, t.UpdatedAt = host.StateCanceled, ptr(now), now
			if err := tx.UpdateTask(ctx, t, fence); err != nil {
				return fenced(err, c.LeaseID)
			}
			if rsReleased, rsExpired, err = e.endTaskResources(ctx, tx, ref); err != nil {
				return err
			}
			out = t
			return appendReceipt(ctx, tx, r, types)
		}
		if t.AcceptReceipt != "" {
			r = &host.Receipt{Type: host.ReceiptReleased, From: t.WorkerID, Parents: []string{t.AcceptReceipt},
				Body: mustJSON(map[string]any{"reason": reason, "lease_id": t.LeaseID})}
			fillTaskReceipt(r, t, t.LeaseID, now)
		}
		acc := t.AcceptReceipt
		clearLease(t)
		t.State, t.AvailableAt, t.UpdatedAt = host.StateQueued, now, now
		if err := tx.UpdateTask(ctx, t, fence); err != nil {
			return fenced(err, c.LeaseID)
		}
		if rsReleased, rsExpired, err = e.endTaskResources(ctx, tx, ref); err != nil {
			return err
		}
		out, released = t, true
		if r != nil {
			return appendReceipt(ctx, tx, r, map[string]host.ReceiptType{acc: host.ReceiptAccepted})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, nil
	}
	e.emitTaskResources(out.Tenant, rsReleased, rsExpired)
	if released {
		e.emit(Event{Kind: EvReleased, Tenant: out.Tenant, TaskType: out.Type, WorkerID: c.WorkerID})
		e.waiters.wake(out.Tenant, out.Type, 1)
	}
	return out, nil
}

// Cancel cancels a task: a queued task at once (task.canceled), a leased one by
// flagging it so the worker learns from its next heartbeat. Canceling a task
// that is already finished is a conflict; canceling twice is a no-op.
func (e *Engine) Cancel(ctx context.Context, actor Actor, taskID, reason string) (*host.Task, error) {
	t, _, err := e.CancelChanged(ctx, actor, taskID, reason)
	return t, err
}

// CancelChanged is Cancel that also reports whether this call changed the
// task: false when it was already canceled, or its cancellation already
// requested, before the call (the no-op of canceling twice).
func (e *Engine) CancelChanged(ctx context.Context, actor Actor, taskID, reason string) (*host.Task, bool, error) {
	if len(reason) > 1000 {
		return nil, false, host.Errorf(host.CodeBadRequest, "reason is longer than 1000 characters")
	}
	now := e.now()
	var out *host.Task
	var canceled, changed bool
	err := e.update(ctx, func(tx store.Tx) error {
		canceled, changed = false, false
		t, err := tx.GetTask(ctx, actor.Tenant, taskID)
		if err != nil {
			return err
		}
		if !visible(actor, t) {
			return host.Errorf(host.CodeNotFound, "no task %s", taskID)
		}
		switch t.State {
		case host.StateCanceled:
			out = t
			return nil
		case host.StateQueued:
			fence := store.Fence{State: host.StateQueued}
			parents, types := taskParents(t)
			r := &host.Receipt{Type: host.ReceiptCanceled, From: actor.Principal, Parents: parents,
				Body: mustJSON(map[string]any{"reason": reason, "canceled_by": actor.Principal})}
			fillTaskReceipt(r, t, "", now)
			t.State, t.CompletedAt, t.UpdatedAt = host.StateCanceled, ptr(now), now
			if err := tx.UpdateTask(ctx, t, fence); err != nil {
				return host.Errorf(host.CodeConflict, "task %s changed while canceling; try again", taskID)
			}
			out, canceled, changed = t, true, true
			return appendReceipt(ctx, tx, r, types)
		case host.StateLeased:
			if t.CancelRequested {
				out = t
				return nil
			}
			fence := store.Fence{State: host.StateLeased, LeaseID: t.LeaseID}
			t.CancelRequested, t.UpdatedAt = true, now
			if err := tx.UpdateTask(ctx, t, fence); err != nil {
				return host.Errorf(host.CodeConflict, "task %s changed while canceling; try again", taskID)
			}
			out, changed = t, true
			return nil
		default:
			return host.Errorf(host.CodeConflict, "task %s is %s and can no longer be canceled", taskID, t.State)
		}
	})
	if err != nil {
		return nil, false, err
	}
	if canceled {
		e.emit(Event{Kind: EvCanceled, Tenant: out.Tenant, TaskType: out.Type})
	}
	return out, changed, nil
}

// Sweep handles every lease that has expired by the engine's clock: the task
// goes back to the queue after its requeue delay plus jitter without using an
// attempt; an accepted lease writes task.escalated (lease_expired); a task
// whose leases keep expiring goes to dead letter (max_lease_expiries); a task
// whose cancel was requested is canceled. It returns how many leases it handled.
func (e *Engine) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := e.sweepBatch(ctx, 200)
		total += n
		if err != nil || n < 200 {
			return total, err
		}
	}
}

func (e *Engine) sweepBatch(ctx context.Context, limit int) (int, error) {
	now := e.now()
	var events []Event
	var requeued []*host.Task
	var n, rsEnded int
	err := e.update(ctx, func(tx store.Tx) error {
		events, requeued, n, rsEnded = nil, nil, 0, 0
		ts, err := tx.ExpiredLeases(ctx, now, limit)
		if err != nil {
			return err
		}
		for _, t := range ts {
			fence := store.Fence{State: host.StateLeased, LeaseID: t.LeaseID, ExpiredAt: ptr(now)}
			leaseID, worker := t.LeaseID, t.WorkerID
			ref := refOf(t)
			var rs []*host.Receipt
			var rtypes map[string]host.ReceiptType
			expBody := map[string]any{"escalation_class": "policy", "escalation_reason": host.ReasonLeaseExpired,
				"lease_id": leaseID, "worker_id": worker, "lease_expires_at": t.LeaseExpiresAt}
			if t.AcceptReceipt != "" {
				rs = append(rs, &host.Receipt{Type: host.ReceiptEscalated, Parents: []string{t.AcceptReceipt}, Body: mustJSON(expBody)})
			}
			t.LeaseExpiries++
			t.UpdatedAt = now
			_, rtypes = taskParents(t)
			switch {
			case t.CancelRequested:
				parents, _ := taskParents(t)
				rs = append(rs, &host.Receipt{Type: host.ReceiptCanceled, Parents: parents, Body: mustJSON(map[string]any{"reason": "cancel_requested", "lease_id": leaseID})})
				clearLease(t)
				t.State, t.CompletedAt = host.StateCanceled, ptr(now)
				events = append(events, Event{Kind: EvCanceled, Tenant: t.Tenant, TaskType: t.Type})
			case t.LeaseExpiries >= e.maxExpiries(ctx, tx, t):
				parents, _ := taskParents(t)
				failed := &host.Receipt{ID: host.NewID(host.PrefixReceipt), Type: host.ReceiptFailed, Parents: parents,
					Body: mustJSON(map[string]any{"dead_reason": host.ReasonMaxLeaseExpiries, "lease_expiries": t.LeaseExpiries, "lease_id": leaseID})}
				rs = append(rs, failed, &host.Receipt{Type: host.ReceiptEscalated, Parents: []string{failed.ID},
					Body: mustJSON(map[string]any{"escalation_class": "policy", "escalation_reason": host.ReasonMaxLeaseExpiries, "lease_expiries": t.LeaseExpiries})})
				clearLease(t)
				t.State, t.DeadReason, t.CompletedAt = host.StateDeadLetter, host.ReasonMaxLeaseExpiries, ptr(now)
				events = append(events, Event{Kind: EvDeadLettered, Tenant: t.Tenant, TaskType: t.Type, Detail: host.ReasonMaxLeaseExpiries})
			default:
				delay := time.Duration(e.requeueDelay(ctx, tx, t)) * time.Second
				clearLease(t)
				t.State, t.AvailableAt = host.StateQueued, now.Add(delay+e.jitter(e.cfg.ExpiryJitter))
				requeued = append(requeued, t)
			}
			if err := tx.UpdateTask(ctx, t, fence); err != nil {
				if errors.Is(err, store.ErrFenced) {
					continue // another host or a racing call handled it
				}
				return err
			}
			rel, exp, err := e.endTaskResources(ctx, tx, ref)
			if err != nil {
				return err
			}
			for i := 0; i < rel+exp; i++ {
				kind := EvResourceExpired
				if i < rel {
					kind = EvResourceReleased
				}
				events = append(events, Event{Kind: kind, Tenant: t.Tenant})
			}
			rsEnded += rel + exp
			for _, r := range rs {
				fillTaskReceipt(r, t, leaseID, now)
				if err := appendReceipt(ctx, tx, r, rtypes); err != nil {
					return err
				}
			}
			events = append(events, Event{Kind: EvLeaseExpired, Tenant: t.Tenant, TaskType: t.Type, WorkerID: worker})
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, ev := range events {
		e.emit(ev)
	}
	if rsEnded > 0 {
		e.rl().wake()
	}
	for _, t := range requeued {
		if !t.AvailableAt.After(now) {
			e.waiters.wake(t.Tenant, t.Type, 1)
		}
	}
	return n, nil
}

func (e *Engine) maxExpiries(ctx context.Context, r store.Reader, t *host.Task) int {
	if ct, err := e.types.getIn(ctx, r, t.Tenant, t.Type); err == nil {
		return ct.tt.MaxLeaseExpiries
	}
	return host.DefaultMaxLeaseExpiries
}

func (e *Engine) requeueDelay(ctx context.Context, r store.Reader, t *host.Task) int {
	if ct, err := e.types.getIn(ctx, r, t.Tenant, t.Type); err == nil {
		return ct.tt.RequeueDelaySeconds
	}
	return host.DefaultRequeueDelaySeconds
}

func compactJSON(raw json.RawMessage) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
