package storetest

import (
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// testEndedTaskStatusToHolder: a worker whose completion committed calls
// again on its lease (its answer was lost, and the gate restarted: a new
// engine with nothing remembered). Its heartbeat is lease_expired with the
// task's state in a field (host.Error.TaskStatus), so it can tell a task
// that already ended from a lease it lost. Any other caller (another
// worker, another tenant) hears the words of a lease that never existed,
// with no state; so does the holder of a lease whose end cleared the holder
// (a failure).
func testEndedTaskStatusToHolder(t *testing.T, b *Bundle) {
	b.Enqueue(t, "work")
	b.Enqueue(t, "work")
	done := b.LeaseOne(t, "w.1")
	failed := b.LeaseOne(t, "w.1")
	b.Complete(t, "w.1", done)
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", failed), Error: "no", Retryable: false}); err != nil {
		t.Fatal(err)
	}
	restarted, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, MaxLeaseSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restarted.Close)
	for _, eng := range []*engine.Engine{b.Engine, restarted} {
		heartbeat := func(c engine.WorkerCall) error {
			_, err := eng.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: c})
			WantCode(t, err, host.CodeLeaseExpired)
			return err
		}
		err := heartbeat(Call("w.1", done))
		if got := host.ErrorTaskStatus(err); got != string(host.StateSucceeded) {
			t.Fatalf("the holder's heartbeat after its completion: task status %q (%v), want succeeded", got, err)
		}
		// Complete again is the first completion's answer, as ever.
		if cr, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", done), Result: Pointer}); err != nil || !cr.Duplicate {
			t.Fatalf("repeat complete = %+v %v", cr, err)
		}
		never := heartbeat(engine.WorkerCall{Tenant: "acme", WorkerID: "w.1", LeaseID: "lease-never"})
		want := strings.ReplaceAll(host.ErrorDetail(never), "lease-never", done.LeaseID)
		for _, c := range []struct {
			name string
			call engine.WorkerCall
		}{
			{"another worker", Call("w.2", done)},
			{"another tenant", engine.WorkerCall{Tenant: "other", WorkerID: "w.1", LeaseID: done.LeaseID}},
			{"the holder of a failed task", Call("w.1", failed)},
		} {
			err := heartbeat(c.call)
			if got := host.ErrorTaskStatus(err); got != "" {
				t.Fatalf("%s: told task status %q", c.name, got)
			}
			if c.call.LeaseID == done.LeaseID && host.ErrorDetail(err) != want {
				t.Fatalf("%s: %q, want the words of a lease that never existed: %q", c.name, host.ErrorDetail(err), want)
			}
		}
	}
}
