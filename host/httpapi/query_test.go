package httpapi

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
)

// TestKeylessRoutesCheckTheirQuery: the routes that take no key check
// their query too (keyless), /metrics when public included, and take no
// ?tenant= (there is no key whose tenant it could name); a route outside
// the OpenAPI document (the dashboard's) is not checked, but its path and
// query must still be UTF-8 text.
func TestKeylessRoutesCheckTheirQuery(t *testing.T) {
	b := setup(t, func(s *Server) { s.cfg.MetricsPublic = true }, WithRoutes(func(e *echo.Echo, _ echo.MiddlewareFunc) {
		e.GET("/ui/zz", func(c echo.Context) error { return c.String(http.StatusOK, "page") })
	}))
	for _, p := range []string{"/metrics?x=1", "/healthz?tenant=default", "/readyz?verbose=1", "/openapi.json?v=2", "/ui/zz?q=%FF", "/ui/zz?q=a%0Ab", "/ui/%FF"} {
		code, m := b.do(t, http.MethodGet, p, "", "")
		if code != 400 || m["error"] != "bad_request" {
			t.Errorf("GET %s = %d %v, want 400 bad_request", p, code, m)
		}
	}
	for _, p := range []string{"/metrics", "/healthz", "/openapi.json", "/ui/zz?anything=1&anything=2"} {
		if code, _ := b.raw(t, http.MethodGet, p, "", ""); code != 200 {
			t.Errorf("GET %s = %d, want 200", p, code)
		}
	}
}
