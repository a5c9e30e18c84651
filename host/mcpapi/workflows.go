package mcpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Workflows (issue 39). submit_workflow may be called as a task
// (task-augmented tools/call): the MCP task is the workflow (taskId =
// workflow_id, "WF-…"), durable as a gate task is, and tasks/get,
// tasks/result and tasks/cancel answer for it; its result is the final
// step's.

// WorkflowPollSeconds is the poll interval a workflow's MCP task suggests.
const WorkflowPollSeconds = 30

// SubmitWorkflowResult is submit_workflow's acknowledgement.
type SubmitWorkflowResult struct {
	*engine.WorkflowResult
	NextStep string `json:"next_step"`
}

// WorkflowCallResult is what tasks/result gives for a succeeded workflow:
// the final step's result as fetch_task_result shows it.
type WorkflowCallResult struct {
	WorkflowID string `json:"workflow_id"`
	Status     string `json:"status"`
	// Outcome is how the workflow ended (succeeded), archived or not.
	Outcome     string `json:"outcome"`
	FinalStep   string `json:"final_step"`
	FinalTaskID string `json:"final_task_id"`
	Result      any    `json:"result"`
	// NextStep is what to do now, as submit_workflow's answer has it (the
	// tool's one output schema covers both answers).
	NextStep string `json:"next_step"`
}

// workflowArchivedStep is the next step of a succeeded workflow past its
// retention, and workflowDoneStep of one whose result is still kept.
const workflowArchivedStep = "The workflow succeeded and is archived: its final step's payload was purged; result holds what is left (summary, checksum, artifacts). Nothing more is owed for it."
const workflowDoneStep = "The workflow succeeded: result is its final step's result. Nothing more is owed for it; archive the final step's result (archive_task_result with final_task_id) when you no longer need it."

// WorkflowListResult is list_workflows's answer.
type WorkflowListResult struct {
	Workflows []*host.Workflow `json:"workflows"`
	Cursor    string           `json:"cursor,omitempty"`
}

var workflowIDArg = mcp.WithString("workflow_id", mcp.Required(), mcp.Description("The workflow id returned by submit_workflow (starts with \"WF-\")."))

func stepItem() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name":         map[string]any{"type": "string", "description": "The step's name, unique in the workflow (letters, digits, '_', '.', '-')."},
			"task_type":    map[string]any{"type": "string", "description": "A task type of your tenant (list_task_types)."},
			"params":       map[string]any{"type": "object", "description": "The task's parameters, checked against the task type's schema."},
			"priority":     map[string]any{"type": "integer", "minimum": 1, "maximum": 10},
			"max_retries":  map[string]any{"type": "integer", "minimum": 0, "maximum": 1000},
			"task_summary": map[string]any{"type": "string", "maxLength": 1000},
			"after":        map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": "Names of the steps this one waits on; its worker receives their outcomes."},
			"after_rule":   map[string]any{"type": "string", "enum": []string{string(host.RuleAllSucceeded), string(host.RuleAnySucceeded), string(host.RuleAllFinished)}},
			"delay_seconds": map[string]any{"type": "integer", "minimum": 0, "maximum": 366 * 24 * 3600,
				"description": "Do not start the step before this many seconds after the submission (not after the steps in after end): with after, it starts when both its after_rule is met and this time has come. Default 0."},
			"not_before": map[string]any{"type": "string", "format": "date-time",
				"description": "Do not start the step before this instant (RFC 3339, at most a year ahead); with delay_seconds, the later of the two."},
			"resource_intents": map[string]any{"type": "array", "items": intentItem(), "maxItems": host.MaxTaskResourceIntents,
				"description": "Resources the step's task needs while it runs, besides its type's, as queue_task's resource_intents: it starts only when every one can be leased."},
		},
		"required": []string{"name", "task_type"},
	}
}

