package httpapi

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
)

func TestEvery503And429CarriesRetryAfter(t *testing.T) {
	codes := []string{host.CodeDatabaseUnavailable, host.CodeMailUnavailable, host.CodeQuotaExceeded, host.CodeBusy, host.CodePluginNotReady, host.CodePluginUnavailable, host.CodeIssuerUnavailable}
	b := setup(t, WithRoutes(func(e *echo.Echo, auth echo.MiddlewareFunc) {
		e.GET("/fail/:code", func(c echo.Context) error { return host.Errorf(c.Param("code"), "it failed") })
	}))
	for _, code := range codes {
		res, err := b.ts.Client().Get(b.ts.URL + "/fail/" + code)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if s := res.StatusCode; s != http.StatusServiceUnavailable && s != http.StatusTooManyRequests {
			t.Fatalf("%s answered %d", code, s)
		}
		n, err := strconv.Atoi(res.Header.Get("Retry-After"))
		if err != nil || n < 1 || n > 120 {
			t.Errorf("%s (%d): Retry-After %q, want a small number of seconds", code, res.StatusCode, res.Header.Get("Retry-After"))
		}
	}
}
