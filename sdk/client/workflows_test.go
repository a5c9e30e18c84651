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
