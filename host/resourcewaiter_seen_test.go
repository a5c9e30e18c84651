package host

import "testing"

// TestWaiterSeenByOthersHidesItsTask: a task's waiter registration is named
// by the task's id (waiter_id) and carries it (task_id); to anyone but an
// admin both are hidden, as the task is unknown to them. An acquire's
// registration keeps its own id.
func TestWaiterSeenByOthersHidesItsTask(t *testing.T) {
	task := &ResourceWaiter{Resource: "F:1", WaiterID: "T-1", TaskID: "T-1"}
	if got := task.SeenBy("agent.b", false); got.WaiterID != "" || got.TaskID != "" || task.TaskID != "T-1" {
		t.Fatalf("seen by agent.b: %+v (original %+v)", got, task)
	}
	if got := task.SeenBy("ops", true); got.TaskID != "T-1" || got.WaiterID != "T-1" {
		t.Fatalf("seen by an admin: %+v", got)
	}
	acquire := &ResourceWaiter{Resource: "F:1", WaiterID: "rwait-1", Holder: "agent.a"}
	if got := acquire.SeenBy("agent.b", false); got.WaiterID != "rwait-1" || got.Holder != "agent.a" {
		t.Fatalf("an acquire's waiter seen by agent.b: %+v", got)
	}
	var none *ResourceWaiter
	if none.SeenBy("agent.b", false) != nil {
		t.Fatal("nil waiter")
	}
}
