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

// readOnly marks a tool that changes nothing.
func readOnly() []mcp.ToolOption {
	return []mcp.ToolOption{
		mcp.WithReadOnlyHintAnnotation(true), mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true), mcp.WithOpenWorldHintAnnotation(false),
	}
}

// writes marks a tool that changes the gate's state.
func writes(idempotent, destructive bool) []mcp.ToolOption {
	return []mcp.ToolOption{
		mcp.WithReadOnlyHintAnnotation(false), mcp.WithDestructiveHintAnnotation(destructive),
		mcp.WithIdempotentHintAnnotation(idempotent), mcp.WithOpenWorldHintAnnotation(false),
	}
}

func tool(name, title, desc string, opts ...[]mcp.ToolOption) mcp.Tool {
	all := []mcp.ToolOption{mcp.WithDescription(desc), mcp.WithTitleAnnotation(title)}
	for _, o := range opts {
		all = append(all, o...)
	}
	return mcp.NewTool(name, all...)
}

func props(opts ...mcp.ToolOption) []mcp.ToolOption { return opts }

// dateTime declares a string argument an RFC 3339 date-time (JSON Schema's
// format date-time), as the handler parses it.
func dateTime() mcp.PropertyOption {
	return func(s map[string]any) { s["format"] = "date-time" }
}

// oneOrList declares an argument that takes one of values, or a list of
// them (anyOf a string and an array of strings, each one of values): a
// filter that took one value and now takes several keeps its callers.
// Its handler binds it as oneOrMany.
func oneOrList(values ...string) mcp.PropertyOption {
	return func(s map[string]any) {
		s["anyOf"] = []any{
			map[string]any{"type": "string", "enum": values},
			map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": values}},
		}
	}
}

// oneOrMany binds an argument declared with oneOrList: a string is a list
// of one.
type oneOrMany []string

func (o *oneOrMany) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*o = oneOrMany{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("a string or a list of strings")
	}
	*o = many
	return nil
}

var taskIDArg = mcp.WithString("task_id", mcp.Required(), mcp.Description("The task id returned by queue_task (starts with \"T-\")."))

