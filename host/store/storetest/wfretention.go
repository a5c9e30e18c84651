package storetest

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Workflows under retention (issue 39): retention archives a workflow in
// the transaction that archives its final step.

// wfRetention is a retention engine with a 1-day type "wshort" and helpers
// that drive workflows through it.
type wfRetention struct {
	b   *Bundle
	eng *engine.Engine
	ch  *memChannel
}

func newWFRetention(t *testing.T, b *Bundle) *wfRetention {
	short := host.NewTaskType("wshort")
	short.Tenant, short.DefaultRetentionDays = "acme", 1
	b.MustPutType(t, short)
	eng, ch := retentionEngine(t, b, engine.RetentionConfig{DeadLetterDays: 5})
	return &wfRetention{b: b, eng: eng, ch: ch}
}

func (w *wfRetention) submit(t *testing.T, name string, steps ...engine.WorkflowStepRequest) *engine.WorkflowResult {
	t.Helper()
	res, err := w.eng.SubmitWorkflow(w.b.Ctx, w.b.Agent, engine.WorkflowRequest{Name: name, Steps: steps})
	if err != nil {
		t.Fatalf("SubmitWorkflow: %v", err)
	}
	return res
}

// lease leases the one task of typ ready, which must be want.
func (w *wfRetention) lease(t *testing.T, typ, want string) host.Offer {
	t.Helper()
	offers, err := w.eng.Lease(w.b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{typ}, MaxTasks: 1})
	if err != nil || len(offers) != 1 || offers[0].Task.ID != want {
		t.Fatalf("lease %s: %v %v, want %s", typ, offers, err, want)
	}
	return offers[0]
}

// complete completes want: "inline" with an inline pointer, anything else
// as a payload through the mem channel.
func (w *wfRetention) complete(t *testing.T, typ, want, payload string) {
	t.Helper()
	req := engine.CompleteRequest{WorkerCall: Call("w.1", w.lease(t, typ, want))}
	if payload == "inline" {
		req.Result = host.Result{Pointer: "inline:" + base64.StdEncoding.EncodeToString([]byte("secret")), Summary: "inline answer"}
	} else {
		req.Result, req.Payload = host.Result{Channel: "mem", Summary: "stored answer"}, []byte(payload)
	}
	if _, err := w.eng.Complete(w.b.Ctx, req); err != nil {
		t.Fatal(err)
	}
}

func (w *wfRetention) get(t *testing.T, id string) *engine.WorkflowView {
	t.Helper()
	v, err := w.eng.GetWorkflow(w.b.Ctx, w.b.Agent, id)
	if err != nil {
		t.Fatalf("GetWorkflow: %v", err)
	}
	return v
}

func (w *wfRetention) sweep(t *testing.T) engine.RetentionReport {
	t.Helper()
	rep, err := w.eng.RetentionSweep(w.b.Ctx)
	if err != nil {
		t.Fatalf("RetentionSweep: %v", err)
	}
	return rep
}

