package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// testForgedLeaseIDs: a lease id carries its task's id (host.NewLeaseID),
// and a store may find the task by it, but only the whole lease id opens
// the lease. A forged one (the task's id with other random characters, or
// a real lease's random characters with another task's id) fails every
// lease-bound call as a lease id that never existed does, with the same
// words, and changes nothing.
func testForgedLeaseIDs(t *testing.T, b *Bundle) {
	b.Enqueue(t, "work")
	b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	other := b.LeaseOne(t, "w.1")
	if id, ok := host.LeaseTaskID(o.LeaseID); !ok || id != o.Task.ID {
		t.Fatalf("lease id %q does not carry its task %q", o.LeaseID, o.Task.ID)
	}
	random := strings.TrimSuffix(strings.TrimPrefix(o.LeaseID, host.PrefixLease), "."+o.Task.ID)
	forged := []string{
		host.NewLeaseID(o.Task.ID),                      // the right task, other random characters
		host.PrefixLease + random + "." + other.Task.ID, // a real lease's random part, another leased task
		o.LeaseID + "x",
		host.PrefixLease + random, // the random part alone, in the older form's length
	}
	const never = "lease-never"
	calls := []struct {
		name string
		do   func(c engine.WorkerCall) error
	}{
		{"heartbeat", func(c engine.WorkerCall) error {
			_, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: c})
			return err
		}},
		{"accept", func(c engine.WorkerCall) error { _, _, err := b.Engine.Accept(b.Ctx, c); return err }},
		{"complete", func(c engine.WorkerCall) error {
			_, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: c, Result: host.Result{Channel: "inline", Pointer: "inline:b2s="}})
			return err
		}},
		{"fail", func(c engine.WorkerCall) error {
			_, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: c, Error: "x", Retryable: true})
			return err
		}},
		{"release", func(c engine.WorkerCall) error { _, err := b.Engine.Release(b.Ctx, c, ""); return err }},
	}
	for _, call := range calls {
		unknown := Call("w.1", o)
		unknown.LeaseID = never
		errU := call.do(unknown)
		if errU == nil {
			t.Fatalf("%s: an unknown lease id succeeded", call.name)
		}
		for _, id := range forged {
			c := Call("w.1", o)
			c.LeaseID = id
			err := call.do(c)
			if err == nil {
				t.Fatalf("%s: forged lease id %q succeeded", call.name, id)
			}
			if strings.ReplaceAll(err.Error(), id, "X") != strings.ReplaceAll(errU.Error(), never, "X") {
				t.Fatalf("%s: a forged lease id and an unknown one answer differently: %v / %v", call.name, err, errU)
			}
		}
	}
	for _, l := range []host.Offer{o, other} {
		if tk := b.Task(t, l.Task.ID); tk.State != host.StateLeased || tk.LeaseID != l.LeaseID || tk.AcceptedAt != nil {
			t.Fatalf("a forged lease id changed task %s: %+v", l.Task.ID, tk)
		}
	}
	if _, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: host.Result{Channel: "inline", Pointer: "inline:b2s="}}); err != nil {
		t.Fatalf("the real lease id: %v", err)
	}
	b.Verify(t)
}

// testOlderLeaseIDs: a task leased under a lease id of the form minted
// before lease ids carried their task (PrefixLease and a ULID) is still
// found by it, as is a finished task by its last lease of either form.
func testOlderLeaseIDs(t *testing.T, b *Bundle) {
	ctx := b.Ctx
	old, fresh := wbTask("T-OLDLEASE", ""), wbTask("T-NEWLEASE", "")
	old.State, old.LeaseID = host.StateLeased, host.NewID(host.PrefixLease)
	fresh.State, fresh.LeaseID = host.StateSucceeded, host.NewLeaseID(fresh.ID)
	exp := Epoch.Add(time.Hour)
	old.LeaseExpiresAt, old.LeasedAt, old.WorkerID = &exp, &Epoch, "w.1"
	if err := b.Store.Update(ctx, func(tx store.Tx) error {
		if err := tx.InsertTask(ctx, old); err != nil {
			return err
		}
		return tx.InsertTask(ctx, fresh)
	}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []*host.Task{old, fresh} {
		for _, inTx := range []bool{false, true} {
			var got *host.Task
			read := func(r store.Reader) error {
				var err error
				got, err = r.GetTaskByLease(ctx, want.LeaseID)
				return err
			}
			var err error
			if inTx {
				err = b.Store.Update(ctx, func(tx store.Tx) error { return read(tx) })
			} else {
				err = b.Store.View(ctx, read)
			}
			if err != nil || got.ID != want.ID {
				t.Fatalf("GetTaskByLease(%q) (in a write %v) = %+v, %v; want task %s", want.LeaseID, inTx, got, err, want.ID)
			}
		}
	}
	// A lease of the older form names no task: its completion keeps the
	// dedupe key "complete:<lease>", and a repeat is found by it.
	b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	older := host.NewID(host.PrefixLease)
	if err := b.Store.Update(ctx, func(tx store.Tx) error {
		tk, err := tx.GetTask(ctx, "acme", o.Task.ID)
		if err != nil {
			return err
		}
		tk.LeaseID = older
		return tx.UpdateTask(ctx, tk, store.Fence{State: host.StateLeased, LeaseID: o.LeaseID})
	}); err != nil {
		t.Fatal(err)
	}
	o.LeaseID = older
	first := b.Complete(t, "w.1", o)
	again := b.Complete(t, "w.1", o)
	if first.Duplicate || !again.Duplicate || again.ReceiptID != first.ReceiptID {
		t.Fatalf("complete of an older lease id twice = %+v then %+v", first, again)
	}
	if err := b.Store.View(ctx, func(r store.Reader) error {
		rc, err := r.GetReceipt(ctx, "acme", first.ReceiptID)
		if err != nil || rc.DedupeKey != "complete:"+older {
			t.Errorf("completion of an older lease id = %+v, %v; want dedupe key complete:%s", rc, err, older)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.View(ctx, func(r store.Reader) error {
		for _, id := range []string{"", "lease-", host.PrefixLease + "." + old.ID, old.LeaseID + ".", host.NewLeaseID(old.ID), host.NewLeaseID("T-NONE")} {
			if tk, err := r.GetTaskByLease(ctx, id); !host.IsCode(err, host.CodeNotFound) {
				t.Errorf("GetTaskByLease(%q) = %+v, %v; want not found", id, tk, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
