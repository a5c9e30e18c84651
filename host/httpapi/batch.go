package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
)

// OutcomeEntry is one entry of POST /v1/leases/batch: a lease and exactly
// one of complete, fail or heartbeat, each the body of its single call.
type OutcomeEntry struct {
	// ID is the caller's name for the entry, echoed in its result (optional;
	// results come in the entries' order either way).
	ID        string         `json:"id,omitempty"`
	LeaseID   string         `json:"lease_id" openapi:"required"`
	Complete  *CompleteBody  `json:"complete,omitempty"`
	Fail      *FailBody      `json:"fail,omitempty"`
	Heartbeat *HeartbeatBody `json:"heartbeat,omitempty"`
}

// OutcomesBody is the body of POST /v1/leases/batch. WorkerID is the worker
// every entry acts as unless its own body names one.
type OutcomesBody struct {
	WorkerID string         `json:"worker_id,omitempty"`
	Entries  []OutcomeEntry `json:"entries" openapi:"required,minItems=1,maxItems=100" doc:"1 to 100 entries. Each names its lease_id and holds exactly one of complete, fail or heartbeat (an entry with none, or two, is refused on its own: 400 in its result)."`
}

// EnqueueBatchBody is the body of POST /v1/tasks/batch: up to
// api.MaxBatchEnqueue tasks, each the body of POST /v1/tasks.
type EnqueueBatchBody struct {
	Tasks []engine.EnqueueRequest `json:"tasks" openapi:"required,minItems=1,maxItems=1000" doc:"1 to 1,000 tasks, each the body of POST /v1/tasks. after cannot name a task of the same batch (its id is made by the gate): enqueue the dependency first."`
}

// EnqueueBatchResult is one task's answer in a batch enqueue: the answer of
// POST /v1/tasks (http_status 201 new, 200 a duplicate idempotency key) or
// its refusal.
type EnqueueBatchResult struct {
	OK         bool                  `json:"ok"`
	HTTPStatus int                   `json:"http_status"`
	Task       *engine.EnqueueResult `json:"task,omitempty"`
	api.BatchEntryError
}

// EnqueueBatchResponse is the 200 answer of POST /v1/tasks/batch: one result
// per task, in the tasks' order.
type EnqueueBatchResponse struct {
	Results   []EnqueueBatchResult `json:"results"`
	Succeeded int                  `json:"succeeded"`
	Failed    int                  `json:"failed"`
}

// entryError is the refusal entry i's error would have been as a single
// call's answer, and that answer's status. A 5xx is logged as the single
// call's would be ("request failed", with the entry's index), and an
// internal error's text stays in the log.
func (s *Server) entryError(c echo.Context, i int, err error) (api.BatchEntryError, int) {
	code, detail := classify(err)
	status := host.HTTPStatus(code)
	if status >= 500 {
		s.log.LogAttrs(c.Request().Context(), failureLevel(code), "request failed",
			slog.String("method", c.Request().Method), slog.String("path", c.Request().URL.Path), slog.Int("entry", i),
			slog.String("error", code), slog.String("detail", detail))
		if code == host.CodeInternal {
			detail = "an internal error occurred; it was logged"
		}
	}
	return api.BatchEntryError{Error: code, Detail: detail, TaskStatus: taskStatus(code, err)}, status
}

// entryPanic logs a panic in entry i of a batch with its stack and answers
// that entry 500 internal_error, as the handler's recoverer would a single
// call.
func (s *Server) entryPanic(c echo.Context, i int, v any, stack []byte) (api.BatchEntryError, int) {
	s.log.Error("batch entry panic", "method", c.Request().Method, "path", c.Request().URL.Path,
		"entry", i, "panic", fmt.Sprint(v), "stack", string(stack))
	return s.entryError(c, i, host.Errorf(host.CodeInternal, "panic: %v", v))
}

// leaseBatch is POST /v1/leases/batch: many lease outcomes in one call,
// each authorized and answered as its single call would be (one entry's
// refusal does not touch the others). Entries on the same lease run in their
// order; the rest run concurrently, so their writes share group commits.
// Only a malformed call is refused whole.
func (s *Server) leaseBatch(c echo.Context) error {
	var b OutcomesBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	if len(b.Entries) == 0 {
		return badRequest("entries is required (1 to %d)", api.MaxBatchOutcomes)
	}
	if len(b.Entries) > api.MaxBatchOutcomes {
		return badRequest("%d entries; a batch holds at most %d", len(b.Entries), api.MaxBatchOutcomes)
	}
	seen := map[string]bool{}
	for _, e := range b.Entries {
		if e.ID == "" {
			continue
		}
		if seen[e.ID] {
			return badRequest("entry id %q is used twice", e.ID)
		}
		seen[e.ID] = true
	}
	if _, _, err := actingWorker(ActorOf(c), b.WorkerID, false); err != nil {
		return err // every entry would be refused alike: an admin is no worker
	}
	out := api.OutcomesResponse{Results: make([]api.OutcomeResult, len(b.Entries))}
	api.RunBatch(len(b.Entries), api.BatchParallel, func(i int) string { return b.Entries[i].LeaseID }, func(i int) {
		out.Results[i] = s.outcome(c, i, b.WorkerID, b.Entries[i])
	}, func(i int, v any, stack []byte) {
		out.Results[i] = api.OutcomeResult{ID: b.Entries[i].ID, LeaseID: b.Entries[i].LeaseID}
		out.Results[i].BatchEntryError, out.Results[i].HTTPStatus = s.entryPanic(c, i, v, stack)
	})
	for _, r := range out.Results {
		if r.OK {
			out.Succeeded++
		} else {
			out.Failed++
		}
	}
	return c.JSON(http.StatusOK, out)
}

