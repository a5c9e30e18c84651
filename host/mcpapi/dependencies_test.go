package mcpapi_test

import (
	"slices"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestQueueTaskAfter queues a fan-in through queue_task: the merge waits
// (status waiting) on two parts, is not leased until both completed, and is
// then leased with their outcomes in its envelope. Another tenant's task id,
// a made-up one and a bad rule are tool errors with their codes.
func TestQueueTaskAfter(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent, worker, other := b.connect(t, b.agent), b.connect(t, b.worker), b.connect(t, b.other)

	var p1, p2, merge mcpapi.QueueTaskResult
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}}, &p1)
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo", "params": map[string]any{"n": 2}}, &p2)
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo", "after": []string{p1.TaskID, p2.TaskID}, "after_rule": "all_succeeded"}, &merge)
	if merge.Status != string(host.StateWaiting) {
		t.Fatalf("merge queued %q, want waiting", merge.Status)
	}
	var st mcpapi.TaskStatus
	ok(t, agent, "check_task_status", map[string]any{"task_id": merge.TaskID}, &st)
	if st.Task == nil || !slices.Equal(st.After, []string{p1.TaskID, p2.TaskID}) || st.AfterRule != host.RuleAllSucceeded {
		t.Fatalf("check_task_status of the waiting merge: %+v", st.Task)
	}
	for range 2 {
		var lease mcpapi.LeaseResult
		ok(t, worker, "worker_lease_task", map[string]any{"task_types": []string{"echo"}}, &lease)
		if lease.TaskID == nil || *lease.TaskID == merge.TaskID {
			t.Fatalf("lease while the parts run: %+v", lease)
		}
		ok(t, worker, "worker_complete_task", map[string]any{"task_id": *lease.TaskID, "run_id": lease.RunID,
			"result_pointer": "s3://b/" + *lease.TaskID, "summary": "part"}, nil)
	}
	var lease mcpapi.LeaseResult
	ok(t, worker, "worker_lease_task", map[string]any{"task_types": []string{"echo"}}, &lease)
	if lease.TaskID == nil || *lease.TaskID != merge.TaskID {
		t.Fatalf("after both parts: %+v, want the merge", lease)
	}
	deps := lease.TaskEnvelope.Dependencies
	if len(deps) != 2 || deps[0].TaskID != p1.TaskID || deps[1].TaskID != p2.TaskID ||
		deps[0].Status != host.StateSucceeded || deps[0].Result == nil || deps[0].Result.Pointer != "s3://b/"+p1.TaskID {
		t.Fatalf("the merge's envelope carries %+v", deps)
	}

	var theirs mcpapi.QueueTaskResult
	ok(t, other, "queue_task", map[string]any{"task_type": "echo"}, &theirs)
	fails(t, agent, "queue_task", map[string]any{"task_type": "echo", "after": []string{theirs.TaskID}}, host.CodeUnknownDependency)
	fails(t, other, "queue_task", map[string]any{"task_type": "echo", "after": []string{p1.TaskID}}, host.CodeUnknownDependency)
	fails(t, agent, "queue_task", map[string]any{"task_type": "echo", "after": []string{"T-made-up"}}, host.CodeUnknownDependency)
	fails(t, agent, "queue_task", map[string]any{"task_type": "echo", "after": []string{p1.TaskID}, "after_rule": "most"}, host.CodeBadRequest)
}
