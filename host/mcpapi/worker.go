package mcpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
)

// LeaseArgs are the arguments of worker_lease_task.
type LeaseArgs struct {
	WorkerID     string   `json:"worker_id,omitempty"`
	TaskTypes    []string `json:"task_types,omitempty"`
	LeaseSeconds int      `json:"lease_seconds,omitempty"`
	WaitSeconds  float64  `json:"wait_seconds,omitempty"`
	// Accept, default true, writes task.accepted at once: the worker takes on
	// the obligation to finish or fail the task.
	Accept *bool `json:"accept,omitempty"`
}

// LeaseResult is worker_lease_task's answer: the spec's task envelope (run_id
// is the lease id), or no task.
type LeaseResult struct {
	*api.TaskEnvelope
	TaskID          *string `json:"task_id"`
	Attempt         int     `json:"attempt,omitempty"`
	AcceptReceiptID string  `json:"accept_receipt_id,omitempty"`
	Message         string  `json:"message,omitempty"`
}

// WorkerCallArgs name the lease a worker call is about.
type WorkerCallArgs struct {
	WorkerID string `json:"worker_id,omitempty"`
	TaskID   string `json:"task_id"`
	RunID    string `json:"run_id"`
}

// call checks the arguments and builds the engine's WorkerCall. A worker key
// acts only as its own worker id.
func (w WorkerCallArgs) call(a engine.Actor) (engine.WorkerCall, error) {
	if w.WorkerID != "" && w.WorkerID != a.Principal {
		return engine.WorkerCall{}, host.Errorf(host.CodeForbidden, "this key acts as worker %q, not %q", a.Principal, w.WorkerID)
	}
	if w.TaskID == "" || w.RunID == "" {
		return engine.WorkerCall{}, host.Errorf(host.CodeBadRequest, "task_id and run_id are required")
	}
	return engine.WorkerCall{Tenant: a.Tenant, WorkerID: a.Principal, LeaseID: w.RunID, TaskID: w.TaskID}, nil
}

var (
	workerIDArg = mcp.WithString("worker_id", mcp.Description("Your worker id. Optional: a worker key always acts as its own worker id ({type}.{instance}); a different one is forbidden."))
	wTaskIDArg  = mcp.WithString("task_id", mcp.Required(), mcp.Description("The task_id from worker_lease_task."))
	runIDArg    = mcp.WithString("run_id", mcp.Required(), mcp.Description("The run_id from worker_lease_task (the lease id). A stale run_id is a lease_expired error (not_found for release and snooze)."))
)