// QueueTaskArgs are the arguments of queue_task.
type QueueTaskArgs struct {
	TaskType       string          `json:"task_type"`
	Params         json.RawMessage `json:"params,omitempty"`
	Priority       int             `json:"priority,omitempty"`
	RecipientAI    string          `json:"recipient_ai,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	TaskSummary    string          `json:"task_summary,omitempty"`
	DelaySeconds   int             `json:"delay_seconds,omitempty"`
	// NotBefore is the earliest time the task may start (RFC 3339); with
	// DelaySeconds, the later of the two. A string, parsed per task, so one
	// entry of queue_tasks that is no time is refused alone.
	NotBefore string `json:"not_before,omitempty"`
	// ResourceIntents are resource leases the task needs while it runs,
	// besides its type's (see docs/http.md "Tasks that need resources").
	ResourceIntents []engine.ResourceIntent `json:"resource_intents,omitempty"`
	// After names tasks this one waits on; AfterRule says when it may run
	// (see docs/http.md "Dependencies and fan-in").
	After     []string            `json:"after,omitempty"`
	AfterRule host.DependencyRule `json:"after_rule,omitempty"`
}

// QueueTaskResult is queue_task's rich acknowledgement: the engine's answer
// plus the guidance an agent should follow.
type QueueTaskResult struct {
	*engine.EnqueueResult
	NextStep string `json:"next_step"`
}

// TaskStatus is check_task_status's answer: the task as the HTTP API shows
// it, with the spec's retry fields and a hint of what to do next.
type TaskStatus struct {
	*host.Task
	RetryCount int    `json:"retry_count"`
	CanRetry   bool   `json:"can_retry"`
	HasResult  bool   `json:"has_result"`
	NextStep   string `json:"next_step"`
}

// TaskSummary is one row of list_active_tasks.
type TaskSummary struct {
	TaskID          string         `json:"task_id"`
	TaskType        string         `json:"task_type"`
	Status          host.TaskState `json:"status"`
	Priority        int            `json:"priority"`
	RecipientAI     string         `json:"recipient_ai"`
	CreatedBy       string         `json:"created_by"`
	TaskSummary     string         `json:"task_summary,omitempty"`
	CreatedAt       time.Time      `json:"created_at"`
	ProgressPercent *float64       `json:"progress_percent,omitempty"`
	ProgressMessage string         `json:"progress_message,omitempty"`
	CancelRequested bool           `json:"cancel_requested,omitempty"`
}

// TaskList is list_active_tasks' answer.
type TaskList struct {
	Tasks  []TaskSummary `json:"tasks"`
	Cursor string        `json:"cursor,omitempty"`
}

// ObligationsResult is list_open_obligations' answer: the HTTP API's
// /v1/obligations/open shape with the caller's side split out.
type ObligationsResult struct {
	api.ObligationsResponse
	OwedToYou int `json:"owed_to_you"`
	YouOwe    int `json:"you_owe"`
}

// ChainResult is get_receipt_chain's answer.
type ChainResult struct {
	ReceiptID string             `json:"receipt_id"`
	Chain     []engine.ChainLink `json:"chain"`
}

// ArchiveResult is archive_task_result's answer.
type ArchiveResult struct {
	TaskID     string     `json:"task_id"`
	Status     string     `json:"status"`
	ArchivedAt *time.Time `json:"archived_at,omitempty"`
}

// nextStep says what an agent should do about a task in its current state.
func nextStep(t *host.Task, poll int) string {
	switch t.State {
	case host.StateWaiting:
		return "Waiting for the tasks it was queued after; it starts when its after_rule is met (or is canceled, with the reason in error_message, if it can no longer be). Continue with other work and check again in a later session."
	case host.StateQueued, host.StateScheduled, host.StateLeased:
		if t.CancelRequested {
			return "Cancellation was requested; the worker stops at its next heartbeat. Nothing to do."
		}
		if poll <= 0 {
			poll = host.DefaultPollSuggestionSeconds
		}
		return fmt.Sprintf("Still %s. Continue with other work and check again in about %d seconds or in a later session; do not poll in a loop.", t.State, poll)
	case host.StateSucceeded:
		if t.Result != nil && t.Result.ArchivedAt != nil {
			return "Succeeded; the result was archived. Nothing to do."
		}
		return "Succeeded. Call fetch_task_result to read the result, then archive_task_result when you have kept what you need."
	case host.StateDeadLetter:
		return "Failed for good (dead letter): see error_message and dead_reason. Decide whether to queue a new task."
	case host.StateCanceled:
		return "Canceled. Nothing to do."
	case host.StateArchived:
		return "Archived: past its retention, its payload was purged; its receipts remain. Nothing to do."
	}
	return ""
}

func (s *Server) pollSuggestion(ctx context.Context, t *host.Task) int {
	if tt, err := s.eng.GetTaskType(ctx, t.Tenant, t.Type); err == nil {
		return tt.PollSuggestionSeconds
	}
	return host.DefaultPollSuggestionSeconds
}

// queueTaskProps are queue_task's arguments; each entry of queue_tasks takes
// the same.
func queueTaskProps() []mcp.ToolOption {
	return props(
		mcp.WithString("task_type", mcp.Required(), mcp.Description("A task type of your tenant: list_task_types lists them (each is also a tool of its own name). An unknown type is an unknown_task_type error that names the valid ones.")),
		mcp.WithObject("params", mcp.Description("Task-specific parameters, checked against the task type's JSON Schema (invalid_params on mismatch). Default {}.")),
		mcp.WithInteger("priority", mcp.Min(1), mcp.Max(10), mcp.Description("1..10, 10 runs first. Default: the task type's (usually 5).")),
		mcp.WithString("recipient_ai", mcp.MaxLength(200), mcp.Description("Who receives the outcome (its obligation): a principal name. Default: you.")),
		mcp.WithString("idempotency_key", mcp.MaxLength(200), mcp.Description("Optional key, yours alone: queuing again yourself with the same key and recipient returns the first task with is_duplicate true; another principal's use of the key never touches your task.")),
		mcp.WithString("task_summary", mcp.MaxLength(1000), mcp.Description("One line saying what this task is for; shown in lists and receipts.")),
		mcp.WithInteger("delay_seconds", mcp.Min(0), mcp.Max(366*24*3600), mcp.Description("Do not start before this many seconds from now (at most a year). Default 0.")),
		// Not declared format date-time: an entry of queue_tasks whose
		// not_before is no time is refused alone (request), not the call.
		mcp.WithString("not_before", mcp.Description("Do not start before this instant (RFC 3339 date-time, at most a year ahead); with delay_seconds, the later of the two. The task shows status scheduled until then.")),
		mcp.WithArray("resource_intents", mcp.Items(intentItem()), mcp.MaxItems(host.MaxTaskResourceIntents),
			mcp.Description("Resources the task needs while it runs, besides its type's: {resource, predicate} with predicate READS (shared) or MUTATES (exclusive). The task starts only when every one can be leased (an agent's MUTATES lease on one keeps it waiting); a worker holds them for the task. A bad name is an invalid_resource error.")),
		mcp.WithArray("after", mcp.WithStringItems(), mcp.MaxItems(host.MaxDependencies),
			mcp.Description("Task ids (of tasks you queued or that are addressed to you) this task waits on: it stays status waiting, and is not started, until after_rule is met; its worker then receives their outcomes (result pointers and summaries, or errors). An id you cannot read is an unknown_dependency error; a dependency that already failed under all_succeeded is dependency_failed. Fan-in: queue the parts, then one task after all of them.")),
		mcp.WithString("after_rule", mcp.Enum(string(host.RuleAllSucceeded), string(host.RuleAnySucceeded), string(host.RuleAllFinished)),
			mcp.Description("When a task with after may run: all_succeeded (default; canceled by the gate, with a task.canceled receipt, as soon as one dependency dead-letters or is canceled), any_succeeded (as soon as one succeeded; canceled when all failed), all_finished (when all finished, however; failures are visible to its worker).")),
	)
}

// agentTools registers the spec's agent tools.
func (s *Server) agentTools() {
	s.add(tool("queue_task", "Queue a long-running task",
		`Hand a long-running job of one of your tenant's task types (list_task_types lists them) to AsyncGate and get an acknowledgement at once; the work happens in the background and survives the end of your session.
Returns task_id (keep it), status ("queued", or "waiting" for a task queued with after), is_duplicate (true when idempotency_key matched an existing task, which is returned instead), estimated_runtime_seconds, poll_suggestion_seconds, inbox_on_complete and receipt_id (the task.assigned receipt: an open obligation owed to recipient_ai until the task completes, fails or is canceled).
After queuing, continue with your other work. Do not wait and do not poll in a loop: check back with check_task_status no sooner than poll_suggestion_seconds later, or in a later session start with list_open_obligations. Use idempotency_key when you might retry the call, so the task is not queued twice.`,
		returns[QueueTaskResult](), writes(false, false), queueTaskProps()),
		agentRoles, s.queueTask)

	s.add(tool("queue_tasks", "Queue many tasks at once",
		`Queue up to 1000 tasks in one call (fan-out: the same job over many inputs, or several models asked the same question). Each entry takes queue_task's arguments and gets its own answer, in the entries' order: ok with the task (task_id, status, is_duplicate, receipt_id…), or error and detail, the code queue_task would have answered (one refused entry does not touch the others). Entries sharing an idempotency_key are queued in their order (the later ones find the first and answer is_duplicate).
An entry cannot name another entry of the same call in after (its id is not known yet): to queue parts and then a task after all of them, call queue_tasks for the parts, then queue_task with after set to their task_ids, or use submit_workflow for the whole graph in one call. Use an idempotency_key per entry when you might retry the call.`,
		returns[QueueTasksResult](), writes(false, false), props(
			mcp.WithArray("tasks", mcp.Required(), mcp.MinItems(1), mcp.MaxItems(api.MaxBatchEnqueue), mcp.Items(queueTaskItem()),
				mcp.Description("The tasks, each with queue_task's arguments (task_type required).")))),
		agentRoles, s.queueTasks)

	s.add(tool("check_task_status", "Check a task's status",
		`Get the current state of one task you queued or that is addressed to you.
Returns status (queued, leased = a worker is on it, succeeded, canceled, dead_letter = failed for good), progress_percent and progress_message, created_at/started_at/completed_at, retry_count (attempts used), max_retries, can_retry, has_result, error_message and dead_reason when it failed, and next_step telling you what to do.
Call it when you come back to a task, not in a loop: if it is still queued or leased, continue other work and check again later. A task that does not exist or is not yours is a not_found error.`,
		returns[TaskStatus](), readOnly(), props(taskIDArg)),
		anyRole, s.checkTaskStatus)

	s.add(tool("get_task_progress", "Get a task's progress history",
		`Get the progress updates a worker reported for a task (newest first), with the current progress_percent and progress_message.
Use it when check_task_status shows a long-running task and you want to see how it is moving; it does not make the task go faster.`,
		returns[api.ProgressResponse](), readOnly(), props(taskIDArg,
			mcp.WithInteger("limit", mcp.Min(1), mcp.Max(1000), mcp.Description("Most updates to return. Default 100.")))),
		anyRole, s.getTaskProgress)

	s.add(tool("cancel_task", "Cancel a task",
		`Cancel a task you no longer need. A queued task is canceled at once (status canceled, a task.canceled receipt discharges its obligation). A task a worker is running gets cancel_requested true (a task.cancel_requested receipt to its worker records that you asked and why) and stops at the worker's next heartbeat.
Canceling twice is harmless; canceling a task that already succeeded or failed is a conflict error.`,
		returns[host.Task](), writes(true, true), props(taskIDArg,
			mcp.WithString("reason", mcp.MaxLength(1000), mcp.Description("Why, for the ledger (optional).")))),
		agentRoles, s.cancelTask)

	s.add(tool("list_active_tasks", "List your active tasks",
		`List your tasks that are still in flight (waiting, queued or leased), oldest first (the order you queued them; page on with cursor), with type, status, priority, created_at and progress. Pass status to list other states (e.g. ["succeeded"] to find results waiting for you).
Use it to get an overview at the start of a session; use check_task_status for details of one task.`,
		returns[TaskList](), readOnly(), props(
			mcp.WithString("task_type", mcp.Description("Only tasks of this type.")),
			mcp.WithString("recipient_ai", mcp.Description("Only tasks addressed to this recipient.")),
			mcp.WithArray("status", mcp.WithStringEnumItems([]string{"waiting", "queued", "scheduled", "leased", "succeeded", "canceled", "dead_letter", "archived"}),
				mcp.Description("States to list. Default [\"waiting\", \"queued\", \"leased\"].")),
			mcp.WithInteger("limit", mcp.Min(1), mcp.Max(500), mcp.Description("Page size. Default 100.")),
			mcp.WithString("cursor", mcp.Description("The cursor of the previous page, to read the next one.")),
		)),
		anyRole, s.listActiveTasks)

	s.add(tool("fetch_task_result", "Fetch a task's result",
		`Fetch the result of a succeeded task from its result channel (inline, file, …).
Returns channel, result_pointer, content (the payload when it is JSON; content_base64 otherwise), checksum_valid (false means the payload was altered), summary, metadata and artifacts.
A task that has not succeeded yet is a conflict error: check_task_status first. A result that was archived and whose payload its channel released is a not_found error saying when it was archived. After you have used the result, call archive_task_result.`,
		returns[api.ResultResponse](), readOnly(), props(taskIDArg)),
		anyRole, s.fetchTaskResult)

	s.add(tool("archive_task_result", "Archive a task's result",
		`Mark a succeeded task's result as handled: the result channel archives or deletes the payload and the task records archived_at. Call it after fetch_task_result once you have stored what you need (for example in your memory). Archiving twice is harmless.
While a task queued after this one (its after list) has not finished, a result the channel would delete is not archived: a conflict error names the first such task; archive it after they finish. Once archived, no task may be queued after this one.`,
		returns[ArchiveResult](), writes(true, true), props(taskIDArg)),
		agentRoles, s.archiveTaskResult)

	s.add(tool("list_open_obligations", "List open obligations (session start)",
		`Call this first in a new session. It lists every open obligation of yours from the receipt ledger: what you are owed (role obligee, e.g. a task.assigned receipt for each task you queued that has not completed, failed or been canceled) and what you owe (role obligor, e.g. tasks a worker accepted).
Each entry has receipt_id, receipt_type, obligor, obligee, task_id and created_at; owed_to_you and you_owe count them. For each task_id, call check_task_status to decide what to do. An obligation that disappears was discharged (completed, failed or canceled).`,
		returns[ObligationsResult](), readOnly(), props(
			mcp.WithString("role", mcp.Enum("obligor", "obligee"), mcp.Description("obligee: only what you are owed; obligor: only what you owe. Default both.")),
			mcp.WithInteger("limit", mcp.Min(1), mcp.Max(500), mcp.Description("Page size. Default 100.")),
			mcp.WithString("cursor", mcp.Description("The cursor of the previous page, to read the next one.")),
		)),
		anyRole, s.listOpenObligations)

	s.add(tool("get_receipt", "Get a receipt",
		`Read one receipt of the ledger by id (receipt ids start with "R-"; queue_task returns one, check_task_status shows assign_receipt_id). Returns its type, from, to, task_id, parents, body, created_at, hash, and terminated_by when the obligation it created has been discharged.`,
		returns[api.ReceiptResponse](), readOnly(), props(mcp.WithString("receipt_id", mcp.Required(), mcp.Description("The receipt id.")))),
		anyRole, s.getReceipt)

	s.add(tool("get_receipt_chain", "Get a receipt's chain",
		`Walk from a receipt up through the receipts it answers (its parents), nearest first, each with depth and terminated_by. Use it to see the provenance of an outcome, e.g. from a task.completed receipt back to the task.assigned it discharged.`,
		returns[ChainResult](), readOnly(), props(mcp.WithString("receipt_id", mcp.Required(), mcp.Description("The receipt id to start from.")))),
		anyRole, s.getReceiptChain)
}

// queueTaskItem is the JSON Schema of one entry of queue_tasks: an object
// with queue_task's arguments.
func queueTaskItem() map[string]any {
	in := mcp.NewTool("queue_task", queueTaskProps()...).InputSchema
	return map[string]any{"type": "object", "properties": in.Properties, "required": in.Required, "additionalProperties": false}
}

// request is the enqueue request queue_task's arguments make; a not_before
// that is no RFC 3339 time is a bad_request.
func (in QueueTaskArgs) request() (engine.EnqueueRequest, error) {
	r := engine.EnqueueRequest{
		TaskType: in.TaskType, Params: in.Params, Priority: in.Priority, Recipient: in.RecipientAI,
		IdempotencyKey: in.IdempotencyKey, Summary: in.TaskSummary, DelaySeconds: in.DelaySeconds,
		ResourceIntents: in.ResourceIntents, After: in.After, AfterRule: in.AfterRule,
	}
	if in.NotBefore != "" {
		nb, err := time.Parse(time.RFC3339Nano, in.NotBefore)
		if err != nil {
			return r, host.Errorf(host.CodeBadRequest, "not_before %q is not an RFC 3339 date-time (e.g. 2026-12-01T09:00:00Z)", in.NotBefore)
		}
		r.NotBefore = &nb
	}
	return r, nil
}

// QueueTasksEntry is one entry's answer of queue_tasks: the task queue_task
// would have answered with, or its refusal (error, detail).
type QueueTasksEntry struct {
	OK   bool                  `json:"ok"`
	Task *engine.EnqueueResult `json:"task,omitempty"`
	api.BatchEntryError
}

// QueueTasksResult is queue_tasks' answer: one entry per task, in the
// tasks' order.
type QueueTasksResult struct {
	Results   []QueueTasksEntry `json:"results"`
	Succeeded int               `json:"succeeded"`
	Failed    int               `json:"failed"`
	NextStep  string            `json:"next_step"`
}

// queueTasks is queue_tasks: each entry judged and answered as queue_task
// would, the entries run concurrently (those sharing an idempotency key in
// their order), so their writes share the store's group commits. Only a
// malformed call (no tasks, too many, an unknown argument) is refused whole.
func (s *Server) queueTasks(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		Tasks []QueueTaskArgs `json:"tasks"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if len(in.Tasks) == 0 {
		return nil, "", host.Errorf(host.CodeBadRequest, "tasks is required (1 to %d)", api.MaxBatchEnqueue)
	}
	if len(in.Tasks) > api.MaxBatchEnqueue {
		return nil, "", host.Errorf(host.CodeBadRequest, "%d tasks; one call holds at most %d", len(in.Tasks), api.MaxBatchEnqueue)
	}
	out := QueueTasksResult{Results: make([]QueueTasksEntry, len(in.Tasks))}
	refuse := func(i int, err error) {
		out.Results[i] = QueueTasksEntry{BatchEntryError: api.BatchEntryError{Error: host.ErrorCode(err), Detail: host.ErrorDetail(err)}}
		if out.Results[i].Error == host.CodeInternal {
			out.Results[i].Detail = "an internal error occurred; it was logged"
		}
	}
	api.RunBatch(len(in.Tasks), api.BatchParallel, func(i int) string { return in.Tasks[i].IdempotencyKey }, func(i int) {
		t := in.Tasks[i]
		if err := required("task_type", t.TaskType); err != nil {
			refuse(i, err)
			return
		}
		er, err := t.request()
		if err != nil {
			refuse(i, err)
			return
		}
		wctx, cancel := detached(ctx)
		defer cancel()
		res, err := s.eng.Enqueue(wctx, a, er)
		if err != nil {
			if host.ErrorCode(err) == host.CodeInternal {
				s.log.Error("queue_tasks entry failed", "entry", i, "principal", a.Principal, "err", err)
			}
			refuse(i, s.explainType(ctx, a.Tenant, err))
			return
		}
		if res.Task != nil {
			s.watch(res.Task)
		}
		out.Results[i] = QueueTasksEntry{OK: true, Task: res}
	}, func(i int, v any, stack []byte) {
		s.log.Error("queue_tasks entry panic", "entry", i, "panic", fmt.Sprint(v), "stack", string(stack))
		refuse(i, host.Errorf(host.CodeInternal, "panic: %v", v))
	})
	for _, r := range out.Results {
		if r.OK {
			out.Succeeded++
		} else {
			out.Failed++
		}
	}
	out.NextStep = "Continue with your other work now. Keep the task_ids; check back with check_task_status in a later session or start it with list_open_obligations; do not poll in a loop."
	if out.Failed > 0 {
		out.NextStep = "Fix the refused entries (see each one's error and detail) and queue them again; the others are queued. " + out.NextStep
	}
	return out, fmt.Sprintf("Queued %s; %s refused. %s", plural(out.Succeeded, "task", "tasks"), plural(out.Failed, "entry", "entries"), out.NextStep), nil
}

