package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
)

// MaxWaitSeconds caps wait_seconds (a lease long-poll).
const MaxWaitSeconds = 30

// actingWorker returns the worker id a call acts as. A worker key acts only as
// its own worker id: a different worker_id in the body is forbidden, an empty
// one means the key's. An admin key is no worker's: receipts name their
// issuer, and an operator's words must not read as a worker's, so an admin
// may neither lease nor act on a lease as a worker (forbidden). It may only
// take a lease away (release, with adminMay), as itself: the call skips the
// holder check and the receipt it writes comes from the admin.
func actingWorker(a engine.Actor, given string, adminMay bool) (wid, by string, err error) {
	if a.Role == engine.RoleWorker {
		if given != "" && given != a.Principal {
			return "", "", host.Errorf(host.CodeForbidden, "this key acts as worker %q, not %q", a.Principal, given)
		}
		return a.Principal, "", nil
	}
	if !adminMay {
		return "", "", host.Errorf(host.CodeForbidden, "a key with role %s is no worker's: lease and act on leases with a worker key (an admin may only release a lease, as itself)", a.Role)
	}
	if given != "" {
		return "", "", host.Errorf(host.CodeForbidden, "an admin releases a lease as itself (%s), not as worker %q: omit worker_id", a.Principal, given)
	}
	return "", a.Principal, nil
}

// LeaseBody is the body of POST /v1/leases (and, leniently, of the seeds'
// lease routes).
type LeaseBody struct {
	WorkerID     string   `json:"worker_id"`
	Capabilities []string `json:"capabilities,omitempty"`
	// TaskTypes and PreferredKinds (the Lease Protocol's name) restrict the
	// offers to these task types; both lists are merged. A name no task type
	// can have (empty, or outside the type names' pattern) is refused with
	// bad_request.
	TaskTypes      []string `json:"task_types,omitempty"`
	PreferredKinds []string `json:"preferred_kinds,omitempty"`
	MaxTasks       int      `json:"max_tasks,omitempty"`
	LeaseSeconds   int      `json:"lease_seconds,omitempty"`
	// WaitSeconds long-polls up to this long (at most 30) when no task is ready.
	WaitSeconds float64 `json:"wait_seconds,omitempty"`
}

// LeasesResponse is the 200 answer of POST /v1/leases.
type LeasesResponse struct {
	Leases []host.Offer `json:"leases"`
}

// doLease validates a lease body and asks the engine for offers. The
// long-poll ends early when the server begins shutting down.
func (s *Server) doLease(c echo.Context, b LeaseBody) ([]host.Offer, error) {
	a := ActorOf(c)
	wid, _, err := actingWorker(a, b.WorkerID, false)
	if err != nil {
		return nil, err
	}
	if b.WaitSeconds < 0 || b.WaitSeconds != b.WaitSeconds {
		return nil, badRequest("wait_seconds must not be negative")
	}
	if b.WaitSeconds > MaxWaitSeconds {
		b.WaitSeconds = MaxWaitSeconds
	}
	if len(b.Capabilities) > 100 {
		return nil, badRequest("at most 100 capabilities")
	}
	// Each list's names are checked here so that a refusal names the field
	// the caller wrote (the engine checks the merged list again).
	for _, l := range []struct {
		field string
		names []string
	}{{"task_types", b.TaskTypes}, {"preferred_kinds", b.PreferredKinds}} {
		for i, n := range l.names {
			if !host.ValidTaskTypeName(n) {
				return nil, badRequest("%s[%d] %q is not a task type name (must match %s)", l.field, i, n, host.TaskTypeNamePattern())
			}
		}
	}
	types := b.TaskTypes
	if len(b.PreferredKinds) > 0 {
		types = append(append([]string{}, b.TaskTypes...), b.PreferredKinds...)
	}
	ctx := c.Request().Context()
	if b.WaitSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.drain, cancel)
		defer stop()
	}
	return s.eng.Lease(ctx, engine.LeaseRequest{
		Tenant: a.Tenant, WorkerID: wid, Capabilities: b.Capabilities, Types: types,
		MaxTasks: b.MaxTasks, LeaseSeconds: b.LeaseSeconds,
		Wait: time.Duration(b.WaitSeconds * float64(time.Second)),
	})
}

