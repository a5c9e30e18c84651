package engine

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Bounds of one task history read.
const (
	timelineReceipts = 500
	timelineProgress = 100
)

// TaskAttempts is a task with its attempts.
type TaskAttempts struct {
	Task *host.Task
	// Attempts are oldest first: every lease that ended, then the live one
	// of a leased task (outcome running, its duration up to At).
	Attempts []host.Attempt
	// At is the engine's clock when they were read.
	At time.Time
}

// Attempts returns a visible task and its attempts.
func (e *Engine) Attempts(ctx context.Context, actor Actor, id string) (*TaskAttempts, error) {
	h, err := e.history(ctx, actor, id, false)
	if err != nil {
		return nil, err
	}
	return &TaskAttempts{Task: h.task, Attempts: h.attempts, At: h.at}, nil
}

// Timeline is a task's history as events, oldest first.
type Timeline struct {
	Task   *host.Task
	Events []host.TimelineEvent
	// Truncated is set when the task has more receipts or progress reports
	// than one timeline shows (500 and the newest 100).
	Truncated bool
	// At is the engine's clock when it was read.
	At time.Time
}

// Timeline returns a visible task's history: its receipts, the grants of
// its leases and the ends of those that wrote no receipt (an offer that
// expired or was given back), and its latest progress reports, in the
// order they happened.
func (e *Engine) Timeline(ctx context.Context, actor Actor, id string) (*Timeline, error) {
	h, err := e.history(ctx, actor, id, true)
	if err != nil {
		return nil, err
	}
	type keyed struct {
		ev   host.TimelineEvent
		rank int // orders events of one lease at one instant: grant, accept, progress, the rest
		n    int // then the order they were read in
	}
	var all []keyed
	add := func(ev host.TimelineEvent, rank int) {
		all = append(all, keyed{ev, rank, len(all)})
	}
	byLease := map[string]host.Attempt{}
	for _, a := range h.attempts {
		byLease[a.LeaseID] = a
		add(host.TimelineEvent{Time: a.LeasedAt, Type: host.EventLeaseGranted, Attempt: a.Attempt, Lease: a.Lease,
			LeaseID: a.LeaseID, WorkerID: a.WorkerID}, 1)
		if a.EndedAt == nil || a.ReceiptID != "" && a.Outcome != host.AttemptExpired {
			continue // running, or its receipt tells how it ended
		}
		typ := host.EventLeaseExpired
		switch a.Outcome {
		case host.AttemptReleased:
			typ = host.EventLeaseReleased
		case host.AttemptSnoozed:
			typ = host.EventLeaseSnoozed
		}
		d := map[string]any{"outcome": a.Outcome, "duration_ms": a.DurationMS}
		if a.LeaseExpiresAt != nil {
			d["lease_expires_at"] = a.LeaseExpiresAt
		}
		if a.RetryAt != nil {
			d["available_at"] = a.RetryAt
		}
		add(host.TimelineEvent{Time: *a.EndedAt, Type: typ, Attempt: a.Attempt, Lease: a.Lease, LeaseID: a.LeaseID,
			WorkerID: a.WorkerID, Details: mustJSON(d)}, 3)
	}
	for _, r := range h.receipts {
		ev := host.TimelineEvent{Time: r.CreatedAt, Type: string(r.Type), LeaseID: r.LeaseID, ReceiptID: r.ID,
			From: r.From, To: r.To, Details: r.Body}
		if a, ok := byLease[r.LeaseID]; ok && r.LeaseID != "" {
			ev.Attempt, ev.Lease, ev.WorkerID = a.Attempt, a.Lease, a.WorkerID
		}
		rank := 3
		switch r.Type {
		case host.ReceiptAssigned:
			rank = 0
		case host.ReceiptAccepted:
			rank = 2
		}
		add(ev, rank)
	}
	for i := len(h.progress) - 1; i >= 0; i-- { // newest first → oldest first
		p := h.progress[i]
		ev := host.TimelineEvent{Time: p.At, Type: host.EventProgress, LeaseID: p.LeaseID}
		if a, ok := byLease[p.LeaseID]; ok {
			ev.Attempt, ev.Lease, ev.WorkerID = a.Attempt, a.Lease, a.WorkerID
		}
		d := map[string]any{}
		if p.Percent != nil {
			d["percent"] = *p.Percent
		}
		if p.Message != "" {
			d["message"] = p.Message
		}
		ev.Details = mustJSON(d)
		add(ev, 2)
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if !a.ev.Time.Equal(b.ev.Time) {
			return a.ev.Time.Before(b.ev.Time)
		}
		if la, lb := leaseOrder(a.ev, a.rank), leaseOrder(b.ev, b.rank); la != lb {
			return la < lb
		}
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		return a.n < b.n
	})
	out := &Timeline{Task: h.task, Events: make([]host.TimelineEvent, len(all)), Truncated: h.truncated, At: h.at}
	for i, k := range all {
		k.ev.EventID = i + 1
		out.Events[i] = k.ev
	}
	return out, nil
}

