package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// ErrorBody is the JSON shape of every error answer.
type ErrorBody struct {
	Error  string `json:"error"`
	Detail string `json:"detail,omitempty"`
	// Message repeats Detail on the seed-compatible /worker/* and /workers/*
	// routes, whose spec names the field "message".
	Message string `json:"message,omitempty"`
	// ServerTime is the gate's clock when the refusal was decided, on the
	// refusals that judge a lease by it (resource leases: lease_expired,
	// verify_required, quota_exceeded, conflict).
	ServerTime *time.Time `json:"server_time,omitempty"`
	// TaskStatus is the state of the task on a lease_expired answer to the
	// worker that held the lease (its task already ended: "succeeded"); never
	// on an answer to anyone else.
	TaskStatus string `json:"task_status,omitempty"`
	// RetryAfterSeconds repeats the Retry-After header when the refusal
	// knows its wait (an email budget's next message, a lease-time quota
	// window's end).
	RetryAfterSeconds int `json:"retry_after_seconds,omitempty"`
}

// CodeMethodNotAllowed is the error code of a 405: the path exists, the
// method does not; the Allow header lists the methods that do.
const CodeMethodNotAllowed = "method_not_allowed"

// routeMethods maps the gate's route patterns to their methods, built on
// first use (after every door has mounted its routes).
type routeMethods struct {
	once   sync.Once
	routes []routePattern
}

type routePattern struct {
	re      *regexp.Regexp
	methods []string
}