// workerTools registers the MCP worker shim, for worker keys only.
func (s *Server) workerTools() {
	s.add(tool("worker_lease_task", "Worker: lease a task",
		`Worker shim, for a worker that is itself an agent with only MCP access (workers with HTTP should use the worker HTTP API). Take the next queued task (priority 10 first, then oldest).
Returns the task envelope: task_id, run_id (keep both: every other worker_* call needs them), task_type, params, priority, lease_expires_at, attempt, metadata, and for a task that names resources its resource_leases, each with a fencing_token to pass with every change you make to that resource. When nothing is queued, task_id is null: wait a while and call again.
By default the lease is accepted at once (a task.accepted receipt: you now owe a worker_complete_task or worker_fail_task). Send worker_heartbeat_task before lease_expires_at for long work, or the task goes back to the queue and your run_id stops working.
wait_seconds long-polls when the queue is empty (capped at a few seconds' worth below client timeouts).`,
		returns[LeaseResult](), writes(false, false),
		props(workerIDArg,
			mcp.WithArray("task_types", mcp.WithStringItems(), mcp.Description("Only lease tasks of these types. Default: any type.")),
			mcp.WithInteger("lease_seconds", mcp.Min(1), mcp.Description("Lease length. Default: the task type's (900 s unless configured); capped by the gate.")),
			mcp.WithNumber("wait_seconds", mcp.Min(0), mcp.Description(fmt.Sprintf("Wait up to this long for a task when none is ready (at most %d). Default 0.", int(s.cfg.MaxLeaseWait.Seconds())))),
			mcp.WithBoolean("accept", mcp.Description("Accept the lease at once (default true). false leaves an offer that still needs an accept over HTTP.")),
		)),
		workerRole, s.workerLease)

	s.add(tool("worker_heartbeat_task", "Worker: heartbeat and progress",
		`Worker shim. Report progress on a leased task and extend its lease. Call it well before lease_expires_at. Returns the new lease_expires_at and cancel_requested: when true, stop working and call worker_fail_task (the task is then canceled).
A heartbeat after the lease expired is a lease_expired error: stop working on that task.`,
		returns[api.HeartbeatResponse](), writes(false, false),
		props(workerIDArg, wTaskIDArg, runIDArg,
			mcp.WithNumber("progress_percent", mcp.Min(0), mcp.Max(100), mcp.Description("0..100.")),
			mcp.WithString("progress_message", mcp.MaxLength(4096), mcp.Description("Human-readable progress, e.g. \"4500/10000 files\" (at most 4096 bytes).")),
			mcp.WithInteger("extend_lease_seconds", mcp.Min(0), mcp.Description("New lease length from now. Default: the task type's lease length.")),
			mcp.WithBoolean("milestone", mcp.Description("Mark this progress as a milestone: it becomes an item of the recipient's inbox (plain progress never does). Use it sparingly.")),
		)),
		workerRole, s.workerHeartbeat)

	s.add(tool("worker_complete_task", "Worker: complete a task",
		`Worker shim. Report success. The outcome must be locatable: give result_pointer (where you stored it, e.g. "s3://bucket/key", with result_channel), artifacts, or result (a JSON payload the gate stores through its result channel for you). A success that says nowhere where the result is, is a not_locatable error.
Writes a task.completed receipt that discharges the requester's obligation. Completing the same run twice returns the first outcome (duplicate true).`,
		returns[api.CompleteResponse](), writes(true, false),
		props(workerIDArg, wTaskIDArg, runIDArg,
			mcp.WithString("summary", mcp.MaxLength(8192), mcp.Description("One or two sentences on the outcome, for the requester (at most 8192 bytes).")),
			mcp.WithString("result_channel", mcp.Description("Channel of the result_pointer (e.g. s3, file, inline), or of the stored payload.")),
			mcp.WithString("result_pointer", mcp.Description("Where the result is, channel:data or a URL. Not with result: the gate records the pointer of the payload it stores.")),
			mcp.WithString("result_checksum", mcp.Description("Optional checksum of the result, e.g. sha256:<hex>. With result it must be sha256 and the payload's own (else checksum_mismatch); the gate records the one it computes.")),
			mcp.WithAny("result", mcp.Description("The result itself as JSON, stored by the gate through a result channel (use for small results).")),
			mcp.WithArray("artifacts", mcp.Items(map[string]any{"type": "object", "properties": map[string]any{
				"type": map[string]any{"type": "string", "minLength": 1}, "url": map[string]any{"type": "string"}, "ref": map[string]any{}}, "required": []string{"type"}}),
				mcp.Description("Locatable pieces of the result: [{\"type\": \"s3\", \"url\": \"s3://…\"}].")),
			mcp.WithObject("metadata", mcp.Description("Extra facts about the result (sizes, counts).")),
		)),
		workerRole, s.workerComplete)

	s.add(tool("worker_fail_task", "Worker: fail a task",
		`Worker shim. Report that this attempt failed. With retryable true (default) the task's retry policy may queue it again after a backoff (will_retry true); with retryable false, or when retries are used up, it becomes a dead letter and the requester's obligation is discharged with task.failed.
Failing the same run twice returns the first outcome.`,
		returns[api.FailResponse](), writes(true, false),
		props(workerIDArg, wTaskIDArg, runIDArg,
			mcp.WithString("error_message", mcp.Required(), mcp.Description("What went wrong. Kept to its first 8192 bytes: a longer message is cut, never refused, so a failure is always recorded.")),
			mcp.WithBoolean("retryable", mcp.Description("Whether another attempt could succeed. Default true.")),
			mcp.WithObject("metadata", mcp.Description("Extra facts about the failure.")),
		)),
		workerRole, s.workerFail)

	s.add(tool("worker_snooze_task", "Worker: snooze a task",
		`Worker shim. Give the task back until snooze_seconds from now without using an attempt: its retry budget is untouched, and it is offered again (to you or another worker) no earlier than available_at. Use it when the task cannot run yet (an upstream rate limit, a resource not ready), not for failures.
Your lease ends: the run_id stops working. An accepted lease's obligation is discharged by a task.snoozed receipt. Snoozing your run that is already gone does nothing; a run_id that is not yours is not_found, as one that never existed.`,
		returns[api.SnoozeResponse](), writes(true, true),
		props(workerIDArg, wTaskIDArg, runIDArg,
			mcp.WithInteger("snooze_seconds", mcp.Required(), mcp.Min(1), mcp.Max(float64(engine.MaxSnooze/time.Second)), mcp.Description("How long the task waits before it is offered again, in seconds (1 to a year).")),
			mcp.WithString("reason", mcp.MaxLength(1000), mcp.Description("Why, for the task's history.")),
		)),
		workerRole, s.workerSnooze)
}