// leaseOrder orders events of one instant by the lease they belong to: an
// assignment first, then lease by lease, then what belongs to no lease (a
// cancel of a queued task, a redrive).
func leaseOrder(ev host.TimelineEvent, rank int) int {
	switch {
	case rank == 0:
		return 0
	case ev.Lease > 0:
		return ev.Lease
	}
	return math.MaxInt
}

// history is what one consistent read knows of a task's past.
type history struct {
	task      *host.Task
	attempts  []host.Attempt
	receipts  []*host.Receipt
	progress  []store.Progress
	truncated bool
	at        time.Time
}

func (e *Engine) history(ctx context.Context, actor Actor, id string, all bool) (*history, error) {
	now := e.now()
	h := &history{at: now}
	err := e.view(ctx, func(r store.Reader) error {
		t, err := r.GetTask(ctx, actor.Tenant, id)
		if err != nil {
			return err
		}
		if !visible(actor, t) {
			return host.Errorf(host.CodeNotFound, "no task %s", id)
		}
		h.task = t
		if h.attempts, err = r.ListAttempts(ctx, actor.Tenant, id, store.MaxAttemptsListed); err != nil {
			return err
		}
		if h.attempts, err = withSucceededAttempt(ctx, r, t, h.attempts); err != nil {
			return err
		}
		if !all {
			return nil
		}
		var cur string
		if h.receipts, cur, err = r.ListReceipts(ctx, store.ReceiptFilter{Tenant: actor.Tenant, TaskID: id, Limit: timelineReceipts}); err != nil {
			return err
		}
		if h.progress, err = r.ListProgress(ctx, actor.Tenant, id, timelineProgress+1); err != nil {
			return err
		}
		if len(h.progress) > timelineProgress {
			h.progress = h.progress[:timelineProgress]
			h.truncated = true
		}
		h.truncated = h.truncated || cur != "" || len(h.attempts) == store.MaxAttemptsListed
		return nil
	})
	if err != nil {
		return nil, err
	}
	if a := host.CurrentAttempt(h.task, now); a != nil {
		h.attempts = append(h.attempts, *a)
	}
	return h, nil
}

// withSucceededAttempt appends to the stored attempts of t the attempt its
// success ended, which is derived, not stored (host.SucceededAttempt);
// a success stored by an older gate is kept as it is. A list already
// holding store.MaxAttemptsListed attempts is cut short before the last,
// so it gets none.
func withSucceededAttempt(ctx context.Context, r store.Reader, t *host.Task, stored []host.Attempt) ([]host.Attempt, error) {
	if host.FinishedAs(t) != host.StateSucceeded || t.LeaseID == "" || len(stored) >= store.MaxAttemptsListed {
		return stored, nil
	}
	for _, a := range stored {
		if a.LeaseID == t.LeaseID && a.Outcome == host.AttemptSucceeded {
			return stored, nil
		}
	}
	rc, err := completionOf(ctx, r, t)
	if err != nil {
		return nil, err
	}
	if a := host.SucceededAttempt(t, rc); a != nil {
		stored = append(stored, *a)
	}
	return stored, nil
}
