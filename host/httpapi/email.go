package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
)

// emailRoutes registers the email API (seed 002's send_email,
// fetch_task_email and archive_task_email).
func (s *Server) emailRoutes(auth echo.MiddlewareFunc) {
	agents := requireRole(engine.RoleAgent, engine.RoleAdmin)
	v1 := s.e.Group("/v1", auth)
	v1.POST("/email", s.sendEmail, agents)
	v1.GET("/tasks/:id/email", s.fetchTaskEmail)
	v1.POST("/tasks/:id/email/archive", s.archiveTaskEmail, agents)
}

// sendEmail is POST /v1/email: queue an email durably (202). A bad or
// disallowed address is a 400 and nothing is written.
func (s *Server) sendEmail(c echo.Context) error {
	var b engine.SendEmailRequest
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	res, err := s.eng.SendEmail(c.Request().Context(), ActorOf(c), b)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, res)
}

// fetchTaskEmail is GET /v1/tasks/{id}/email: the message a task's result
// was emailed as, read back from the gate's mailbox.
func (s *Server) fetchTaskEmail(c echo.Context) error {
	res, err := s.eng.FetchTaskEmail(c.Request().Context(), ActorOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// archiveTaskEmail is POST /v1/tasks/{id}/email/archive: the email
// channel's ack deletes the message from the mailbox; the result is marked
// archived.
func (s *Server) archiveTaskEmail(c echo.Context) error {
	if err := noBody(c); err != nil {
		return err
	}
	t, err := s.eng.ArchiveTaskEmail(c.Request().Context(), ActorOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	out := api.ArchivedEmail{TaskID: t.ID, Status: "archived"}
	if t.Result != nil {
		out.ArchivedAt = t.Result.ArchivedAt
	}
	return c.JSON(http.StatusOK, out)
}