func (s *Server) queueTask(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in QueueTaskArgs
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := required("task_type", in.TaskType); err != nil {
		return nil, "", err
	}
	er, err := in.request()
	if err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.Enqueue(wctx, a, er)
	if err != nil {
		return nil, "", s.explainType(ctx, a.Tenant, err)
	}
	if res.Task != nil {
		s.watch(res.Task)
	}
	next := fmt.Sprintf("Continue with your other work now. Check back with check_task_status(task_id=%q) in about %d seconds or in a later session; do not poll in a loop. %s",
		res.TaskID, res.PollSuggestionSeconds, res.Inbox)
	head := fmt.Sprintf("Queued task %s (%s), status %s.", res.TaskID, in.TaskType, res.Status)
	if res.IsDuplicate {
		head = fmt.Sprintf("Task %s already exists for this idempotency_key (is_duplicate); status %s.", res.TaskID, res.Status)
	}
	return QueueTaskResult{EnqueueResult: res, NextStep: next}, head + " " + next, nil
}

func (s *Server) checkTaskStatus(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	taskID, err := taskIDOf(req)
	if err != nil {
		return nil, "", err
	}
	st, err := s.taskStatus(ctx, a, taskID)
	if err != nil {
		return nil, "", err
	}
	t := st.Task
	text := fmt.Sprintf("Task %s (%s) is %s.", t.ID, t.Type, t.State)
	if t.ProgressPercent != nil || t.ProgressMessage != "" {
		text += " Progress:"
		if t.ProgressPercent != nil {
			text += fmt.Sprintf(" %.0f%%", *t.ProgressPercent)
		}
		if t.ProgressMessage != "" {
			if t.ProgressPercent != nil {
				text += ","
			}
			text += " " + workerWords(t.WorkerID, t.ProgressMessage)
		}
		text += "."
	}
	return st, text + " " + st.NextStep, nil
}

