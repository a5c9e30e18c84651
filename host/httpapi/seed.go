package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
)

// The seed-compatible worker routes: thin reshapings of the canonical
// handlers' engine calls into the exact request and response shapes of the
// Lease Protocol (/lease) and of the spec's worker interface (/worker/* and
// /workers/*). Their bodies are decoded leniently: unknown fields are ignored,
// as the seeds show bodies with "..." in them.

// SeedOffer is the Lease Protocol's single offer object. Beyond the
// protocol's fields it carries what the worker of the task needs and no
// other field could hand it: the task's resource leases with their fencing
// tokens, and the outcomes of the tasks it waited on (as /v1/leases does).
type SeedOffer struct {
	LeaseID        string    `json:"lease_id"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	Task           SeedTask  `json:"task"`
	// ResourceLeases are the task's resource leases (only for a task with
	// resource intents).
	ResourceLeases []*host.ResourceLease `json:"resource_leases,omitempty"`
	// Dependencies are the outcomes of the tasks this one waited on (only
	// for a task enqueued with after).
	Dependencies []host.DependencyOutcome `json:"dependencies,omitempty"`
}

// SeedTask is the task part of a Lease Protocol offer: the work
// specification, not a receipt. inputs are the task's params; task_body,
// payload_pointer, expected_outcome_kind and expected_artifact_mime are lifted
// from params fields of those names when present.
type SeedTask struct {
	TaskID               string          `json:"task_id"`
	PrincipalAI          string          `json:"principal_ai"`
	TaskType             string          `json:"task_type"`
	TaskSummary          string          `json:"task_summary"`
	TaskBody             any             `json:"task_body,omitempty"`
	PayloadPointer       string          `json:"payload_pointer,omitempty"`
	Inputs               json.RawMessage `json:"inputs"`
	ExpectedOutcomeKind  string          `json:"expected_outcome_kind,omitempty"`
	ExpectedArtifactMime string          `json:"expected_artifact_mime,omitempty"`
}

func seedOffer(o host.Offer) SeedOffer {
	t := o.Task
	st := SeedTask{TaskID: t.ID, PrincipalAI: t.CreatedBy, TaskType: t.Type, TaskSummary: t.Summary, Inputs: t.Params}
	var lift struct {
		TaskBody             any    `json:"task_body"`
		PayloadPointer       string `json:"payload_pointer"`
		ExpectedOutcomeKind  string `json:"expected_outcome_kind"`
		ExpectedArtifactMime string `json:"expected_artifact_mime"`
	}
	if json.Unmarshal(t.Params, &lift) == nil {
		st.TaskBody, st.PayloadPointer = lift.TaskBody, lift.PayloadPointer
		st.ExpectedOutcomeKind, st.ExpectedArtifactMime = lift.ExpectedOutcomeKind, lift.ExpectedArtifactMime
	}
	if len(st.Inputs) == 0 {
		st.Inputs = json.RawMessage(`{}`)
	}
	return SeedOffer{LeaseID: o.LeaseID, LeaseExpiresAt: o.LeaseExpiresAt, Task: st, ResourceLeases: o.ResourceLeases, Dependencies: o.Dependencies}
}

// seedLease is POST /lease: one offer object, or 204. max_tasks is accepted
// but, as the protocol's V1 says, one task is offered per poll.
func (s *Server) seedLease(c echo.Context) error {
	var b LeaseBody
	if err := bind(c, &b, lenient); err != nil {
		return err
	}
	b.MaxTasks = 1
	offers, err := s.doLease(c, b)
	if err != nil {
		return err
	}
	if len(offers) == 0 {
		return c.NoContent(http.StatusNoContent)
	}
	return c.JSON(http.StatusOK, seedOffer(offers[0]))
}

// seedLeaseHeartbeat is POST /lease/{lease_id}/heartbeat: it extends the lease.
func (s *Server) seedLeaseHeartbeat(c echo.Context) error {
	var b HeartbeatBody
	if err := bind(c, &b, lenient); err != nil {
		return err
	}
	res, err := s.doHeartbeat(c, c.Param("lease_id"), b)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// envelopeLease is POST /worker/lease (204 when idle) and, with noTaskBody,
// POST /workers/lease_task (200 {"task_id": null, "message": …} when idle).
func (s *Server) envelopeLease(noTaskBody bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		var b LeaseBody
		if err := bind(c, &b, lenient); err != nil {
			return err
		}
		b.MaxTasks = 1
		offers, err := s.doLease(c, b)
		if err != nil {
			return err
		}
		if len(offers) == 0 {
			if noTaskBody {
				return c.JSON(http.StatusOK, map[string]any{"task_id": nil, "message": "No tasks available"})
			}
			return c.NoContent(http.StatusNoContent)
		}
		return c.JSON(http.StatusOK, api.NewTaskEnvelope(offers[0]))
	}
}

// envelopeHeartbeat is POST /worker/heartbeat and /workers/heartbeat.
func (s *Server) envelopeHeartbeat(c echo.Context) error {
	var b HeartbeatBody
	if err := bind(c, &b, lenient); err != nil {
		return err
	}
	if err := needTaskRun(b.TaskID, b.RunID); err != nil {
		return err
	}
	res, err := s.doHeartbeat(c, b.RunID, b)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"status": "ok", "lease_expires_at": res.LeaseExpiresAt, "cancel_requested": res.CancelRequested})
}

// envelopeComplete is POST /worker/complete and /workers/complete.
func (s *Server) envelopeComplete(c echo.Context) error {
	var b CompleteBody
	if err := bind(c, &b, lenient); err != nil {
		return err
	}
	if err := needTaskRun(b.TaskID, b.RunID); err != nil {
		return err
	}
	res, err := s.doComplete(c, b.RunID, b)
	if err != nil {
		return err
	}
	// The receipt in the recipient's ledger is the notification.
	return c.JSON(http.StatusOK, map[string]any{"status": res.Status, "notification_sent": true, "notification_id": res.ReceiptID, "duplicate": res.Duplicate})
}

// envelopeFail is POST /worker/fail and /workers/fail.
func (s *Server) envelopeFail(c echo.Context) error {
	var b FailBody
	if err := bind(c, &b, lenient); err != nil {
		return err
	}
	if err := needTaskRun(b.TaskID, b.RunID); err != nil {
		return err
	}
	res, err := s.doFail(c, b.RunID, b)
	if err != nil {
		return err
	}
	out := map[string]any{"status": res.Status, "will_retry": res.WillRetry}
	switch {
	case res.WillRetry:
		out["retry_scheduled_at"] = res.RetryScheduledAt
	default:
		out["notification_sent"] = true
	}
	return c.JSON(http.StatusOK, out)
}

func needTaskRun(taskID, runID string) error {
	if taskID == "" || runID == "" {
		return badRequest("task_id and run_id are required")
	}
	return nil
}

// seedCreateWorkerKey is the spec's POST /admin/workers/create_key: a worker
// key in the admin's tenant, answered as {"api_key", "worker_id"}.
func (s *Server) seedCreateWorkerKey(c echo.Context) error {
	var b struct {
		WorkerID string `json:"worker_id"`
	}
	if err := bind(c, &b, lenient); err != nil {
		return err
	}
	k, err := auth.CreateKey(c.Request().Context(), s.st, auth.NewKeyRequest{Role: engine.RoleWorker, Principal: b.WorkerID, Tenant: ActorOf(c).Tenant})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]string{"api_key": k.APIKey, "worker_id": k.Principal, "key_id": k.ID})
}
