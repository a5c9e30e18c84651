package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// StatsResponse is the answer of GET /v1/admin/stats: a tenant's queue at a
// glance (`gate stats`).
type StatsResponse struct {
	Tenant string `json:"tenant"`
	// ByState counts tasks by status.
	ByState map[host.TaskState]int64 `json:"by_state"`
	// ByType counts queued and leased tasks by task type.
	ByType map[string]int64 `json:"by_type"`
	// Ready counts the queued tasks ready to lease: by_state's queued
	// ones less those of paused types (asyncgate_task_queue_depth).
	Ready int64 `json:"ready"`
	// OldestReadyAgeSeconds is the age of the oldest queued task ready to
	// lease (0 when none waits); a task of a paused type is not ready.
	OldestReadyAgeSeconds float64 `json:"oldest_ready_age_seconds"`
	// PausedByType lists every task type whose leasing is paused, with
	// the queued tasks it holds (scheduled ones are counted scheduled):
	// by_state counts them queued, their status, but no lease is offered
	// them until the type is resumed.
	PausedByType map[string]int64 `json:"paused_by_type"`
	// WorkflowsByState counts workflows by status (running, succeeded,
	// failed, canceled).
	WorkflowsByState map[host.WorkflowState]int64 `json:"workflows_by_state"`
}

// statsRoutes adds GET /v1/admin/stats.
func (s *Server) statsRoutes(auth echo.MiddlewareFunc) {
	s.e.GET("/v1/admin/stats", s.stats, auth, requireRole(engine.RoleAdmin))
}

func (s *Server) stats(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	qs, err := s.eng.Stats(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	wfs, err := s.eng.WorkflowCounts(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	out := StatsResponse{Tenant: tenant, ByState: qs.ByState, ByType: qs.ByType, Ready: qs.ReadyQueued(),
		OldestReadyAgeSeconds: qs.OldestReadyAge.Seconds(), PausedByType: qs.Paused, WorkflowsByState: wfs}
	if out.PausedByType == nil {
		out.PausedByType = map[string]int64{}
	}
	out.ByState = withEveryState(out.ByState)
	if out.ByType == nil {
		out.ByType = map[string]int64{}
	}
	return c.JSON(http.StatusOK, out)
}

// withEveryState is by with every counted state (host.CountedStates) that
// it lacks at 0: a state whose last task left reads 0, not absent.
func withEveryState(by map[host.TaskState]int64) map[host.TaskState]int64 {
	out := make(map[host.TaskState]int64, len(host.CountedStates)+len(by))
	for _, st := range host.CountedStates {
		out[st] = 0
	}
	for st, n := range by {
		out[st] = n
	}
	return out
}
