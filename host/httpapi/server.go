package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// DefaultBodyLimit is the largest request body accepted unless configured.
const DefaultBodyLimit = 1 << 20

// Config configures a Server. Engine is required.
type Config struct {
	Engine *engine.Engine
	Logger *slog.Logger // default slog.Default()
	// BodyLimit caps request bodies in bytes (default DefaultBodyLimit);
	// larger bodies are refused with 413 too_large.
	BodyLimit int64
	// Metrics, when set, is served at /metrics and times every request. Wire
	// Metrics.OnEvent into engine.Config.OnEvent to count engine events.
	Metrics *Metrics
	// MetricsPublic serves /metrics without a key; otherwise it needs an admin key.
	MetricsPublic bool
	// Authenticator resolves bearer credentials; give the one the other
	// doors use (the dashboard's sign-in) so a key revoked here is
	// forgotten there too. Nil: one of the server's own, caching for
	// AuthCacheTTL.
	Authenticator *auth.Authenticator
	// AuthCacheTTL is how long the server's own Authenticator caches a
	// resolved key (0: 5 s; negative: off).
	AuthCacheTTL time.Duration
	// Version is reported by /healthz and in the obligations API's server block.
	Version string
	// StoreTimeout bounds each store call a request makes, every route's
	// and every door's mounted here (MCP, the dashboard) alike
	// (store.WithTimeout): a call the database has not answered by then
	// fails, and the request answers 503 database_unavailable. It bounds
	// the store's calls only, so a long-poll, a result streamed from its
	// channel or a plugin call keeps its own bound. 0: store.DefaultTimeout
	// (15 s); negative: none.
	StoreTimeout time.Duration
}

// Option changes a Server as it is built.
type Option func(*Server)

// WithRoutes lets another door (the MCP server, the dashboard, the plugins
// list) mount routes on the gate's echo instance; cmd/gate composes them.
// auth is the bearer-key middleware; handlers behind it find the caller
// with ActorOf or auth.ActorFromContext.
func WithRoutes(fn func(e *echo.Echo, auth echo.MiddlewareFunc)) Option {
	return func(s *Server) { s.extra = append(s.extra, fn) }
}

// Server is the gate's HTTP door.
type Server struct {
	eng     *engine.Engine
	st      store.Store
	log     *slog.Logger
	cfg     Config
	e       *echo.Echo
	authn   *auth.Authenticator
	metrics *Metrics
	extra   []func(*echo.Echo, echo.MiddlewareFunc)

	pluginsPending func() []string // plugins still loading (WithPluginsPending), for /readyz

	hsMu    sync.Mutex
	methods routeMethods

	hs       *http.Server
	shutdown bool            // Shutdown was called; a later Serve returns at once
	drain    context.Context // done when shutdown begins: ends long-polls
	endDrain context.CancelFunc

	ready readyProbe
}

// New builds a Server and its routes.
func New(cfg Config, opts ...Option) (*Server, error) {
	if cfg.Engine == nil {
		return nil, errors.New("httpapi: Config.Engine is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = DefaultBodyLimit
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = store.DefaultTimeout
	}
	s := &Server{eng: cfg.Engine, st: cfg.Engine.Store(), log: cfg.Logger, cfg: cfg, metrics: cfg.Metrics}
	s.drain, s.endDrain = context.WithCancel(context.Background())
	s.authn = cfg.Authenticator
	if s.authn == nil {
		s.authn = auth.NewAuthenticator(s.st, cfg.AuthCacheTTL)
	}
	for _, o := range opts {
		o(s)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.JSONSerializer = rawJSONSerializer{}
	e.Use(noSniff, s.recoverer, s.storeTimeout, s.bodyLimit, refuseNUL, refuseBadURL, traceRequest)
	if s.metrics != nil {
		e.Use(s.metrics.middleware)
		s.metrics.watch(s.eng, s.st)
	}
	s.e = e
	s.routes()
	for _, fn := range s.extra {
		fn(e, authMiddleware(s.authn))
	}
	return s, nil
}

// Echo returns the echo instance, for tests and for mounting more routes.
func (s *Server) Echo() *echo.Echo { return s.e }

// Handler returns the server as an http.Handler.
func (s *Server) Handler() http.Handler { return s.e }

// Authenticator returns the server's key resolver.
func (s *Server) Authenticator() *auth.Authenticator { return s.authn }

// AuthMiddleware returns the bearer-key middleware.
func (s *Server) AuthMiddleware() echo.MiddlewareFunc { return authMiddleware(s.authn) }

// Serve answers requests on ln until Shutdown. It returns nil after a clean shutdown.
// Shutdown may come first (a signal during start-up): Serve then closes ln
// and returns nil.
func (s *Server) Serve(ln net.Listener) error {
	s.hsMu.Lock()
	if s.shutdown {
		s.hsMu.Unlock()
		ln.Close()
		return nil
	}
	s.hs = &http.Server{
		Handler:           s.e,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      90 * time.Second, // above the longest long-poll (30 s)
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	hs := s.hs
	s.hsMu.Unlock()
	err := hs.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections, ends long-polls (they answer 204),
// and waits for in-flight requests until ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.endDrain()
	s.hsMu.Lock()
	s.shutdown = true
	hs := s.hs
	s.hsMu.Unlock()
	if hs == nil {
		return nil
	}
	return hs.Shutdown(ctx)
}

// recoverer turns a handler panic into a logged 500 internal_error.
func (s *Server) recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				s.log.Error("handler panic", "method", c.Request().Method, "path", c.Request().URL.Path,
					"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = host.Errorf(host.CodeInternal, "panic: %v", r)
			}
		}()
		return next(c)
	}
}

