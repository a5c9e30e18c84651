package mcpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

// TestWorkflowAsDurableTask submits a workflow as a task-augmented call:
// one MCP task for the whole workflow, found again by another session of
// the same key, whose result is the final step's; another tenant's key
// cannot see or cancel it, and the tools read and cancel workflows.
func TestWorkflowAsDurableTask(t *testing.T) {
	b := setup(t, mcpapi.Config{TaskResultWait: 300 * time.Millisecond})
	first := b.connect(t, b.agent)
	args := map[string]any{"name": "pair", "steps": []map[string]any{
		{"name": "a", "task_type": "echo", "params": map[string]any{"n": 1}},
		{"name": "b", "task_type": "echo", "params": map[string]any{"n": 2}, "after": []string{"a"}},
	}}
	var ct createTask
	rpcOK(t, first, "tools/call", map[string]any{"name": "submit_workflow", "arguments": args, "task": map[string]any{}}, &ct)
	id := ct.Task.TaskId
	if !strings.HasPrefix(id, "WF-") || ct.Task.Status != mcp.TaskStatusWorking || ct.Task.PollInterval == nil {
		t.Fatalf("create task: %+v", ct)
	}
	first.Close()

	again := b.connect(t, b.agent)
	var got mcp.Task
	rpcOK(t, again, "tasks/get", map[string]any{"taskId": id}, &got)
	if got.TaskId != id || got.Status != mcp.TaskStatusWorking || !strings.Contains(got.StatusMessage, "2 steps") {
		t.Fatalf("tasks/get: %+v", got)
	}
	if _, e := rpc(t, again, "tasks/result", map[string]any{"taskId": id}); e == nil || e.Code != -32000 || !strings.Contains(e.Message, "still running") {
		t.Fatalf("tasks/result on a running workflow: %+v", e)
	}
	other := b.connect(t, b.other)
	for _, m := range []string{"tasks/get", "tasks/cancel", "tasks/result"} {
		if _, e := rpc(t, other, m, map[string]any{"taskId": id}); e == nil || e.Code != -32602 || !strings.Contains(e.Message, "not_found") {
			t.Fatalf("other tenant %s: %+v", m, e)
		}
	}
	fails(t, other, "get_workflow", map[string]any{"workflow_id": id}, "not_found")
	fails(t, other, "cancel_workflow", map[string]any{"workflow_id": id}, "not_found")
	// No id at all is a bad call, not an unknown workflow.
	fails(t, again, "get_workflow", map[string]any{}, "bad_request")
	fails(t, again, "cancel_workflow", map[string]any{"workflow_id": " "}, "bad_request")

	var v engine.WorkflowView
	gw := ok(t, again, "get_workflow", map[string]any{"workflow_id": id}, &v)
	// The name is the submitter's words, quoted as such in the text.
	if want := "Workflow " + id + ` (its name: agent.a wrote: "pair")`; !strings.HasPrefix(text(gw), want) {
		t.Fatalf("get_workflow's text %q, want it to start %q", text(gw), want)
	}
	if len(v.Steps) != 2 || v.FinalStep != "b" {
		t.Fatalf("get_workflow: %+v", v)
	}
	complete(t, b, v.Steps[0].TaskID, map[string]any{"first": true})
	complete(t, b, v.Steps[1].TaskID, map[string]any{"answer": 42})

	var tr struct {
		StructuredContent mcpapi.WorkflowCallResult `json:"structuredContent"`
		IsError           bool                      `json:"isError"`
		Meta              map[string]map[string]any `json:"_meta"`
	}
	rpcOK(t, again, "tasks/result", map[string]any{"taskId": id}, &tr)
	// A client checks a task's result against the tool's one output
	// schema, as it checks a plain call's: the workflow's must match.
	var raw struct {
		StructuredContent any `json:"structuredContent"`
	}
	rpcOK(t, again, "tasks/result", map[string]any{"taskId": id}, &raw)
	schema, err := jsonschema.CompileString("submit_workflow.output.json", string(mcpapi.OutputSchema[mcpapi.SubmitWorkflowResult]()))
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(raw.StructuredContent); err != nil {
		t.Fatalf("tasks/result of a workflow does not match submit_workflow's output schema: %v", err)
	}
	res, _ := json.Marshal(tr.StructuredContent.Result)
	if tr.IsError || tr.StructuredContent.WorkflowID != id || tr.StructuredContent.Status != "succeeded" || !strings.Contains(string(res), `"content":{"answer":42}`) ||
		tr.Meta["io.modelcontextprotocol/related-task"]["taskId"] != id {
		t.Fatalf("tasks/result: %+v %s", tr, res)
	}
	rpcOK(t, again, "tasks/get", map[string]any{"taskId": id}, &got)
	if got.Status != mcp.TaskStatusCompleted {
		t.Fatalf("tasks/get after the end: %+v", got)
	}
	if _, e := rpc(t, again, "tasks/cancel", map[string]any{"taskId": id}); e == nil || !strings.Contains(e.Message, "conflict") {
		t.Fatalf("tasks/cancel of a finished workflow: %+v", e)
	}

	// A plain call, then cancel through the tool; a bad graph is a tool error with its code.
	var sub mcpapi.SubmitWorkflowResult
	ok(t, again, "submit_workflow", map[string]any{"name": "one", "steps": []map[string]any{{"name": "x", "task_type": "echo"}}}, &sub)
	ok(t, again, "cancel_workflow", map[string]any{"workflow_id": sub.WorkflowID}, nil)
	var list mcpapi.WorkflowListResult
	ok(t, again, "list_workflows", map[string]any{"status": "canceled"}, &list)
	if len(list.Workflows) != 1 || list.Workflows[0].ID != sub.WorkflowID {
		t.Fatalf("list_workflows: %+v", list)
	}
	fails(t, again, "submit_workflow", map[string]any{"name": "loop", "steps": []map[string]any{
		{"name": "x", "task_type": "echo", "after": []string{"y"}}, {"name": "y", "task_type": "echo", "after": []string{"x"}}}}, "workflow_cycle")
	if _, e := rpc(t, again, "tools/call", map[string]any{"name": "submit_workflow", "arguments": map[string]any{"name": "x", "steps": []any{}}, "task": map[string]any{}}); e == nil ||
		e.Code != -32602 || !strings.Contains(e.Message, "invalid_workflow") {
		t.Fatalf("a bad workflow as a task: %+v", e)
	}
}

