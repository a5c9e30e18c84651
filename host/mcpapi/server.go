package mcpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/jsonkeys"
	"github.com/asyncgate/asyncgate/host/tracing"
)

// Path is where the streamable HTTP endpoint is mounted.
const Path = "/mcp"

// DefaultMaxLeaseWait caps worker_lease_task's wait_seconds unless configured.
// It stays well below the request timeouts of MCP clients (the TypeScript SDK
// gives up after 60 s) and the HTTP server's write timeout.
const DefaultMaxLeaseWait = 20 * time.Second

// writeTimeout bounds an engine write that runs detached from the request.
const writeTimeout = 30 * time.Second

// Config configures a Server. Engine is required.
type Config struct {
	Engine *engine.Engine
	Logger *slog.Logger // default slog.Default()
	// Version is reported to clients in the initialize answer.
	Version string
	// AllowAnyHost turns off mcp-go's DNS-rebinding protection, which answers
	// 403 to a request that arrives on a loopback address with a Host header
	// that is not a localhost name. Turn it on only behind a reverse proxy on
	// the same machine that keeps the public Host header (gate serve
	// --mcp-allow-any-host); better, make the proxy send Host: localhost.
	AllowAnyHost bool
	// MaxLeaseWait caps the long-poll of worker_lease_task (default
	// DefaultMaxLeaseWait).
	MaxLeaseWait time.Duration
	// TaskResultWait bounds how long tasks/result waits for a task to end
	// (default DefaultTaskResultWait); a task still working then is a
	// JSON-RPC error saying to ask again.
	TaskResultWait time.Duration
	// WatchInterval is how often the tasks connected sessions care about are
	// read again for notifications (default DefaultWatchInterval).
	WatchInterval time.Duration
	// KeyCheckInterval is how long a key found valid is believed before a
	// session that outlives its requests (an open event stream, a
	// notification, a stdio session's next request) reads it again; a
	// session whose key was revoked is dropped, its open event streams
	// ended, and a stdio session's requests refused (default
	// DefaultKeyCheckInterval).
	KeyCheckInterval time.Duration
	// Challenge is the WWW-Authenticate value of a 401 the door answers
	// itself, for request r refused with err (unauthorized): a request on
	// a session whose key was revoked after the auth middleware let it
	// through. The gate passes its key resolver's, so that this 401 names
	// the OAuth resource metadata as the middleware's do (MCP
	// authorization). Default: Bearer realm="asyncgate".
	Challenge func(r *http.Request, err error) string
	// ValidateOutput checks every tool result against the tool's output
	// schema (a failure becomes a tool error). For tests.
	ValidateOutput bool
}

// Server is the gate's MCP door. One Server serves streamable HTTP and any
// number of stdio sessions.
type Server struct {
	eng  *engine.Engine
	log  *slog.Logger
	cfg  Config
	mcp  *server.MCPServer
	http *server.StreamableHTTPServer

	roles map[string][]string   // tool name -> roles that may use it
	args  map[string]*argSchema // tool name -> its input schema, checked before it runs

	sessMu sync.Mutex
	// sessions are the live sessions by id: only ids the gate issued
	// (openSession) and not yet ended; any other id is answered 404.
	sessions map[string]*session
	// byKey and perTenant index the HTTP sessions for their caps
	// (openSession): key hash -> id -> session, tenant -> count.
	byKey     map[string]map[string]*session
	perTenant map[string]int
	typeFP    map[string]string // tenant -> fingerprint of its task types

	keyMu     sync.Mutex
	keyChecks map[string]keyCheck // key hash -> last read of the key

	watchMu   sync.Mutex
	watched   map[string]*watched // task id -> last seen
	watchDone chan struct{}

	// resourceWatches counts the running watches of subscribed leased
	// resources (resourcewatch.go).
	resourceWatches atomic.Int64

	drain     context.Context // done once Close is called: ends lease waits
	endDrain  context.CancelFunc
	closeOnce sync.Once
}

