package storetest

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// cancelBody is the part of a task.cancel_requested or task.canceled
// receipt's body the cancel cases read.
type cancelBody struct {
	Reason        string `json:"reason"`
	RequestedBy   string `json:"requested_by"`
	CanceledBy    string `json:"canceled_by"`
	CancelRequest string `json:"cancel_request"`
	LeaseID       string `json:"lease_id"`
	WorkerID      string `json:"worker_id"`
	Error         string `json:"error_message"`
}

func bodyOf(t testing.TB, r *host.Receipt) cancelBody {
	t.Helper()
	var b cancelBody
	if err := json.Unmarshal(r.Body, &b); err != nil {
		t.Fatalf("receipt %s body %s: %v", r.ID, r.Body, err)
	}
	return b
}

// lastOf returns the last receipt of type typ of task id, failing the test
// when there is none.
func (b *Bundle) lastOf(t testing.TB, id string, typ host.ReceiptType) *host.Receipt {
	t.Helper()
	rs := b.Receipts(t, id)
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Type == typ {
			return rs[i]
		}
	}
	t.Fatalf("task %s has no %s receipt: %v", id, typ, b.ReceiptTypes(t, id))
	return nil
}

// testCancelRecordsWhoAsked: a cancel of a leased task is recorded in the
// ledger when it is asked for — a task.cancel_requested receipt from the
// principal who asked to the worker holding the lease, with the reason,
// opening and discharging nothing — and the task.canceled that ends the
// lease, whichever way it ends (the worker's fail or release, the sweep
// of its expiry), names that receipt among its parents and repeats who
// asked and why. A read of the task names them too, and a canceled task's
// error_message is the cancel's reason, not an earlier attempt's failure
// (kept in its attempts). A second cancel writes nothing; a task canceled
// while queued names who asked as well.
func testCancelRecordsWhoAsked(t *testing.T, b *Bundle) {
	// An earlier attempt failed; the next lease is canceled by the agent.
	res := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.MaxRetries = ptrInt(3) })
	o := b.LeaseOne(t, "w.1")
	if _, _, err := b.Engine.Accept(b.Ctx, Call("w.1", o)); err != nil {
		t.Fatal(err)
	}
	if fr, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "boom", Retryable: true}); err != nil || !fr.WillRetry {
		t.Fatalf("first failure: %+v %v", fr, err)
	}
	b.Clock.Advance(time.Hour)
	o = b.LeaseOne(t, "w.1")
	_, accept, err := b.Engine.Accept(b.Ctx, Call("w.1", o))
	if err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(time.Second)
	tk, err := b.Engine.Cancel(b.Ctx, b.Agent, res.TaskID, "not needed any more")
	if err != nil || tk.State != host.StateLeased || !tk.CancelRequested {
		t.Fatalf("cancel of the leased task: %+v %v", tk, err)
	}
	req := b.lastOf(t, res.TaskID, host.ReceiptCancelRequested)
	if rb := bodyOf(t, req); req.From != b.Agent.Principal || req.To != "w.1" || req.LeaseID != o.LeaseID ||
		!slices.Equal(req.Parents, []string{accept}) || rb.Reason != "not needed any more" || rb.RequestedBy != b.Agent.Principal ||
		rb.LeaseID != o.LeaseID || rb.WorkerID != "w.1" || !req.CreatedAt.Equal(b.Clock.Now()) {
		t.Fatalf("the cancel request: %+v %s", req, req.Body)
	}
	if req.Type.CreatesObligation() || req.Type.Terminal() {
		t.Fatalf("%s must be informational", req.Type)
	}
	if obs := b.Open(t, "w.1"); len(obs) != 1 || obs[0].ReceiptID != accept {
		t.Fatalf("the request changed the worker's obligations: %+v", obs)
	}
	tk = b.Task(t, res.TaskID)
	if tk.CancelRequestedBy != b.Agent.Principal || tk.CancelReason != "not needed any more" {
		t.Fatalf("a read of the flagged task: cancel requested by %q, reason %q", tk.CancelRequestedBy, tk.CancelReason)
	}
	// Asking again (the agent, an admin) is a no-op: no second request.
	n := len(b.Receipts(t, res.TaskID))
	for _, a := range []engine.Actor{b.Agent, b.Admin} {
		if _, err := b.Engine.Cancel(b.Ctx, a, res.TaskID, "again"); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(b.Receipts(t, res.TaskID)); got != n {
		t.Fatalf("a repeated cancel wrote %d receipts", got-n)
	}
	hb, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o)})
	if err != nil || !hb.CancelRequested {
		t.Fatalf("heartbeat after the cancel: %+v %v", hb, err)
	}
	fr, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "stopped as asked"})
	if err != nil || fr.Status != "canceled" {
		t.Fatalf("the worker's stop: %+v %v", fr, err)
	}
	end := b.lastOf(t, res.TaskID, host.ReceiptCanceled)
	if eb := bodyOf(t, end); end.ID != fr.ReceiptID || end.From != "w.1" || !slices.Contains(end.Parents, req.ID) ||
		eb.CanceledBy != b.Agent.Principal || eb.Reason != "not needed any more" || eb.CancelRequest != req.ID || eb.Error != "stopped as asked" {
		t.Fatalf("the task.canceled ending the lease: %+v %s", end, end.Body)
	}
	tk = b.Task(t, res.TaskID)
	if tk.State != host.StateCanceled || tk.LastError != "not needed any more" || tk.CancelRequestedBy != b.Agent.Principal ||
		tk.CancelReason != "not needed any more" {
		t.Fatalf("the canceled task: state %s, error_message %q, canceled by %q for %q", tk.State, tk.LastError, tk.CancelRequestedBy, tk.CancelReason)
	}
	at, err := b.Engine.Attempts(b.Ctx, b.Agent, res.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if len(at.Attempts) != 2 || at.Attempts[0].Error != "boom" || at.Attempts[0].Outcome != host.AttemptFailed ||
		at.Attempts[1].Error != "stopped as asked" || at.Attempts[1].Outcome != host.AttemptCanceled {
		t.Fatalf("attempts keep each attempt's error: %+v", at.Attempts)
	}
	if obs := b.Open(t, "w.1"); len(obs) != 0 {
		t.Fatalf("the cancel left the worker's obligations open: %+v", obs)
	}
	if obs := b.Open(t, b.Agent.Principal); len(obs) != 0 {
		t.Fatalf("the cancel left the agent's obligations open: %+v", obs)
	}

	// An admin asks; the worker releases (never accepted: the request
	// cites the assignment).
	rel := b.Enqueue(t, "work")
	o = b.LeaseOne(t, "w.2")
	if _, err := b.Engine.Cancel(b.Ctx, b.Admin, rel.TaskID, "maintenance"); err != nil {
		t.Fatal(err)
	}
	req = b.lastOf(t, rel.TaskID, host.ReceiptCancelRequested)
	if req.From != b.Admin.Principal || req.To != "w.2" || !slices.Equal(req.Parents, []string{rel.ReceiptID}) {
		t.Fatalf("the admin's request: %+v", req)
	}
	if tk, err := b.Engine.Release(b.Ctx, Call("w.2", o), "told to stop"); err != nil || tk.State != host.StateCanceled {
		t.Fatalf("release after the cancel: %+v %v", tk, err)
	}
	end = b.lastOf(t, rel.TaskID, host.ReceiptCanceled)
	if eb := bodyOf(t, end); end.From != "w.2" || !slices.Contains(end.Parents, req.ID) || eb.CanceledBy != b.Admin.Principal ||
		eb.Reason != "maintenance" || eb.CancelRequest != req.ID {
		t.Fatalf("the release's task.canceled: %+v %s", end, end.Body)
	}
	if tk := b.Task(t, rel.TaskID); tk.LastError != "maintenance" || tk.CancelRequestedBy != b.Admin.Principal || tk.CancelReason != "maintenance" {
		t.Fatalf("the released task: error_message %q, canceled by %q for %q", tk.LastError, tk.CancelRequestedBy, tk.CancelReason)
	}

	// The lease expires after the cancel: the sweep ends it, from the gate,
	// naming who asked (with no reason given).
	exp := b.Enqueue(t, "work")
	o = b.LeaseOne(t, "w.3")
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, exp.TaskID, ""); err != nil {
		t.Fatal(err)
	}
	req = b.lastOf(t, exp.TaskID, host.ReceiptCancelRequested)
	b.Clock.Set(o.LeaseExpiresAt)
	if _, err := b.Engine.Sweep(b.Ctx); err != nil {
		t.Fatal(err)
	}
	end = b.lastOf(t, exp.TaskID, host.ReceiptCanceled)
	if eb := bodyOf(t, end); end.From != engine.GatePrincipal || !slices.Contains(end.Parents, req.ID) ||
		eb.CanceledBy != b.Agent.Principal || eb.Reason != "" || eb.CancelRequest != req.ID {
		t.Fatalf("the sweep's task.canceled: %+v %s", end, end.Body)
	}
	if tk := b.Task(t, exp.TaskID); tk.State != host.StateCanceled || tk.LastError != "" || tk.CancelRequestedBy != b.Agent.Principal {
		t.Fatalf("the expired canceled task: %s, error_message %q, canceled by %q", tk.State, tk.LastError, tk.CancelRequestedBy)
	}

	// Canceled while queued after a failed attempt: at once, and the
	// failure is no longer the task's error_message.
	q := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.MaxRetries = ptrInt(3) })
	o = b.LeaseOne(t, "w.1")
	if fr, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "boom", Retryable: true}); err != nil || !fr.WillRetry {
		t.Fatalf("failure: %+v %v", fr, err)
	}
	if tk, err := b.Engine.Cancel(b.Ctx, b.Agent, q.TaskID, "changed my mind"); err != nil || tk.State != host.StateCanceled {
		t.Fatalf("cancel of the scheduled task: %+v %v", tk, err)
	}
	tk = b.Task(t, q.TaskID)
	if tk.LastError != "changed my mind" || tk.CancelRequestedBy != b.Agent.Principal || tk.CancelReason != "changed my mind" {
		t.Fatalf("the task canceled while queued: error_message %q, canceled by %q for %q", tk.LastError, tk.CancelRequestedBy, tk.CancelReason)
	}
	if slices.Contains(b.ReceiptTypes(t, q.TaskID), host.ReceiptCancelRequested) {
		t.Fatalf("a cancel at once wrote a request: %v", b.ReceiptTypes(t, q.TaskID))
	}

	// The worker completes anyway: the task succeeded, the request stays
	// in the ledger, and a read no longer says a cancel is pending.
	done := b.Enqueue(t, "work")
	o = b.LeaseOne(t, "w.1")
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, done.TaskID, "too late"); err != nil {
		t.Fatal(err)
	}
	b.Complete(t, "w.1", o)
	b.lastOf(t, done.TaskID, host.ReceiptCancelRequested)
	if tk := b.Task(t, done.TaskID); tk.State != host.StateSucceeded || tk.CancelRequested || tk.CancelRequestedBy != "" || tk.LastError != "" {
		t.Fatalf("the task completed despite the cancel: %+v", tk)
	}
	// A lease an older gate flagged (the flag, no request in the ledger)
	// ends canceled as before: the old reason, nobody named, and no
	// earlier error left as the task's.
	old := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.MaxRetries = ptrInt(3) })
	o = b.LeaseOne(t, "w.1")
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "boom", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(time.Hour)
	o = b.LeaseOne(t, "w.1")
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		tk, err := tx.GetTask(b.Ctx, "acme", old.TaskID)
		if err != nil {
			return err
		}
		f := store.Fence{State: host.StateLeased, LeaseID: tk.LeaseID}
		tk.CancelRequested = true
		return tx.UpdateTask(b.Ctx, tk, f)
	}); err != nil {
		t.Fatal(err)
	}
	if tk := b.Task(t, old.TaskID); !tk.CancelRequested || tk.CancelRequestedBy != "" {
		t.Fatalf("a lease flagged without a request: %+v", tk)
	}
	if tk, err := b.Engine.Release(b.Ctx, Call("w.1", o), ""); err != nil || tk.State != host.StateCanceled {
		t.Fatalf("release of the flagged lease: %+v %v", tk, err)
	}
	end = b.lastOf(t, old.TaskID, host.ReceiptCanceled)
	if eb := bodyOf(t, end); eb.Reason != "cancel_requested" || eb.CanceledBy != "" || eb.CancelRequest != "" || len(end.Parents) != 1 {
		t.Fatalf("the old lease's task.canceled: %+v %s", end, end.Body)
	}
	if tk := b.Task(t, old.TaskID); tk.LastError != "" || tk.CancelRequestedBy != "" {
		t.Fatalf("the old lease's canceled task: error_message %q, canceled by %q", tk.LastError, tk.CancelRequestedBy)
	}

	// Lists do not read the ledger: they leave the names out.
	ts, _, err := b.Engine.ListTasks(b.Ctx, b.Admin, store.TaskFilter{States: []host.TaskState{host.StateCanceled}, Limit: 100})
	if err != nil || len(ts) == 0 {
		t.Fatalf("list of canceled tasks: %d %v", len(ts), err)
	}
	for _, x := range ts {
		if x.CancelRequestedBy != "" {
			t.Fatalf("a list read the cancel of %s", x.ID)
		}
	}
}