// allowed returns the methods registered for a path, sorted; none when no
// route matches it.
func (s *Server) allowed(path string) []string {
	s.methods.once.Do(func() {
		by := map[string]map[string]bool{}
		var order []string
		for _, r := range s.e.Routes() {
			if r.Method == echo.RouteNotFound || strings.HasPrefix(r.Method, "echo_") || r.Method == "" {
				continue
			}
			if by[r.Path] == nil {
				by[r.Path] = map[string]bool{}
				order = append(order, r.Path)
			}
			by[r.Path][r.Method] = true
		}
		for _, p := range order {
			var re strings.Builder
			re.WriteString("^")
			for i, seg := range strings.Split(p, "/") {
				if i > 0 {
					re.WriteString("/")
				}
				switch {
				case strings.HasPrefix(seg, ":"):
					re.WriteString("[^/]+")
				case seg == "*":
					re.WriteString(".*")
				default:
					re.WriteString(regexp.QuoteMeta(seg))
				}
			}
			re.WriteString("$")
			var ms []string
			for m := range by[p] {
				ms = append(ms, m)
			}
			s.methods.routes = append(s.methods.routes, routePattern{regexp.MustCompile(re.String()), ms})
		}
	})
	set := map[string]bool{}
	for _, r := range s.methods.routes {
		if r.re.MatchString(path) {
			for _, m := range r.methods {
				set[m] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for m := range set {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// ctxKeySeedErrors marks a request whose error answers also carry "message".
const ctxKeySeedErrors = "asyncgate.seed_errors"

// errorHandler is echo's central error handler: it maps every error to
// {"error": code, "detail": text} with host.HTTPStatus, and logs 5xx answers
// (at failureLevel).
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	code, detail := classify(err)
	status := host.HTTPStatus(code)
	var he *echo.HTTPError
	if errors.As(err, &he) && code == host.CodeInternal {
		// Router answers (no route, wrong method) and echo's own errors.
		switch he.Code {
		case http.StatusNotFound, http.StatusMethodNotAllowed:
			// A catch-all (the gate's or a route group's) answers every
			// path without a route for the method: a path known under
			// other methods is 405 with Allow, anything else 404.
			// (A 404 a handler of this very method returned is a 404.)
			if allow := s.allowed(c.Request().URL.Path); len(allow) > 0 && !slices.Contains(allow, c.Request().Method) {
				c.Response().Header().Set(echo.HeaderAllow, strings.Join(allow, ", "))
				code, status, detail = CodeMethodNotAllowed, 405, "method "+c.Request().Method+" is not allowed on "+c.Request().URL.Path+"; allowed: "+strings.Join(allow, ", ")
			} else {
				code, status, detail = host.CodeNotFound, 404, "no route "+c.Request().Method+" "+c.Request().URL.Path
			}
		case http.StatusRequestEntityTooLarge:
			code, status, detail = host.CodeTooLarge, 413, "the request body is over the limit"
		default:
			if he.Code >= 400 && he.Code < 500 {
				code, status = host.CodeBadRequest, he.Code
				if m, ok := he.Message.(string); ok {
					detail = m
				}
			}
		}
	}
	if status >= 500 {
		s.log.LogAttrs(c.Request().Context(), failureLevel(code), "request failed",
			slog.String("method", c.Request().Method), slog.String("path", c.Request().URL.Path),
			slog.String("error", code), slog.String("detail", detail))
		if code == host.CodeInternal {
			detail = "an internal error occurred; it was logged"
		}
	}
	body := ErrorBody{Error: code, Detail: detail}
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		secs := retryAfter(code)
		if d := host.ErrorRetryAfter(err); d > 0 {
			secs = host.RetryAfterSeconds(d)
			body.RetryAfterSeconds = secs
		}
		c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
	}
	if at := host.ErrorServerTime(err); !at.IsZero() {
		body.ServerTime = &at
	}
	body.TaskStatus = taskStatus(code, err)
	if v, _ := c.Get(ctxKeySeedErrors).(bool); v {
		body.Message = detail
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, body)
}

// failureLevel is the log level of a 5xx answer with code: WARN for the
// refusals that are the gate's configuration or its limits answering a
// caller (no mail configured, plugins still loading, too many large result
// fetches), which any caller can repeat at will, and an identity provider
// that cannot be read (its failed read is logged already); ERROR for the
// rest, the answers an operator must look at (internal errors, an
// unavailable database, a failing channel or plugin).
func failureLevel(code string) slog.Level {
	switch code {
	case host.CodeMailUnavailable, host.CodePluginNotReady, host.CodeBusy, host.CodeIssuerUnavailable:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// retryAfter is the Retry-After, in seconds, of a 503 or 429 answer whose
// error names no wait of its own (host.Error.RetryAfter): how long the
// cause usually lasts (docs/http.md lists them).
func retryAfter(code string) int {
	switch code {
	case host.CodePluginNotReady:
		return 1 // a plugin loads in well under a second
	case host.CodeBusy:
		return 2 // a large result fetch frees its slot
	case host.CodeDatabaseUnavailable:
		return 5 // a reconnect, a failover, a lock released
	case host.CodeIssuerUnavailable:
		return 5 // an identity provider back; a failed read is tried again after 5 s
	case host.CodeMailUnavailable:
		return 30 // a mail server down or unreachable
	case host.CodePluginUnavailable:
		return 30 // an operator putting a plugin back (the folder is read every second)
	case host.CodeQuotaExceeded:
		return 60 // a lease released or expired, a quota window moving on
	}
	return 5
}

// classify returns the code and detail of err. Context cancellation (the
// client went away) and body-size errors get their own codes.
func classify(err error) (string, string) {
	var mbe *http.MaxBytesError
	var he *host.Error
	switch {
	case errors.As(err, &he) && (he.Code == host.CodePluginTimeout || he.Code == host.CodePluginNotReady):
		// A plugin call stopped at its deadline has a deadline in its
		// chain: it is the plugin's timeout, not a database problem.
		return he.Code, he.Detail
	case errors.As(err, &mbe):
		return host.CodeTooLarge, "the request body is over the limit of " + itoa(mbe.Limit) + " bytes"
	case errors.Is(err, context.Canceled):
		return host.CodeBadRequest, "the request was canceled"
	case he != nil && he.Code == host.CodeDatabaseUnavailable:
		// The store's own account (a timeout it names, a batch whose
		// outcome is unknown) says more than "timed out", whatever its
		// chain holds.
		return he.Code, he.Detail
	case errors.Is(err, context.DeadlineExceeded):
		// The request's own deadline passed before the store's bound: an
		// update may have been sent, so neither "not made" nor "made".
		return host.CodeDatabaseUnavailable, "the request timed out before the store answered: if it asked for a change, its outcome is unknown (it may still commit); read it back, or retry the same call"
	}
	if he != nil {
		return he.Code, he.Detail
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return host.CodeBadRequest, "malformed JSON: " + se.Error()
	}
	return host.CodeInternal, err.Error()
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func badRequest(format string, args ...any) error {
	return host.Errorf(host.CodeBadRequest, format, args...)
}

// What makes a call whose outcome is unknown safe to repeat, added to the
// store's "read it back, or retry the same call" (retryAdvice).
const (
	adviceLeaseID = "A heartbeat, completion or failure is idempotent by its lease id: retry it with the same lease id."
	adviceKey     = "An enqueue is idempotent by its idempotency_key: retry it with the same idempotency_key."
	adviceNoKey   = "This enqueue has no idempotency_key, so a retry may make a second task: read the tasks back before enqueuing it again."
)

// retryAdvice adds advice to the detail of err when err is a store update
// whose outcome is unknown (store.ErrOutcomeUnknown); any other error is
// returned as it is.
func retryAdvice(err error, advice string) error {
	if err == nil || !errors.Is(err, store.ErrOutcomeUnknown) || !host.IsCode(err, host.CodeDatabaseUnavailable) {
		return err
	}
	detail := strings.TrimRight(host.ErrorDetail(err), " ")
	if !strings.HasSuffix(detail, ".") {
		detail += "." // the store's sentence ends here; the advice is one of its own
	}
	return host.WrapError(host.CodeDatabaseUnavailable, err, detail+" "+advice)
}

// enqueueAdvice is retryAdvice for an enqueue with idempotency key key.
func enqueueAdvice(err error, key string) error {
	if key == "" {
		return retryAdvice(err, adviceNoKey)
	}
	return retryAdvice(err, adviceKey)
}

// taskStatus is the task_status of an answer with code: a lease_expired
// refusal's (host.ErrorTaskStatus), else "".
func taskStatus(code string, err error) string {
	if code != host.CodeLeaseExpired {
		return ""
	}
	return host.ErrorTaskStatus(err)
}
