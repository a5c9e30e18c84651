package httpapi

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Resource leases (KLIS-3) over HTTP: /v1/resource-leases… for any key (the
// holder is the key's principal), /v1/admin/resource-leases… for operators.

// resourceLeaseRoutes registers the resource lease routes.
func (s *Server) resourceLeaseRoutes(e *echo.Echo, auth echo.MiddlewareFunc, admins echo.MiddlewareFunc) {
	g := e.Group("/v1/resource-leases", auth)
	g.POST("", s.acquireResources)
	g.GET("", s.resourceHolders)
	g.POST("/heartbeat", s.heartbeatResources)
	g.POST("/release", s.releaseResources)
	g.POST("/verify", s.verifyResources)
	g.POST("/die-restart", s.dieRestart)
	g.POST("/:lease_id/heartbeat", s.heartbeatResources)
	g.POST("/:lease_id/release", s.releaseResources)
	a := e.Group("/v1/admin/resource-leases", auth, admins)
	a.GET("", s.adminResourceLeases)
	a.GET("/events", s.adminResourceLeaseEvents)
	a.POST("/:lease_id/revoke", s.revokeResourceLease)
	s.resourceSessionRoutes(e, auth)
}

// AcquireBody is the body of POST /v1/resource-leases: an intent manifest.
type AcquireBody struct {
	Intents []engine.ResourceIntent `json:"intents"`
	// TTLMs is the leases' TTL in milliseconds (default 60000, capped, and
	// raised to the minimum).
	TTLMs int64 `json:"ttl_ms,omitempty"`
	// PriorityAt is the request's immutable wait-die timestamp (RFC 3339);
	// default: the holder's bound priority while it holds live leases, else
	// the server's now, returned in the answer for retries. Older than the
	// bound priority is 409 conflict.
	PriorityAt *time.Time `json:"priority_at,omitempty"`
	// WaitSeconds long-polls (at most 30) while wait-die lets the request wait.
	WaitSeconds float64 `json:"wait_seconds,omitempty"`
	// Holder, when given, must be the key's principal (the holder is always
	// the caller; another name is 403 forbidden, for an admin too).
	Holder string `json:"holder,omitempty"`
	// SessionID grants the leases in the holder's session: they follow the
	// session's heartbeats and end with it (ttl_ms is the session's).
	SessionID string `json:"session_id,omitempty"`
}

// ResourceConflictBody is the 409 answer to a refused acquire: the error,
// the holder's lease it names, and whether wait-die lets the request wait.
type ResourceConflictBody struct {
	ErrorBody
	Conflict *host.ResourceLease `json:"conflict"`
	// Ahead is the older waiter the request is behind, when no live lease
	// conflicts (waiters are served oldest first; conflict is null then).
	Ahead   *host.ResourceWaiter `json:"ahead,omitempty"`
	WaitDie string               `json:"wait_die"` // "wait" (older: may wait) or "die" (refused)
	// PriorityAt is the priority the request ran with (its own, or the
	// holder's bound one): send it again to keep its seniority.
	PriorityAt time.Time `json:"priority_at"`
	ServerTime time.Time `json:"server_time"`
}

// LeaseIDsBody is the body of heartbeat, release and verify calls.
type LeaseIDsBody struct {
	LeaseIDs []string `json:"lease_ids,omitempty"`
	// TTLMs, on a heartbeat, sets a new TTL (capped, raised to the minimum)
	// from now on: the expiry becomes now + TTL, shorter or longer.
	TTLMs int64 `json:"ttl_ms,omitempty"`
	// Holder, on verify, asks for every active lease of the holder.
	Holder string `json:"holder,omitempty"`
}

func (s *Server) acquireResources(c echo.Context) error {
	a := ActorOf(c)
	var b AcquireBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	// The holder is the caller, an admin included: a lease held in another's
	// name would put that name on every grant, heartbeat and fencing token
	// of it. An admin takes leases away with release or revoke.
	if b.Holder != "" && b.Holder != a.Principal {
		return host.Errorf(host.CodeForbidden, "this key holds leases as %q, not %q: a lease's holder is the key that acquires it, an admin's included", a.Principal, b.Holder)
	}
	if b.WaitSeconds < 0 || math.IsNaN(b.WaitSeconds) {
		return badRequest("wait_seconds must not be negative")
	}
	if b.WaitSeconds > MaxWaitSeconds {
		b.WaitSeconds = MaxWaitSeconds
	}
	if b.TTLMs < 0 {
		return badRequest("ttl_ms must not be negative")
	}
	if b.TTLMs > int64(time.Hour/time.Millisecond)*24 {
		b.TTLMs = int64(time.Hour/time.Millisecond) * 24 // the engine caps it further
	}
	ctx := c.Request().Context()
	if b.WaitSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.drain, cancel)
		defer stop()
	}
	res, err := s.eng.AcquireResources(ctx, engine.AcquireRequest{Tenant: a.Tenant, Holder: a.Principal, Intents: b.Intents,
		TTL: time.Duration(b.TTLMs) * time.Millisecond, PriorityAt: b.PriorityAt, Wait: time.Duration(b.WaitSeconds * float64(time.Second)),
		SessionID: b.SessionID})
	var ce *engine.ResourceConflictError
	if errors.As(err, &ce) {
		wd := "die"
		if ce.MayWait {
			wd = "wait"
		}
		holder, ahead := s.eng.ConflictSeenBy(ctx, a, ce)
		return c.JSON(http.StatusConflict, ResourceConflictBody{ErrorBody: ErrorBody{Error: ce.Err.Code, Detail: ce.Err.Detail},
			Conflict: holder, Ahead: ahead, WaitDie: wd, PriorityAt: ce.PriorityAt, ServerTime: ce.ServerTime})
	}
	if err != nil {
		if errors.Is(err, context.Canceled) && s.drain.Err() != nil {
			return host.Errorf(host.CodeDatabaseUnavailable, "the gate is shutting down; acquire again")
		}
		return err
	}
	return c.JSON(http.StatusCreated, res)
}

