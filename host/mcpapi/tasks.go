package mcpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// MCP Tasks (spec 2025-11-25, basic/utilities/tasks), served durably: an
// MCP task is a gate task (taskId = task_id) and belongs to the key's
// principal, not to the session, so a client finds its tasks again after a
// reconnect or a gate restart. mcp-go keeps tasks in memory per session and
// has no seam for a store, so the task methods (and tools/call of the
// task-type tools, resources/subscribe, and resources/read of the gate's
// resources, so that a caller's error keeps its code) are answered here,
// ahead of mcp-go, by handle; everything else goes to mcp-go unchanged.

// TaskURIPrefix starts the URI of a task's resource: asyncgate://tasks/{id}.
const TaskURIPrefix = "asyncgate://tasks/"

// ReceiptURIPrefix starts the URI of a receipt chain's resource:
// asyncgate://receipts/{id}/chain.
const ReceiptURIPrefix = "asyncgate://receipts/"

// DefaultTaskResultWait bounds how long tasks/result waits for a task to end.
const DefaultTaskResultWait = 25 * time.Second

// resultFetchTimeout bounds tasks/result's read of a finished task's result,
// which comes after (and is not bounded by) the wait.
const resultFetchTimeout = 30 * time.Second

// Error codes in the structured content of a tasks/result tool error.
const (
	CodeTaskFailed   = "task_failed"   // the task ended as a dead letter; detail is its error
	CodeTaskCanceled = "task_canceled" // the task was canceled
)

// JSON-RPC error codes.
const (
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	rpcInternal       = -32603
	rpcServerError    = -32000
)

// relatedTask is the _meta key tying a message to its task.
const relatedTask = "io.modelcontextprotocol/related-task"

type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// rpcError is a JSON-RPC error answer.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func rpcReply(id json.RawMessage, result any) []byte {
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
	if err != nil {
		return rpcFail(id, &rpcError{Code: rpcInternal, Message: "encoding the result: " + err.Error()})
	}
	return b
}

func rpcFail(id json.RawMessage, e *rpcError) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": e})
	return b
}

// errFor maps an engine error to a JSON-RPC error: not found and conflicts
// are invalid params (the spec's answer for an unknown taskId or a task
// already ended); the data carries the gate's code and detail.
func errFor(err error) *rpcError {
	code, detail := host.ErrorCode(err), host.ErrorDetail(err)
	rc := rpcInternal
	switch code {
	case host.CodeNotFound, host.CodeConflict, host.CodeBadRequest, host.CodeInvalidParams,
		host.CodeUnknownTaskType, host.CodeTaskTypeDisabled, host.CodeTooLarge, host.CodeIdempotencyConflict, host.CodeInvalidResource,
		host.CodeInvalidWorkflow, host.CodeUnknownStep, host.CodeDuplicateStep, host.CodeWorkflowCycle, host.CodeTooManySteps:
		rc = rpcInvalidParams
	case host.CodeInternal:
		detail = "an internal error occurred; it was logged"
	default:
		rc = rpcServerError
	}
	return &rpcError{Code: rc, Message: code + ": " + detail, Data: errorBody(err, code, detail)}
}