// workflowTools registers the workflow tools.
func (s *Server) workflowTools() {
	submit := tool("submit_workflow", "Submit a workflow of tasks",
		`Submit a graph of tasks in one call: named steps, each a task of one of your task types, with after naming the steps it waits on (fan-out: several steps after one; fan-in: one step after several, whose worker receives all their results). The workflow's outcome is its final step's (final_step, by default the one step nothing waits on).
Returns workflow_id (keep it), status (running), steps (each step's task_id) and receipt_id (the workflow.submitted receipt: one open obligation owed to you until the workflow ends; its steps make no obligations or inbox items of yours). Call it as a task (task-augmented tools/call) to get one durable MCP task for the whole workflow, whose result is the final step's.
A step may also take delay_seconds, not_before and resource_intents, as queue_task does; the delay counts from the submission.
Everything is checked before anything is queued: unknown_step, duplicate_step, workflow_cycle, too_many_steps (over 1,000), invalid_workflow, and each step's fields as queue_task checks them (unknown_task_type, invalid_params, invalid_resource, bad_request, ..., naming the step). Then continue with your other work; check back with get_workflow later.`,
		returns[SubmitWorkflowResult](), writes(false, false),
		props(
			mcp.WithString("name", mcp.Required(), mcp.MaxLength(200), mcp.Description("A name for the workflow, shown in lists and receipts.")),
			mcp.WithArray("steps", mcp.Required(), mcp.Items(stepItem()), mcp.MaxItems(host.MaxWorkflowSteps), mcp.Description("The steps, at most 1,000.")),
			mcp.WithString("final_step", mcp.Description("The step whose outcome is the workflow's. Default: the one step no other step waits on (required when there are several).")),
			mcp.WithString("idempotency_key", mcp.MaxLength(200), mcp.Description("Optional key, yours alone: submitting the same workflow again with it returns the first with is_duplicate true.")),
		))
	submit.Execution = &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}
	s.add(submit, agentRoles, s.submitWorkflow)

	s.add(tool("get_workflow", "Get a workflow and its steps",
		`Get a workflow you submitted: status (running, succeeded, failed, canceled, or archived once past its final step's retention, with how it ended in outcome), result (the final step's result pointer and summary when it succeeded; an archived workflow's has no pointer, its payload purged), error_message, and each step with its task_id, status and result. A workflow that does not exist or is not yours is a not_found error.`,
		returns[engine.WorkflowView](), readOnly(), props(workflowIDArg)),
		agentRoles, s.getWorkflow)

	s.add(tool("list_workflows", "List your workflows",
		`List the workflows you submitted, newest first. status keeps those in one state, or in any of a list of them (e.g. ["failed", "canceled"]).`,
		returns[WorkflowListResult](), readOnly(), props(
			mcp.WithAny("status", oneOrList("running", "succeeded", "failed", "canceled", "archived"),
				mcp.Description("A state, or a list of states; default: every state.")),
			mcp.WithString("cursor", mcp.Description("The cursor of the previous page.")),
			mcp.WithInteger("limit", mcp.Min(1), mcp.Max(500)))),
		agentRoles, s.listWorkflows)

	s.add(tool("cancel_workflow", "Cancel a workflow",
		`Cancel a workflow: every step not finished is canceled (a step a worker is running stops at its next heartbeat). Canceling twice is harmless; canceling a workflow that already succeeded or failed is a conflict error.`,
		returns[host.Workflow](), writes(true, true), props(workflowIDArg,
			mcp.WithString("reason", mcp.MaxLength(1000), mcp.Description("Why, for the ledger (optional).")))),
		agentRoles, s.cancelWorkflow)
}

func (s *Server) submitWorkflow(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	res, err := s.doSubmitWorkflow(ctx, a, req.GetRawArguments())
	if err != nil {
		return nil, "", err
	}
	next := fmt.Sprintf("Continue with your other work now. Check back with get_workflow(workflow_id=%q) later or in a later session; its outcome also reaches your inbox. Do not poll in a loop.", res.WorkflowID)
	head := fmt.Sprintf("Submitted workflow %s with %d steps, status %s.", res.WorkflowID, len(res.Steps), res.Status)
	if res.IsDuplicate {
		head = fmt.Sprintf("Workflow %s already exists for this idempotency_key (is_duplicate); status %s.", res.WorkflowID, res.Status)
	}
	return SubmitWorkflowResult{WorkflowResult: res, NextStep: next}, head + " " + next, nil
}