// taskStatus is check_task_status' answer for task id.
func (s *Server) taskStatus(ctx context.Context, a engine.Actor, id string) (*TaskStatus, error) {
	t, err := s.eng.GetTask(ctx, a, id)
	if err != nil {
		return nil, err
	}
	st := &TaskStatus{Task: t, RetryCount: t.Attempts, HasResult: t.State == host.StateSucceeded && t.Result != nil,
		CanRetry: !t.State.Terminal() && t.Attempts < t.MaxRetries}
	st.NextStep = nextStep(t, s.pollSuggestion(ctx, t))
	return st, nil
}

func (s *Server) getTaskProgress(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		TaskID string `json:"task_id"`
		Limit  int    `json:"limit,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := required("task_id", in.TaskID); err != nil {
		return nil, "", err
	}
	if err := nonNegative("limit", in.Limit); err != nil {
		return nil, "", err
	}
	t, ps, err := s.eng.Progress(ctx, a, in.TaskID, in.Limit)
	if err != nil {
		return nil, "", err
	}
	if ps == nil {
		ps = []store.Progress{}
	}
	out := api.ProgressResponse{TaskID: t.ID, Status: t.State, ProgressPercent: t.ProgressPercent, ProgressMessage: t.ProgressMessage, Progress: ps}
	return out, fmt.Sprintf("Task %s is %s; %s reported.", t.ID, t.State, plural(len(ps), "progress update", "progress updates")), nil
}

func (s *Server) cancelTask(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		TaskID string `json:"task_id"`
		Reason string `json:"reason,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := required("task_id", in.TaskID); err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	t, err := s.eng.Cancel(wctx, a, in.TaskID, in.Reason)
	if err != nil {
		return nil, "", err
	}
	text := fmt.Sprintf("Task %s is canceled.", t.ID)
	if t.State == host.StateLeased {
		text = fmt.Sprintf("Task %s is running; cancellation was requested and the worker stops at its next heartbeat.", t.ID)
	}
	return t, text, nil
}