// resourceHolders is GET /v1/resource-leases?resource=: who holds the
// resource now, without taking it (what a conflicting acquire would name).
// With wait_seconds it long-polls until nothing in the way of taking it
// (predicate, default MUTATES) is held: the wait of a request refused by
// wait-die, which takes nothing while it waits.
func (s *Server) resourceHolders(c echo.Context) error {
	q := c.QueryParams()
	for k, v := range q {
		if k != "resource" && k != "wait_seconds" && k != "predicate" {
			return badRequest("unknown query parameter %q; this call takes resource, wait_seconds and predicate", k)
		}
		if k != "resource" && len(v) != 1 {
			return badRequest("%s: give it once", k)
		}
	}
	if len(q["resource"]) != 1 {
		return badRequest("name one resource: ?resource=NAME")
	}
	if !q.Has("wait_seconds") && !q.Has("predicate") {
		res, err := s.eng.ResourceHolders(c.Request().Context(), ActorOf(c), q["resource"])
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, res)
	}
	var wait float64
	if v := q.Get("wait_seconds"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return badRequest("wait_seconds: a number of seconds, 0 or more")
		}
		wait = f
	}
	p := host.LeasePredicate(q.Get("predicate"))
	if p != "" && p != host.PredicateReads && p != host.PredicateMutates {
		return badRequest("predicate: READS or MUTATES")
	}
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	stop := context.AfterFunc(s.drain, cancel)
	defer stop()
	res, err := s.eng.AwaitResources(ctx, ActorOf(c), engine.AwaitRequest{Resources: q["resource"], Predicate: p,
		Wait: time.Duration(min(wait, 3600) * float64(time.Second))})
	if err != nil {
		if errors.Is(err, context.Canceled) && s.drain.Err() != nil {
			return host.Errorf(host.CodeDatabaseUnavailable, "the gate is shutting down; ask again")
		}
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// leaseIDs reads the lease ids of a call: the path's, or the body's.
func leaseIDs(c echo.Context) (LeaseIDsBody, error) {
	var b LeaseIDsBody
	if err := bind(c, &b, strict); err != nil {
		return b, err
	}
	if id := c.Param("lease_id"); id != "" {
		if len(b.LeaseIDs) > 0 {
			return b, badRequest("the lease id is in the path; lease_ids must not be given too")
		}
		b.LeaseIDs = []string{id}
	}
	if b.TTLMs < 0 {
		return b, badRequest("ttl_ms must not be negative")
	}
	return b, nil
}

func (s *Server) heartbeatResources(c echo.Context) error {
	b, err := leaseIDs(c)
	if err != nil {
		return err
	}
	if b.Holder != "" {
		return badRequest("holder is for verify; a heartbeat names lease_ids")
	}
	if b.TTLMs > int64(24*time.Hour/time.Millisecond) {
		b.TTLMs = int64(24 * time.Hour / time.Millisecond)
	}
	res, err := s.eng.HeartbeatResources(c.Request().Context(), ActorOf(c), b.LeaseIDs, time.Duration(b.TTLMs)*time.Millisecond)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

func (s *Server) releaseResources(c echo.Context) error {
	b, err := leaseIDs(c)
	if err != nil {
		return err
	}
	if b.Holder != "" || b.TTLMs != 0 {
		return badRequest("a release names lease_ids only")
	}
	res, err := s.eng.ReleaseResources(c.Request().Context(), ActorOf(c), b.LeaseIDs)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

func (s *Server) verifyResources(c echo.Context) error {
	b, err := leaseIDs(c)
	if err != nil {
		return err
	}
	if b.TTLMs != 0 {
		return badRequest("ttl_ms is for heartbeats")
	}
	res, err := s.eng.VerifyResources(c.Request().Context(), ActorOf(c), engine.VerifyRequest{IDs: b.LeaseIDs, Holder: b.Holder})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

func (s *Server) dieRestart(c echo.Context) error {
	var b struct{}
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	res, err := s.eng.DieRestart(c.Request().Context(), ActorOf(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// adminResourceLeases is GET /v1/admin/resource-leases?holder=&resource=&state=&live=&cursor=&limit=&tenant=.
func (s *Server) adminResourceLeases(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	limit, err := queryInt(c, "limit", 100)
	if err != nil {
		return err
	}
	f := store.ResourceLeaseFilter{Tenant: tenant, Holder: c.QueryParam("holder"), Cursor: c.QueryParam("cursor"), Limit: limit}
	if r := c.QueryParam("resource"); r != "" {
		n, err := host.NormalizeResource(r)
		if err != nil {
			return err
		}
		f.Resources = []string{n}
	}
	switch st := c.QueryParam("state"); st {
	case "", "all":
	case "held":
		now := s.eng.Clock().Now()
		f.LiveAt = &now
	case string(host.ResourceLeaseActive), string(host.ResourceLeaseReleased), string(host.ResourceLeaseExpired):
		f.States = []host.ResourceLeaseState{host.ResourceLeaseState(st)}
	default:
		return badRequest("state must be held, active, released, expired or all")
	}
	ls, cur, now, err := s.eng.ListResourceLeases(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"leases": ls, "next_cursor": cur, "server_time": now})
}

// adminResourceLeaseEvents is GET /v1/admin/resource-leases/events?lease_id=&resource=&cursor=&limit=&tenant=:
// the audit trail.
func (s *Server) adminResourceLeaseEvents(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	limit, err := queryInt(c, "limit", 100)
	if err != nil {
		return err
	}
	f := store.ResourceLeaseEventFilter{Tenant: tenant, LeaseID: c.QueryParam("lease_id"), Cursor: c.QueryParam("cursor"), Limit: limit}
	if r := c.QueryParam("resource"); r != "" {
		n, err := host.NormalizeResource(r)
		if err != nil {
			return err
		}
		f.Resource = n
	}
	evs, cur, err := s.eng.ResourceLeaseEvents(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"events": evs, "next_cursor": cur})
}

// --- metrics

// resourceLeaseMetrics counts resource lease events (granted, released,
// expired, refused) and tracks acquires waiting now; the held leases are
// counted from the store at scrape time.
type resourceLeaseMetrics struct {
	granted, released, expired, refused *prometheus.CounterVec
	waiting                             *prometheus.GaugeVec
}

func newResourceLeaseMetrics(reg *prometheus.Registry) *resourceLeaseMetrics {
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "asyncgate", Name: name, Help: help}, append([]string{"tenant"}, labels...))
		reg.MustRegister(c)
		return c
	}
	m := &resourceLeaseMetrics{
		granted:  cv("resource_leases_granted_total", "Resource leases granted.", "predicate"),
		released: cv("resource_leases_released_total", "Resource leases released by their holders."),
		expired:  cv("resource_leases_expired_total", "Resource leases that expired (holder lost)."),
		refused:  cv("resource_leases_refused_total", "Acquires refused (conflict or quota).", "reason"),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "asyncgate", Name: "resource_leases_waiting",
			Help: "Acquires waiting now for conflicting leases to end (wait-die: older requests)."}, []string{"tenant"}),
	}
	reg.MustRegister(m.waiting)
	return m
}