func (s *Server) workerSnooze(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		WorkerCallArgs
		SnoozeSeconds int64  `json:"snooze_seconds"`
		Reason        string `json:"reason,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	call, err := in.call(a)
	if err != nil {
		return nil, "", err
	}
	if in.SnoozeSeconds == 0 {
		return nil, "", host.Errorf(host.CodeBadRequest, "snooze_seconds is required: how long the task waits, 1..%d seconds", int64(engine.MaxSnooze/time.Second))
	}
	if in.SnoozeSeconds < 1 || in.SnoozeSeconds > int64(engine.MaxSnooze/time.Second) {
		return nil, "", host.Errorf(host.CodeBadRequest, "snooze_seconds must be 1..%d, got %d", int64(engine.MaxSnooze/time.Second), in.SnoozeSeconds)
	}
	if host.LongerThan(in.Reason, 1000) {
		return nil, "", host.Errorf(host.CodeBadRequest, "reason is longer than 1000 characters")
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	t, err := s.eng.Snooze(wctx, call, time.Duration(in.SnoozeSeconds)*time.Second, in.Reason)
	if err != nil {
		return nil, "", err
	}
	out := api.SnoozeResponse{Status: api.SnoozeStatus(t), LeaseID: call.LeaseID}
	// As for release: name the task only to the worker that held the lease.
	if t != nil && (t.WorkerID == "" || t.WorkerID == a.Principal) {
		out.Fill(t)
	}
	text := fmt.Sprintf("Task %s: snoozed; your run is over.", call.TaskID)
	switch out.Status {
	case "ended":
		text = fmt.Sprintf("Task %s: your run had already ended; nothing was snoozed.", call.TaskID)
	case "canceled":
		text = fmt.Sprintf("Task %s: its cancel was requested, so it ended canceled instead; your run is over.", call.TaskID)
	}
	if out.AvailableAt != nil {
		text = fmt.Sprintf("Task %s: snoozed until %s; your run is over.", call.TaskID, out.AvailableAt.Format(time.RFC3339))
	}
	return out, text, nil
}

func (s *Server) workerLease(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in LeaseArgs
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if in.WorkerID != "" && in.WorkerID != a.Principal {
		return nil, "", host.Errorf(host.CodeForbidden, "this key acts as worker %q, not %q", a.Principal, in.WorkerID)
	}
	if in.WaitSeconds < 0 || in.WaitSeconds != in.WaitSeconds {
		return nil, "", host.Errorf(host.CodeBadRequest, "wait_seconds must not be negative")
	}
	// Capped before it becomes a Duration, which a huge wait_seconds would
	// overflow to a negative one (no wait at all).
	wait := s.cfg.MaxLeaseWait
	if in.WaitSeconds < wait.Seconds() {
		wait = time.Duration(in.WaitSeconds * float64(time.Second))
	}
	wait = untilExpiry(ctx, wait)
	// The wait ends when the client goes away or the gate shuts down; the
	// claim itself is one transaction, so an offer is either returned or
	// never made (an offer whose answer is lost expires without using an
	// attempt).
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.drain, cancel)
	defer stop()
	offers, err := s.eng.Lease(lctx, engine.LeaseRequest{
		Tenant: a.Tenant, WorkerID: a.Principal, Types: in.TaskTypes, MaxTasks: 1, LeaseSeconds: in.LeaseSeconds, Wait: wait,
	})
	if err != nil && s.drain.Err() != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
		err = nil // shut down while claiming: the claim rolled back, no offer was made
	}
	if err != nil {
		return nil, "", err
	}
	if len(offers) == 0 {
		return LeaseResult{Message: "No tasks available"}, "No task is ready. Try again later (or pass wait_seconds to wait a little).", nil
	}
	o := offers[0]
	t := o.Task
	e := api.NewTaskEnvelope(o)
	env := &e
	out := LeaseResult{TaskEnvelope: env, TaskID: &env.TaskID, Attempt: o.Attempt}
	if in.Accept == nil || *in.Accept {
		wctx, wcancel := detached(ctx)
		defer wcancel()
		_, rid, err := s.eng.Accept(wctx, engine.WorkerCall{Tenant: a.Tenant, WorkerID: a.Principal, LeaseID: o.LeaseID, TaskID: t.ID})
		if err != nil {
			return nil, "", err
		}
		out.AcceptReceiptID = rid
	}
	return out, fmt.Sprintf("Leased task %s (%s), run_id %s, until %s. Do the work, heartbeat before the lease expires, then call worker_complete_task or worker_fail_task with task_id and run_id.",
		t.ID, t.Type, o.RunID, o.LeaseExpiresAt.Format(time.RFC3339)), nil
}

func (s *Server) workerHeartbeat(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		WorkerCallArgs
		ProgressPercent    *float64 `json:"progress_percent,omitempty"`
		ProgressMessage    string   `json:"progress_message,omitempty"`
		ExtendLeaseSeconds int      `json:"extend_lease_seconds,omitempty"`
		Milestone          bool     `json:"milestone,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	call, err := in.call(a)
	if err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.Heartbeat(wctx, engine.HeartbeatRequest{WorkerCall: call, ProgressPercent: in.ProgressPercent,
		ProgressMessage: in.ProgressMessage, ExtendSeconds: in.ExtendLeaseSeconds, Milestone: in.Milestone})
	if err != nil {
		return nil, "", err
	}
	out := api.HeartbeatResponse{Status: res.Status, LeaseID: call.LeaseID, LeaseExpiresAt: res.LeaseExpiresAt, CancelRequested: res.CancelRequested, ServerTime: res.ServerTime}
	text := fmt.Sprintf("Lease extended until %s.", res.LeaseExpiresAt.Format(time.RFC3339))
	if res.CancelRequested {
		text += " The requester canceled this task: stop working and call worker_fail_task."
	}
	return out, text, nil
}

