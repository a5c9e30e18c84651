package httpapi

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// deliveryRoutes registers the delivery API (issue 13): the session
// bootstrap, the inbox and mark_read.
func (s *Server) deliveryRoutes(auth echo.MiddlewareFunc) {
	v1 := s.e.Group("/v1", auth)
	v1.GET("/session/bootstrap", s.sessionBootstrap)
	v1.GET("/inbox", s.inbox)
	v1.POST("/inbox/mark-read", s.markRead)
	a := s.e.Group("/v1/admin", auth, requireRole(engine.RoleAdmin))
	a.POST("/retention/sweep", s.retentionSweep)
}

// retentionSweep is POST /v1/admin/retention/sweep: one retention sweep now,
// answered with what it archived and purged.
func (s *Server) retentionSweep(c echo.Context) error {
	rep, err := s.eng.RetentionSweep(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}

// sessionBootstrap is GET /v1/session/bootstrap?limit=: the caller's open
// obligations and unread inbox in one stable shape.
func (s *Server) sessionBootstrap(c echo.Context) error {
	limit, err := queryInt(c, "limit", 0)
	if err != nil {
		return err
	}
	b, err := s.eng.SessionBootstrap(c.Request().Context(), ActorOf(c), limit)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, b)
}

// InboxList is a page of inbox items.
type InboxList struct {
	Recipient string           `json:"recipient"`
	Items     []host.InboxItem `json:"items"`
	Cursor    string           `json:"cursor"`
}

// inbox is GET /v1/inbox?unread=true&task_id=&recipient=&cursor=&limit=.
func (s *Server) inbox(c echo.Context) error {
	limit, err := queryInt(c, "limit", 0)
	if err != nil {
		return err
	}
	q := engine.InboxQuery{Recipient: c.QueryParam("recipient"), TaskID: c.QueryParam("task_id"), Cursor: c.QueryParam("cursor"), Limit: limit}
	if v := c.QueryParam("unread"); v != "" {
		if q.Unread, err = strconv.ParseBool(v); err != nil {
			return badRequest("query parameter unread must be true or false")
		}
	}
	items, cur, err := s.eng.Inbox(c.Request().Context(), ActorOf(c), q)
	if err != nil {
		return err
	}
	who := q.Recipient
	if who == "" {
		who = ActorOf(c).Principal
	}
	return c.JSON(http.StatusOK, InboxList{Recipient: who, Items: items, Cursor: cur})
}

// MarkReadBody is the body of POST /v1/inbox/mark-read.
type MarkReadBody struct {
	InboxIDs []string `json:"inbox_ids"`
}

// markRead is POST /v1/inbox/mark-read: the explicit act that sets read_at.
func (s *Server) markRead(c echo.Context) error {
	var b MarkReadBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	res, err := s.eng.MarkRead(c.Request().Context(), ActorOf(c), b.InboxIDs)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}
