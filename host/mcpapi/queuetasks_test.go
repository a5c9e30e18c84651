package mcpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
	"github.com/asyncgate/asyncgate/host/store"
)

// queueTasksAnswer is queue_tasks' answer as the tests read it.
type queueTasksAnswer struct {
	Results []struct {
		OK   bool `json:"ok"`
		Task *struct {
			TaskID      string `json:"task_id"`
			Status      string `json:"status"`
			IsDuplicate bool   `json:"is_duplicate"`
			ReceiptID   string `json:"receipt_id"`
		} `json:"task"`
		Error  string `json:"error"`
		Detail string `json:"detail"`
	} `json:"results"`
	Succeeded int    `json:"succeeded"`
	Failed    int    `json:"failed"`
	NextStep  string `json:"next_step"`
}

// TestQueueTasks: queue_tasks answers every entry on its own, in order, with
// queue_task's answer or its refusal code; a refused entry (unknown type,
// bad params, another tenant's task in after) writes nothing and leaves its
// neighbours queued; entries sharing an idempotency key find the first; a
// call with no tasks, too many, an unknown argument or an entry its
// declared schema refuses (no task_type, a priority out of 1..10) is
// refused whole and queues nothing, as a client checking the arguments
// against the tool's input schema refuses it; a worker key does not see
// the tool.
func TestQueueTasks(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	other := b.connect(t, b.other)
	ctx := context.Background()

	var theirs struct {
		TaskID string `json:"task_id"`
	}
	ok(t, other, "queue_task", map[string]any{"task_type": "echo"}, &theirs)

	var a queueTasksAnswer
	res := ok(t, agent, "queue_tasks", map[string]any{"tasks": []any{
		map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}, "idempotency_key": "k1", "task_summary": "one"},
		map[string]any{"task_type": "no_such_type"},
		map[string]any{"task_type": "echo", "params": map[string]any{"n": "not a number"}},
		map[string]any{"task_type": "echo", "after": []string{theirs.TaskID}},
		map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}, "idempotency_key": "k1"},
		map[string]any{"task_type": "echo", "priority": 9},
	}}, &a)
	wantCodes := []string{"", host.CodeUnknownTaskType, host.CodeInvalidParams, host.CodeUnknownDependency, "", ""}
	if len(a.Results) != len(wantCodes) {
		t.Fatalf("%d results, want %d: %+v", len(a.Results), len(wantCodes), a)
	}
	for i, code := range wantCodes {
		r := a.Results[i]
		if code == "" {
			if !r.OK || r.Task == nil || r.Task.TaskID == "" || r.Task.ReceiptID == "" || r.Error != "" {
				t.Errorf("entry %d: want queued, got %+v", i, r)
			}
			continue
		}
		if r.OK || r.Task != nil || r.Error != code || r.Detail == "" {
			t.Errorf("entry %d: want refused %s with a detail, got ok=%v error=%q detail=%q", i, code, r.OK, r.Error, r.Detail)
		}
	}
	if a.Succeeded != 3 || a.Failed != 3 || !strings.Contains(a.NextStep, "refused") || !strings.Contains(text(res), "Queued 3 tasks; 3 entries refused") {
		t.Errorf("counts and guidance: succeeded %d failed %d next %q text %q", a.Succeeded, a.Failed, a.NextStep, text(res))
	}
	if !strings.Contains(a.Results[1].Detail, "echo") {
		t.Errorf("an unknown type's refusal names the valid types, as queue_task's does: %q", a.Results[1].Detail)
	}
	first, dup := a.Results[0].Task, a.Results[4].Task
	if first.IsDuplicate || !dup.IsDuplicate || dup.TaskID != first.TaskID {
		t.Errorf("entries sharing an idempotency key: first %+v, second %+v", first, dup)
	}

	// What was queued is exactly the two new tasks (the duplicate and the
	// refused entries wrote nothing), both the agent's; the other tenant's
	// task is untouched and not waited on.
	me := engine.Actor{Tenant: "default", Principal: "agent.a", Role: engine.RoleAgent}
	tasks, _, err := b.eng.ListTasks(ctx, me, store.TaskFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, tk := range tasks {
		got[tk.ID] = tk.Priority
	}
	if len(got) != 2 || got[first.TaskID] == 0 || got[a.Results[5].Task.TaskID] != 9 {
		t.Errorf("tasks queued: %v, want %s and %s (priority 9)", got, first.TaskID, a.Results[5].Task.TaskID)
	}
	them := engine.Actor{Tenant: "other", Principal: "agent.b", Role: engine.RoleAgent}
	tk, err := b.eng.GetTask(ctx, them, theirs.TaskID)
	if err != nil || tk.State != host.StateQueued || tk.HasWaiters {
		t.Errorf("the other tenant's task after a refused after: %+v %v", tk, err)
	}

	// Refused whole: nothing queued.
	fails(t, agent, "queue_tasks", map[string]any{"tasks": []any{}}, host.CodeBadRequest)
	fails(t, agent, "queue_tasks", map[string]any{}, host.CodeBadRequest)
	fails(t, agent, "queue_tasks", map[string]any{"tasks": []any{map[string]any{"task_type": "echo", "bogus": 1}}}, host.CodeBadRequest)
	fails(t, agent, "queue_tasks", map[string]any{"tasks": []any{map[string]any{"task_type": "nope", "TASK_TYPE": "echo"}}}, host.CodeBadRequest)
	for _, bad := range []struct {
		entry  map[string]any
		detail string
	}{
		{map[string]any{"params": map[string]any{"n": 2}}, "tasks[1].task_type is required"},
		{map[string]any{"task_type": "echo", "priority": 11}, "tasks[1].priority must be 1..10, got 11"},
		{map[string]any{"task_type": "echo", "after_rule": "ALL_SUCCEEDED", "after": []string{first.TaskID}}, `tasks[1].after_rule must be one of`},
	} {
		var body mcpapi.ErrorBody
		res := call(t, agent, "queue_tasks", map[string]any{"tasks": []any{map[string]any{"task_type": "echo"}, bad.entry}}, &body)
		if !res.IsError || body.Error != host.CodeBadRequest || !strings.Contains(body.Detail, bad.detail) {
			t.Errorf("queue_tasks with %v: %+v, want bad_request naming %q", bad.entry, body, bad.detail)
		}
	}
	many := make([]any, 1001)
	for i := range many {
		many[i] = map[string]any{"task_type": "echo"}
	}
	fails(t, agent, "queue_tasks", map[string]any{"tasks": many}, host.CodeBadRequest)
	if tasks, _, err := b.eng.ListTasks(ctx, me, store.TaskFilter{Limit: 100}); err != nil || len(tasks) != 2 {
		t.Errorf("after the refused calls: %d tasks, want still 2 (%v)", len(tasks), err)
	}

	hidden(t, b.connect(t, b.worker), "queue_tasks", map[string]any{"tasks": []any{map[string]any{"task_type": "echo"}}})
}
