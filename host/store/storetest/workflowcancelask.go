package storetest

import (
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// testWorkflowLeasedStepCanceledNamesWhoAsked: a leased step canceled as a
// task is flagged (task.cancel_requested names who asked); when its lease
// ends — the worker releases, fails, or the lease expires — the workflow
// ends canceled and its end names who asked for the cancel (canceled_by,
// and the error_message "step … was canceled by …"), as it does for a step
// canceled while not leased. For a step the final step needs, and for the
// final step itself; asked by an admin, who is not the submitter.
func testWorkflowLeasedStepCanceledNamesWhoAsked(t *testing.T, b *Bundle) {
	ends := []struct {
		name string
		end  func(t *testing.T, o host.Offer)
	}{
		{"release", func(t *testing.T, o host.Offer) {
			if _, err := b.Engine.Release(b.Ctx, Call("w.1", o), "told to stop"); err != nil {
				t.Fatal(err)
			}
		}},
		{"fail", func(t *testing.T, o host.Offer) {
			if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "stopped as asked"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"expiry", func(t *testing.T, o host.Offer) {
			b.Clock.Set(o.LeaseExpiresAt)
			if _, err := b.Engine.Sweep(b.Ctx); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, end := range ends {
		for _, final := range []bool{false, true} {
			steps := []engine.WorkflowStepRequest{step("a", "work"), step("b", "other", "a")}
			if final {
				steps = steps[:1]
			}
			res := b.submit(t, "leased "+end.name, steps...)
			o := b.leaseType(t, "w.1", "work")
			if o.Task.ID != res.Steps["a"] {
				t.Fatalf("%s: leased %s, not step a %s", end.name, o.Task.ID, res.Steps["a"])
			}
			if _, err := b.Engine.Cancel(b.Ctx, b.Admin, res.Steps["a"], "wrong input"); err != nil {
				t.Fatal(err)
			}
			if tk := b.Task(t, res.Steps["a"]); tk.CancelRequestedBy != b.Admin.Principal {
				t.Fatalf("%s: the flagged step names %q as who asked", end.name, tk.CancelRequestedBy)
			}
			end.end(t, o)
			v := b.wantWorkflowEnd(t, res.WorkflowID, host.WorkflowCanceled)
			body := b.receiptBody(t, v.EndReceipt)
			if body["canceled_by"] != b.Admin.Principal || body["error_by"] != nil {
				t.Errorf("%s (final step %v): end receipt body %v, want canceled_by %s and no error_by", end.name, final, body, b.Admin.Principal)
			}
			if !final && !strings.Contains(v.Error, "step a was canceled by "+b.Admin.Principal) {
				t.Errorf("%s: workflow error %q, want it to name step a and %s", end.name, v.Error, b.Admin.Principal)
			}
		}
	}
}
