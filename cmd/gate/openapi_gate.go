package main

import (
	"log/slog"

	"github.com/asyncgate/asyncgate/host/httpapi"
	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// GET /v1/admin/plugins (mounted by startPlugins) in the OpenAPI document.
// Routes mounted by serve are checked against the document at start
// (warnUndocumentedRoutes), and every end-to-end test fails on the warning.
func init() {
	openapi.Add(openapi.Op{Method: "GET", Path: "/v1/admin/plugins", Tag: "plugins", Roles: []string{"admin"},
		Query:   []openapi.Param{{Name: "tenant", Description: "held to the rule of every /v1/admin route; the plugins are the gate's"}},
		Summary: "Plugins loaded: version, state, calls and faults (operators see the gate-wide figures)",
		Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"ready", "plugins"},
			"properties": map[string]any{
				"ready":       openapi.Schema{"type": "boolean"},
				"plugins":     openapi.Schema{"type": []string{"array", "null"}, "items": openapi.Schema{"type": "object"}},
				"plugins_dir": openapi.Schema{"type": "string"},
			}}}})
}

// undocumentedRoutesMsg is logged when the server's routes and the OpenAPI
// document differ; the end-to-end tests fail on it.
const undocumentedRoutesMsg = "the HTTP routes and the OpenAPI document differ"

// warnUndocumentedRoutes logs, once at start, routes that the OpenAPI
// document lacks and operations without a route (every door mounted).
func warnUndocumentedRoutes(srv *httpapi.Server, log *slog.Logger) {
	if missing, extra := srv.RouteDocDiff(); len(missing)+len(extra) > 0 {
		log.Warn(undocumentedRoutesMsg, "undocumented_routes", missing, "operations_without_route", extra)
	}
}
