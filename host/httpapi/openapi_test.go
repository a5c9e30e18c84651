package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
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

// TestOpenAPIWorkflowOutcome: the document's workflow outcome lists exactly
// the end states (succeeded, failed, canceled), in Workflow and
// WorkflowView, and the gate's answers about workflows that ended each way,
// before and after retention archives them, match the document.
func TestOpenAPIWorkflowOutcome(t *testing.T) {
	clock := host.NewManualClock(time.Now())
	b := setupClock(t, clock)
	ctx := context.Background()
	code, raw := b.raw(t, "GET", "/openapi.json", "", "")
	if code != 200 {
		t.Fatalf("GET /openapi.json: %d", code)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"succeeded", "failed", "canceled"}
	for _, name := range []string{"Workflow", "WorkflowView"} {
		s := doc.Components.Schemas[name]
		if s == nil || s.Value.Properties["outcome"] == nil {
			t.Fatalf("the document has no %s.outcome", name)
		}
		if got := s.Value.Properties["outcome"].Value.Enum; !reflect.DeepEqual(got, want) {
			t.Errorf("%s.outcome enum %v, want %v", name, got, want)
		}
	}
	check := func(schema, what string, body []byte) {
		t.Helper()
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := doc.Components.Schemas[schema].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s does not match the document's %s: %v\n%s", what, schema, err, body)
		}
	}

	if code, m := b.do(t, "PUT", "/v1/admin/task-types/echo", b.admin, `{"default_retention_days":1}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	ids := map[string]string{} // how it ends → workflow id
	steps := map[string]string{}
	for _, end := range []string{"succeeded", "failed", "canceled"} {
		code, m := b.do(t, "POST", "/v1/workflows", b.agent, `{"name":"`+end+`","steps":[{"name":"only","task_type":"echo"}]}`)
		if code != 201 {
			t.Fatalf("submit: %d %v", code, m)
		}
		ids[end] = m["workflow_id"].(string)
		steps[m["steps"].(map[string]any)["only"].(string)] = end
	}
	code, raw = b.raw(t, "POST", "/v1/workflows/"+ids["canceled"]+"/cancel", b.agent, "")
	if code != 200 {
		t.Fatalf("cancel: %d %s", code, raw)
	}
	check("Workflow", "the cancel's answer", raw)
	offers, err := b.eng.Lease(ctx, engine.LeaseRequest{Tenant: auth.DefaultTenant, WorkerID: "echo.w1", MaxTasks: 5})
	if err != nil || len(offers) != 2 {
		t.Fatalf("lease: %v %v", offers, err)
	}
	for _, o := range offers {
		call := engine.WorkerCall{Tenant: auth.DefaultTenant, WorkerID: "echo.w1", LeaseID: o.LeaseID}
		switch steps[o.Task.ID] {
		case "succeeded":
			_, err = b.eng.Complete(ctx, engine.CompleteRequest{WorkerCall: call, Result: host.Result{Pointer: "inline:aGk=", Summary: "hi"}})
		case "failed":
			_, err = b.eng.Fail(ctx, engine.FailRequest{WorkerCall: call, Error: "no"})
		default:
			t.Fatalf("leased %s, the step of no running workflow", o.Task.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, archived := range []bool{false, true} {
		if archived {
			clock.Advance(time.Duration(engine.DefaultDeadLetterDays+1) * 24 * time.Hour) // past the dead letter's keep too
			if code, m := b.do(t, "POST", "/v1/admin/retention/sweep", b.admin, ""); code != 200 || m["workflows_archived"] != float64(3) {
				t.Fatalf("sweep: %d %v", code, m)
			}
		}
		for end, id := range ids {
			code, raw := b.raw(t, "GET", "/v1/workflows/"+id, b.agent, "")
			var w struct{ Status, Outcome string }
			if code != 200 || json.Unmarshal(raw, &w) != nil || w.Outcome != end || (w.Status == "archived") != archived {
				t.Fatalf("GET the %s workflow (archived %v): %d %s", end, archived, code, raw)
			}
			check("WorkflowView", "the "+end+" workflow (archived "+strconv.FormatBool(archived)+")", raw)
		}
		code, raw := b.raw(t, "GET", "/v1/workflows", b.agent, "")
		if code != 200 {
			t.Fatalf("list: %d %s", code, raw)
		}
		check("WorkflowList", "the list", raw)
	}
}

// TestOpenAPIBatchBodies: the batch routes' bodies say what the handlers
// enforce: the array is required and holds 1 to the cap (api.MaxBatchOutcomes,
// api.MaxBatchEnqueue) items, an entry requires lease_id and holds exactly one
// verb; and the error shape lists task_status.
func TestOpenAPIBatchBodies(t *testing.T) {
	raw, err := openapi.Document("test")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	body := func(path string) *openapi3.Schema {
		return doc.Paths.Find(path).Post.RequestBody.Value.Content.Get("application/json").Schema.Value
	}
	for _, c := range []struct {
		path, field string
		max         int
	}{{"/v1/leases/batch", "entries", api.MaxBatchOutcomes}, {"/v1/tasks/batch", "tasks", api.MaxBatchEnqueue}} {
		s := body(c.path)
		a := s.Properties[c.field].Value
		if !reflect.DeepEqual(s.Required, []string{c.field}) || a.MinItems != 1 || a.MaxItems == nil || int(*a.MaxItems) != c.max || a.Description == "" {
			t.Errorf("%s: required %v, %s minItems %d maxItems %v description %q; want required, 1 to %d", c.path, s.Required, c.field, a.MinItems, a.MaxItems, a.Description, c.max)
		}
	}
	entries := body("/v1/leases/batch").Properties["entries"].Value
	if e := entries.Items.Value; !reflect.DeepEqual(e.Required, []string{"lease_id"}) || !strings.Contains(entries.Description, "exactly one of complete, fail or heartbeat") {
		t.Errorf("an entry: required %v, entries described %q", e.Required, entries.Description)
	}
	if !strings.Contains(body("/v1/tasks/batch").Properties["tasks"].Value.Description, "after cannot name a task of the same batch") {
		t.Errorf("tasks: %q", body("/v1/tasks/batch").Properties["tasks"].Value.Description)
	}
	if doc.Components.Schemas["Error"].Value.Properties["task_status"] == nil {
		t.Errorf("the Error schema lacks task_status")
	}
}