// New builds a Server with every tool registered.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil {
		return nil, errors.New("mcpapi: Config.Engine is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.MaxLeaseWait <= 0 {
		cfg.MaxLeaseWait = DefaultMaxLeaseWait
	}
	if cfg.TaskResultWait <= 0 {
		cfg.TaskResultWait = DefaultTaskResultWait
	}
	if cfg.WatchInterval <= 0 {
		cfg.WatchInterval = DefaultWatchInterval
	}
	if cfg.KeyCheckInterval <= 0 {
		cfg.KeyCheckInterval = DefaultKeyCheckInterval
	}
	s := &Server{eng: cfg.Engine, log: cfg.Logger, cfg: cfg, roles: map[string][]string{}, args: map[string]*argSchema{},
		sessions: map[string]*session{}, byKey: map[string]map[string]*session{}, perTenant: map[string]int{}, typeFP: map[string]string{}, keyChecks: map[string]keyCheck{}, watched: map[string]*watched{}, watchDone: make(chan struct{})}
	s.drain, s.endDrain = context.WithCancel(context.Background())
	opts := []server.ServerOption{
		server.WithToolCapabilities(true), // the task types are tools: they change
		server.WithResourceCapabilities(true, false),
		// Answered here, durably (tasks.go); mcp-go only advertises them.
		server.WithTaskCapabilities(true, true, true),
		server.WithRecovery(),
		server.WithInstructions(instructions),
		server.WithToolFilter(s.filterTools),
	}
	if cfg.ValidateOutput {
		opts = append(opts, server.WithOutputSchemaValidation())
	}
	s.mcp = server.NewMCPServer("asyncgate", cfg.Version, opts...)
	s.agentTools()
	s.workflowTools()
	s.workerTools()
	s.taskTypeTools()
	s.taskResources()
	s.resourceLeaseTools()
	s.deliveryTools()
	s.emailTools()
	s.scheduleTools()
	s.http = server.NewStreamableHTTPServer(s.mcp,
		server.WithHTTPContextFunc(contextWithActor),
		server.WithDisableLocalhostProtection(cfg.AllowAnyHost),
		server.WithStreamableHTTPLogger(cfg.Logger),
	)
	go s.watchLoop()
	return s, nil
}

// instructions is sent to clients at initialize; agents read it as guidance.
const instructions = `AsyncGate holds long-running work for you across sessions.
Start a session with list_open_obligations to see what you are owed (tasks you queued) and what you owe.
list_task_types lists the kinds of work you can hand off; each is also a tool of its own name, best called as an MCP task (tasks/get, tasks/result), and your tasks outlive this session.
Hand work off with such a tool or queue_task, then continue with your other work: do not wait or poll in a loop.
Check back with check_task_status no sooner than poll_suggestion_seconds later (or in a later session); when the status is succeeded, call fetch_task_result, then archive_task_result once you have kept what you need.
Every error result is {"error": code, "detail": text}; not_found means the task does not exist or is not yours.`

// MCPServer returns the underlying mcp-go server (for in-process clients and tests).
func (s *Server) MCPServer() *server.MCPServer { return s.mcp }

// Handler returns the streamable HTTP handler. It expects the caller's Actor
// in the request context (auth.WithActor); Mount puts it there through the
// gate's bearer-key middleware. A request without one is refused.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Mount registers the streamable HTTP endpoint at Path on e behind auth, the
// gate's bearer-key middleware: no or a bad key is a 401 JSON error before
// mcp-go sees the request. cmd/gate mounts it on the HTTP door with
// httpapi.WithRoutes(s.Mount).
func (s *Server) Mount(e *echo.Echo, auth echo.MiddlewareFunc) {
	e.Any(Path, echo.WrapHandler(s.Handler()), auth)
}

// Close ends worker lease waits, tasks/result waits and open event streams
// at once, and stops the notifications; call it when the gate begins to shut
// down, before the HTTP server drains. Tools keep answering afterwards.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.endDrain()
		<-s.watchDone
	})
}

// contextWithActor carries the Actor the auth middleware put in the HTTP
// request's context, and when its credential expires, into the context
// mcp-go gives the tool handlers.
func contextWithActor(ctx context.Context, r *http.Request) context.Context {
	if a, ok := auth.ActorFromContext(r.Context()); ok {
		ctx = auth.WithActor(ctx, a)
	}
	if exp, ok := auth.ExpiryFromContext(r.Context()); ok {
		ctx = auth.WithExpiry(ctx, exp)
	}
	return ctx
}

