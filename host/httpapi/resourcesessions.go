package httpapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// Resource sessions and revocation over HTTP (issue 43 item 4):
// /v1/resource-sessions… for any key (the holder is the key's principal),
// POST /v1/admin/resource-leases/{lease_id}/revoke for operators.

// SessionBody is the body of POST /v1/resource-sessions and of a session
// heartbeat.
type SessionBody struct {
	// TTLMs is the session's TTL in milliseconds (default 60000, capped,
	// raised to the minimum); on a heartbeat, a new TTL from now on.
	TTLMs int64 `json:"ttl_ms,omitempty"`
}

func (s *Server) resourceSessionRoutes(e *echo.Echo, auth echo.MiddlewareFunc) {
	g := e.Group("/v1/resource-sessions", auth)
	g.POST("", s.createResourceSession)
	g.GET("/:session_id", s.getResourceSession)
	g.POST("/:session_id/heartbeat", s.heartbeatResourceSession)
	g.POST("/:session_id/end", s.endResourceSession)
}

func sessionTTL(c echo.Context) (time.Duration, error) {
	var b SessionBody
	if err := bind(c, &b, strict); err != nil {
		return 0, err
	}
	if b.TTLMs < 0 {
		return 0, badRequest("ttl_ms must not be negative")
	}
	return time.Duration(min(b.TTLMs, int64(24*time.Hour/time.Millisecond))) * time.Millisecond, nil
}

// createResourceSession is POST /v1/resource-sessions.
func (s *Server) createResourceSession(c echo.Context) error {
	ttl, err := sessionTTL(c)
	if err != nil {
		return err
	}
	res, err := s.eng.CreateResourceSession(c.Request().Context(), ActorOf(c), ttl)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, res)
}

// getResourceSession is GET /v1/resource-sessions/{session_id}.
func (s *Server) getResourceSession(c echo.Context) error {
	res, err := s.eng.GetResourceSession(c.Request().Context(), ActorOf(c), c.Param("session_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// heartbeatResourceSession is POST /v1/resource-sessions/{session_id}/heartbeat.
func (s *Server) heartbeatResourceSession(c echo.Context) error {
	ttl, err := sessionTTL(c)
	if err != nil {
		return err
	}
	res, err := s.eng.HeartbeatResourceSession(c.Request().Context(), ActorOf(c), c.Param("session_id"), ttl)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// endResourceSession is POST /v1/resource-sessions/{session_id}/end.
func (s *Server) endResourceSession(c echo.Context) error {
	if err := bind(c, &struct{}{}, strict); err != nil { // an empty or {} body
		return err
	}
	res, err := s.eng.EndResourceSession(c.Request().Context(), ActorOf(c), c.Param("session_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// revokeResourceLease is POST /v1/admin/resource-leases/{lease_id}/revoke?tenant=.
func (s *Server) revokeResourceLease(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	if err := noBody(c); err != nil {
		return err
	}
	res, err := s.eng.RevokeResourceLease(c.Request().Context(), ActorOf(c), tenant, c.Param("lease_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}
