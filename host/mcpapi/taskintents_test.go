package mcpapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestQueueTaskResourceIntents queues a task with a MUTATES intent through
// queue_task: the intent is stored on the task (normalized), the task is not
// leased while the agent holds a MUTATES resource lease on that resource, and
// is leased, with its resource lease held for it, once the agent releases.
// A bad resource name or predicate is a tool error. A task-type tool queues
// with its type's intents.
func TestQueueTaskResourceIntents(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	tt := host.NewTaskType("code.edit")
	tt.Tenant = "default"
	tt.ResourceIntents = []host.ResourceIntent{{Resource: "REPO:github.com/a/b", Predicate: host.PredicateReads}}
	if _, err := b.eng.PutTaskType(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	agent, worker := b.connect(t, b.agent), b.connect(t, b.worker)

	var held mcpapi.AcquireToolResult
	ok(t, agent, "acquire_resource_leases", map[string]any{"intents": []any{
		map[string]any{"resource": "FILE:/repo/x.go", "predicate": "MUTATES"}}}, &held)
	if !held.Granted || len(held.Leases) != 1 {
		t.Fatalf("acquire: %+v", held)
	}

	var ack mcpapi.QueueTaskResult
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo", "resource_intents": []any{
		map[string]any{"resource": "file:/repo/x.go", "predicate": "MUTATES"}}}, &ack)
	var st mcpapi.TaskStatus
	ok(t, agent, "check_task_status", map[string]any{"task_id": ack.TaskID}, &st)
	want := []host.ResourceIntent{{Resource: "FILE:/repo/x.go", Predicate: host.PredicateMutates}}
	if st.Task == nil || host.IntentsJSON(st.ResourceIntents) != host.IntentsJSON(want) {
		t.Fatalf("stored intents: %+v, want %+v", st.Task, want)
	}

	// The agent's lease keeps the task waiting.
	var lease mcpapi.LeaseResult
	ok(t, worker, "worker_lease_task", map[string]any{"task_types": []string{"echo"}}, &lease)
	if lease.TaskID != nil {
		t.Fatalf("task leased while the agent holds a MUTATES lease on its resource: %+v", lease)
	}

	var rel engine.ResourceLeasesResult
	ok(t, agent, "release_resource_leases", map[string]any{"lease_ids": []any{held.Leases[0].ID}}, &rel)
	// The refused task stepped aside for a moment: wait for it, with a deadline.
	deadline := time.Now().Add(30 * time.Second)
	for lease.TaskID == nil {
		if time.Now().After(deadline) {
			t.Fatal("task not leased within 30 s of the release")
		}
		ok(t, worker, "worker_lease_task", map[string]any{"task_types": []string{"echo"}, "wait_seconds": 2}, &lease)
	}
	if *lease.TaskID != ack.TaskID {
		t.Fatalf("leased %s, want %s", *lease.TaskID, ack.TaskID)
	}
	var refused mcpapi.AcquireToolResult
	ok(t, agent, "acquire_resource_leases", map[string]any{"intents": []any{
		map[string]any{"resource": "FILE:/repo/x.go", "predicate": "READS"}}}, &refused)
	if refused.Granted || refused.Conflict == nil || refused.Conflict.TaskID != ack.TaskID {
		t.Fatalf("the running task's resource lease does not hold off the agent: %+v", refused)
	}

	// The task-type tool takes params only; the type's intents come with it.
	var typed mcpapi.TaskTypeCallResult
	ok(t, agent, "code.edit", map[string]any{}, &typed)
	var tst mcpapi.TaskStatus
	ok(t, agent, "check_task_status", map[string]any{"task_id": typed.TaskID}, &tst)
	if tst.Task == nil || host.IntentsJSON(tst.ResourceIntents) != host.IntentsJSON(tt.ResourceIntents) {
		t.Fatalf("task-type tool: intents %+v, want %+v", tst.Task, tt.ResourceIntents)
	}

	fails(t, agent, "queue_task", map[string]any{"task_type": "echo", "resource_intents": []any{
		map[string]any{"resource": "", "predicate": "MUTATES"}}}, host.CodeInvalidResource)
	fails(t, agent, "queue_task", map[string]any{"task_type": "echo", "resource_intents": []any{
		map[string]any{"resource": "FILE:/a", "predicate": "OWNS"}}}, host.CodeBadRequest)
}