func (s *Server) listActiveTasks(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		TaskType    string   `json:"task_type,omitempty"`
		RecipientAI string   `json:"recipient_ai,omitempty"`
		Status      []string `json:"status,omitempty"`
		Limit       int      `json:"limit,omitempty"`
		Cursor      string   `json:"cursor,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := nonNegative("limit", in.Limit); err != nil {
		return nil, "", err
	}
	f := store.TaskFilter{Recipient: in.RecipientAI, Cursor: in.Cursor, Limit: in.Limit}
	if in.TaskType != "" {
		f.Types = []string{in.TaskType}
	}
	if len(in.Status) == 0 {
		in.Status = []string{string(host.StateWaiting), string(host.StateQueued), string(host.StateScheduled), string(host.StateLeased)}
	}
	for _, st := range in.Status {
		f.States = append(f.States, host.TaskState(st))
	}
	ts, cur, err := s.eng.ListTasks(ctx, a, f)
	if err != nil {
		return nil, "", err
	}
	out := TaskList{Tasks: make([]TaskSummary, 0, len(ts)), Cursor: cur}
	for _, t := range ts {
		out.Tasks = append(out.Tasks, TaskSummary{TaskID: t.ID, TaskType: t.Type, Status: t.State, Priority: t.Priority,
			RecipientAI: t.Recipient, CreatedBy: t.CreatedBy, TaskSummary: t.Summary, CreatedAt: t.CreatedAt,
			ProgressPercent: t.ProgressPercent, ProgressMessage: t.ProgressMessage, CancelRequested: t.CancelRequested})
	}
	text := fmt.Sprintf("%s (%s).", plural(len(ts), "task", "tasks"), strings.Join(in.Status, ", "))
	if cur != "" {
		text += " More remain: call again with cursor."
	}
	return out, text, nil
}

func (s *Server) fetchTaskResult(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	taskID, err := taskIDOf(req)
	if err != nil {
		return nil, "", err
	}
	fr, err := s.eng.FetchResult(ctx, a, taskID)
	if err != nil {
		return nil, "", err
	}
	out := resultResponse(fr)
	text := fmt.Sprintf("Result of task %s", fr.Task.ID)
	if out.Channel != "" {
		text += " from channel " + out.Channel
	}
	text += "."
	if out.Summary != "" {
		text += " Summary: " + workerWords(fr.Task.WorkerID, out.Summary)
	}
	if out.ChecksumValid != nil && !*out.ChecksumValid {
		text += " WARNING: the checksum does not match; the payload may have been altered."
	}
	if out.ArchivedAt == nil {
		text += " Call archive_task_result when you have kept what you need."
	}
	return out, text, nil
}

func (s *Server) archiveTaskResult(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	taskID, err := taskIDOf(req)
	if err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	t, err := s.eng.ArchiveResult(wctx, a, taskID)
	if err != nil {
		return nil, "", err
	}
	out := ArchiveResult{TaskID: t.ID, Status: "archived"}
	if t.Result != nil {
		out.ArchivedAt = t.Result.ArchivedAt
	}
	return out, fmt.Sprintf("The result of task %s is archived.", t.ID), nil
}

func (s *Server) listOpenObligations(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		Role   string `json:"role,omitempty"`
		Limit  int    `json:"limit,omitempty"`
		Cursor string `json:"cursor,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := nonNegative("limit", in.Limit); err != nil {
		return nil, "", err
	}
	obs, cur, err := s.eng.OpenObligations(ctx, a, store.ObligationFilter{Role: in.Role, Limit: in.Limit, Cursor: in.Cursor})
	if err != nil {
		return nil, "", err
	}
	if obs == nil {
		obs = []host.Obligation{}
	}
	out := ObligationsResult{ObligationsResponse: api.ObligationsResponse{
		Server:          api.ServerInfo{Name: "asyncgate", Version: s.cfg.Version, Time: s.eng.Clock().Now().UTC(), Driver: s.eng.Store().Driver()},
		Relationship:    api.Relationship{Tenant: a.Tenant, Principal: a.Principal, Role: in.Role, CallerRole: a.Role},
		OpenObligations: obs, Cursor: cur,
	}}
	for _, o := range obs {
		if o.Obligee == a.Principal {
			out.OwedToYou++
		}
		if o.Obligor == a.Principal {
			out.YouOwe++
		}
	}
	text := fmt.Sprintf("%s: %d owed to you, %d you owe.", plural(len(obs), "open obligation", "open obligations"), out.OwedToYou, out.YouOwe)
	if len(obs) > 0 {
		text += " Call check_task_status for each task_id to decide what to do."
	}
	if cur != "" {
		text += " More remain: call again with cursor."
	}
	return out, text, nil
}

