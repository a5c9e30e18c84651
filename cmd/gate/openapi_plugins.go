package main

import "github.com/asyncgate/asyncgate/host/httpapi/openapi"

// GET /v1/admin/plugins (mounted by startPlugins) in the OpenAPI document.
func init() {
	openapi.Add(openapi.Op{Method: "GET", Path: "/v1/admin/plugins", Tag: "plugins", Roles: []string{"admin"},
		Summary: "Plugins loaded: version, state, calls and faults (operators see the gate-wide figures)",
		Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"ready", "plugins"},
			"properties": map[string]any{
				"ready":       openapi.Schema{"type": "boolean"},
				"plugins":     openapi.Schema{"type": []string{"array", "null"}, "items": openapi.Schema{"type": "object"}},
				"plugins_dir": openapi.Schema{"type": "string"},
			}}}})
}
