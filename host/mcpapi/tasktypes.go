package mcpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/url"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
)

// TaskTypeURIPrefix starts the URI of a task type's resource:
// asyncgate://task-types/{name}.
const TaskTypeURIPrefix = "asyncgate://task-types/"

// TaskTypeInfo describes a task type to an agent: what the work is, its
// params schema, how failures are retried, where the result goes and how long
// it usually takes. It is list_task_types' row and the content of the
// asyncgate://task-types/{name} resource.
type TaskTypeInfo struct {
	Name        string `json:"task_type"`
	Description string `json:"description,omitempty"`
	// Tool is the tool that queues a task of this type (its name), empty when
	// the type is disabled or its name is taken by a built-in tool.
	Tool                    string                 `json:"tool,omitempty"`
	ResourceURI             string                 `json:"resource_uri"`
	Enabled                 bool                   `json:"enabled"`
	ParamsSchema            json.RawMessage        `json:"params_schema,omitempty"`
	DefaultPriority         int                    `json:"default_priority"`
	MaxRetries              int                    `json:"max_retries"`
	RetryPolicy             engine.RetryPolicyView `json:"retry_policy"`
	ResultChannel           string                 `json:"result_channel"`
	EstimatedRuntimeSeconds int                    `json:"estimated_runtime_seconds"`
	PollSuggestionSeconds   int                    `json:"poll_suggestion_seconds"`
	LeaseSeconds            int                    `json:"lease_seconds"`
	TimeoutSeconds          int                    `json:"timeout_seconds"`
	MaxPayloadBytes         int64                  `json:"max_payload_bytes"`
}

// TaskTypeList is list_task_types' answer.
type TaskTypeList struct {
	TaskTypes []TaskTypeInfo `json:"task_types"`
}

// TaskTypeCallResult is what a task-type tool answers: called plainly, at
// once, with the queue acknowledgement (queued); called as an MCP task,
// through tasks/result, with the task's result fetched through its channel
// (result).
type TaskTypeCallResult struct {
	TaskID string              `json:"task_id"`
	Status string              `json:"status"`
	Queued *QueueTaskResult    `json:"queued,omitempty"`
	Result *api.ResultResponse `json:"result,omitempty"`
}

func (s *Server) taskTypeInfo(tt *host.TaskType) TaskTypeInfo {
	info := TaskTypeInfo{
		Name: tt.Name, Description: tt.Description, ResourceURI: TaskTypeURIPrefix + tt.Name, Enabled: tt.Enabled,
		ParamsSchema: tt.ParamsSchema, DefaultPriority: tt.DefaultPriority, MaxRetries: tt.DefaultMaxRetries,
		RetryPolicy: s.eng.RetryPolicy(tt), ResultChannel: tt.DefaultResultChannel,
		EstimatedRuntimeSeconds: tt.EstimatedRuntimeSeconds, PollSuggestionSeconds: tt.PollSuggestionSeconds,
		LeaseSeconds: tt.LeaseSeconds, TimeoutSeconds: tt.DefaultTimeoutSeconds, MaxPayloadBytes: tt.MaxPayloadBytes,
	}
	if s.isTypeTool(tt) {
		info.Tool = tt.Name
	}
	return info
}

// isTypeTool says whether tt is served as a tool: enabled, and its name is
// not one of the built-in tools (which keep their name).
func (s *Server) isTypeTool(tt *host.TaskType) bool {
	_, builtin := s.roles[tt.Name]
	return tt.Enabled && !builtin
}

// typeToolOutput is the output schema every task-type tool declares.
var typeToolOutput = OutputSchema[TaskTypeCallResult]()

// typeTool is the tool that queues a task of type tt.
func typeTool(tt *host.TaskType) mcp.Tool {
	desc := strings.TrimSpace(tt.Description)
	if desc == "" {
		desc = fmt.Sprintf("Queue a %s task.", tt.Name)
	}
	desc += fmt.Sprintf(`

Runs in the background on a worker of AsyncGate (task type %q; typically about %d s; up to %d retries; result through the %s channel). The arguments are the task's params.
Call it as an MCP task (task-augmented tools/call) to get a task at once, then tasks/get and tasks/result; the task survives disconnects and gate restarts. Called plainly it queues the task and answers with task_id and status: continue with other work and check back with check_task_status in about %d s, then fetch_task_result.`,
		tt.Name, tt.EstimatedRuntimeSeconds, tt.DefaultMaxRetries, tt.DefaultResultChannel, tt.PollSuggestionSeconds)
	t := mcp.Tool{
		Name: tt.Name, Description: desc, RawOutputSchema: typeToolOutput,
		Annotations: mcp.ToolAnnotation{Title: "Queue " + tt.Name},
		Execution:   &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional},
	}
	for _, o := range writes(false, false) {
		o(&t)
	}
	t.Annotations.Title = "Queue " + tt.Name
	t.RawInputSchema = inputSchema(tt.ParamsSchema)
	return t
}

// inputSchema is a params schema as a tool's input schema, which must be an
// object schema: a schema that is not one (or none) accepts any object.
func inputSchema(params json.RawMessage) json.RawMessage {
	var head struct {
		Type any `json:"type"`
	}
	if len(params) > 0 && json.Unmarshal(params, &head) == nil && head.Type == "object" {
		return params
	}
	return json.RawMessage(`{"type":"object"}`)
}

// typeTools lists the tools of the enabled task types of a's tenant (agents
// and admins only: workers do not queue).
func (s *Server) typeTools(ctx context.Context, a engine.Actor) []mcp.Tool {
	if a.Role != engine.RoleAgent && a.Role != engine.RoleAdmin {
		return nil
	}
	tts, err := s.eng.ListTaskTypes(ctx, a.Tenant)
	if err != nil {
		s.log.Warn("mcp: listing task types", "tenant", a.Tenant, "err", err)
		return nil
	}
	out := make([]mcp.Tool, 0, len(tts))
	for _, tt := range tts {
		if s.isTypeTool(tt) {
			out = append(out, typeTool(tt))
		}
	}
	return out
}