// testWorkflowRetention: once its final step is past retention, an ended
// workflow is archived with it, whatever its outcome (a failed one's final
// step was canceled by its failed dependency, a canceled one's by the
// cancel): state archived, outcome kept, its result's pointer purged (a
// payload through a managed channel and an inline one), no receipt written.
// A running workflow's first step waits while its second step, which is
// owed its result, has not finished, and goes once it has. A second
// sweep changes nothing.
func testWorkflowRetention(t *testing.T, b *Bundle) {
	w := newWFRetention(t, b)
	ok := w.submit(t, "stored", step("a", "wshort"), step("z", "wshort", "a"))
	w.complete(t, "wshort", ok.Steps["a"], "inline")
	w.complete(t, "wshort", ok.Steps["z"], `{"answer":42}`)
	inline := w.submit(t, "inline", step("only", "wshort"))
	w.complete(t, "wshort", inline.Steps["only"], "inline")
	failed := w.submit(t, "failed", step("a", "wshort"), step("z", "wshort", "a"))
	o := w.lease(t, "wshort", failed.Steps["a"])
	if _, err := w.eng.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "broken input"}); err != nil {
		t.Fatal(err)
	}
	canceled := w.submit(t, "canceled", step("only", "wshort"))
	if _, err := w.eng.CancelWorkflow(b.Ctx, b.Agent, canceled.WorkflowID, "enough"); err != nil {
		t.Fatal(err)
	}
	running := w.submit(t, "running", step("a", "wshort"), step("z", "work", "a"))
	w.complete(t, "wshort", running.Steps["a"], "inline")

	ended := map[string]host.WorkflowState{ok.WorkflowID: host.WorkflowSucceeded, inline.WorkflowID: host.WorkflowSucceeded,
		failed.WorkflowID: host.WorkflowFailed, canceled.WorkflowID: host.WorkflowCanceled}
	before := map[string]*engine.WorkflowView{}
	for id, st := range ended {
		v := w.get(t, id)
		if v.State != st || v.Outcome != st || v.ArchivedAt != nil {
			t.Fatalf("workflow %s before retention: %s outcome %q archived %v, want %s", id, v.State, v.Outcome, v.ArchivedAt, st)
		}
		before[id] = v
	}
	if v := w.get(t, ok.WorkflowID); v.Result == nil || v.Result.Pointer == "" {
		t.Fatalf("the succeeded workflow's result before retention: %+v", v.Result)
	}
	if rep := w.sweep(t); rep.Archived != 0 || rep.WorkflowsArchived != 0 {
		t.Fatalf("sweep before any retention ran out: %+v", rep)
	}

	b.Clock.Advance(24*time.Hour + time.Second)
	rep := w.sweep(t)
	// Tasks: ok's two steps, inline's one, failed's canceled final step,
	// canceled's one; failed's dead letter waits, and so does running's
	// first step, whose result its unfinished second step is owed.
	if rep.Archived != 5 || rep.WorkflowsArchived != 4 || rep.ChannelErrors != 0 {
		t.Fatalf("sweep: %+v, want 5 tasks and 4 workflows archived", rep)
	}
	archivedAt := b.Clock.Now()
	for id, st := range ended {
		v := w.get(t, id)
		if v.State != host.WorkflowArchived || v.Outcome != st || v.ArchivedAt == nil || !v.ArchivedAt.Equal(archivedAt) {
			t.Fatalf("workflow %s after retention: %s outcome %q archived %v, want archived, outcome %s", id, v.State, v.Outcome, v.ArchivedAt, st)
		}
		if v.EndReceipt != before[id].EndReceipt || v.Error != before[id].Error || v.CompletedAt == nil || !v.CompletedAt.Equal(*before[id].CompletedAt) {
			t.Fatalf("workflow %s lost how it ended: %+v, was %+v", id, v.Workflow, before[id].Workflow)
		}
		if got := b.workflowReceipts(t, id); len(got) != 2 {
			t.Fatalf("workflow %s has receipts %v after retention, want its two (archiving writes none)", id, got)
		}
		for _, s := range v.Steps {
			if s.Final && s.Status != host.StateArchived {
				t.Fatalf("workflow %s is archived but its final step is %s", id, s.Status)
			}
		}
	}
	for _, id := range []string{ok.WorkflowID, inline.WorkflowID} {
		r := w.get(t, id).Result
		if r == nil || r.Pointer != "" || r.PurgedAt == nil || r.ArchivedAt == nil || r.Summary == "" {
			t.Fatalf("workflow %s's result after retention: %+v, want no pointer, purged, its summary kept", id, r)
		}
	}
	if r := w.get(t, ok.WorkflowID).Result; r.Checksum == "" || r.Checksum != before[ok.WorkflowID].Result.Checksum {
		t.Fatalf("the stored result's checksum after retention: %q, was %q", r.Checksum, before[ok.WorkflowID].Result.Checksum)
	}
	if w.ch.held() != 0 {
		t.Fatalf("the mem channel still holds %d payloads", w.ch.held())
	}
	if v := w.get(t, failed.WorkflowID); v.Result != nil || v.Error == "" {
		t.Fatalf("the failed workflow after retention: result %+v error %q", v.Result, v.Error)
	}
	if v := w.get(t, running.WorkflowID); v.State != host.WorkflowRunning || v.Outcome != "" || v.ArchivedAt != nil || v.Steps[0].Status != host.StateSucceeded {
		t.Fatalf("a running workflow after its first step's retention ran out: %s outcome %q archived %v, steps %+v", v.State, v.Outcome, v.ArchivedAt, v.Steps)
	}
	// Reads by state: the list and the counts.
	wfs, _, err := w.eng.ListWorkflows(b.Ctx, b.Agent, store.WorkflowFilter{State: host.WorkflowArchived})
	if err != nil || len(wfs) != 4 {
		t.Fatalf("archived workflows listed: %d %v, want 4", len(wfs), err)
	}
	if c, err := w.eng.WorkflowCounts(b.Ctx, "acme"); err != nil || c[host.WorkflowArchived] != 4 || c[host.WorkflowRunning] != 1 || c[host.WorkflowSucceeded] != 0 {
		t.Fatalf("workflow counts after retention: %v %v", c, err)
	}
	// Canceling: a no-op on the one that ended canceled, a conflict on one
	// that succeeded.
	if wf, err := w.eng.CancelWorkflow(b.Ctx, b.Agent, canceled.WorkflowID, ""); err != nil || wf.State != host.WorkflowArchived {
		t.Fatalf("canceling an archived canceled workflow: %v %v", wf, err)
	}
	if _, err := w.eng.CancelWorkflow(b.Ctx, b.Agent, ok.WorkflowID, ""); !host.IsCode(err, host.CodeConflict) {
		t.Fatalf("canceling an archived succeeded workflow: %v, want conflict", err)
	}

	// Idempotent: a second sweep archives nothing and changes nothing.
	b.Clock.Advance(time.Hour)
	if rep := w.sweep(t); rep.Archived != 0 || rep.WorkflowsArchived != 0 {
		t.Fatalf("second sweep: %+v, want nothing", rep)
	}
	for id := range ended {
		if v := w.get(t, id); v.State != host.WorkflowArchived || !v.ArchivedAt.Equal(archivedAt) || !v.UpdatedAt.Equal(archivedAt) {
			t.Fatalf("workflow %s after a second sweep: %s archived %v updated %v, want both %v", id, v.State, v.ArchivedAt, v.UpdatedAt, archivedAt)
		}
	}
	// The failed workflow's dead letter goes at its own retention, the
	// workflow staying as it is.
	b.Clock.Advance(5 * 24 * time.Hour)
	if rep := w.sweep(t); rep.Archived != 1 || rep.WorkflowsArchived != 0 || b.Task(t, failed.Steps["a"]).State != host.StateArchived {
		t.Fatalf("dead letter retention: %+v", rep)
	}
	// The running workflow's second step finishes: its first step, owed to
	// it no longer, goes at the next sweep; the workflow (its final step
	// within retention) stays as it ended.
	w.complete(t, "work", running.Steps["z"], "inline")
	if rep := w.sweep(t); rep.Archived != 1 || rep.WorkflowsArchived != 0 || b.Task(t, running.Steps["a"]).State != host.StateArchived {
		t.Fatalf("sweep once the first step is owed to none: %+v", rep)
	}
	if v := w.get(t, running.WorkflowID); v.State != host.WorkflowSucceeded || v.ArchivedAt != nil {
		t.Fatalf("the workflow whose first step was archived: %s archived %v", v.State, v.ArchivedAt)
	}
	if v := b.Verify(t); !v.OK {
		t.Fatalf("ledger after retention: %+v", v)
	}
}

