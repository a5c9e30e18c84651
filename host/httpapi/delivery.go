package httpapi

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
)

// deliveryRoutes registers the delivery API (issue 13): the session
// bootstrap, the inbox and mark_read.
func (s *Server) deliveryRoutes(auth echo.MiddlewareFunc) {
	// An agent's (or an admin's), as the MCP door's inbox tools are.
	agents := requireRole(engine.RoleAgent, engine.RoleAdmin)
	v1 := s.e.Group("/v1", auth)
	// Their query is what the operations declare, as every route's
	// (checkQuery): the obligations routes' principal= is refused here.
	v1.GET("/session/bootstrap", s.sessionBootstrap, agents)
	v1.GET("/inbox", s.inbox, agents)
	v1.POST("/inbox/mark-read", s.markRead, agents)
	v1.POST("/tasks/:id/store-in-memory", s.storeInMemory, requireRole(engine.RoleAgent, engine.RoleAdmin))
	// Gate-wide: operators only (requireOperator).
	a := s.e.Group("/v1/admin", auth, requireOperator)
	a.POST("/retention/sweep", s.retentionSweep)
	a.GET("/outbox", s.outboxStatus)
	a.POST("/outbox/retry", s.outboxRetry)
}

// StoreInMemoryBody is the body of POST /v1/tasks/{id}/store-in-memory.
type StoreInMemoryBody struct {
	Domain        string `json:"domain,omitempty"`
	AsObservation *bool  `json:"as_observation,omitempty"`
}

// storeInMemory is POST /v1/tasks/{id}/store-in-memory: the seed's
// store_task_result_in_memory. The result is queued durably for the
// external ledger as a memory item and promoted_to_memory is set on the
// caller's own inbox items of the task.
func (s *Server) storeInMemory(c echo.Context) error {
	var b StoreInMemoryBody
	if c.Request().ContentLength != 0 {
		if err := bind(c, &b, strict); err != nil {
			return err
		}
	}
	res, err := s.eng.PromoteToMemory(c.Request().Context(), ActorOf(c), engine.PromoteRequest{TaskID: c.Param("id"), Domain: b.Domain, AsObservation: b.AsObservation})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// outboxStatus is GET /v1/admin/outbox?limit=: pending and dead counts, the
// lag (age of the oldest pending entry) and the dead list.
func (s *Server) outboxStatus(c echo.Context) error {
	limit, err := queryInt(c, "limit", 100)
	if err != nil {
		return err
	}
	st, err := s.eng.OutboxStatus(c.Request().Context(), limit)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// OutboxRetryBody is the body of POST /v1/admin/outbox/retry: the dead
// entries to send again (all when ids is empty).
type OutboxRetryBody struct {
	IDs []int64 `json:"ids,omitempty"`
}

// outboxRetry is POST /v1/admin/outbox/retry.
func (s *Server) outboxRetry(c echo.Context) error {
	var b OutboxRetryBody
	if c.Request().ContentLength != 0 {
		if err := bind(c, &b, strict); err != nil {
			return err
		}
	}
	if len(b.IDs) > 10000 {
		return badRequest("at most 10000 ids at once")
	}
	n, err := s.eng.RetryOutbox(c.Request().Context(), b.IDs)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]int64{"requeued": n})
}

// retentionSweep is POST /v1/admin/retention/sweep: one retention sweep now,
// answered with what it archived and purged.
func (s *Server) retentionSweep(c echo.Context) error {
	if err := noBody(c); err != nil {
		return err
	}
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
	return c.JSON(http.StatusOK, api.InboxList{Recipient: who, Items: items, Cursor: cur})
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