// storeTimeout marks the request's context with Config.StoreTimeout, the
// bound of each store call it makes (store.WithTimeout).
func (s *Server) storeTimeout(next echo.HandlerFunc) echo.HandlerFunc {
	if s.cfg.StoreTimeout < 0 {
		return next
	}
	return func(c echo.Context) error {
		r := c.Request()
		c.SetRequest(r.WithContext(store.WithTimeout(r.Context(), s.cfg.StoreTimeout)))
		return next(c)
	}
}

// bodyLimit refuses bodies over the limit: at once when Content-Length says
// so, and while reading otherwise. A body with a Content-Encoding other than
// identity is refused (415) before it is read: inflating it would let a small
// body stand for one far over the limit.
//
// A body refused unread (or cut at the limit) is read to its end and
// dropped, up to drainLimit bytes within drainTime, before the answer: a
// client that sends its whole body before it reads (Python's urllib, most
// simple clients) otherwise has its connection reset mid-send and never
// sees the 413, so it cannot tell a body too large from a network fault.
func (s *Server) bodyLimit(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		body := r.Body != nil && r.Body != http.NoBody
		if body {
			if enc, ok := encoded(r.Header); ok {
				drainRefused(c, r.Body, false)
				return host.Errorf(host.CodeUnsupportedMediaType, "the request body is sent with Content-Encoding %q; the gate reads bodies only as sent (identity): send it uncompressed", enc)
			}
		}
		if r.ContentLength > s.cfg.BodyLimit {
			drainRefused(c, r.Body, false)
			return host.Errorf(host.CodeTooLarge, "the request body is %d bytes, the limit is %d", r.ContentLength, s.cfg.BodyLimit)
		}
		if !body {
			return next(c)
		}
		sent := r.Body
		lb := &limitedBody{ReadCloser: http.MaxBytesReader(c.Response(), sent, s.cfg.BodyLimit)}
		r.Body = lb
		err := next(c) // the answer may be written already (an inner middleware's c.Error)
		if lb.cut {
			drainRefused(c, sent, true)
		}
		return err
	}
}

// limitedBody is a request body cut at the limit, which remembers whether
// the cut was reached.
type limitedBody struct {
	io.ReadCloser
	cut bool
}

func (l *limitedBody) Read(p []byte) (int, error) {
	n, err := l.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if err != nil && errors.As(err, &mbe) {
		l.cut = true
	}
	return n, err
}

// How much of a refused body the gate reads and drops so that its client
// gets the answer (bodyLimit): a client sending more, or more slowly, has
// its connection closed instead.
const (
	drainLimit = 64 << 20
	drainTime  = 15 * time.Second
)