func (s *Server) doSubmitWorkflow(ctx context.Context, a engine.Actor, args any) (*engine.WorkflowResult, error) {
	var in engine.WorkflowRequest
	if err := bind(mcp.CallToolRequest{Params: mcp.CallToolParams{Arguments: args}}, &in); err != nil {
		return nil, err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	return s.eng.SubmitWorkflow(wctx, a, in)
}

func (s *Server) getWorkflow(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		WorkflowID string `json:"workflow_id"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := required("workflow_id", in.WorkflowID); err != nil {
		return nil, "", err
	}
	v, err := s.eng.GetWorkflow(ctx, a, in.WorkflowID)
	if err != nil {
		return nil, "", err
	}
	state := string(v.State)
	if v.State == host.WorkflowArchived {
		state = "archived (it " + string(v.Outcome) + "; past its retention, its result's payload was purged)"
	}
	return v, fmt.Sprintf("%s is %s; %s.", workflowLabel(v), state, stepCounts(v)), nil
}

// stepCounts says how many steps are in each state.
func stepCounts(v *engine.WorkflowView) string {
	n := map[host.TaskState]int{}
	var order []host.TaskState
	for _, st := range v.Steps {
		if n[st.Status] == 0 {
			order = append(order, st.Status)
		}
		n[st.Status]++
	}
	parts := make([]string, len(order))
	for i, st := range order {
		parts[i] = fmt.Sprintf("%d %s", n[st], st)
	}
	return fmt.Sprintf("%d steps: %s", len(v.Steps), strings.Join(parts, ", "))
}

func (s *Server) listWorkflows(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		Status oneOrMany `json:"status"`
		Cursor string    `json:"cursor"`
		Limit  int       `json:"limit"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := nonNegative("limit", in.Limit); err != nil {
		return nil, "", err
	}
	f := store.WorkflowFilter{Cursor: in.Cursor, Limit: in.Limit}
	for _, st := range in.Status {
		f.States = append(f.States, host.WorkflowState(st))
	}
	wfs, cur, err := s.eng.ListWorkflows(ctx, a, f)
	if err != nil {
		return nil, "", err
	}
	if wfs == nil {
		wfs = []*host.Workflow{}
	}
	return WorkflowListResult{Workflows: wfs, Cursor: cur}, fmt.Sprintf("%d workflows.", len(wfs)), nil
}

func (s *Server) cancelWorkflow(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		WorkflowID string `json:"workflow_id"`
		Reason     string `json:"reason"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := required("workflow_id", in.WorkflowID); err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	wf, err := s.eng.CancelWorkflow(wctx, a, in.WorkflowID, in.Reason)
	if err != nil {
		return nil, "", err
	}
	return wf, fmt.Sprintf("Workflow %s is %s.", wf.ID, wf.State), nil
}

// isWorkflowID reports whether an MCP taskId names a workflow.
func isWorkflowID(id string) bool { return strings.HasPrefix(id, host.PrefixWorkflow) }

// callWorkflowAsTask serves a task-augmented tools/call of submit_workflow.
func (s *Server) callWorkflowAsTask(ctx context.Context, a engine.Actor, args json.RawMessage) (any, *rpcError) {
	if a.Role != engine.RoleAgent && a.Role != engine.RoleAdmin {
		return nil, errFor(host.Errorf(host.CodeForbidden, "submit_workflow needs an agent or admin key"))
	}
	var raw any = args
	if len(args) == 0 {
		raw = nil
	}
	// Checked against the declared schema as a plain call is (add).
	if err := s.args["submit_workflow"].check(raw); err != nil {
		return nil, errFor(err)
	}
	res, err := s.doSubmitWorkflow(ctx, a, raw)
	if err != nil {
		return nil, errFor(err)
	}
	v, err := s.eng.GetWorkflow(ctx, a, res.WorkflowID)
	if err != nil {
		return nil, errFor(err)
	}
	return map[string]any{
		"task": mcpWorkflowTask(v, s.endWriter(ctx, a, v)), // a duplicate may name an ended workflow
		"_meta": map[string]any{"io.modelcontextprotocol/model-immediate-response": fmt.Sprintf(
			"Submitted workflow %s (%s) with %d steps. It runs in the background and survives disconnects; its result (the final step's) comes through tasks/result.", v.ID, v.Name, len(v.Steps))},
	}, nil
}

// mcpWorkflowTask is a workflow as an MCP task: an archived workflow is
// the task its outcome made it, its message saying it is archived. by is
// who wrote an ended workflow's summary or error (endWriter): the text is
// quoted as that worker's words.
func mcpWorkflowTask(v *engine.WorkflowView, by string) mcp.Task {
	out := mcp.Task{TaskId: v.ID, CreatedAt: v.CreatedAt.UTC().Format(time.RFC3339Nano), LastUpdatedAt: v.UpdatedAt.UTC().Format(time.RFC3339Nano)}
	archived := ""
	if v.State == host.WorkflowArchived {
		archived = " (archived)"
	}
	switch v.Ended() {
	case host.WorkflowSucceeded:
		out.Status, out.StatusMessage = mcp.TaskStatusCompleted, "succeeded"+archived
		if v.Result != nil && v.Result.Summary != "" {
			out.StatusMessage += ": " + workerWords(by, v.Result.Summary)
		}
	case host.WorkflowCanceled:
		out.Status, out.StatusMessage = mcp.TaskStatusCancelled, canceledMessage(v.Error, archived)
	case host.WorkflowFailed:
		out.Status, out.StatusMessage = mcp.TaskStatusFailed, "failed"+archived+": "+workflowError(v, by)
	default:
		out.Status, out.StatusMessage = mcp.TaskStatusWorking, "running, "+stepCounts(v)
		if v.CancelRequested {
			out.StatusMessage += " (cancellation requested)"
		}
		ms := int64(WorkflowPollSeconds) * 1000
		out.PollInterval = &ms
	}
	return out
}

// canceledMessage is a canceled workflow's statusMessage from its error
// (archived is " (archived)" or ""): "canceled by agent.a: agent.a wrote:
// "not needed"", the reason quoted as the words of the principal who
// canceled it (a principal has no space, so the first ": " ends its name);
// the gate's own reason, such as a canceled step the final step needed,
// unquoted; "canceled" alone when the error says nothing more.
func canceledMessage(e, archived string) string {
	msg := "canceled" + archived
	switch rest, ok := strings.CutPrefix(e, "canceled"); {
	case e == "":
	case ok && strings.HasPrefix(rest, " by "):
		by, reason, quoted := strings.Cut(strings.TrimPrefix(rest, " by "), ": ")
		msg += " by " + by
		switch {
		case !quoted:
		case by == engine.GatePrincipal:
			msg += ": " + reason
		default:
			msg += ": " + engine.Words(by, reason)
		}
	case ok && strings.HasPrefix(rest, ": "):
		msg += ": " + engine.Words("the canceler", strings.TrimPrefix(rest, ": "))
	case ok && rest == "":
	default:
		msg += ": " + e
	}
	return msg
}

// workflowError is a failed workflow's error as a model reads it: the
// gate's own words when the gate wrote it (by is engine.GatePrincipal),
// else quoted as the words of the worker that wrote it.
func workflowError(v *engine.WorkflowView, by string) string {
	if by == engine.GatePrincipal {
		return v.Error
	}
	return workerWords(by, v.Error)
}

// endWriter is who wrote an ended workflow's summary or error, as its end
// receipt names them (worker_id in workflow.completed, error_by in
// workflow.failed); "" when it names no one or cannot be read.
func (s *Server) endWriter(ctx context.Context, a engine.Actor, v *engine.WorkflowView) string {
	if v.EndReceipt == "" {
		return ""
	}
	switch v.Ended() {
	case host.WorkflowSucceeded:
		if v.Result == nil || v.Result.Summary == "" {
			return ""
		}
	case host.WorkflowFailed:
	default:
		return ""
	}
	r, _, err := s.eng.GetReceipt(ctx, a, v.EndReceipt)
	if err != nil {
		return ""
	}
	var b struct {
		WorkerID string `json:"worker_id"`
		ErrorBy  string `json:"error_by"`
	}
	_ = json.Unmarshal(r.Body, &b)
	if v.Ended() == host.WorkflowFailed {
		return b.ErrorBy
	}
	return b.WorkerID
}

func (s *Server) workflowTaskGet(ctx context.Context, a engine.Actor, id string) (any, *rpcError) {
	v, err := s.eng.GetWorkflow(ctx, a, id)
	if err != nil {
		return nil, errFor(err)
	}
	return mcpWorkflowTask(v, s.endWriter(ctx, a, v)), nil
}

func (s *Server) workflowTaskCancel(ctx context.Context, a engine.Actor, id string) (any, *rpcError) {
	if a.Role != engine.RoleAgent && a.Role != engine.RoleAdmin {
		return nil, &rpcError{Code: rpcInvalidParams, Message: "forbidden: canceling needs an agent or admin key"}
	}
	v, err := s.eng.GetWorkflow(ctx, a, id)
	if err != nil {
		return nil, errFor(err)
	}
	if v.State.Terminal() {
		return nil, errFor(host.Errorf(host.CodeConflict, "workflow %s is already %s and can no longer be canceled", id, v.State))
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	if _, err := s.eng.CancelWorkflow(wctx, a, id, "canceled with MCP tasks/cancel"); err != nil {
		return nil, errFor(err)
	}
	return s.workflowTaskGet(ctx, a, id)
}

// workflowTaskResult waits, at most TaskResultWait, for the workflow to
// end, then answers with its final step's result, or a tool error.
func (s *Server) workflowTaskResult(ctx context.Context, a engine.Actor, id string) (any, *rpcError) {
	wctx, cancel := context.WithTimeout(ctx, untilExpiry(ctx, s.cfg.TaskResultWait))
	defer cancel()
	stop := context.AfterFunc(s.drain, cancel)
	defer stop()
	var v *engine.WorkflowView
	for {
		var err error
		if v, err = s.eng.GetWorkflow(wctx, a, id); err != nil {
			if wctx.Err() != nil {
				break
			}
			return nil, errFor(err)
		}
		if v.State.Terminal() {
			break
		}
		select {
		case <-wctx.Done():
		case <-time.After(s.cfg.WatchInterval / 2):
			continue
		}
		break
	}
	if v == nil || !v.State.Terminal() {
		return nil, &rpcError{Code: rpcServerError,
			Message: fmt.Sprintf("workflow %s is still running; call tasks/result again, or tasks/get after its pollInterval", id),
			Data:    map[string]any{"taskId": id, "status": mcp.TaskStatusWorking}}
	}
	var out *mcp.CallToolResult
	switch {
	case v.State == host.WorkflowArchived && v.Outcome == host.WorkflowSucceeded:
		// Past its retention: the payload is purged, what is left of the
		// result (summary, checksum, times) is the answer.
		rr := api.ResultResponse{TaskID: v.FinalTaskID}
		if r := v.Result; r != nil {
			rr.ResultPointer, rr.ResultChecksum, rr.Summary, rr.Metadata = r.Pointer, r.Checksum, r.Summary, r.Metadata
			rr.Artifacts, rr.DeliveryProof, rr.ArchivedAt = r.Artifacts, r.DeliveryProof, r.ArchivedAt
		}
		text := fmt.Sprintf("%s succeeded; it is archived, past its retention: the final step %s's payload was purged.", workflowLabel(v), v.FinalStep)
		if rr.Summary != "" {
			text += " Summary: " + workerWords(s.endWriter(ctx, a, v), rr.Summary)
		}
		out = result(WorkflowCallResult{WorkflowID: v.ID, Status: string(v.State), Outcome: string(v.Outcome), FinalStep: v.FinalStep, FinalTaskID: v.FinalTaskID, Result: &rr, NextStep: workflowArchivedStep}, text)
	case v.State == host.WorkflowSucceeded:
		fctx, cancel := context.WithTimeout(ctx, resultFetchTimeout)
		fr, err := s.eng.FetchResult(fctx, a, v.FinalTaskID)
		cancel()
		if err != nil {
			out = toolError(err)
			break
		}
		rr := resultResponse(fr)
		text := fmt.Sprintf("%s succeeded; its final step %s returned.", workflowLabel(v), v.FinalStep)
		if rr.Summary != "" {
			text += " Summary: " + workerWords(fr.Task.WorkerID, rr.Summary)
		}
		out = result(WorkflowCallResult{WorkflowID: v.ID, Status: string(v.State), Outcome: string(v.Outcome), FinalStep: v.FinalStep, FinalTaskID: v.FinalTaskID, Result: &rr, NextStep: workflowDoneStep}, text)
	case v.Ended() == host.WorkflowCanceled:
		out = toolError(host.Errorf(CodeTaskCanceled, "workflow %s was canceled", v.ID))
	default:
		out = toolError(host.Errorf(CodeTaskFailed, "workflow %s failed: %s", v.ID, workflowError(v, s.endWriter(ctx, a, v))))
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, &rpcError{Code: rpcInternal, Message: "encoding the result"}
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["_meta"] = map[string]any{relatedTask: map[string]any{"taskId": v.ID}}
	return m, nil
}

// workflowLabel names a workflow in a tool's text: its id, and its name
// quoted as its submitter's words (the name is theirs, not the gate's),
// as the other tools quote what principals wrote.
func workflowLabel(v *engine.WorkflowView) string {
	if v.Name == "" {
		return "Workflow " + v.ID
	}
	return fmt.Sprintf("Workflow %s (its name: %s)", v.ID, engine.Words(v.CreatedBy, v.Name))
}
