package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
)

// Schedules (issue 39): an agent's recurring tasks. Another agent's
// schedule answers 404 not_found, as an unknown id; the tenant's admins see
// and manage all of them.

// createSchedule is POST /v1/schedules.
func (s *Server) createSchedule(c echo.Context) error {
	var req engine.CreateScheduleRequest
	if err := bind(c, &req, strict); err != nil {
		return err
	}
	v, err := s.eng.CreateSchedule(c.Request().Context(), ActorOf(c), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, v)
}

// listSchedules is GET /v1/schedules.
func (s *Server) listSchedules(c echo.Context) error {
	limit, err := queryInt(c, "limit", 0)
	if err != nil {
		return err
	}
	n, err := queryInt(c, "next_runs", 0)
	if err != nil {
		return err
	}
	vs, cur, err := s.eng.ListSchedules(c.Request().Context(), ActorOf(c), c.QueryParam("cursor"), limit, n)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.ScheduleList{Schedules: vs, Cursor: cur})
}

// getSchedule is GET /v1/schedules/{id}.
func (s *Server) getSchedule(c echo.Context) error {
	n, err := queryInt(c, "next_runs", 0)
	if err != nil {
		return err
	}
	v, err := s.eng.GetSchedule(c.Request().Context(), ActorOf(c), c.Param("id"), n)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// scheduleReceipts is GET /v1/schedules/{id}/receipts: the schedule's own
// receipts in ledger order, a page at a time (a deleted schedule's too).
func (s *Server) scheduleReceipts(c echo.Context) error {
	limit, err := queryInt(c, "limit", 0)
	if err != nil {
		return err
	}
	rs, cur, err := s.eng.ScheduleReceipts(c.Request().Context(), ActorOf(c), c.Param("id"), c.QueryParam("cursor"), limit)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ReceiptList{Receipts: rs, Cursor: cur})
}

// updateSchedule is PATCH /v1/schedules/{id}.
func (s *Server) updateSchedule(c echo.Context) error {
	var req engine.UpdateScheduleRequest
	if err := bind(c, &req, strict); err != nil {
		return err
	}
	v, err := s.eng.UpdateSchedule(c.Request().Context(), ActorOf(c), c.Param("id"), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// pauseSchedule is POST /v1/schedules/{id}/pause.
func (s *Server) pauseSchedule(c echo.Context) error {
	if err := noBody(c); err != nil {
		return err
	}
	v, err := s.eng.PauseSchedule(c.Request().Context(), ActorOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// resumeSchedule is POST /v1/schedules/{id}/resume.
func (s *Server) resumeSchedule(c echo.Context) error {
	if err := noBody(c); err != nil {
		return err
	}
	v, err := s.eng.ResumeSchedule(c.Request().Context(), ActorOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// deleteSchedule is DELETE /v1/schedules/{id}.
func (s *Server) deleteSchedule(c echo.Context) error {
	if err := noBody(c); err != nil {
		return err
	}
	id := c.Param("id")
	if err := s.eng.DeleteSchedule(c.Request().Context(), ActorOf(c), id); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.ScheduleDeleted{ScheduleID: id, Status: "deleted"})
}