func (s *Server) workerComplete(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		WorkerCallArgs
		Summary        string          `json:"summary,omitempty"`
		ResultChannel  string          `json:"result_channel,omitempty"`
		ResultPointer  string          `json:"result_pointer,omitempty"`
		ResultChecksum string          `json:"result_checksum,omitempty"`
		Result         json.RawMessage `json:"result,omitempty"`
		Artifacts      []host.Artifact `json:"artifacts,omitempty"`
		Metadata       json.RawMessage `json:"metadata,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	call, err := in.call(a)
	if err != nil {
		return nil, "", err
	}
	var payload []byte
	if len(in.Result) > 0 && string(in.Result) != "null" {
		payload = in.Result
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.Complete(wctx, engine.CompleteRequest{WorkerCall: call, Payload: payload,
		Result: host.Result{Channel: in.ResultChannel, Pointer: in.ResultPointer, Checksum: in.ResultChecksum,
			Summary: in.Summary, Metadata: in.Metadata, Artifacts: in.Artifacts}})
	if err != nil {
		return nil, "", err
	}
	out := api.CompleteResponse{Status: res.Status, LeaseID: call.LeaseID, ReceiptID: res.ReceiptID, Duplicate: res.Duplicate}
	if res.Task != nil {
		out.TaskID = res.Task.ID
		if r := res.Task.Result; r != nil {
			out.ResultChannel, out.ResultPointer, out.ResultChecksum = r.Channel, r.Pointer, r.Checksum
		}
	}
	return out, fmt.Sprintf("Task %s is complete (receipt %s). Lease the next task when ready.", call.TaskID, res.ReceiptID), nil
}

func (s *Server) workerFail(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		WorkerCallArgs
		ErrorMessage string          `json:"error_message"`
		Retryable    *bool           `json:"retryable,omitempty"`
		Metadata     json.RawMessage `json:"metadata,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	call, err := in.call(a)
	if err != nil {
		return nil, "", err
	}
	if err := required("error_message", in.ErrorMessage); err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.Fail(wctx, engine.FailRequest{WorkerCall: call, Error: in.ErrorMessage,
		Retryable: in.Retryable == nil || *in.Retryable, Metadata: in.Metadata})
	if err != nil {
		return nil, "", err
	}
	out := api.FailResponse{Status: res.Status, LeaseID: call.LeaseID, WillRetry: res.WillRetry, RetryScheduledAt: res.RetryScheduledAt,
		ReceiptID: res.ReceiptID, Duplicate: res.Duplicate}
	if res.Task != nil {
		out.TaskID = res.Task.ID
	}
	text := fmt.Sprintf("Task %s: failure recorded, status %s.", call.TaskID, res.Status)
	if res.WillRetry && res.RetryScheduledAt != nil {
		text += " It will be retried after " + res.RetryScheduledAt.Format(time.RFC3339) + "."
	}
	return out, text, nil
}