func (s *Server) getReceipt(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		ReceiptID string `json:"receipt_id"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := required("receipt_id", in.ReceiptID); err != nil {
		return nil, "", err
	}
	rc, term, err := s.eng.GetReceipt(ctx, a, in.ReceiptID)
	if err != nil {
		return nil, "", err
	}
	text := fmt.Sprintf("Receipt %s: %s from %s to %s.", rc.ID, rc.Type, rc.From, rc.To)
	switch {
	case term != "":
		text += " Its obligation was discharged by " + term + "."
	case rc.Type.CreatesObligation():
		text += " Its obligation is still open."
	}
	return api.ReceiptResponse{Receipt: rc, TerminatedBy: term}, text, nil
}

func (s *Server) getReceiptChain(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		ReceiptID string `json:"receipt_id"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := required("receipt_id", in.ReceiptID); err != nil {
		return nil, "", err
	}
	links, err := s.eng.Chain(ctx, a, in.ReceiptID)
	if err != nil {
		return nil, "", err
	}
	if links == nil {
		links = []engine.ChainLink{}
	}
	types := make([]string, len(links))
	for i, l := range links {
		types[i] = string(l.Type)
	}
	return ChainResult{ReceiptID: in.ReceiptID, Chain: links},
		fmt.Sprintf("Chain of %s (%s): %s.", in.ReceiptID, plural(len(links), "receipt", "receipts"), strings.Join(types, " ← ")), nil
}

// workerWords is text a worker wrote (a summary, an error, a progress
// message) as a tool's text or a task's statusMessage shows it to a model:
// quoted and attributed to who, the worker (engine.Words), so it cannot pass
// for the gate's words or start a line of its own. who is "" when the gate
// no longer knows which worker wrote it (a task that failed for good no
// longer names its worker): the text is then "the worker"'s.
func workerWords(who, text string) string {
	if who == "" {
		who = "the worker"
	}
	return engine.Words(who, text)
}