// testWorkflowRetentionFenced: a final step that changes between the
// sweep's read and its decision (taken under the step's row lock) is left
// alone for the next sweep, and so is its workflow; the next sweep
// archives both. A write of the step while its payload is being released
// (during the channel's ack, after archived_at was committed) does not
// stop the release: the step and its workflow are archived, their
// pointers purged, in that sweep, so neither names a payload that is gone.
func testWorkflowRetentionFenced(t *testing.T, b *Bundle) {
	short := host.NewTaskType("wshort")
	short.Tenant, short.DefaultRetentionDays = "acme", 1
	b.MustPutType(t, short)
	hooked := &retentionHookStore{Store: b.Store}
	ch := &memChannel{data: map[string][]byte{}}
	eng, err := engine.New(engine.Config{Store: hooked, Clock: b.Clock, ExpiryJitter: -1, Plugins: memPlugins{ch},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Delivery: engine.DeliveryConfig{Retention: engine.RetentionConfig{Interval: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	w := &wfRetention{b: b, eng: eng, ch: ch}
	touch := func(id string) func() {
		return func() {
			// The step's row is written (its version moves on), as a
			// redrive or any update of it would.
			if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
				tk, err := tx.GetTask(b.Ctx, "acme", id)
				if err != nil {
					return err
				}
				tk.UpdatedAt = b.Clock.Now()
				return tx.UpdateTask(b.Ctx, tk, store.Fence{State: host.StateSucceeded})
			}); err != nil {
				t.Error(err)
			}
		}
	}
	res := w.submit(t, "fenced", step("only", "wshort"))
	final := res.Steps["only"]
	w.complete(t, "wshort", final, `{"answer":1}`)
	b.Clock.Advance(24*time.Hour + time.Second)
	hooked.setAfterDue(touch(final))
	if rep := w.sweep(t); rep.Archived != 0 || rep.WorkflowsArchived != 0 || len(ch.acked) != 0 {
		t.Fatalf("sweep with the step written after its read: %+v (acked %v), want nothing archived", rep, ch.acked)
	}
	if v := w.get(t, res.WorkflowID); v.State != host.WorkflowSucceeded || v.ArchivedAt != nil || v.Result == nil || v.Result.Pointer == "" || v.Result.PurgedAt != nil {
		t.Fatalf("the workflow of a fenced step: %s archived %v result %+v", v.State, v.ArchivedAt, v.Result)
	}
	hooked.setAfterDue(nil)
	if rep := w.sweep(t); rep.Archived != 1 || rep.WorkflowsArchived != 1 {
		t.Fatalf("next sweep: %+v, want the step and its workflow", rep)
	}
	if v := w.get(t, res.WorkflowID); v.State != host.WorkflowArchived || v.Outcome != host.WorkflowSucceeded || v.Result.Pointer != "" || v.Result.PurgedAt == nil {
		t.Fatalf("the workflow after the next sweep: %s outcome %s result %+v", v.State, v.Outcome, v.Result)
	}

	// Written during the ack: released, purged and archived all the same.
	res = w.submit(t, "written while released", step("only", "wshort"))
	final = res.Steps["only"]
	w.complete(t, "wshort", final, `{"answer":2}`)
	b.Clock.Advance(24*time.Hour + time.Second)
	ch.mu.Lock()
	ch.onAck = touch(final)
	ch.mu.Unlock()
	if rep := w.sweep(t); rep.Archived != 1 || rep.Purged != 1 || rep.WorkflowsArchived != 1 {
		t.Fatalf("sweep with the step written during its ack: %+v, want the step and its workflow", rep)
	}
	if tk := b.Task(t, final); tk.State != host.StateArchived || tk.Result.Pointer != "" || tk.Result.PurgedAt == nil {
		t.Fatalf("a step whose payload was released: %s %+v", tk.State, tk.Result)
	}
	if v := w.get(t, res.WorkflowID); v.State != host.WorkflowArchived || v.Result.Pointer != "" || v.Result.PurgedAt == nil {
		t.Fatalf("the workflow of a step whose payload was released: %s result %+v", v.State, v.Result)
	}
}

// retentionHookStore runs a hook after each RetentionDue read, as if another
// writer came between a sweep's read and its transaction.
type retentionHookStore struct {
	store.Store
	mu       sync.Mutex
	afterDue func()
}

func (s *retentionHookStore) setAfterDue(fn func()) { s.mu.Lock(); s.afterDue = fn; s.mu.Unlock() }

// View implements store.Store.
func (s *retentionHookStore) View(ctx context.Context, fn func(store.Reader) error) error {
	return s.Store.View(ctx, func(r store.Reader) error { return fn(retentionHookReader{r, s}) })
}

type retentionHookReader struct {
	store.Reader
	s *retentionHookStore
}

// RetentionDue implements store.Reader.
func (r retentionHookReader) RetentionDue(ctx context.Context, q store.RetentionQuery) ([]*host.Task, error) {
	ts, err := r.Reader.RetentionDue(ctx, q)
	r.s.mu.Lock()
	hook := r.s.afterDue
	r.s.mu.Unlock()
	if hook != nil && len(ts) > 0 {
		hook()
	}
	return ts, err
}
