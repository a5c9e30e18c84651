package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
)

// ErrorBody is the JSON shape of every error answer.
type ErrorBody struct {
	Error  string `json:"error"`
	Detail string `json:"detail,omitempty"`
	// Message repeats Detail on the seed-compatible /worker/* and /workers/*
	// routes, whose spec names the field "message".
	Message string `json:"message,omitempty"`
}

// ctxKeySeedErrors marks a request whose error answers also carry "message".
const ctxKeySeedErrors = "asyncgate.seed_errors"

// errorHandler is echo's central error handler: it maps every error to
// {"error": code, "detail": text} with host.HTTPStatus, and logs 5xx answers.
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
		case http.StatusNotFound:
			code, status, detail = host.CodeNotFound, 404, "no route "+c.Request().Method+" "+c.Request().URL.Path
		case http.StatusMethodNotAllowed:
			code, status, detail = "method_not_allowed", 405, "method "+c.Request().Method+" is not allowed on "+c.Request().URL.Path
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
		s.log.LogAttrs(c.Request().Context(), slog.LevelError, "request failed",
			slog.String("method", c.Request().Method), slog.String("path", c.Request().URL.Path),
			slog.String("error", code), slog.String("detail", detail))
		if code == host.CodeInternal {
			detail = "an internal error occurred; it was logged"
		}
	}
	if code == host.CodePluginNotReady {
		c.Response().Header().Set("Retry-After", "1")
	}
	body := ErrorBody{Error: code, Detail: detail}
	if v, _ := c.Get(ctxKeySeedErrors).(bool); v {
		body.Message = detail
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, body)
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
	case errors.Is(err, context.DeadlineExceeded):
		return host.CodeDatabaseUnavailable, "the request timed out"
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