// handle answers the methods served here. It reports false for any other
// message, which then goes to mcp-go.
func (s *Server) handle(ctx context.Context, sess *session, raw []byte) (out []byte, handled bool) {
	var m rpcMessage
	if err := json.Unmarshal(raw, &m); err != nil || len(m.ID) == 0 {
		return nil, false // malformed, a batch or a notification: mcp-go answers
	}
	if messageRefuses(m, raw) {
		return nil, false // mcp-go refuses it (checks.go)
	}
	defer func() { // as mcp-go's WithRecovery: a bug answers an error, never ends a stdio session
		if r := recover(); r != nil {
			s.log.Error("mcp: panic answering a request", "method", m.Method, "panic", r)
			out, handled = rpcFail(m.ID, &rpcError{Code: rpcInternal, Message: "internal_error: an internal error occurred; it was logged"}), true
		}
	}()
	ctx, done := s.bound(ctx, sess)
	defer done()
	a := sess.actor
	var res any
	var rerr *rpcError
	switch m.Method {
	case "tools/call":
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			Task      *mcp.TaskParams `json:"task"`
		}
		if json.Unmarshal(m.Params, &p) != nil {
			return nil, false
		}
		if roles, builtin := s.roles[p.Name]; builtin {
			if p.Task == nil || !slices.Contains(roles, a.Role) {
				// mcp-go answers: the call itself, or "tool not found" to
				// a key that may not use the tool (as tools/list hides it).
				return nil, false
			}
			if p.Name == "submit_workflow" {
				res, rerr = s.callWorkflowAsTask(ctx, a, p.Arguments)
				break
			}
			rerr = &rpcError{Code: rpcMethodNotFound, Message: fmt.Sprintf("tool %s does not run as a task (its execution.taskSupport is forbidden): call it without task", p.Name)}
			break
		}
		if a.Role != engine.RoleAgent && a.Role != engine.RoleAdmin {
			return nil, false
		}
		tt, err := s.eng.GetTaskType(ctx, a.Tenant, p.Name)
		if err != nil || !s.isTypeTool(tt) {
			return nil, false // mcp-go answers "tool not found"
		}
		res, rerr = s.callType(ctx, sess, tt, p.Arguments, p.Task != nil)
	case "tasks/get":
		res, rerr = s.tasksGet(ctx, sess, m.Params)
	case "tasks/result":
		res, rerr = s.tasksResult(ctx, a, m.Params)
	case "tasks/list":
		res, rerr = s.tasksList(ctx, a, m.Params)
	case "tasks/cancel":
		res, rerr = s.tasksCancel(ctx, a, m.Params)
	case "resources/read":
		var ok bool
		if res, rerr, ok = s.resourcesRead(ctx, a, m.Params); !ok {
			return nil, false // not one of the gate's resources: mcp-go answers
		}
	case "resources/subscribe":
		res, rerr = s.subscribe(ctx, sess, m.Params, true)
	case "resources/unsubscribe":
		res, rerr = s.subscribe(ctx, sess, m.Params, false)
	default:
		return nil, false
	}
	if rerr != nil {
		return rpcFail(m.ID, rerr), true
	}
	if modernRequest(m.Params) {
		res = s.decorate(res)
	}
	return rpcReply(m.ID, res), true
}

