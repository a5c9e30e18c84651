package httpapi

import (
	"net/http"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// openAPIRoutes serves the OpenAPI 3.1 document at /openapi.json, without a
// key: it describes the API, it holds no data.
func (s *Server) openAPIRoutes() {
	var (
		once sync.Once
		doc  []byte
		err  error
	)
	s.e.GET("/openapi.json", func(c echo.Context) error {
		once.Do(func() { doc, err = openapi.Document(s.cfg.Version) })
		if err != nil {
			return host.WrapError(host.CodeInternal, err, "building the OpenAPI document: "+err.Error())
		}
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, doc)
	}, keyless)
}

// RouteDocDiff compares the routes registered on the server (every door's)
// with the OpenAPI document: missing are routes the document lacks, extra
// are operations without a route. Both are empty when they agree.
func (s *Server) RouteDocDiff() (missing, extra []string) {
	var rs []openapi.Route
	for _, r := range s.e.Routes() {
		if r.Method == echo.RouteNotFound {
			continue
		}
		rs = append(rs, openapi.Route{Method: r.Method, Path: r.Path})
	}
	return openapi.Diff(rs)
}