// onEvent counts a resource lease event; other events are ignored.
func (m *resourceLeaseMetrics) onEvent(ev engine.Event) {
	if m == nil {
		return
	}
	switch ev.Kind {
	case engine.EvResourceGranted:
		m.granted.WithLabelValues(ev.Tenant, ev.Detail).Inc()
	case engine.EvResourceReleased:
		m.released.WithLabelValues(ev.Tenant).Inc()
	case engine.EvResourceExpired:
		m.expired.WithLabelValues(ev.Tenant).Inc()
	case engine.EvResourceRefused:
		m.refused.WithLabelValues(ev.Tenant, ev.Detail).Inc()
	case engine.EvResourceWaiting:
		m.waiting.WithLabelValues(ev.Tenant).Inc()
	case engine.EvResourceWaited:
		m.waiting.WithLabelValues(ev.Tenant).Dec()
	}
}

var descResourceHeld = prometheus.NewDesc("asyncgate_resource_leases_held", "Resource leases honoured now, by predicate.", []string{"predicate"}, nil)

// resourceHeldCollector counts the held resource leases at scrape time.
type resourceHeldCollector struct {
	eng    *engine.Engine
	tenant string
}

func (g resourceHeldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descResourceHeld }

func (g resourceHeldCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := g.eng.CountLiveResourceLeases(ctx, g.tenant)
	if err != nil {
		return
	}
	for _, p := range []host.LeasePredicate{host.PredicateReads, host.PredicateMutates} {
		ch <- prometheus.MustNewConstMetric(descResourceHeld, prometheus.GaugeValue, float64(n[p]), string(p))
	}
}
