package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// TestOpenAPIDocumentMatchesRoutes fails when a route of the HTTP API has no
// operation in the OpenAPI document, or an operation no route.
func TestOpenAPIDocumentMatchesRoutes(t *testing.T) {
	b := setup(t)
	missing, extra := b.srv.RouteDocDiff()
	if len(missing) > 0 {
		t.Errorf("routes the OpenAPI document lacks (add them in an openapi_*.go file): %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("operations in the OpenAPI document without a route: %v", extra)
	}
}

// TestOpenAPIDocumentIsValid loads /openapi.json as served into kin-openapi
// and validates it as an OpenAPI 3.1 document.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	b := setup(t)
	res, err := http.Get(b.ts.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var raw json.RawMessage
	if err := json.NewDecoder(res.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatalf("loading the document: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the document is not valid: %v", err)
	}
	for _, p := range []string{"/v1/tasks", "/v1/leases/{lease_id}/complete", "/v1/admin/stats"} {
		if doc.Paths.Find(p) == nil {
			t.Errorf("document lacks %s", p)
		}
	}
	if doc.Components.Schemas["Error"] == nil || doc.Components.Schemas["Task"] == nil {
		t.Errorf("components lack Error or Task: %v", len(doc.Components.Schemas))
	}
}

// TestOpenAPIDiffReportsBothWays checks Diff on routes it is given.
func TestOpenAPIDiffReportsBothWays(t *testing.T) {
	missing, extra := openapi.Diff([]openapi.Route{{Method: "GET", Path: "/v1/nowhere/:id"}, {Method: "GET", Path: "/ui/tasks"}, {Method: "POST", Path: "/mcp"}})
	if len(missing) != 1 || missing[0] != "GET /v1/nowhere/{id}" {
		t.Errorf("missing %v", missing)
	}
	if len(extra) == 0 {
		t.Errorf("no extra operations reported for routes that are not registered")
	}
}

// BenchmarkOpenAPIDocument measures building the document (done once per
// server, on the first GET /openapi.json).
func BenchmarkOpenAPIDocument(b *testing.B) {
	for b.Loop() {
		if _, err := openapi.Document("bench"); err != nil {
			b.Fatal(err)
		}
	}
}