// typesFingerprint identifies the tools a tenant's task types make, to see
// when an operator added, changed or disabled one.
func typesFingerprint(tts []*host.TaskType) string {
	h := fnv.New64a()
	for _, tt := range tts {
		fmt.Fprintf(h, "%s\x00%t\x00%s\x00", tt.Name, tt.Enabled, tt.UpdatedAt.UTC().Format("2006-01-02T15:04:05.999999999"))
	}
	return fmt.Sprintf("%d:%x", len(tts), h.Sum64())
}

// validTypes names the enabled task types of tenant, for an unknown_task_type error.
func (s *Server) validTypes(ctx context.Context, tenant string) string {
	tts, err := s.eng.ListTaskTypes(ctx, tenant)
	if err != nil {
		return ""
	}
	var names []string
	for _, tt := range tts {
		if tt.Enabled {
			names = append(names, tt.Name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "No task type is enabled in your tenant."
	}
	return "Valid task types: " + strings.Join(names, ", ") + "."
}

// explainType adds the valid task types to an unknown_task_type or
// task_type_disabled error.
func (s *Server) explainType(ctx context.Context, tenant string, err error) error {
	switch code := host.ErrorCode(err); code {
	case host.CodeUnknownTaskType, host.CodeTaskTypeDisabled:
		return host.Errorf(code, "%s. %s", strings.TrimSuffix(host.ErrorDetail(err), "."), s.validTypes(ctx, tenant))
	}
	return err
}

// taskTypeTools registers list_task_types and the task-type resources.
func (s *Server) taskTypeTools() {
	s.add(tool("list_task_types", "List the task types you can queue",
		`List the kinds of work you can hand off: every task type of your tenant with its description, params_schema (what params it takes), retry_policy, result_channel, estimated_runtime_seconds (typical duration) and poll_suggestion_seconds. Each enabled type is also a tool of the same name (see tool) that queues it; queue_task takes its name as task_type. Each has a resource at resource_uri.`,
		returns[TaskTypeList](), readOnly(), props(
			mcp.WithBoolean("include_disabled", mcp.Description("Also list disabled types (they cannot be queued). Default false.")),
		)),
		anyRole, s.listTaskTypes)

	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(TaskTypeURIPrefix+"{name}", "task type",
		mcp.WithTemplateDescription("A task type of your tenant: description, params schema, retry policy, result channel and typical duration (as list_task_types shows it)."),
		mcp.WithTemplateMIMEType("application/json")),
		s.readTemplate)
}

func (s *Server) listTaskTypes(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		IncludeDisabled bool `json:"include_disabled,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	tts, err := s.eng.ListTaskTypes(ctx, a.Tenant)
	if err != nil {
		return nil, "", err
	}
	out := TaskTypeList{TaskTypes: make([]TaskTypeInfo, 0, len(tts))}
	names := make([]string, 0, len(tts))
	for _, tt := range tts {
		if tt.Enabled || in.IncludeDisabled {
			out.TaskTypes = append(out.TaskTypes, s.taskTypeInfo(tt))
			names = append(names, tt.Name)
		}
	}
	text := fmt.Sprintf("%s: %s.", plural(len(names), "task type", "task types"), strings.Join(names, ", "))
	if len(names) == 0 {
		text = "No task types: ask an operator to register one."
	}
	return out, text, nil
}

func (s *Server) readTaskType(ctx context.Context, a engine.Actor, uri string) ([]mcp.ResourceContents, error) {
	name, err := url.PathUnescape(strings.TrimPrefix(uri, TaskTypeURIPrefix))
	if err != nil || name == "" || strings.Contains(name, "/") {
		return nil, host.Errorf(host.CodeBadRequest, "want %s{name}", TaskTypeURIPrefix)
	}
	tt, err := s.eng.GetTaskType(ctx, a.Tenant, name)
	if err != nil {
		return nil, s.explainType(ctx, a.Tenant, err)
	}
	return jsonResource(uri, s.taskTypeInfo(tt))
}

// jsonResource is v as the JSON text of the resource uri.
func jsonResource(uri string, v any) ([]mcp.ResourceContents, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, host.WrapError(host.CodeInternal, err, "encoding the resource")
	}
	return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: "application/json", Text: string(b)}}, nil
}

// callTypeTool queues a task of type tt with the call's arguments as params.
func (s *Server) callTypeTool(ctx context.Context, a engine.Actor, tt *host.TaskType, args json.RawMessage) (*engine.EnqueueResult, error) {
	params := json.RawMessage(strings.TrimSpace(string(args)))
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage("{}")
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.Enqueue(wctx, a, engine.EnqueueRequest{TaskType: tt.Name, Params: params})
	if err != nil {
		return nil, s.explainType(ctx, a.Tenant, err)
	}
	return res, nil
}

// queuedResult is a plain call's answer: the acknowledgement.
func queuedResult(tt *host.TaskType, res *engine.EnqueueResult) *mcp.CallToolResult {
	next := fmt.Sprintf("Continue with your other work now. Check back with check_task_status(task_id=%q) in about %d seconds or in a later session; do not poll in a loop.",
		res.TaskID, res.PollSuggestionSeconds)
	out := TaskTypeCallResult{TaskID: res.TaskID, Status: res.Status, Queued: &QueueTaskResult{EnqueueResult: res, NextStep: next}}
	return result(out, fmt.Sprintf("Queued task %s (%s), status %s. %s", res.TaskID, tt.Name, res.Status, next))
}
