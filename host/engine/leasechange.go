package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// WorkerCall identifies the lease a worker call is about.
type WorkerCall struct {
	Tenant   string
	WorkerID string // "" skips the holder check (an admin's release)
	// By is the principal acting when it is not the holder (an admin taking
	// a lease away): the receipts the call writes come from it, not from
	// the worker.
	By      string
	LeaseID string
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
			return nil, noLiveLease(c)
		}
		return nil, err
	}
	return checkLive(t, c, now)
}

// noLiveLease answers a call naming a lease the caller cannot hold: one
// that never existed, another tenant's, or another worker's, live or
// ended. The words are the same for each, so that the answer tells nothing
// of leases and tasks the caller may not see.
func noLiveLease(c WorkerCall) error {
	return host.Errorf(host.CodeLeaseExpired, "no live lease %s: it expired, was released or never existed", c.LeaseID)
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
		return nil, noLiveLease(c)
	}
	if t.State != host.StateLeased || t.LeaseID != c.LeaseID {
		if c.WorkerID != "" && t.WorkerID != c.WorkerID {
			// Not its lease, or one whose end cleared the holder (a release,
			// snooze, failure or expiry): the task's state is not the
			// caller's to learn from a lease id. Only a success keeps the
			// holder, whose worker hears the state.
			return t, noLiveLease(c)
		}
		err := host.Errorf(host.CodeLeaseExpired, "lease %s is no longer held: the task is %s", c.LeaseID, t.State)
		if c.WorkerID != "" {
			// The holder's own worker: its task's state, in a field too,
			// so that a worker whose completion was taken but whose answer
			// was lost knows the task ended rather than that it lost it.
			err.TaskStatus = string(t.State)
		}
		return t, err
	}
	if c.WorkerID != "" && t.WorkerID != c.WorkerID {
		return t, noLiveLease(c) // another worker's: that it is live is not the caller's to learn
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

// leaseChange is one change to the task under a worker's live lease: accept,
// heartbeat (with its progress), complete, fail and release are each one,
// and changeLeased writes each of them.
type leaseChange struct {
	// prebuild is the change of a verb that reads nothing but the task
	// (accept, complete): it changes t in place and returns what follows
	// the task's own write, or nil when there is nothing to write (t is the
	// answer as it stands). As it needs no transaction it first runs outside
	// the store's single writer, on a copy of the task this engine knows to
	// be leased, and the writer only writes the result, fenced on the live
	// lease and on that copy's row version; only when something wrote the
	// task in between does it run again in the transaction, on the task
	// read there.
	prebuild func(t *host.Task) *leaseWrite
	// build is the change of any other verb (heartbeat reads the task type
	// and writes progress): it runs in the transaction only, on the task
	// read there, and may write rows that precede the task's own. Exactly
	// one of prebuild and build is set.
	build func(tx store.Tx, t *host.Task) (*leaseWrite, error)
	// gone, when set, answers a call whose lease is not live, given
	// liveLease's error and the task it found, if any: an error, or nil
	// when the verb recorded an answer itself (a repeated call's first
	// outcome, a release of a lease already gone). Unset, the error is the
	// answer.
	gone func(tx store.Tx, t *host.Task, err error) error
	// reset, when set, runs first in every run of the transaction (a
	// store may run it more than once, a batch rerun): it clears what the
	// verb gathered from an earlier run.
	reset func()
}

// leaseWrite is what a leaseChange writes after the task itself, in this
// order: the receipts, then whatever then writes.
type leaseWrite struct {
	// receipts are appended in order; each terminates those of its parents
	// named in parents (appendReceipt).
	receipts []*host.Receipt
	parents  map[string]host.ReceiptType
	// then, when set, writes the rest with the task as written (its
	// resource leases; the receipts of a verb that writes those after its
	// resource leases) and records the verb's answer.
	then func(tx store.Tx, t *host.Task) error
}

// persist writes w after the task t. validated says the receipts were
// already validated outside the writer.
func (w *leaseWrite) persist(ctx context.Context, tx store.Tx, t *host.Task, validated bool) error {
	for _, r := range w.receipts {
		add := appendReceipt
		if validated {
			add = appendValid
		}
		if err := add(ctx, tx, r, w.parents); err != nil {
			return err
		}
	}
	if w.then != nil {
		return w.then(tx, t)
	}
	return nil
}

// changeLeased makes ch to the task under c's live lease, in one store
// transaction (e.update, which also writes the inbox and outbox rows of the
// receipts: delivery.go). It loads the task by its lease and checks that the
// lease is live (liveLease: tenant, task, holder, and expiry by the server
// clock at now), lets ch change it, writes it fenced on the live lease, and
// then writes what follows it (leaseWrite). A fence lost to a concurrent
// change is lease_expired. It returns the task as written, or as found when
// there was nothing to write, or nil when ch.gone answered.
//
// A change ch.prebuild makes is built first outside the writer (leasedTask:
// the copy this engine remembers leasing, or one read now), its receipts
// validated there, and written fenced on the copy's row version too; if
// something wrote the task since, the transaction builds it again from the
// task it reads.
func (e *Engine) changeLeased(ctx context.Context, c WorkerCall, now time.Time, ch leaseChange) (*host.Task, error) {
	var pre *prebuiltChange
	if ch.prebuild != nil {
		if t := e.leasedTask(ctx, c, now); t != nil {
			pre = prebuild(t, ch.prebuild)
		}
	}
	var out *host.Task
	err := e.update(ctx, func(tx store.Tx) error {
		out = nil
		if ch.reset != nil {
			ch.reset()
		}
		if pre != nil {
			t := pre.task
			fence := liveFence(pre.from, now)
			fence.Version = pre.from.Version
			err := tx.UpdateTask(ctx, &t, fence)
			if err == nil {
				out = &t
				return pre.write.persist(ctx, tx, &t, true)
			}
			if !errors.Is(err, store.ErrFenced) {
				return err
			}
		}
		t, err := liveLease(ctx, tx, c, now)
		if err != nil {
			if ch.gone != nil {
				return ch.gone(tx, t, err)
			}
			return err
		}
		fence := liveFence(t, now)
		var w *leaseWrite
		if ch.prebuild != nil {
			w = ch.prebuild(t)
		} else if w, err = ch.build(tx, t); err != nil {
			return err
		}
		if w == nil {
			out = t
			return nil
		}
		if err := tx.UpdateTask(ctx, t, fence); err != nil {
			return fenced(err, c.LeaseID)
		}
		out = t
		return w.persist(ctx, tx, t, false)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// prebuiltChange is a leaseChange built outside the store's writer.
type prebuiltChange struct {
	from  *host.Task // the copy it was built from: its lease and version fence the write
	task  host.Task  // the task as the change leaves it
	write *leaseWrite
}

// prebuild runs build on a copy of from, the task under a live lease. It
// returns nil when there is nothing to write or a receipt does not
// validate: the writer builds the change again then, and reports why.
func prebuild(from *host.Task, build func(*host.Task) *leaseWrite) *prebuiltChange {
	p := &prebuiltChange{from: from, task: *from}
	if p.write = build(&p.task); p.write == nil {
		return nil
	}
	for _, r := range p.write.receipts {
		if r.Validate() != nil {
			return nil
		}
	}
	return p
}

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
