package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// TestEnqueueBatch queues tasks in one call against a real gate: each is
// answered on its own (a new task, a repeated idempotency key answered with
// the first task, a schema refusal as the *APIError Enqueue returns), and a
// batch over MaxEnqueueBatch is refused before it is sent.
func TestEnqueueBatch(t *testing.T) {
	g := startGate(t)
	ctx := context.Background()
	admin := client.New(g.URL, g.Admin)
	if _, err := admin.Do(ctx, "PUT", "/v1/admin/task-types/image.batch", map[string]any{
		"params_schema": map[string]any{"type": "object", "required": []string{"url", "width"},
			"properties": map[string]any{"width": map[string]any{"type": "integer", "minimum": 1}}},
	}, nil); err != nil {
		t.Fatal(err)
	}
	c := client.New(g.URL, g.key(t, "agent", "producer.batch"))
	res, err := c.EnqueueBatch(ctx, []client.NewTask{
		{Type: "image.batch", Params: resizeParams{URL: "u1", Width: 1}, Options: &client.EnqueueOptions{IdempotencyKey: "b-1", Priority: 3}},
		{Type: "image.batch", Params: resizeParams{URL: "u2", Width: 0}},
		{Type: "image.batch", Params: resizeParams{URL: "u1", Width: 1}, Options: &client.EnqueueOptions{IdempotencyKey: "b-1", Priority: 3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Err != nil || r.TaskID == "" || r.IsDuplicate || r.Status != client.StateQueued {
		t.Fatalf("new: %+v", r)
	}
	var ae *client.APIError
	if r := res[1]; r.Enqueued != nil || !errors.As(r.Err, &ae) || ae.Status != 400 || ae.Code != "invalid_params" || ae.Detail == "" {
		t.Fatalf("refused: %+v", r)
	}
	if r := res[2]; r.Err != nil || !r.IsDuplicate || r.TaskID != res[0].TaskID {
		t.Fatalf("repeat: %+v", r)
	}
	st, err := c.Status(ctx, res[0].TaskID)
	if err != nil || st.Priority != 3 || st.TaskType != "image.batch" {
		t.Fatalf("status %+v %v", st, err)
	}
	many := make([]client.NewTask, client.MaxEnqueueBatch+1)
	for i := range many {
		many[i] = client.NewTask{Type: "image.batch", Params: resizeParams{URL: fmt.Sprint(i), Width: 1}}
	}
	if _, err := c.EnqueueBatch(ctx, many); err == nil {
		t.Fatal("a batch over the limit was sent")
	}
	res, err = c.EnqueueBatch(ctx, many[:client.MaxEnqueueBatch])
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.TaskID == "" {
			t.Fatalf("task %d of 1,000: %+v", i, r)
		}
	}
}