// TestSubmitWorkflowStepStart: submit_workflow's input schema lists a
// step's delay_seconds, not_before and resource_intents, the tool takes
// them (get_workflow then shows the delayed steps), and a bad one is the
// tool error queue_task gives.
func TestSubmitWorkflowStepStart(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	res, err := agent.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var steps map[string]any
	for _, tl := range res.Tools {
		if tl.Name == "submit_workflow" {
			steps, _ = tl.InputSchema.Properties["steps"].(map[string]any)
		}
	}
	items, _ := steps["items"].(map[string]any)
	props, _ := items["properties"].(map[string]any)
	for _, f := range []string{"delay_seconds", "not_before", "resource_intents"} {
		if props[f] == nil {
			t.Fatalf("submit_workflow's step schema lacks %s: %v", f, props)
		}
	}
	if it, _ := props["resource_intents"].(map[string]any)["items"].(map[string]any); it["required"] == nil {
		t.Fatalf("resource_intents items are not intents: %v", props["resource_intents"])
	}

	nb := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	var sub mcpapi.SubmitWorkflowResult
	ok(t, agent, "submit_workflow", map[string]any{"name": "timed", "final_step": "b", "steps": []map[string]any{
		{"name": "a", "task_type": "echo"},
		{"name": "b", "task_type": "echo", "after": []string{"a"}, "delay_seconds": 600,
			"resource_intents": []map[string]any{{"resource": "REPO:r", "predicate": "READS"}}},
		{"name": "c", "task_type": "echo", "not_before": nb.Format(time.RFC3339)},
	}}, &sub)
	var v engine.WorkflowView
	ok(t, agent, "get_workflow", map[string]any{"workflow_id": sub.WorkflowID}, &v)
	if len(v.Steps) != 3 || v.Steps[1].Status != "waiting" || v.Steps[1].AvailableAt == nil ||
		v.Steps[2].Status != "scheduled" || v.Steps[2].AvailableAt == nil || !v.Steps[2].AvailableAt.Equal(nb) {
		t.Fatalf("get_workflow: %+v", v.Steps)
	}
	fails(t, agent, "queue_task", map[string]any{"task_type": "echo", "resource_intents": []map[string]any{{"resource": "FILE:", "predicate": "READS"}}}, "invalid_resource")
	fails(t, agent, "submit_workflow", map[string]any{"name": "bad", "steps": []map[string]any{
		{"name": "a", "task_type": "echo", "resource_intents": []map[string]any{{"resource": "FILE:", "predicate": "READS"}}}}}, "invalid_resource")
	fails(t, agent, "submit_workflow", map[string]any{"name": "bad", "steps": []map[string]any{
		{"name": "a", "task_type": "echo", "delay_seconds": -1}}}, "bad_request")
}

