package httpapi

import (
	"errors"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
)

// TestFailedRequestLogLevel: a 503 that is the gate's configuration or its
// limits answering a caller (mail_unavailable: POST /v1/email on a gate
// without mail; plugin_not_ready; busy) is logged at WARN, so no caller can
// fill the operator's error log; an internal error and an unavailable
// database stay at ERROR.
func TestFailedRequestLogLevel(t *testing.T) {
	b := setup(t, WithRoutes(func(e *echo.Echo, authn echo.MiddlewareFunc) {
		e.GET("/fail/:code", func(c echo.Context) error {
			if c.Param("code") == host.CodeInternal {
				return errors.New("kaboom")
			}
			return host.Errorf(c.Param("code"), "refused")
		}, authn)
	}))
	lines := func(code string) []string {
		var out []string
		for _, l := range strings.Split(b.logs.String(), "\n") {
			if strings.Contains(l, `msg="request failed"`) && strings.Contains(l, "error="+code+" ") {
				out = append(out, l)
			}
		}
		return out
	}
	if code, m := b.do(t, "POST", "/v1/email", b.agent, `{"to":"a@example.com","subject":"s","body":"b"}`); code != 503 || m["error"] != host.CodeMailUnavailable {
		t.Fatalf("POST /v1/email without mail: %d %v", code, m)
	}
	for _, code := range []string{host.CodePluginNotReady, host.CodeBusy, host.CodeDatabaseUnavailable, host.CodeInternal} {
		if got, _ := b.do(t, "GET", "/fail/"+code, b.agent, ""); got < 500 {
			t.Fatalf("GET /fail/%s: %d", code, got)
		}
	}
	for code, level := range map[string]string{
		host.CodeMailUnavailable: "WARN", host.CodePluginNotReady: "WARN", host.CodeBusy: "WARN",
		host.CodeDatabaseUnavailable: "ERROR", host.CodeInternal: "ERROR",
	} {
		ls := lines(code)
		if len(ls) != 1 || !strings.Contains(ls[0], "level="+level+" ") {
			t.Errorf("%s logged %q, want one line at %s", code, ls, level)
		}
	}
}