// Roles that may use each kind of tool, as on the HTTP routes.
var (
	anyRole    = []string{engine.RoleAgent, engine.RoleAdmin, engine.RoleWorker}
	agentRoles = []string{engine.RoleAgent, engine.RoleAdmin}
	workerRole = []string{engine.RoleWorker}
)

// filterTools hides (and, at call time, refuses) the tools the caller's role
// may not use. A context without an Actor sees nothing.
//
// It also adds the tools of the caller's task types (tasktypes.go) to a full
// listing, but not to mcp-go's call-time check of one built-in tool.
func (s *Server) filterTools(ctx context.Context, tools []mcp.Tool) (out []mcp.Tool) {
	a, ok := auth.ActorFromContext(ctx)
	out = tools[:0:0]
	if !ok {
		return out
	}
	if len(tools) > 1 {
		defer func() {
			out = append(out, s.typeTools(ctx, a)...)
			slices.SortFunc(out, func(x, y mcp.Tool) int { return strings.Compare(x.Name, y.Name) })
		}()
	}
	for _, t := range tools {
		for _, r := range s.roles[t.Name] {
			if r == a.Role {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// handlerFunc is a tool body: it returns the structured result and the
// readable text, or an error that becomes a tool error.
type handlerFunc func(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error)

// add registers a tool usable by roles. Its input schema refuses arguments
// it does not name (additionalProperties false), as bind does, and every
// call is checked against it before h runs (argSchema.check).
func (s *Server) add(t mcp.Tool, roles []string, h handlerFunc) {
	s.roles[t.Name] = roles
	if t.InputSchema.AdditionalProperties == nil {
		t.InputSchema.AdditionalProperties = false
	}
	as, err := compileArgs(t)
	if err != nil {
		panic(err) // a tool declared with a schema that does not compile
	}
	s.args[t.Name] = as
	s.mcp.AddTool(t, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		a, ok := auth.ActorFromContext(ctx)
		if !ok {
			return toolError(host.Errorf(host.CodeUnauthorized, "no caller identity: connect with an API key")), nil
		}
		allowed := false
		for _, r := range roles {
			allowed = allowed || r == a.Role
		}
		if !allowed {
			return toolError(host.Errorf(host.CodeForbidden, "%s needs a key with role %s; yours is %s", t.Name, strings.Join(roles, " or "), a.Role)), nil
		}
		if err := as.check(req.GetRawArguments()); err != nil {
			return toolError(err), nil
		}
		ctx, done := s.bound(ctx, sessionFrom(ctx))
		defer done()
		ctx, span := traceCall(ctx, t.Name, req)
		defer span.End()
		v, text, err := h(ctx, a, req)
		tracing.RecordError(span, err)
		if err != nil {
			if host.ErrorCode(err) == host.CodeInternal {
				s.log.Error("mcp tool failed", "tool", t.Name, "principal", a.Principal, "err", err)
			}
			return toolError(err), nil
		}
		return result(v, text), nil
	})
}

// ErrorBody is the structured content of a tool error: the HTTP API's error shape.
type ErrorBody struct {
	Error  string `json:"error"`
	Detail string `json:"detail,omitempty"`
	// ServerTime is the gate's clock when a resource lease refusal was
	// decided (lease_expired, verify_required, quota_exceeded, conflict).
	ServerTime *time.Time `json:"server_time,omitempty"`
	// RetryAfterSeconds is how long until the refusal's cause passes,
	// when the refusal knows it (the HTTP door's Retry-After): an email
	// budget's next message, a lease-time quota window's end.
	RetryAfterSeconds int `json:"retry_after_seconds,omitempty"`
}

// errorBody is err's ErrorBody with code and detail as the caller words
// them.
func errorBody(err error, code, detail string) ErrorBody {
	body := ErrorBody{Error: code, Detail: detail}
	if at := host.ErrorServerTime(err); !at.IsZero() {
		body.ServerTime = &at
	}
	if d := host.ErrorRetryAfter(err); d > 0 {
		body.RetryAfterSeconds = host.RetryAfterSeconds(d)
	}
	return body
}

// toolError turns err into an MCP tool error with the HTTP API's code: its
// text is the JSON {"error": code, "detail": text}. It carries no structured
// content, which clients check against the tool's output schema (the
// TypeScript SDK does so for errors too, and would turn a tool error into a
// protocol error that loses the code).
func toolError(err error) *mcp.CallToolResult {
	code, detail := host.ErrorCode(err), host.ErrorDetail(err)
	switch {
	case errors.Is(err, context.Canceled):
		code, detail = host.CodeBadRequest, "the request was canceled"
	case code == host.CodeDatabaseUnavailable:
		// The store's own account (a timeout it names, an update whose
		// outcome is unknown) says more than "timed out".
	case errors.Is(err, context.DeadlineExceeded):
		code, detail = host.CodeDatabaseUnavailable, "the request timed out before the store answered: if it asked for a change, its outcome is unknown (it may still commit); read it back, or retry the same call"
	case code == host.CodeInternal:
		detail = "an internal error occurred; it was logged"
	}
	b, _ := json.Marshal(errorBody(err, code, detail))
	return &mcp.CallToolResult{
		Content: []mcp.Content{mcp.NewTextContent(string(b))},
		IsError: true,
	}
}

// result is a successful tool answer: v as structured content (the payload,
// checked against the tool's output schema by clients) and text, a short
// summary for the model. Only a result without a summary repeats v as JSON.
func result(v any, text string) *mcp.CallToolResult {
	if text == "" {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return toolError(host.WrapError(host.CodeInternal, err, "encoding the result"))
		}
		text = string(b)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.NewTextContent(text)},
		StructuredContent: v,
	}
}

// bind decodes a tool's arguments into dst, refusing unknown fields so a
// misspelt argument is a clear bad_request rather than silently ignored.
// taskIDOf binds a call whose only argument is task_id, which is required.
func taskIDOf(req mcp.CallToolRequest) (string, error) {
	var in struct {
		TaskID string `json:"task_id"`
	}
	if err := bind(req, &in); err != nil {
		return "", err
	}
	return in.TaskID, required("task_id", in.TaskID)
}

func bind(req mcp.CallToolRequest, dst any) error {
	raw, err := rawArgs(req.GetRawArguments())
	if err != nil {
		return host.Errorf(host.CodeBadRequest, "arguments: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return argsError(err, raw, dst)
	}
	// encoding/json matches field names case-insensitively: "TASK_TYPE"
	// would be read as task_type. As on the HTTP door, a field is named
	// exactly (and once).
	if err := jsonkeys.CheckNamed(raw, reflect.TypeOf(dst), "arguments"); err != nil {
		return host.Errorf(host.CodeBadRequest, "%v", err)
	}
	return nil
}

// argsError words an error decoding raw into dst as the HTTP door words a
// body's: the argument is named by its path ("tasks[2].not_before"), never
// by a Go type.
func argsError(err error, raw []byte, dst any) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := ""
		if te.Offset > 0 && te.Offset <= int64(len(raw)) {
			field = jsonkeys.PathAt(raw, te.Offset-1, "")
		}
		if field == "" {
			return host.Errorf(host.CodeBadRequest, "arguments must be a JSON object, not a JSON %s", te.Value)
		}
		return host.Errorf(host.CodeBadRequest, "argument %s must be %s, not a JSON %s", field, kindName(te.Type), te.Value)
	}
	if path, _, verr := jsonkeys.BadValue(raw, reflect.TypeOf(dst), "arguments"); verr != nil {
		var pe *time.ParseError
		if errors.As(verr, &pe) || strings.HasPrefix(verr.Error(), "Time.") {
			return host.Errorf(host.CodeBadRequest, "argument %s must be an RFC 3339 time such as \"2026-12-01T09:30:00Z\"", path)
		}
		return host.Errorf(host.CodeBadRequest, "argument %s: %v", path, verr)
	}
	return host.Errorf(host.CodeBadRequest, "arguments: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// kindName names what a Go type takes, in JSON's words.
func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another kind of value"
}

// required refuses an empty required string argument.
func required(name, v string) error {
	if strings.TrimSpace(v) == "" {
		return host.Errorf(host.CodeBadRequest, "%s is required", name)
	}
	return nil
}

// detached returns a context for an engine write that must not be cut short
// by the request's cancellation (mcp-go issue #897), bounded by writeTimeout.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// nonNegative refuses a negative integer argument with bad_request, as the
// HTTP door refuses a negative query parameter; zero means the default.
func nonNegative(name string, n int) error {
	if n < 0 {
		return host.Errorf(host.CodeBadRequest, "argument %s must be a non-negative integer", name)
	}
	return nil
}
