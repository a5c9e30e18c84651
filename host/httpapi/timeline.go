package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
)

// attempts is GET /v1/tasks/{id}/attempts: every lease of the task, who held
// it, when, for how long and how it ended.
func (s *Server) attempts(c echo.Context) error {
	ta, err := s.eng.Attempts(c.Request().Context(), ActorOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	as := ta.Attempts
	if as == nil {
		as = []host.Attempt{}
	}
	return c.JSON(http.StatusOK, api.AttemptsResponse{TaskID: ta.Task.ID, Status: ta.Task.State, Attempts: as, ServerTime: ta.At})
}

// timeline is GET /v1/tasks/{id}/timeline: the task's history as events.
func (s *Server) timeline(c echo.Context) error {
	tl, err := s.eng.Timeline(c.Request().Context(), ActorOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	ev := tl.Events
	if ev == nil {
		ev = []host.TimelineEvent{}
	}
	return c.JSON(http.StatusOK, api.TimelineResponse{TaskID: tl.Task.ID, Status: tl.Task.State, Events: ev, Truncated: tl.Truncated})
}