// drainRefused reads what is left of a refused request body, up to
// drainLimit within drainTime, and asks for the connection to be closed
// after the answer. It reads nothing of a request that waits for
// "100 Continue" before sending its body, unless its reading has started (reading would ask for the body
// the answer refuses: Go's server then answers without it and closes), nor
// of one without a credential (an Authorization header or the dashboard's
// session cookie): anonymous callers keep the old bound on what the gate
// reads for them.
func drainRefused(c echo.Context, body io.ReadCloser, started bool) {
	r := c.Request()
	if body == nil || body == http.NoBody {
		return
	}
	c.Response().Header().Set("Connection", "close")
	if !started && strings.EqualFold(r.Header.Get("Expect"), "100-continue") || r.Header.Get(echo.HeaderAuthorization) == "" && len(r.Cookies()) == 0 {
		return
	}
	rc := http.NewResponseController(c.Response().Writer)
	_ = rc.SetReadDeadline(time.Now().Add(drainTime))
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainLimit))
}

// encoded returns the request's Content-Encoding when it names any coding
// other than identity.
func encoded(h http.Header) (string, bool) {
	for _, v := range h.Values("Content-Encoding") {
		for _, tok := range strings.Split(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" && !strings.EqualFold(tok, "identity") {
				return strings.Join(h.Values("Content-Encoding"), ", "), true
			}
		}
	}
	return "", false
}

// noSniff marks every answer's Content-Type as the only reading of its
// body: answers echo what callers sent (an error names the path it did not
// find, a task shows its params), and a browser must never take such JSON
// for a page or a script.
func noSniff(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("X-Content-Type-Options", "nosniff")
		return next(c)
	}
}

// refuseNUL refuses a request whose path or query holds a NUL character
// (%00): PostgreSQL refuses U+0000 in text and SQLite would look it up, so
// the two stores would answer apart. Bodies are checked as they are decoded
// (jsonkeys), on both doors.
func refuseNUL(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		u := c.Request().URL
		if strings.Contains(u.Path, "\x00") || strings.Contains(u.RawPath, "%00") || strings.Contains(u.RawQuery, "%00") || strings.Contains(u.RawQuery, "\x00") {
			return badRequest("the request's path or query holds a NUL character (%%00), which no parameter accepts")
		}
		return next(c)
	}
}