// maxLeaseIDBytes bounds a batch entry's lease_id: a lease id the gate
// makes is under 100 bytes.
const maxLeaseIDBytes = 200

// outcome runs entry i of a batch of lease outcomes.
func (s *Server) outcome(c echo.Context, i int, worker string, e OutcomeEntry) api.OutcomeResult {
	r := api.OutcomeResult{ID: e.ID, LeaseID: e.LeaseID}
	err := func() error {
		if e.LeaseID == "" {
			return badRequest("lease_id is required")
		}
		// Judged as the single call judges the lease id in its path.
		if err := textOK(e.LeaseID); err != nil {
			return badRequest("lease_id %s, which no lease id does", err)
		}
		if len(e.LeaseID) > maxLeaseIDBytes {
			return badRequest("lease_id is %d bytes long; no lease id is longer than %d", len(e.LeaseID), maxLeaseIDBytes)
		}
		n := 0
		for _, set := range []bool{e.Complete != nil, e.Fail != nil, e.Heartbeat != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return badRequest("an entry holds exactly one of complete, fail or heartbeat")
		}
		var err error
		switch {
		case e.Complete != nil:
			b := *e.Complete
			if b.WorkerID == "" {
				b.WorkerID = worker
			}
			r.Complete, err = s.doComplete(c, e.LeaseID, b)
		case e.Fail != nil:
			b := *e.Fail
			if b.WorkerID == "" {
				b.WorkerID = worker
			}
			r.Fail, err = s.doFail(c, e.LeaseID, b)
		default:
			b := *e.Heartbeat
			if b.WorkerID == "" {
				b.WorkerID = worker
			}
			r.Heartbeat, err = s.doHeartbeat(c, e.LeaseID, b)
		}
		return err
	}()
	if err != nil {
		r.Complete, r.Fail, r.Heartbeat = nil, nil, nil
		r.BatchEntryError, r.HTTPStatus = s.entryError(c, i, err)
		return r
	}
	r.OK, r.HTTPStatus = true, http.StatusOK
	return r
}

// enqueueBatch is POST /v1/tasks/batch: up to api.MaxBatchEnqueue tasks in
// one call, each with its own idempotency key and answer, each judged as
// POST /v1/tasks would judge it. Tasks sharing an idempotency key are
// enqueued in their order (the later ones find the first); the rest run
// concurrently, so their inserts share group commits.
func (s *Server) enqueueBatch(c echo.Context) error {
	var b EnqueueBatchBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	if len(b.Tasks) == 0 {
		return badRequest("tasks is required (1 to %d)", api.MaxBatchEnqueue)
	}
	if len(b.Tasks) > api.MaxBatchEnqueue {
		return badRequest("%d tasks; a batch holds at most %d", len(b.Tasks), api.MaxBatchEnqueue)
	}
	a := ActorOf(c)
	ctx := c.Request().Context()
	out := EnqueueBatchResponse{Results: make([]EnqueueBatchResult, len(b.Tasks))}
	api.RunBatch(len(b.Tasks), api.BatchParallel, func(i int) string { return b.Tasks[i].IdempotencyKey }, func(i int) {
		res, err := s.eng.Enqueue(ctx, a, b.Tasks[i])
		r := &out.Results[i]
		if err != nil {
			r.BatchEntryError, r.HTTPStatus = s.entryError(c, i, enqueueAdvice(err, b.Tasks[i].IdempotencyKey))
			return
		}
		r.OK, r.Task, r.HTTPStatus = true, res, http.StatusCreated
		if res.IsDuplicate {
			r.HTTPStatus = http.StatusOK
		}
	}, func(i int, v any, stack []byte) {
		out.Results[i] = EnqueueBatchResult{}
		out.Results[i].BatchEntryError, out.Results[i].HTTPStatus = s.entryPanic(c, i, v, stack)
	})
	for _, r := range out.Results {
		if r.OK {
			out.Succeeded++
		} else {
			out.Failed++
		}
	}
	return c.JSON(http.StatusOK, out)
}
