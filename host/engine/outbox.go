package engine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Sink delivers outbox entries to an external ledger (ReceiptGate,
// MemoryGate, anything that takes receipts). The outbox calls it at least
// once per entry, in ledger order per task; an entry's Key is the same on
// every attempt, so the sink can drop repeats.
type Sink interface {
	// Deliver sends one entry. nil means the sink has it (now or before). A
	// *RefusedError means the sink will never take it: the entry goes to the
	// dead list. Any other error is retried with backoff.
	Deliver(ctx context.Context, e store.OutboxEntry) error
}

// RefusedError is a sink's final refusal of an entry.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "refused by the sink: " + e.Reason }

// OutboxConfig tunes the outbox dispatcher. Zero values are defaults.
type OutboxConfig struct {
	// Sink receives the entries; without one the outbox only fills (another
	// host, or a later start with a sink, delivers them).
	Sink Sink
	// Batch is how many entries one round claims (default 200); Workers how
	// many deliveries run at once (default 16).
	Batch   int
	Workers int
	// Timeout bounds one delivery (default 10 s); ClaimFor how long a round's
	// claim holds before another dispatcher may take the entries (default
	// 2 min, above Timeout).
	Timeout  time.Duration
	ClaimFor time.Duration
	// MinBackoff and MaxBackoff bound the delay before a failed entry is
	// tried again (defaults 1 s and 5 min), doubled per attempt with jitter.
	MinBackoff, MaxBackoff time.Duration
	// Idle is how long the dispatcher sleeps when nothing is due and nothing
	// woke it (default 1 s).
	Idle time.Duration
}

func (c *OutboxConfig) defaults() {
	if c.Batch <= 0 {
		c.Batch = 200
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.ClaimFor <= c.Timeout {
		c.ClaimFor = max(2*time.Minute, 2*c.Timeout)
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = time.Second
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Minute
	}
	if c.Idle <= 0 {
		c.Idle = time.Second
	}
}

// Event kinds of the outbox.
const (
	EvOutboxDelivered EventKind = "outbox_delivered"
	EvOutboxFailed    EventKind = "outbox_failed" // retried later
	EvOutboxDead      EventKind = "outbox_dead"   // refused by the sink
)

// outboxOn reports whether appended receipts are queued in the outbox.
func (e *Engine) outboxOn() bool {
	return e.cfg.Delivery.Outbox || e.cfg.Delivery.OutboxConfig.Sink != nil
}

// wakeOutbox tells the dispatcher that entries were committed.
func (e *Engine) wakeOutbox() {
	select {
	case e.outboxWake <- struct{}{}:
	default:
	}
}

func (c *OutboxConfig) backoff(attempts int) time.Duration {
	d := c.MinBackoff
	for i := 1; i < attempts && d < c.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.MaxBackoff)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// The kinds of outbox entries: receipts and memory items go to the external
// ledger's sink, email to the mail server.
const (
	OutboxKindReceipt = "receipt"
	OutboxKindMemory  = "memory"
)

// OutboxRound claims the due entries, delivers them and records the
// outcomes. It returns how many it claimed. Entries of kind email go to the
// gate's mail server (email.go), every other to the sink; without either it
// does nothing. The outcomes of emails (email.sent, email.failed) are
// appended in the transaction that records them.
func (e *Engine) OutboxRound(ctx context.Context) (int, error) {
	cfg := e.cfg.Delivery.OutboxConfig
	cfg.defaults()
	if cfg.Sink == nil && e.cfg.Delivery.Mail == nil {
		return 0, nil
	}
	// This host claims only what it can deliver: a host without a sink
	// leaves receipts and memory items to one with a sink, a host without
	// mail leaves email to one with mail.
	var kinds []string
	if cfg.Sink != nil {
		kinds = append(kinds, OutboxKindReceipt, OutboxKindMemory)
	}
	if e.cfg.Delivery.Mail != nil {
		kinds = append(kinds, OutboxKindEmail)
	}
	claimFor := cfg.ClaimFor
	if m := e.cfg.Delivery.Mail; m != nil {
		claimFor = max(claimFor, 2*m.CallBound()) // room for an email's session
	}
	now := e.now()
	claimEnd := now.Add(claimFor)
	var claimed []store.OutboxEntry
	if err := storeErr(e.st.Update(ctx, func(tx store.Tx) error {
		var err error
		claimed, err = tx.ClaimOutbox(ctx, now, claimEnd, cfg.Batch, kinds)
		return err
	})); err != nil || len(claimed) == 0 {
		return 0, err
	}
	// A delivery that could outlast the round's claim is not started:
	// another dispatcher may take the entry once the claim ends, and two
	// deliveries at once are what the claim is there to prevent. Such an
	// entry is handed back as it was, due at once.
	released := make([]bool, len(claimed))
	sem := make(chan struct{}, cfg.Workers)
	var wg sync.WaitGroup
	for i := range claimed {
		bound := cfg.Timeout
		if claimed[i].Kind == OutboxKindEmail && e.cfg.Delivery.Mail != nil {
			// One mail session may take longer than a sink's call.
			bound = max(bound, e.cfg.Delivery.Mail.CallBound())
		}
		sem <- struct{}{}
		if e.now().Add(bound).After(claimEnd) {
			<-sem
			released[i] = true
			claimed[i].State, claimed[i].NextAt = store.OutboxPending, e.now()
			continue
		}
		wg.Add(1)
		go func(en *store.OutboxEntry) {
			defer func() { <-sem; wg.Done() }()
			dctx, cancel := context.WithTimeout(ctx, bound)
			var err error
			switch {
			case en.Kind == OutboxKindEmail:
				err = e.deliverEmail(dctx, *en)
			case cfg.Sink == nil:
				err = errors.New("this host has no sink for the external ledger (delivery.sink); the entry waits for one")
			default:
				err = cfg.Sink.Deliver(dctx, *en)
			}
			cancel()
			var refused *RefusedError
			switch {
			case err == nil:
				en.State = store.OutboxDone
			case errors.As(err, &refused):
				en.State, en.Attempts, en.LastError = store.OutboxDead, en.Attempts+1, errorText(err, 1000)
			default:
				en.State, en.Attempts, en.LastError = store.OutboxPending, en.Attempts+1, errorText(err, 1000)
				en.NextAt = e.now().Add(cfg.backoff(en.Attempts))
			}
		}(&claimed[i])
	}
	wg.Wait()
	// The outcomes are recorded even when the gate is stopping: a delivery
	// made and not recorded would be made again.
	var out deliveryOut
	rctx := context.WithoutCancel(ctx)
	if err := storeErr(e.st.Update(rctx, e.withDelivery(func(tx store.Tx) error {
		if err := tx.FinishOutbox(rctx, claimed); err != nil {
			return err
		}
		return e.emailOutcomes(rctx, tx, claimed)
	}, &out))); err != nil {
		return len(claimed), err // the claims end by themselves; the entries are tried again
	}
	e.afterCommit(&out) // email outcome receipts queued for the external ledger
	for i, en := range claimed {
		if released[i] || en.State == store.OutboxReclaimed {
			continue // not tried, or its outcome is another dispatcher's now
		}
		ev := Event{Tenant: en.Tenant, Detail: en.LastError}
		switch en.State {
		case store.OutboxDone:
			ev.Kind = EvOutboxDelivered
		case store.OutboxDead:
			ev.Kind = EvOutboxDead
			what := "the sink"
			if en.Kind == OutboxKindEmail {
				what = "the mail server"
			}
			e.log.Warn("outbox: "+what+" refused an entry; it is on the dead list (gate outbox retry)", "id", en.ID, "key", en.Key, "err", en.LastError)
		default:
			ev.Kind = EvOutboxFailed
			e.log.Debug("outbox: delivery failed; retrying", "id", en.ID, "key", en.Key, "attempts", en.Attempts, "next", en.NextAt, "err", en.LastError)
		}
		e.emit(ev)
	}
	return len(claimed), nil
}

// outboxLoop runs rounds until Close: at once while there is work, else
// when woken by a commit or after Idle. A sink that is down only slows this
// loop; the lease engine never waits for it.
func (e *Engine) outboxLoop() {
	defer e.wg.Done()
	cfg := e.cfg.Delivery.OutboxConfig
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-e.stop; cancel() }()
	fails := 0
	for {
		n, err := e.OutboxRound(ctx)
		wait := time.Duration(0)
		switch {
		case err != nil:
			fails++
			wait = cfg.backoff(fails)
			if ctx.Err() == nil {
				e.log.Warn("outbox round failed", "err", err, "retry_in", wait)
			}
		case n == 0:
			fails = 0
			wait = cfg.Idle
		default:
			fails = 0
		}
		if wait == 0 {
			select {
			case <-e.stop:
				return
			default:
				continue
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-e.stop:
			t.Stop()
			return
		case <-e.outboxWake:
			t.Stop()
		case <-t.C:
		}
	}
}

// OutboxStatus is what `gate outbox status` shows.
type OutboxStatus struct {
	store.OutboxStats
	// LagSeconds is the age of the oldest pending entry (0 when none).
	LagSeconds float64             `json:"lag_seconds"`
	DeadList   []store.OutboxEntry `json:"dead_list"`
}

// OutboxStatusOf reads the outbox of st at now: counts, lag and the dead list (up to limit).
func OutboxStatusOf(ctx context.Context, st store.Store, now time.Time, limit int) (*OutboxStatus, error) {
	out := &OutboxStatus{DeadList: []store.OutboxEntry{}}
	err := storeErr(st.View(ctx, func(r store.Reader) error {
		var err error
		if out.OutboxStats, err = r.OutboxStats(ctx); err != nil {
			return err
		}
		dead, err := r.ListOutbox(ctx, store.OutboxDead, 0, limit)
		if dead != nil {
			out.DeadList = dead
		}
		return err
	}))
	if out.OldestPendingAt != nil {
		out.LagSeconds = max(0, now.Sub(*out.OldestPendingAt).Seconds())
	}
	return out, err
}

// OutboxStatus reads the engine's outbox.
func (e *Engine) OutboxStatus(ctx context.Context, limit int) (*OutboxStatus, error) {
	limit, err := pageSize(limit, MaxLongPage)
	if err != nil {
		return nil, err
	}
	return OutboxStatusOf(ctx, e.st, e.now(), limit)
}

// RetryOutboxOf moves dead entries of st (all when ids is empty) back to pending.
func RetryOutboxOf(ctx context.Context, st store.Store, ids []int64, now time.Time) (int64, error) {
	var n int64
	err := storeErr(st.Update(ctx, func(tx store.Tx) error {
		var err error
		n, err = tx.RetryOutbox(ctx, ids, now)
		return err
	}))
	return n, err
}

// RetryOutbox moves dead entries back to pending and wakes the dispatcher.
func (e *Engine) RetryOutbox(ctx context.Context, ids []int64) (int64, error) {
	n, err := RetryOutboxOf(ctx, e.st, ids, e.now())
	if n > 0 {
		e.wakeOutbox()
	}
	return n, err
}

// PromoteRequest asks to store a task's result in long-term memory.
type PromoteRequest struct {
	TaskID        string `json:"task_id"`
	Domain        string `json:"domain,omitempty"`
	AsObservation *bool  `json:"as_observation,omitempty"`
}

// PromoteResult is store_task_result_in_memory's answer.
type PromoteResult struct {
	TaskID          string    `json:"task_id"`
	MemoryKey       string    `json:"memory_key"`
	PromotedAt      time.Time `json:"promoted_at"`
	AlreadyPromoted bool      `json:"already_promoted"`
	Status          string    `json:"status"`
}

// maxMemoryContent bounds a result's content carried in a memory item.
const maxMemoryContent = 64 << 10

// PromoteToMemory queues a succeeded task's result for the external ledger
// as a memory item (kind "memory", key memory:<task_id>) and sets
// promoted_to_memory on the acting principal's own inbox items of the task,
// in one transaction. It answers already_promoted, queuing nothing, when an
// item of the task was promoted. The outbox delivers it at least once. The result's content is carried when it
// is at most 64 KiB; otherwise its pointer and checksum are.
func (e *Engine) PromoteToMemory(ctx context.Context, actor Actor, req PromoteRequest) (*PromoteResult, error) {
	if !e.outboxOn() {
		return nil, host.Errorf(host.CodeConflict, "this gate has no external ledger configured (delivery.sink); nothing to promote to")
	}
	if host.LongerThan(req.Domain, 200) || !printable(req.Domain) {
		return nil, host.Errorf(host.CodeBadRequest, "domain must be at most 200 printable characters")
	}
	t, err := e.PeekTask(ctx, actor, req.TaskID)
	if err != nil {
		return nil, err
	}
	if t.State != host.StateSucceeded || t.Result == nil {
		return nil, host.Errorf(host.CodeConflict, "task %s is %s and has no result to promote", t.ID, t.State)
	}
	item := map[string]any{"task_id": t.ID, "task_type": t.Type, "recipient": t.Recipient, "created_by": t.CreatedBy,
		"completed_at": t.CompletedAt, "result": t.Result, "domain": req.Domain, "as_observation": req.AsObservation == nil || *req.AsObservation,
		"promoted_by": actor.Principal}
	if req.Domain == "" {
		item["domain"] = t.Type
	}
	if t.Result.Pointer != "" && e.cfg.Plugins != nil {
		if fr, err := e.FetchResult(ctx, actor, t.ID); err == nil && len(fr.Content) <= maxMemoryContent {
			if json.Valid(fr.Content) {
				item["content"] = json.RawMessage(fr.Content)
			} else {
				item["content_base64"] = base64.StdEncoding.EncodeToString(fr.Content)
			}
		}
	}
	body := mustJSON(item)
	now := e.now()
	out := &PromoteResult{TaskID: t.ID, MemoryKey: "memory:" + t.ID, PromotedAt: now, Status: "queued"}
	err = e.update(ctx, func(tx store.Tx) error {
		out.AlreadyPromoted, out.PromotedAt, out.Status = false, now, "queued"
		items, _, err := tx.ListInbox(ctx, store.InboxFilter{Tenant: t.Tenant, TaskID: t.ID, Limit: 100})
		if err != nil {
			return err
		}
		for _, it := range items {
			if it.PromotedAt != nil {
				out.AlreadyPromoted, out.PromotedAt, out.Status = true, *it.PromotedAt, "already_promoted"
				return nil
			}
		}
		if err := tx.InsertOutbox(ctx, []store.OutboxEntry{{Tenant: t.Tenant, TaskID: t.ID, Kind: OutboxKindMemory, Key: out.MemoryKey,
			Body: body, NextAt: now, CreatedAt: now}}); err != nil {
			return err
		}
		// Only the promoting principal's own items (seed 002: the mark
		// records what that AI did); the answer above is the task's.
		_, err = tx.MarkInbox(ctx, store.InboxMark{Tenant: t.Tenant, Recipient: actor.Principal, TaskID: t.ID, Field: host.InboxPromoted, At: now})
		return err
	})
	if err != nil {
		return nil, err
	}
	if !out.AlreadyPromoted {
		e.wakeOutbox()
	}
	return out, nil
}

// ChannelSink is a Sink made of a channel plugin: each entry is Put as one
// JSON payload named by its dedupe key, so any channel plugin that pushes
// payloads somewhere (the http channel, an operator's own) can take
// receipts to another ledger. The channel is looked up on every delivery:
// one still loading is a retryable failure. A channel's bad_request or
// too_large answer is a refusal.
type ChannelSink struct {
	Plugins Plugins
	Name    string
}

var _ Sink = ChannelSink{}

// Deliver implements Sink.
func (s ChannelSink) Deliver(ctx context.Context, e store.OutboxEntry) error {
	if s.Plugins == nil {
		return errors.New("no plugins to resolve the sink channel")
	}
	ch, err := s.Plugins.Channel(s.Name)
	if err != nil {
		return err
	}
	body := mustJSON(map[string]any{"dedupe_key": e.Key, "kind": e.Kind, "tenant": e.Tenant, "task_id": e.TaskID, "item": e.Body})
	_, err = ch.Put(ctx, e.Key, body)
	if c := host.ErrorCode(err); err != nil && (c == host.CodeBadRequest || c == host.CodeTooLarge) {
		return &RefusedError{Reason: err.Error()}
	}
	return err
}