// routes registers every route. Handlers are in worker.go, seed.go, agent.go
// and admin.go.
func (s *Server) routes() {
	e := s.e
	auth := authMiddleware(s.authn)
	workers := requireRole(engine.RoleWorker, engine.RoleAdmin)
	agents := requireRole(engine.RoleAgent, engine.RoleAdmin)
	admins := requireRole(engine.RoleAdmin)

	e.GET("/healthz", s.healthz, keyless)
	e.GET("/readyz", s.readyz, keyless)
	if s.metrics != nil {
		if s.cfg.MetricsPublic {
			e.GET("/metrics", s.metrics.handler(true), keyless)
		} else {
			// A key resolved before a database outage still reads the
			// process and HTTP series through it (auth.AllowStale).
			e.GET("/metrics", s.metrics.handler(false), allowStaleKey, auth, admins)
		}
	}
	e.RouteNotFound("/*", func(c echo.Context) error {
		return echo.ErrNotFound // the error handler tells 404 from 405
	})

	// Worker API, canonical.
	w := e.Group("/v1/leases", auth, workers)
	w.POST("", s.lease)
	w.POST("/batch", s.leaseBatch)
	w.POST("/:lease_id/accept", s.accept)
	w.POST("/:lease_id/heartbeat", s.heartbeat)
	w.POST("/:lease_id/complete", s.complete)
	w.POST("/:lease_id/fail", s.fail)
	w.POST("/:lease_id/release", s.release)
	w.POST("/:lease_id/snooze", s.snooze)

	// Worker API, the seeds' spellings.
	e.POST("/lease", s.seedLease, auth, workers)
	e.POST("/lease/:lease_id/heartbeat", s.seedLeaseHeartbeat, auth, workers)
	sw := e.Group("/worker", seedErrors, auth, workers)
	sw.POST("/lease", s.envelopeLease(false))
	sw.POST("/heartbeat", s.envelopeHeartbeat)
	sw.POST("/complete", s.envelopeComplete)
	sw.POST("/fail", s.envelopeFail)
	sws := e.Group("/workers", seedErrors, auth, workers)
	sws.POST("/lease_task", s.envelopeLease(true))
	sws.POST("/heartbeat", s.envelopeHeartbeat)
	sws.POST("/complete", s.envelopeComplete)
	sws.POST("/fail", s.envelopeFail)

	// Agent API.
	v1 := e.Group("/v1", auth)
	v1.POST("/tasks", s.enqueue, agents)
	v1.POST("/tasks/batch", s.enqueueBatch, agents)
	v1.GET("/tasks", s.listTasks)
	v1.GET("/tasks/:id", s.getTask)
	v1.GET("/tasks/:id/progress", s.progress)
	v1.GET("/tasks/:id/attempts", s.attempts)
	v1.GET("/tasks/:id/timeline", s.timeline)
	v1.POST("/tasks/:id/cancel", s.cancel, agents)
	v1.GET("/tasks/:id/result", s.fetchResult)
	v1.POST("/tasks/:id/archive", s.archive, agents)
	v1.GET("/obligations/open", s.openObligations)
	v1.GET("/receipts", s.listReceipts)
	v1.POST("/receipts", s.appendReceipt)
	v1.POST("/receipts/check-terminator", s.checkTerminator)
	v1.GET("/receipts/:id", s.getReceipt)
	v1.GET("/receipts/:id/chain", s.chain)
	s.workflowRoutes(v1, agents)
	v1.POST("/schedules", s.createSchedule, agents)
	v1.GET("/schedules", s.listSchedules, agents)
	v1.GET("/schedules/:id", s.getSchedule, agents)
	v1.GET("/schedules/:id/receipts", s.scheduleReceipts, agents)
	v1.PATCH("/schedules/:id", s.updateSchedule, agents)
	v1.POST("/schedules/:id/pause", s.pauseSchedule, agents)
	v1.POST("/schedules/:id/resume", s.resumeSchedule, agents)
	v1.DELETE("/schedules/:id", s.deleteSchedule, agents)
	s.deliveryRoutes(auth)
	s.emailRoutes(auth)

	// Operator API.
	a := e.Group("/v1/admin", auth, admins)
	a.PUT("/task-types/:name", s.putTaskType)
	a.PATCH("/task-types/:name", s.patchTaskType)
	a.DELETE("/task-types/:name", s.deleteTaskType)
	a.GET("/task-types", s.listTaskTypes)
	a.GET("/task-types/:name", s.getTaskType)
	a.POST("/task-types/:name/pause", s.pauseTaskType)
	a.POST("/task-types/:name/resume", s.resumeTaskType)
	a.POST("/keys", s.createKey)
	a.GET("/keys", s.listKeys)
	a.DELETE("/keys/:id", s.revokeKey)
	a.GET("/dead-letters", s.deadLetters)
	a.POST("/dead-letters/:task_id/redrive", s.redrive)
	a.GET("/workers", s.listWorkers)
	// The spec's worker key endpoint.
	e.POST("/admin/workers/create_key", s.seedCreateWorkerKey, seedErrors, auth, admins)

	s.openAPIRoutes()
	s.statsRoutes(auth)
	s.resourceLeaseRoutes(e, auth, admins)
}

// WithPluginsPending makes /readyz answer 503 plugin_not_ready, naming the
// plugins, while fn returns any: plugins still in their first load after a
// start (see Server.readyz).
func WithPluginsPending(fn func() []string) Option {
	return func(s *Server) { s.pluginsPending = fn }
}

// seedErrors marks the seed /worker/* and /workers/* routes, whose error
// answers also carry the spec's "message" field.
func seedErrors(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Set(ctxKeySeedErrors, true)
		return next(c)
	}
}

// healthz answers 200 while the process runs, with the gate's version.
func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok", "version": s.cfg.Version})
}

// readyProbeInterval is how long a store probe's outcome answers /readyz:
// a probe commits a write, so a busy load balancer costs at most one write a
// second.
const readyProbeInterval = time.Second

// readyRefusedHold is how long a commit the database refused keeps /readyz
// 503, whatever the probe's own write does meanwhile: on a full disk the
// probe's small write may still fit where an enqueue's does not, and a host
// whose enqueues fail must not look ready between them.
const readyRefusedHold = 5 * time.Second

// readyProbe reads the store on every call (cheap) and runs its Ping, which
// commits a write, at most once per readyProbeInterval; callers in between,
// or waiting on the probe in flight, share that outcome. A commit the
// database refused (store.CommitHealth: anyone's, not only the probe's)
// answers at once and for readyRefusedHold after it: a full disk shows on
// the first call after the first enqueue it failed.
type readyProbe struct {
	mu  sync.Mutex // held while a probe runs
	at  time.Time
	err error
}