// lease is POST /v1/leases: 200 {"leases": [offer…]} or 204 when no work.
func (s *Server) lease(c echo.Context) error {
	var b LeaseBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	offers, err := s.doLease(c, b)
	if err != nil {
		return err
	}
	if len(offers) == 0 {
		return c.NoContent(http.StatusNoContent)
	}
	return c.JSON(http.StatusOK, LeasesResponse{Leases: offers})
}

// workerCall builds the engine's WorkerCall for a lease route.
// adminMay admits an admin (release alone; see actingWorker).
func workerCall(c echo.Context, leaseID, bodyWorker, taskID string, adminMay bool) (engine.WorkerCall, error) {
	a := ActorOf(c)
	wid, by, err := actingWorker(a, bodyWorker, adminMay)
	if err != nil {
		return engine.WorkerCall{}, err
	}
	if leaseID == "" {
		return engine.WorkerCall{}, badRequest("lease_id (run_id) is required")
	}
	return engine.WorkerCall{Tenant: a.Tenant, WorkerID: wid, By: by, LeaseID: leaseID, TaskID: taskID}, nil
}

// sameRun refuses a body whose run_id names another lease than the path's
// (run_id is the lease id; it is optional where the path names the lease).
func sameRun(leaseID, runID string) error {
	if runID != "" && runID != leaseID {
		return badRequest("run_id %q in the body differs from the lease id %q it is sent for (the path's, or a batch entry's lease_id)", runID, leaseID)
	}
	return nil
}

// LeaseCallBody is the body of accept and release (all fields optional).
type LeaseCallBody struct {
	WorkerID string `json:"worker_id,omitempty"`
	TaskID   string `json:"task_id,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// AcceptResponse is the answer of POST /v1/leases/{id}/accept.
type AcceptResponse struct {
	Status         string     `json:"status"`
	TaskID         string     `json:"task_id"`
	LeaseID        string     `json:"lease_id"`
	ReceiptID      string     `json:"receipt_id"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
}

// accept is POST /v1/leases/{lease_id}/accept: it writes task.accepted.
func (s *Server) accept(c echo.Context) error {
	var b LeaseCallBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	call, err := workerCall(c, c.Param("lease_id"), b.WorkerID, b.TaskID, false)
	if err != nil {
		return err
	}
	t, rid, err := s.eng.Accept(c.Request().Context(), call)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, AcceptResponse{Status: "accepted", TaskID: t.ID, LeaseID: call.LeaseID, ReceiptID: rid, LeaseExpiresAt: t.LeaseExpiresAt})
}

// HeartbeatBody is the body of a heartbeat.
type HeartbeatBody struct {
	WorkerID        string   `json:"worker_id,omitempty"`
	TaskID          string   `json:"task_id,omitempty"`
	RunID           string   `json:"run_id,omitempty"`
	ProgressPercent *float64 `json:"progress_percent,omitempty"`
	ProgressMessage string   `json:"progress_message,omitempty"`
	// ExtendLeaseSeconds is the new lease length from now (0: the task type's).
	ExtendLeaseSeconds int `json:"extend_lease_seconds,omitempty"`
	// Milestone makes this progress report an item of the recipient's inbox.
	Milestone bool `json:"milestone,omitempty"`
}

func (s *Server) doHeartbeat(c echo.Context, leaseID string, b HeartbeatBody) (*api.HeartbeatResponse, error) {
	if err := sameRun(leaseID, b.RunID); err != nil {
		return nil, err
	}
	call, err := workerCall(c, leaseID, b.WorkerID, b.TaskID, false)
	if err != nil {
		return nil, err
	}
	res, err := s.eng.Heartbeat(c.Request().Context(), engine.HeartbeatRequest{
		WorkerCall: call, ProgressPercent: b.ProgressPercent, ProgressMessage: b.ProgressMessage, ExtendSeconds: b.ExtendLeaseSeconds,
		Milestone: b.Milestone,
	})
	if err != nil {
		return nil, retryAdvice(err, adviceLeaseID)
	}
	return &api.HeartbeatResponse{Status: res.Status, LeaseID: leaseID, LeaseExpiresAt: res.LeaseExpiresAt, CancelRequested: res.CancelRequested, ServerTime: res.ServerTime}, nil
}