// TestQueueTaskNotBefore: queue_task and each entry of queue_tasks take
// not_before as submit_workflow's steps do: the task is scheduled until
// that instant (check_task_status shows it), the later of it and
// delay_seconds counts, and a time that is no RFC 3339 instant or is more
// than a year ahead is refused as bad_request, nothing queued.
func TestQueueTaskNotBefore(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	nb := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	var q mcpapi.QueueTaskResult
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo", "not_before": nb.Format(time.RFC3339), "delay_seconds": 60}, &q)
	if !q.AvailableAt.Equal(nb) {
		t.Fatalf("queue_task with not_before %v: available_at %v", nb, q.AvailableAt)
	}
	var st map[string]any
	ok(t, agent, "check_task_status", map[string]any{"task_id": q.TaskID}, &st)
	if st["status"] != "scheduled" {
		t.Fatalf("a task not before %v shows %v, want scheduled", nb, st["status"])
	}
	var many mcpapi.QueueTasksResult
	ok(t, agent, "queue_tasks", map[string]any{"tasks": []map[string]any{
		{"task_type": "echo", "not_before": nb.Format(time.RFC3339)},
		{"task_type": "echo", "not_before": "tomorrow"},
	}}, &many)
	if len(many.Results) != 2 || !many.Results[0].OK || !many.Results[0].Task.AvailableAt.Equal(nb) || many.Results[1].OK || many.Results[1].Error != "bad_request" {
		t.Fatalf("queue_tasks with not_before: %+v", many.Results)
	}
	fails(t, agent, "queue_task", map[string]any{"task_type": "echo", "not_before": "tomorrow"}, "bad_request")
	fails(t, agent, "queue_task", map[string]any{"task_type": "echo", "not_before": time.Now().AddDate(2, 0, 0).Format(time.RFC3339)}, "bad_request")
}

// TestWorkflowDurableTaskArchived: a workflow archived by retention is
// still the MCP task its outcome made it: tasks/get completed (or
// cancelled), tasks/result the final step's result without its purged
// payload, not an error; get_workflow says archived and how it ended.
func TestWorkflowDurableTaskArchived(t *testing.T) {
	b, clock := setupRetention(t)
	agent := b.connect(t, b.agent)
	var ct createTask
	rpcOK(t, agent, "tools/call", map[string]any{"name": "submit_workflow", "task": map[string]any{},
		"arguments": map[string]any{"name": "one", "steps": []map[string]any{{"name": "only", "task_type": "echo"}}}}, &ct)
	id := ct.Task.TaskId
	var v engine.WorkflowView
	ok(t, agent, "get_workflow", map[string]any{"workflow_id": id}, &v)
	complete(t, b, v.Steps[0].TaskID, map[string]any{"answer": 42})
	var sub mcpapi.SubmitWorkflowResult
	ok(t, agent, "submit_workflow", map[string]any{"name": "dropped", "steps": []map[string]any{{"name": "x", "task_type": "echo"}}}, &sub)
	ok(t, agent, "cancel_workflow", map[string]any{"workflow_id": sub.WorkflowID}, nil)

	clock.Advance(25 * time.Hour)
	if rep, err := b.eng.RetentionSweep(context.Background()); err != nil || rep.WorkflowsArchived != 2 {
		t.Fatalf("sweep: %+v %v", rep, err)
	}
	ok(t, agent, "get_workflow", map[string]any{"workflow_id": id}, &v)
	if v.State != host.WorkflowArchived || v.Outcome != host.WorkflowSucceeded || v.Result == nil || v.Result.Pointer != "" || v.Result.PurgedAt == nil {
		t.Fatalf("get_workflow after retention: %+v result %+v", v.Workflow, v.Result)
	}
	var got mcp.Task
	rpcOK(t, agent, "tasks/get", map[string]any{"taskId": id}, &got)
	if got.Status != mcp.TaskStatusCompleted || !strings.Contains(got.StatusMessage, "archived") {
		t.Fatalf("tasks/get of an archived workflow: %+v", got)
	}
	var tr struct {
		StructuredContent mcpapi.WorkflowCallResult `json:"structuredContent"`
		IsError           bool                      `json:"isError"`
	}
	rpcOK(t, agent, "tasks/result", map[string]any{"taskId": id}, &tr)
	res, _ := json.Marshal(tr.StructuredContent.Result)
	if tr.IsError || tr.StructuredContent.Status != "archived" || tr.StructuredContent.Outcome != "succeeded" ||
		strings.Contains(string(res), "result_pointer") || !strings.Contains(string(res), `"summary":"echoed"`) {
		t.Fatalf("tasks/result of an archived workflow: %+v %s", tr, res)
	}
	rpcOK(t, agent, "tasks/get", map[string]any{"taskId": sub.WorkflowID}, &got)
	if got.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/get of an archived canceled workflow: %+v", got)
	}
	var list mcpapi.WorkflowListResult
	ok(t, agent, "list_workflows", map[string]any{"status": "archived"}, &list)
	if len(list.Workflows) != 2 {
		t.Fatalf("list_workflows archived: %+v", list)
	}
}

