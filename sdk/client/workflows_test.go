package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// TestWorkflowsAgainstTheGate submits a two-step workflow to a real gate,
// runs its steps as a worker over HTTP, waits for it, and checks that its
// result is the final step's; lists it, cancels another, refuses a cycle,
// and answers another agent's read of it as an unknown id.
func TestWorkflowsAgainstTheGate(t *testing.T) {
	g := startGate(t)
	ctx := context.Background()
	admin := client.New(g.URL, g.Admin)
	if _, err := admin.Do(ctx, "PUT", "/v1/admin/task-types/wf.step", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	c := client.New(g.URL, g.key(t, "agent", "producer.wf"))
	other := client.New(g.URL, g.key(t, "agent", "producer.other"))
	worker := client.New(g.URL, g.key(t, "worker", "wf.w1"))

	sub, err := c.SubmitWorkflow(ctx, client.NewWorkflow{Name: "pair", IdempotencyKey: "p1", Steps: []client.WorkflowStep{
		client.Step("first", "wf.step", map[string]int{"n": 1}),
		client.Step("second", "wf.step", map[string]int{"n": 2}, "first"),
	}})
	if err != nil || sub.WorkflowID == "" || sub.Status != "running" || len(sub.Steps) != 2 {
		t.Fatalf("submit: %+v %v", sub, err)
	}
	if _, err := other.GetWorkflow(ctx, sub.WorkflowID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("another agent's read: %v", err)
	}
	if _, err := other.CancelWorkflow(ctx, sub.WorkflowID, ""); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("another agent's cancel: %v", err)
	}
	for _, summary := range []string{"one", "the answer"} {
		var leases struct {
			Leases []struct {
				LeaseID string `json:"lease_id"`
			} `json:"leases"`
		}
		if _, err := worker.Do(ctx, "POST", "/v1/leases", map[string]any{"worker_id": "wf.w1", "task_types": []string{"wf.step"}}, &leases); err != nil || len(leases.Leases) != 1 {
			t.Fatalf("lease: %+v %v", leases, err)
		}
		if _, err := worker.Do(ctx, "POST", "/v1/leases/"+leases.Leases[0].LeaseID+"/complete", map[string]any{"result": map[string]string{"s": summary}, "summary": summary}, nil); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	w, err := c.WaitWorkflow(wctx, sub.WorkflowID, 20*time.Millisecond)
	if err != nil || w.Status != "succeeded" || w.Result == nil || w.Result.Summary != "the answer" || len(w.Steps) != 2 || !w.Steps[1].Final {
		t.Fatalf("wait: %+v %v", w, err)
	}
	res, err := c.Result(ctx, w.FinalTaskID)
	if err != nil || res.Summary != "the answer" {
		t.Fatalf("the final step's result: %+v %v", res, err)
	}

	two, err := c.SubmitWorkflow(ctx, client.NewWorkflow{Name: "stopped", Steps: []client.WorkflowStep{client.Step("only", "wf.step", nil)}})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := c.CancelWorkflow(ctx, two.WorkflowID, "not needed"); err != nil || w.Status != "canceled" {
		t.Fatalf("cancel: %+v %v", w, err)
	}
	list, _, err := c.ListWorkflows(ctx, "", "", 0)
	if err != nil || len(list) != 2 || list[0].WorkflowID != two.WorkflowID {
		t.Fatalf("list: %+v %v", list, err)
	}
	_, err = c.SubmitWorkflow(ctx, client.NewWorkflow{Name: "loop", Steps: []client.WorkflowStep{
		client.Step("x", "wf.step", nil, "y"), client.Step("y", "wf.step", nil, "x")}})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "workflow_cycle" {
		t.Fatalf("a cycle: %v", err)
	}
}

// TestWorkflowStepStartAgainstTheGate submits steps with DelaySeconds,
// NotBefore and ResourceIntents to a real gate: GetWorkflow shows when each
// delayed step may start, a changed start under the same idempotency key
// is a conflict, and a bad intent is the APIError an enqueue gets.
func TestWorkflowStepStartAgainstTheGate(t *testing.T) {
	g := startGate(t)
	ctx := context.Background()
	admin := client.New(g.URL, g.Admin)
	if _, err := admin.Do(ctx, "PUT", "/v1/admin/task-types/wf.step", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	c := client.New(g.URL, g.key(t, "agent", "producer.timed"))
	nb := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	wf := func(delay int) client.NewWorkflow {
		b := client.Step("b", "wf.step", nil, "a")
		b.DelaySeconds = delay
		b.ResourceIntents = []client.ResourceIntent{{Resource: "REPO:r", Predicate: client.Reads}}
		later := client.Step("c", "wf.step", nil)
		later.NotBefore = &nb
		return client.NewWorkflow{Name: "timed", IdempotencyKey: "t1", FinalStep: "b",
			Steps: []client.WorkflowStep{client.Step("a", "wf.step", nil), b, later}}
	}
	sub, err := c.SubmitWorkflow(ctx, wf(3600))
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.GetWorkflow(ctx, sub.WorkflowID)
	if err != nil || len(w.Steps) != 3 {
		t.Fatalf("get: %+v %v", w, err)
	}
	if s := w.Steps[1]; s.Status != "waiting" || s.AvailableAt == nil || s.AvailableAt.Before(time.Now().Add(59*time.Minute)) {
		t.Fatalf("step b: %+v, want waiting with available_at an hour ahead", s)
	}
	if s := w.Steps[2]; s.Status != "scheduled" || s.AvailableAt == nil || !s.AvailableAt.Equal(nb) {
		t.Fatalf("step c: %+v, want scheduled until %s", s, nb)
	}
	var ae *client.APIError
	if _, err := c.SubmitWorkflow(ctx, wf(60)); !errors.As(err, &ae) || ae.Status != 409 || ae.Code != "idempotency_conflict" {
		t.Fatalf("another delay under the same key: %v", err)
	}
	bad := client.Step("x", "wf.step", nil)
	bad.ResourceIntents = []client.ResourceIntent{{Resource: "FILE:", Predicate: client.Reads}}
	if _, err := c.SubmitWorkflow(ctx, client.NewWorkflow{Name: "bad", Steps: []client.WorkflowStep{bad}}); !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_resource" {
		t.Fatalf("a bad intent: %v", err)
	}
}