// heartbeat is POST /v1/leases/{lease_id}/heartbeat.
func (s *Server) heartbeat(c echo.Context) error {
	var b HeartbeatBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	res, err := s.doHeartbeat(c, c.Param("lease_id"), b)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// CompleteBody is the body of a completion. The result must be locatable:
// result_pointer, artifacts or delivery_proof, or an inline payload (result
// or result_base64) that the gate stores through a result channel.
type CompleteBody struct {
	WorkerID       string          `json:"worker_id,omitempty"`
	TaskID         string          `json:"task_id,omitempty"`
	RunID          string          `json:"run_id,omitempty"`
	Summary        string          `json:"summary,omitempty" doc:"At most 8192 bytes (413 too_large naming summary)."`
	ResultChannel  string          `json:"result_channel,omitempty"`
	ResultPointer  string          `json:"result_pointer,omitempty" doc:"Where the worker stored the result (at most 8192 bytes). Not with result or result_base64: the gate records the pointer of a payload it stores (400)."`
	ResultChecksum string          `json:"result_checksum,omitempty" doc:"algorithm:hex, at most 200 bytes. With result or result_base64 it must be sha256 (else 400) and the payload's own (else 422 checksum_mismatch); the gate records its own."`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	Artifacts      []host.Artifact `json:"artifacts,omitempty"`
	DeliveryProof  json.RawMessage `json:"delivery_proof,omitempty"`
	Result         json.RawMessage `json:"result,omitempty" doc:"The result itself, any JSON value, stored by the gate through a result channel. Every other field is checked before it is stored."`
	ResultBase64   *string         `json:"result_base64,omitempty" doc:"The result as standard base64 bytes; not with result."`
}

func (s *Server) doComplete(c echo.Context, leaseID string, b CompleteBody) (*api.CompleteResponse, error) {
	if err := sameRun(leaseID, b.RunID); err != nil {
		return nil, err
	}
	call, err := workerCall(c, leaseID, b.WorkerID, b.TaskID, false)
	if err != nil {
		return nil, err
	}
	p, err := payload(b.Result, b.ResultBase64)
	if err != nil {
		return nil, err
	}
	res, err := s.eng.Complete(c.Request().Context(), engine.CompleteRequest{
		WorkerCall: call, Payload: p,
		Result: host.Result{Channel: b.ResultChannel, Pointer: b.ResultPointer, Checksum: b.ResultChecksum, Summary: b.Summary,
			Metadata: b.Metadata, Artifacts: b.Artifacts, DeliveryProof: b.DeliveryProof},
	})
	if err != nil {
		return nil, retryAdvice(err, adviceLeaseID)
	}
	out := &api.CompleteResponse{Status: res.Status, LeaseID: leaseID, ReceiptID: res.ReceiptID, Duplicate: res.Duplicate}
	if res.Task != nil {
		out.TaskID = res.Task.ID
		if r := res.Task.Result; r != nil {
			out.ResultChannel, out.ResultPointer, out.ResultChecksum = r.Channel, r.Pointer, r.Checksum
		}
	}
	return out, nil
}

// complete is POST /v1/leases/{lease_id}/complete.
func (s *Server) complete(c echo.Context) error {
	var b CompleteBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	res, err := s.doComplete(c, c.Param("lease_id"), b)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// FailBody is the body of a failure report. Retryable defaults to true.
type FailBody struct {
	WorkerID     string          `json:"worker_id,omitempty"`
	TaskID       string          `json:"task_id,omitempty"`
	RunID        string          `json:"run_id,omitempty"`
	ErrorMessage string          `json:"error_message,omitempty"`
	Retryable    *bool           `json:"retryable,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
}

func (s *Server) doFail(c echo.Context, leaseID string, b FailBody) (*api.FailResponse, error) {
	if err := sameRun(leaseID, b.RunID); err != nil {
		return nil, err
	}
	call, err := workerCall(c, leaseID, b.WorkerID, b.TaskID, false)
	if err != nil {
		return nil, err
	}
	retryable := b.Retryable == nil || *b.Retryable
	res, err := s.eng.Fail(c.Request().Context(), engine.FailRequest{WorkerCall: call, Error: b.ErrorMessage, Retryable: retryable, Metadata: b.Metadata})
	if err != nil {
		return nil, retryAdvice(err, adviceLeaseID)
	}
	out := &api.FailResponse{Status: res.Status, LeaseID: leaseID, WillRetry: res.WillRetry, RetryScheduledAt: res.RetryScheduledAt,
		ReceiptID: res.ReceiptID, Duplicate: res.Duplicate}
	if res.Task != nil {
		out.TaskID = res.Task.ID
	}
	return out, nil
}

// fail is POST /v1/leases/{lease_id}/fail.
func (s *Server) fail(c echo.Context) error {
	var b FailBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	res, err := s.doFail(c, c.Param("lease_id"), b)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// ReleaseResponse is the answer of a release.
type ReleaseResponse struct {
	Status     string `json:"status"`
	LeaseID    string `json:"lease_id"`
	TaskID     string `json:"task_id,omitempty"`
	TaskStatus string `json:"task_status,omitempty"`
}

// release is POST /v1/leases/{lease_id}/release: the task goes back to the
// queue at once without using an attempt. Releasing the caller's own lease
// that is gone is a no-op; a lease the caller cannot hold is 404, as an
// unknown one (engine.Release).
func (s *Server) release(c echo.Context) error {
	var b LeaseCallBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	if host.LongerThan(b.Reason, 1000) {
		return badRequest("reason is longer than 1000 characters")
	}
	call, err := workerCall(c, c.Param("lease_id"), b.WorkerID, b.TaskID, true)
	if err != nil {
		return err
	}
	t, err := s.eng.Release(c.Request().Context(), call, b.Reason)
	if err != nil {
		return err
	}
	out := ReleaseResponse{Status: "released", LeaseID: call.LeaseID}
	// Name the task only when this caller held the lease (or is an admin):
	// the engine returns it only then, and this keeps it so.
	if t != nil && (call.WorkerID == "" || t.WorkerID == "" || t.WorkerID == call.WorkerID) {
		out.TaskID, out.TaskStatus = t.ID, string(t.State)
	}
	return c.JSON(http.StatusOK, out)
}

// SnoozeBody is the body of a snooze.
type SnoozeBody struct {
	WorkerID string `json:"worker_id,omitempty"`
	TaskID   string `json:"task_id,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// SnoozeSeconds is how long the task waits before it is offered again
	// (1 s to a year). Required.
	SnoozeSeconds int64 `json:"snooze_seconds"`
}

// snooze is POST /v1/leases/{lease_id}/snooze: the task goes back to the
// queue until snooze_seconds from now without using an attempt (SQS
// ChangeMessageVisibility, River's JobSnooze). Its answers for a lease that
// is gone, or not the caller's, are a release's.
func (s *Server) snooze(c echo.Context) error {
	var b SnoozeBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	if host.LongerThan(b.Reason, 1000) {
		return badRequest("reason is longer than 1000 characters")
	}
	if b.SnoozeSeconds == 0 {
		return badRequest("snooze_seconds is required: how long the task waits, 1..%d seconds", int64(engine.MaxSnooze/time.Second))
	}
	if b.SnoozeSeconds < 1 || b.SnoozeSeconds > int64(engine.MaxSnooze/time.Second) {
		return badRequest("snooze_seconds must be 1..%d, got %d", int64(engine.MaxSnooze/time.Second), b.SnoozeSeconds)
	}
	call, err := workerCall(c, c.Param("lease_id"), b.WorkerID, b.TaskID, false)
	if err != nil {
		return err
	}
	t, err := s.eng.Snooze(c.Request().Context(), call, time.Duration(b.SnoozeSeconds)*time.Second, b.Reason)
	if err != nil {
		return err
	}
	out := api.SnoozeResponse{Status: api.SnoozeStatus(t), LeaseID: call.LeaseID}
	// As for release: name the task only to the worker that held the lease.
	if t != nil && (call.WorkerID == "" || t.WorkerID == "" || t.WorkerID == call.WorkerID) {
		out.Fill(t)
	}
	return c.JSON(http.StatusOK, out)
}