// TestListWorkflowsTakesStates: list_workflows takes one state (a string, as
// it always did) or a list of them, as GET /v1/workflows?status=a,b does,
// through the MCP client; what its declared input schema accepts and
// refuses, the gate accepts and refuses, and a refusal says what status
// must be.
func TestListWorkflowsTakesStates(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	submit := func(name string) string {
		t.Helper()
		var sub mcpapi.SubmitWorkflowResult
		ok(t, agent, "submit_workflow", map[string]any{"name": name, "steps": []map[string]any{{"name": "x", "task_type": "echo"}}}, &sub)
		return sub.Steps["x"]
	}
	done := submit("done")
	complete(t, b, done, map[string]any{"ok": true})
	submit("dropped")
	var list mcpapi.WorkflowListResult
	ok(t, agent, "list_workflows", map[string]any{"status": "succeeded"}, &list)
	if len(list.Workflows) != 1 || list.Workflows[0].Name != "done" {
		t.Fatalf("succeeded: %+v", list.Workflows)
	}
	ok(t, agent, "list_workflows", map[string]any{}, &list)
	var dropped string
	for _, w := range list.Workflows {
		if w.Name == "dropped" {
			dropped = w.ID
		}
	}
	ok(t, agent, "cancel_workflow", map[string]any{"workflow_id": dropped}, nil)
	submit("running")

	names := func(args map[string]any) []string {
		t.Helper()
		var l mcpapi.WorkflowListResult
		ok(t, agent, "list_workflows", args, &l)
		var out []string
		for _, w := range l.Workflows {
			out = append(out, w.Name)
		}
		return out
	}
	for _, c := range []struct {
		status any
		want   string
	}{
		{[]string{"succeeded", "canceled"}, "dropped,done"},
		{[]string{"canceled"}, "dropped"},
		{[]string{"running", "running"}, "running"},
		{"canceled", "dropped"},
		{[]string{}, "running,dropped,done"},
		{nil, "running,dropped,done"},
	} {
		args := map[string]any{}
		if c.status != nil {
			args["status"] = c.status
		}
		if got := strings.Join(names(args), ","); got != c.want {
			t.Errorf("status %v: %s, want %s", c.status, got, c.want)
		}
	}

	// The declared schema and the gate agree.
	tools, err := agent.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var schema *jsonschema.Schema
	for _, tl := range tools.Tools {
		if tl.Name == "list_workflows" {
			raw, _ := json.Marshal(tl.InputSchema)
			if schema, err = jsonschema.CompileString("list_workflows.input.json", string(raw)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if schema == nil {
		t.Fatal("list_workflows is not listed")
	}
	for _, c := range []struct {
		status any
		want   string // "" accepted; else what the refusal's detail holds
	}{
		{"failed", ""},
		{[]any{"failed", "archived"}, ""},
		{[]any{}, ""},
		{"bogus", `status must be one of "running", "succeeded", "failed", "canceled", "archived", got "bogus"`},
		{[]any{"running", "Failed"}, `status[1] must be one of`},
		{7, "status must be a string or an array, got an integer"},
		{[]any{7}, "status[0] must be a string, got an integer"},
		{map[string]any{"running": true}, "status must be a string or an array, got an object"},
		{nil, "status must be a string or an array, got null (leave an argument out"},
	} {
		args := map[string]any{"status": c.status}
		verr := schema.Validate(map[string]any{"status": c.status})
		var body mcpapi.ErrorBody
		res := call(t, agent, "list_workflows", args, &body)
		if c.want == "" {
			if verr != nil || res.IsError {
				t.Errorf("status %v: schema says %v, the gate %s", c.status, verr, text(res))
			}
			continue
		}
		if verr == nil {
			t.Errorf("status %v: the declared schema accepts it", c.status)
		}
		if !res.IsError || body.Error != "bad_request" || !strings.Contains(body.Detail, c.want) {
			t.Errorf("status %v: %s, want bad_request saying %q", c.status, text(res), c.want)
		}
	}
}
