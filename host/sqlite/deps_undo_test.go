package sqlite

import (
	"encoding/json"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// TestRefusedAfterLeavesNoMarker: an enqueue naming agent.kee's task and a
// task that does not exist is refused (unknown_dependency) after its one
// statement marked kee's task as waited on. In a batch whose other update
// commits, that marker is the refused update's write and must be undone
// with it: another principal's refused enqueue leaves kee's task as it was.
func TestRefusedAfterLeavesNoMarker(t *testing.T) {
	g := newFailGate(t)
	res, err := g.b.Engine.Enqueue(g.b.Ctx, g.b.Agent, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	dep := res.Task.ID
	errs := g.oneBatch(t,
		g.enqueue("agent.kee", "m-1"),
		func() error {
			a := g.b.Agent
			a.Principal = "agent.mallory"
			_, err := g.b.Engine.Enqueue(g.b.Ctx, a, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{}`),
				After: []string{dep, "T-none"}})
			return err
		},
	)
	if errs[0] != nil {
		t.Fatalf("the batch's other update: %v", errs[0])
	}
	if !host.IsCode(errs[1], host.CodeUnknownDependency) {
		t.Fatalf("the enqueue after an unknown task: %v, want %s", errs[1], host.CodeUnknownDependency)
	}
	if n := g.count(t, `SELECT count(*) FROM tasks WHERE id = '`+dep+`' AND has_waiters = 1`); n != 0 {
		t.Fatal("the refused enqueue's waited-on marker on agent.kee's task was committed (half-written)")
	}
}