func (p *readyProbe) check(ctx context.Context, st store.Store) error {
	ctx, cancel := context.WithTimeoutCause(ctx, readyProbeTimeout, errReadyProbeTimeout)
	defer cancel()
	if err := st.View(ctx, func(r store.Reader) error {
		_, err := r.QueueStats(ctx, store.ProbeTenant)
		return err
	}); err != nil {
		return probeTimeout(ctx, err)
	}
	if ch, ok := st.(store.CommitHealth); ok {
		if at, err := ch.RefusedCommit(); err != nil && time.Since(at) < readyRefusedHold {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < readyProbeInterval {
		return p.err
	}
	err := st.Ping(ctx)
	if ctx.Err() != nil {
		return probeTimeout(ctx, err) // this caller went away or waited too long: no verdict on the store
	}
	p.at, p.err = time.Now(), err
	return err
}

// readyProbeTimeout bounds one /readyz check of the store.
const readyProbeTimeout = 5 * time.Second

var errReadyProbeTimeout = errors.New("no answer within " + readyProbeTimeout.String())

// probeTimeout is the probe's failure when ctx ended at the probe's own
// bound (a store that does not answer): that, rather than "context deadline
// exceeded" or what a store call's caller is told (a write's unknown
// outcome).
func probeTimeout(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), errReadyProbeTimeout) {
		return errReadyProbeTimeout
	}
	return err
}

// readyz answers 200 {"status":"ready","database":<driver>} when this host
// can do its job now, else the 503 notReady gives.
func (s *Server) readyz(c echo.Context) error {
	if err := s.notReady(c.Request().Context()); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready", "database": s.st.Driver()})
}

// notReady returns why this host cannot do its job now, one check per
// reason, or nil. The store: it must read, and commit a write (a full disk,
// a damaged or unreachable database answers 503 database_unavailable, whose
// detail carries the store's error). The plugins: none may still be in its
// first load (pluginsNotReady).
func (s *Server) notReady(ctx context.Context) error {
	if err := s.ready.check(ctx, s.st); err != nil {
		return host.WrapError(host.CodeDatabaseUnavailable, err, "the store is not available: "+host.ErrorDetail(err))
	}
	return s.pluginsNotReady()
}

// pluginsNotReady is /readyz's plugin reason: 503 plugin_not_ready, naming
// them, while any plugin is still in its first load. A start serves each
// plugin from wazero's interpreter while it compiles, so this lasts about
// a second on a fresh data folder and well under that from the
// compilation cache.
func (s *Server) pluginsNotReady() error {
	if s.pluginsPending == nil {
		return nil
	}
	if pending := s.pluginsPending(); len(pending) > 0 {
		return host.Errorf(host.CodePluginNotReady, "plugins not serving yet (loading, or retrying a start that ran out of time): %s", strings.Join(pending, ", "))
	}
	return nil
}

// noBody is the body check of a /v1 route that takes no fields: an empty
// body or {} passes; anything else (malformed JSON, an unknown field) is a
// 400 bad_request, as docs/http.md says of every /v1 body.
func noBody(c echo.Context) error {
	return bind(c, &struct{}{}, strict)
}

// queryInt reads an optional integer query parameter.
func queryInt(c echo.Context, name string, def int) (int, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, badRequest("query parameter %s must be a non-negative integer", name)
	}
	return n, nil
}

// rawJSONSerializer is echo's JSON serializer without HTML escaping: a
// receipt's body is hashed over its stored bytes, and an answer that wrote
// its <, > and & as \u003c, \u003e and \u0026 would hand verifiers bytes the
// hash does not cover. The API answers JSON, never HTML, so nothing needs the
// escapes.
type rawJSONSerializer struct{}

// Serialize writes i as JSON (indented when indent is not empty).
func (rawJSONSerializer) Serialize(c echo.Context, i any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc.Encode(i)
}

// Deserialize reads a JSON request body into i, as echo's default does.
func (rawJSONSerializer) Deserialize(c echo.Context, i any) error {
	return echo.DefaultJSONSerializer{}.Deserialize(c, i)
}

// allowStaleKey lets the key of a request be answered from the key cache
// past its TTL while the store is unavailable (auth.AllowStale): for
// /metrics alone, which reads no data with the caller's authority beyond
// gauges that say when the store failed them.
func allowStaleKey(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.SetRequest(c.Request().WithContext(auth.AllowStale(c.Request().Context())))
		return next(c)
	}
}
