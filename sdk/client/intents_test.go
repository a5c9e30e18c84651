package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// TestEnqueueResourceIntents enqueues with resource intents against a real
// gate: they are merged with the type's, normalized and shown on the task,
// and a bad resource name is a 400 invalid_resource APIError.
func TestEnqueueResourceIntents(t *testing.T) {
	g := startGate(t)
	ctx := context.Background()
	if _, err := client.New(g.URL, g.Admin).Do(ctx, "PUT", "/v1/admin/task-types/code.edit", map[string]any{
		"resource_intents": []client.ResourceIntent{{Resource: "REPO:github.com/a/b", Predicate: client.Reads}},
	}, nil); err != nil {
		t.Fatal(err)
	}
	c := client.New(g.URL, g.key(t, "agent", "producer.a"))
	ack, err := c.Enqueue(ctx, "code.edit", map[string]any{}, &client.EnqueueOptions{
		ResourceIntents: []client.ResourceIntent{{Resource: "file:/repo/src/x.go", Predicate: client.Mutates}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx, ack.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"REPO:github.com/a/b": client.Reads, "FILE:/repo/src/x.go": client.Mutates}
	got := map[string]string{}
	for _, it := range st.ResourceIntents {
		got[it.Resource] = it.Predicate
	}
	if len(st.ResourceIntents) != len(want) || len(got) != len(want) {
		t.Fatalf("task intents %+v, want %v", st.ResourceIntents, want)
	}
	for r, p := range want {
		if got[r] != p {
			t.Fatalf("task intents %+v, want %v", st.ResourceIntents, want)
		}
	}

	_, err = c.Enqueue(ctx, "code.edit", map[string]any{}, &client.EnqueueOptions{
		ResourceIntents: []client.ResourceIntent{{Resource: "", Predicate: client.Mutates}}})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_resource" || ae.Detail == "" {
		t.Fatalf("bad resource: %v", err)
	}
}