// modernRequest says whether params declare protocol 2026-07-28 or later in
// their _meta, as mcp-go tells the protocol eras apart; a request of an
// older version (its version fixed at initialize) declares none.
func modernRequest(params json.RawMessage) bool {
	var p struct {
		Meta map[string]any `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return false
	}
	v, _ := p.Meta[mcp.MetaKeyProtocolVersion].(string)
	return mcp.IsModernProtocol(v)
}

// serverInfo is the server's identity as mcp-go states it (initialize,
// _meta of a 2026-07-28 result).
func (s *Server) serverInfo() mcp.Implementation {
	return mcp.Implementation{Name: "asyncgate", Version: s.cfg.Version}
}

// decorate adds to res, the answer handle gives to a request of protocol
// 2026-07-28 or later, what mcp-go's decoration adds to its own answers for
// those versions: resultType "complete" and the server's identity in _meta
// (serverInfo), each unless res has it already, beside res's own _meta.
// mcp-go adds cache hints to list and read results of tools, prompts and
// resources as well; of those the gate answers only resources/read, and
// resourcesRead sets them. Answers to older versions are not decorated.
func (s *Server) decorate(res any) any {
	b, err := json.Marshal(res)
	if err != nil {
		return res
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil || m == nil {
		return res // not an object: nothing to add to
	}
	if _, ok := m["resultType"]; !ok {
		m["resultType"], _ = json.Marshal(mcp.ResultTypeComplete)
	}
	var meta map[string]json.RawMessage
	if raw, ok := m["_meta"]; ok && json.Unmarshal(raw, &meta) != nil {
		return res
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	if _, ok := meta[mcp.MetaKeyServerInfo]; !ok {
		meta[mcp.MetaKeyServerInfo], _ = json.Marshal(s.serverInfo())
	}
	m["_meta"], _ = json.Marshal(meta)
	return m
}

// callType serves tools/call of a task-type tool: it queues the task and
// answers with the acknowledgement, or, task-augmented, with the MCP task.
func (s *Server) callType(ctx context.Context, sess *session, tt *host.TaskType, args json.RawMessage, asTask bool) (any, *rpcError) {
	res, err := s.callTypeTool(ctx, sess.actor, tt, args)
	if err != nil {
		if asTask {
			return nil, errFor(err)
		}
		return toolError(err), nil
	}
	if res.Task != nil {
		s.watch(res.Task)
	}
	if !asTask {
		return queuedResult(tt, res), nil
	}
	t := res.Task
	if t == nil {
		if t, err = s.eng.PeekTask(ctx, sess.actor, res.TaskID); err != nil {
			return nil, errFor(err)
		}
	}
	return map[string]any{
		"task": mcpTask(t, res.PollSuggestionSeconds),
		"_meta": map[string]any{"io.modelcontextprotocol/model-immediate-response": fmt.Sprintf(
			"Queued task %s (%s). It runs in the background and survives disconnects; its result comes through tasks/result.", t.ID, tt.Name)},
	}, nil
}

// mapStatus is the MCP status of a gate task and a short status message.
// What a worker wrote (its summary, error or progress message) is quoted
// as its words (workerWords), never repeated raw.
func mapStatus(t *host.Task) (mcp.TaskStatus, string) {
	if t.State == host.StateArchived {
		// Past its retention: the MCP task keeps how it ended.
		as := host.FinishedAs(t)
		st, msg := mapStatus(&host.Task{State: as, WorkerID: t.WorkerID, Result: t.Result, DeadReason: t.DeadReason, LastError: t.LastError,
			CancelRequestedBy: t.CancelRequestedBy, CancelReason: t.CancelReason})
		return st, msg + " (archived)"
	}
	switch t.State {
	case host.StateSucceeded:
		msg := "succeeded"
		if t.Result != nil && t.Result.Summary != "" {
			msg += ": " + workerWords(t.WorkerID, t.Result.Summary)
		}
		return mcp.TaskStatusCompleted, msg
	case host.StateCanceled:
		return mcp.TaskStatusCancelled, "canceled" + askedBy(t)
	case host.StateDeadLetter:
		msg := "failed"
		if t.DeadReason != "" {
			msg += " (" + t.DeadReason + ")"
		}
		if t.LastError != "" {
			msg += ": " + workerWords(t.WorkerID, t.LastError)
		}
		return mcp.TaskStatusFailed, msg
	}
	if t.State.Terminal() {
		return mcp.TaskStatusFailed, string(t.State)
	}
	msg := string(t.State)
	if t.State == host.StateLeased && t.WorkerID != "" {
		msg = "running on " + t.WorkerID
	}
	if t.ProgressPercent != nil {
		msg += fmt.Sprintf(", %.0f%%", *t.ProgressPercent)
	}
	if t.ProgressMessage != "" {
		msg += ": " + workerWords(t.WorkerID, t.ProgressMessage)
	}
	if t.CancelRequested {
		msg += " (cancellation requested" + askedBy(t) + ")"
	}
	return mcp.TaskStatusWorking, msg
}

// askedBy is who asked for t's cancel and why, when a read of the task
// filled them: " by agent.a: agent.a wrote: "…"", the reason quoted as
// the words of the principal who gave it (the gate's own, such as a
// dependency's end, unquoted).
func askedBy(t *host.Task) string {
	if t.CancelRequestedBy == "" {
		return ""
	}
	s := " by " + t.CancelRequestedBy
	switch {
	case t.CancelReason == "":
	case t.CancelRequestedBy == engine.GatePrincipal:
		s += ": " + t.CancelReason
	default:
		s += ": " + engine.Words(t.CancelRequestedBy, t.CancelReason)
	}
	return s
}

// mcpTask is t as an MCP task. Gate tasks do not expire (ttl null); poll is
// the task type's poll suggestion in seconds.
func mcpTask(t *host.Task, poll int) mcp.Task {
	st, msg := mapStatus(t)
	out := mcp.Task{TaskId: t.ID, Status: st, StatusMessage: msg,
		CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano), LastUpdatedAt: t.UpdatedAt.UTC().Format(time.RFC3339Nano)}
	if !st.IsTerminal() {
		if poll <= 0 {
			poll = host.DefaultPollSuggestionSeconds
		}
		ms := int64(poll) * 1000
		out.PollInterval = &ms
	}
	return out
}

// maxTaskIDParam bounds the taskId of tasks/get, tasks/result and
// tasks/cancel: task and workflow ids are under 40 characters.
const maxTaskIDParam = 200

func taskIDParam(params json.RawMessage) (string, *rpcError) {
	var p struct {
		TaskID json.RawMessage `json:"taskId"`
	}
	if err := json.Unmarshal(params, &p); err != nil || len(p.TaskID) == 0 || string(p.TaskID) == "null" {
		return "", &rpcError{Code: rpcInvalidParams, Message: "taskId is required"}
	}
	var id string
	if err := json.Unmarshal(p.TaskID, &id); err != nil {
		return "", &rpcError{Code: rpcInvalidParams, Message: "taskId must be a string (the id tasks/list or a task-augmented call answered)"}
	}
	if strings.TrimSpace(id) == "" {
		return "", &rpcError{Code: rpcInvalidParams, Message: "taskId is required"}
	}
	if host.LongerThan(id, maxTaskIDParam) {
		// No id the gate makes is near this long; an answer quoting it
		// would carry the caller's bytes back twice.
		return "", &rpcError{Code: rpcInvalidParams, Message: fmt.Sprintf("taskId is longer than %d characters: no task has such an id", maxTaskIDParam)}
	}
	return id, nil
}

func (s *Server) tasksGet(ctx context.Context, sess *session, params json.RawMessage) (any, *rpcError) {
	id, rerr := taskIDParam(params)
	if rerr != nil {
		return nil, rerr
	}
	if isWorkflowID(id) {
		return s.workflowTaskGet(ctx, sess.actor, id)
	}
	t, err := s.eng.PeekTask(ctx, sess.actor, id)
	if err != nil {
		return nil, errFor(err)
	}
	s.watch(t)
	return mcpTask(t, s.pollSuggestion(ctx, t)), nil
}

func (s *Server) tasksList(ctx context.Context, a engine.Actor, params json.RawMessage) (any, *rpcError) {
	var p struct {
		Cursor string `json:"cursor"`
	}
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, &rpcError{Code: rpcInvalidParams, Message: "params: " + err.Error()}
		}
	}
	ts, cur, err := s.eng.ListTasks(ctx, a, store.TaskFilter{Cursor: p.Cursor, Limit: 100})
	if err != nil {
		return nil, errFor(err)
	}
	// A list leaves out who asked for a cancel and why; the status
	// messages say it, as tasks/get's do.
	if err := s.eng.FillCancels(ctx, a, ts); err != nil {
		return nil, errFor(err)
	}
	out := make([]mcp.Task, 0, len(ts))
	for _, t := range ts {
		out = append(out, mcpTask(t, s.pollSuggestion(ctx, t)))
	}
	res := map[string]any{"tasks": out}
	if cur != "" {
		res["nextCursor"] = cur
	}
	return res, nil
}

func (s *Server) tasksCancel(ctx context.Context, a engine.Actor, params json.RawMessage) (any, *rpcError) {
	id, rerr := taskIDParam(params)
	if rerr != nil {
		return nil, rerr
	}
	if isWorkflowID(id) {
		return s.workflowTaskCancel(ctx, a, id)
	}
	if a.Role != engine.RoleAgent && a.Role != engine.RoleAdmin {
		return nil, &rpcError{Code: rpcInvalidParams, Message: "forbidden: canceling needs an agent or admin key"}
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	t, changed, err := s.eng.CancelChanged(wctx, a, id, "canceled with MCP tasks/cancel")
	if err != nil {
		return nil, errFor(err)
	}
	// The engine keeps canceling twice a no-op (the REST route is
	// idempotent); the spec makes canceling a task already in a terminal
	// status an error, as for a succeeded or dead-letter task.
	if !changed && t.State.Terminal() {
		return nil, errFor(host.Errorf(host.CodeConflict, "task %s is already %s and can no longer be canceled", id, t.State))
	}
	// Who asked and why, as tasks/get says it (the ledger's words): the
	// statusMessage names them from this answer on.
	if err := s.eng.FillCancels(wctx, a, []*host.Task{t}); err != nil {
		return nil, errFor(err)
	}
	s.watch(t)
	return mcpTask(t, s.pollSuggestion(ctx, t)), nil
}

// tasksResult waits, at most TaskResultWait, for the task to end, then
// answers with what the task-type tool's call produced: the result fetched
// through its channel, or a tool error for a failed or canceled task.
func (s *Server) tasksResult(ctx context.Context, a engine.Actor, params json.RawMessage) (any, *rpcError) {
	id, rerr := taskIDParam(params)
	if rerr != nil {
		return nil, rerr
	}
	if isWorkflowID(id) {
		return s.workflowTaskResult(ctx, a, id)
	}
	wctx, cancel := context.WithTimeout(ctx, untilExpiry(ctx, s.cfg.TaskResultWait))
	defer cancel()
	stop := context.AfterFunc(s.drain, cancel)
	defer stop()
	var t *host.Task
	for {
		var err error
		if t, err = s.eng.PeekTask(wctx, a, id); err != nil {
			if wctx.Err() != nil {
				break
			}
			return nil, errFor(err)
		}
		if t.State.Terminal() {
			break
		}
		select {
		case <-wctx.Done():
		case <-time.After(s.cfg.WatchInterval / 2):
			continue
		}
		break
	}
	if t == nil || !t.State.Terminal() {
		return nil, &rpcError{Code: rpcServerError,
			Message: fmt.Sprintf("task %s is still working; call tasks/result again, or tasks/get after its pollInterval", id),
			Data:    map[string]any{"taskId": id, "status": mcp.TaskStatusWorking}}
	}
	var out *mcp.CallToolResult
	switch as := host.FinishedAs(t); {
	case t.State == host.StateArchived && as == host.StateSucceeded:
		// Past its retention: the payload is purged, what is left of the
		// result (summary, checksum, times) is the answer.
		rr := api.ResultResponse{TaskID: t.ID}
		if r := t.Result; r != nil {
			rr.ResultPointer, rr.ResultChecksum, rr.Summary, rr.Metadata = r.Pointer, r.Checksum, r.Summary, r.Metadata
			rr.Artifacts, rr.DeliveryProof, rr.ArchivedAt = r.Artifacts, r.DeliveryProof, r.ArchivedAt
		}
		text := fmt.Sprintf("Task %s (%s) succeeded; it is archived, past its retention: its payload was purged.", t.ID, t.Type)
		if rr.Summary != "" {
			text += " Summary: " + workerWords(t.WorkerID, rr.Summary)
		}
		out = result(TaskTypeCallResult{TaskID: t.ID, Status: string(t.State), Result: &rr}, text)
	case as == host.StateCanceled:
		out = toolError(host.Errorf(CodeTaskCanceled, "task %s was canceled", t.ID))
	case t.State == host.StateSucceeded:
		// The read gets a bound of its own, not what is left of the wait: a
		// task that ended just before it would otherwise answer an error.
		fctx, cancel := context.WithTimeout(ctx, resultFetchTimeout)
		fr, err := s.eng.FetchResult(fctx, a, id)
		cancel()
		if err != nil {
			out = toolError(err)
			break
		}
		rr := resultResponse(fr)
		text := fmt.Sprintf("Task %s (%s) succeeded.", t.ID, t.Type)
		if rr.Summary != "" {
			text += " Summary: " + workerWords(fr.Task.WorkerID, rr.Summary)
		}
		if rr.ChecksumValid != nil && !*rr.ChecksumValid {
			text += " WARNING: the checksum does not match; the payload may have been altered."
		}
		out = result(TaskTypeCallResult{TaskID: t.ID, Status: string(t.State), Result: &rr}, text)
	default:
		_, msg := mapStatus(t)
		out = toolError(host.Errorf(CodeTaskFailed, "task %s %s", t.ID, msg))
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, &rpcError{Code: rpcInternal, Message: "encoding the result"}
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["_meta"] = map[string]any{relatedTask: map[string]any{"taskId": t.ID}}
	return m, nil
}

// resultResponse is a fetched result as fetch_task_result shows it.
func resultResponse(fr *engine.FetchedResult) api.ResultResponse {
	out := api.ResultResponse{TaskID: fr.Task.ID, Channel: fr.Channel, ResultPointer: fr.Pointer, ChecksumValid: fr.ChecksumValid}
	if r := fr.Task.Result; r != nil {
		out.ResultChecksum, out.Summary, out.Metadata = r.Checksum, r.Summary, r.Metadata
		out.Artifacts, out.DeliveryProof, out.ArchivedAt = r.Artifacts, r.DeliveryProof, r.ArchivedAt
	}
	if len(fr.Content) > 0 {
		if json.Valid(fr.Content) {
			out.Content = fr.Content
		} else {
			out.ContentBase64 = base64.StdEncoding.EncodeToString(fr.Content)
		}
	}
	return out
}

// subscribe serves resources/subscribe and resources/unsubscribe. Tasks
// (asyncgate://tasks/{id}) and leased resources
// (asyncgate://resource-leases/{resource}, resourcewatch.go) change, so only
// they can be subscribed to. A URI holding a control character is refused
// before its id is looked up (refuseControl).
func (s *Server) subscribe(ctx context.Context, sess *session, params json.RawMessage, on bool) (any, *rpcError) {
	var p struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.URI == "" {
		return nil, &rpcError{Code: rpcInvalidParams, Message: "uri is required"}
	}
	if !on {
		unsubscribe(sess, p.URI)
		return struct{}{}, nil
	}
	if err := refuseControl(p.URI); err != nil {
		return nil, errFor(err)
	}
	if name, ok, err := resourceLeaseURI(p.URI); ok {
		if err != nil {
			return nil, errFor(err)
		}
		return s.subscribeResource(sess, p.URI, name)
	}
	id, ok := taskURI(p.URI)
	if !ok {
		return nil, subscribeURIError()
	}
	t, err := s.eng.PeekTask(ctx, sess.actor, id)
	if err != nil {
		return nil, errFor(err)
	}
	sess.mu.Lock()
	_, rerr := addSubscription(sess, p.URI)
	sess.mu.Unlock()
	if rerr != nil {
		return nil, rerr
	}
	s.watch(t)
	return struct{}{}, nil
}

// taskURI returns the task id of asyncgate://tasks/{id}.
func taskURI(uri string) (string, bool) {
	rest, ok := strings.CutPrefix(uri, TaskURIPrefix)
	if !ok {
		return "", false
	}
	id, err := url.PathUnescape(rest)
	if err != nil || id == "" || strings.Contains(id, "/") {
		return "", false
	}
	return id, true
}

// taskResources registers the task and receipt-chain resources.
func (s *Server) taskResources() {
	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(TaskURIPrefix+"{task_id}", "task",
		mcp.WithTemplateDescription("One of your tasks as check_task_status shows it (status, progress, retries, next_step). Subscribe to it (resources/subscribe) to hear when it changes."),
		mcp.WithTemplateMIMEType("application/json")),
		s.readTemplate)
	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(ReceiptURIPrefix+"{receipt_id}/chain", "receipt chain",
		mcp.WithTemplateDescription("A receipt and the receipts it answers (its parents), nearest first, as get_receipt_chain shows it."),
		mcp.WithTemplateMIMEType("application/json")),
		s.readTemplate)
}

// readTemplate is the mcp-go handler of the gate's resource templates. The
// doors answer resources/read of these URIs in handle (resourcesRead), so
// that a caller's error keeps its code; this serves in-process clients of
// MCPServer, for which mcp-go reports any error as an internal one.
func (s *Server) readTemplate(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	a, ok := auth.ActorFromContext(ctx)
	if !ok {
		return nil, host.Errorf(host.CodeUnauthorized, "no caller identity: connect with an API key")
	}
	contents, _, err := s.readResource(ctx, a, req.Params.URI)
	return contents, err
}

// resourcesRead serves resources/read of the gate's resources: a caller's
// error (an unknown or foreign task, a bad URI) is -32602 with the gate's
// code in data.error, as tasks/get and resources/subscribe answer it, and
// only a failure of the gate is -32603. It reports false for a URI none of
// the gate's templates starts, which mcp-go answers.
func (s *Server) resourcesRead(ctx context.Context, a engine.Actor, params json.RawMessage) (any, *rpcError, bool) {
	var p struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.URI == "" {
		return nil, nil, false
	}
	contents, ok, err := s.readResource(ctx, a, p.URI)
	if !ok {
		return nil, nil, false
	}
	if err != nil {
		return nil, errFor(err), true
	}
	res := mcp.ReadResourceResult{Contents: contents}
	// Protocol 2026-07-28 asks a read result for its cache hints, as
	// mcp-go's decoration of its own answers adds them (its defaults: no
	// caching, private); handle adds its type and the server's identity
	// (decorate).
	if modernRequest(params) {
		res.SetCacheHints(0, mcp.CacheScopePrivate)
	}
	return res, nil, true
}

// readResource reads the gate's resource uri as a. It reports false for a
// URI that none of the gate's resource templates starts.
func (s *Server) readResource(ctx context.Context, a engine.Actor, uri string) ([]mcp.ResourceContents, bool, error) {
	var read func(context.Context, engine.Actor, string) ([]mcp.ResourceContents, error)
	switch {
	case strings.HasPrefix(uri, TaskURIPrefix):
		read = s.readTask
	case strings.HasPrefix(uri, ReceiptURIPrefix):
		read = s.readChain
	case strings.HasPrefix(uri, TaskTypeURIPrefix):
		read = s.readTaskType
	case strings.HasPrefix(uri, ResourceLeaseURIPrefix):
		read = s.readResourceHolders
	default:
		return nil, false, nil
	}
	if err := refuseControl(uri); err != nil {
		return nil, true, err
	}
	contents, err := read(ctx, a, uri)
	return contents, true, err
}

// refuseControl refuses a resource URI that holds a NUL or another control
// character (C0, DEL or C1), as it is or percent-escaped (%00, %0A,
// %C2%85), with bad_request, before the id or name in it is looked up. No
// id or name of the gate holds one, and PostgreSQL refuses U+0000 in text
// where SQLite looks it up: the stores would answer one request apart. It
// is the MCP door's counterpart of the HTTP door's refusal of %00 in a
// path; a malformed escape is left to the URI's own parser.
func refuseControl(uri string) error {
	b := make([]byte, 0, len(uri))
	for i := 0; i < len(uri); i++ {
		c := uri[i]
		if c == '%' && i+2 < len(uri) {
			if v, err := strconv.ParseUint(uri[i+1:i+3], 16, 8); err == nil {
				c = byte(v)
				i += 2
			}
		}
		b = append(b, c)
	}
	if !utf8.Valid(b) {
		// Each store would answer it its own way (PostgreSQL refuses the
		// bytes, SQLite looks them up): one answer for both, before either.
		return host.Errorf(host.CodeBadRequest, "the URI's escapes decode to bytes that are not UTF-8, which no id or name is")
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) {
			return host.Errorf(host.CodeBadRequest, "the URI holds a control character, %U (%s percent-escaped), which no id or name accepts",
				r, url.PathEscape(string(r)))
		}
	}
	return nil
}

func (s *Server) readTask(ctx context.Context, a engine.Actor, uri string) ([]mcp.ResourceContents, error) {
	id, ok := taskURI(uri)
	if !ok {
		return nil, host.Errorf(host.CodeBadRequest, "want %s{task_id}", TaskURIPrefix)
	}
	st, err := s.taskStatus(ctx, a, id)
	if err != nil {
		return nil, err
	}
	return jsonResource(uri, st)
}

func (s *Server) readChain(ctx context.Context, a engine.Actor, uri string) ([]mcp.ResourceContents, error) {
	rest, _ := strings.CutPrefix(uri, ReceiptURIPrefix)
	esc, ok := strings.CutSuffix(rest, "/chain")
	// The id is unescaped as a task's is (taskURI): R-%41 names R-A.
	id, err := url.PathUnescape(esc)
	if !ok || err != nil || id == "" || strings.Contains(id, "/") {
		return nil, host.Errorf(host.CodeBadRequest, "want %s{receipt_id}/chain", ReceiptURIPrefix)
	}
	links, err := s.eng.Chain(ctx, a, id)
	if err != nil {
		return nil, err
	}
	if links == nil {
		links = []engine.ChainLink{}
	}
	return jsonResource(uri, ChainResult{ReceiptID: id, Chain: links})
}
