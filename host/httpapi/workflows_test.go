package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
)

func TestWorkflowRoutes(t *testing.T) {
	b := setup(t)
	ck, err := auth.CreateKey(context.Background(), b.st, auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "agent.other"})
	if err != nil {
		t.Fatal(err)
	}
	other := ck.APIKey
	if code, m := b.do(t, "PUT", "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	body := `{"name":"pair","idempotency_key":"k","steps":[{"name":"a","task_type":"echo","params":{"x":1}},{"name":"b","task_type":"echo","after":["a"]}]}`
	code, m := b.do(t, "POST", "/v1/workflows", b.agent, body)
	if code != 201 || m["status"] != "running" || m["workflow_id"] == nil {
		t.Fatalf("submit: %d %v", code, m)
	}
	id := m["workflow_id"].(string)
	if code, m := b.do(t, "POST", "/v1/workflows", b.agent, body); code != 200 || m["is_duplicate"] != true || m["workflow_id"] != id {
		t.Fatalf("repeat: %d %v", code, m)
	}
	code, m = b.do(t, "GET", "/v1/workflows/"+id, b.agent, "")
	steps, _ := m["steps"].([]any)
	if code != 200 || m["final_step"] != "b" || len(steps) != 2 || steps[1].(map[string]any)["status"] != "waiting" {
		t.Fatalf("get: %d %v", code, m)
	}
	code, m = b.do(t, "GET", "/v1/workflows?status=running", b.agent, "")
	if wfs, _ := m["workflows"].([]any); code != 200 || len(wfs) != 1 {
		t.Fatalf("list: %d %v", code, m)
	}
	// A comma list of states, or the parameter repeated, as GET /v1/tasks
	// takes them; a state it does not know is 400 in a list too.
	for _, q := range []string{"status=running,succeeded", "status=succeeded&status=running", "status=failed,canceled"} {
		code, m = b.do(t, "GET", "/v1/workflows?"+q, b.agent, "")
		wfs, _ := m["workflows"].([]any)
		if want := map[bool]int{true: 0, false: 1}[strings.HasPrefix(q, "status=failed")]; code != 200 || len(wfs) != want {
			t.Fatalf("list ?%s: %d %v, want %d", q, code, m, want)
		}
	}
	if code, m := b.do(t, "GET", "/v1/workflows?status=running,nope", b.agent, ""); code != 400 || m["error"] != "bad_request" {
		t.Fatalf("list ?status=running,nope: %d %v", code, m)
	}
	// Another agent: the same answer as for an unknown id, and nothing listed.
	for _, path := range []string{"/v1/workflows/" + id, "/v1/workflows/WF-unknown"} {
		code, m := b.do(t, "GET", path, other, "")
		if code != 404 || m["error"] != "not_found" {
			t.Fatalf("GET %s by another agent: %d %v", path, code, m)
		}
		code, m = b.do(t, "POST", path+"/cancel", other, "")
		if code != 404 || m["error"] != "not_found" {
			t.Fatalf("cancel %s by another agent: %d %v", path, code, m)
		}
	}
	if code, m := b.do(t, "GET", "/v1/workflows", other, ""); code != 200 || len(m["workflows"].([]any)) != 0 {
		t.Fatalf("another agent's list: %d %v", code, m)
	}
	// Workers do not submit or read workflows.
	if code, _ := b.do(t, "POST", "/v1/workflows", b.worker, body); code != 403 {
		t.Fatalf("a worker's submit: %d", code)
	}
	// Bad graphs: a 400 with a code each.
	for bad, want := range map[string]string{
		`{"name":"x","steps":[{"name":"a","task_type":"echo","after":["b"]},{"name":"b","task_type":"echo","after":["a"]}]}`: "workflow_cycle",
		`{"name":"x","steps":[{"name":"a","task_type":"echo","after":["q"]}]}`:                                               "unknown_step",
		`{"name":"x","steps":[{"name":"a","task_type":"echo"},{"name":"a","task_type":"echo"}]}`:                             "duplicate_step",
		`{"name":"x","steps":[{"name":"a","task_type":"nope"}]}`:                                                             "unknown_task_type",
		`{"name":"x","steps":[{"name":"a","task_type":"echo"},{"name":"b","task_type":"echo"}]}`:                             "invalid_workflow",
		`{"name":"x","steps":[{"name":"a","task_type":"echo","surprise":1}]}`:                                                "bad_request",
	} {
		code, m := b.do(t, "POST", "/v1/workflows", b.agent, bad)
		if code != 400 || m["error"] != want {
			t.Fatalf("%s: %d %v, want 400 %s", bad, code, m, want)
		}
	}
	code, m = b.do(t, "GET", "/v1/obligations/open", b.agent, "")
	if obs, _ := m["open_obligations"].([]any); code != 200 || len(obs) != 1 || obs[0].(map[string]any)["task_id"] != id {
		t.Fatalf("open obligations of a running workflow: %d %v, want the workflow's one", code, m)
	}
	code, m = b.do(t, "POST", "/v1/workflows/"+id+"/cancel", b.agent, `{"reason":"enough"}`)
	if code != 200 || m["status"] != "canceled" {
		t.Fatalf("cancel: %d %v", code, m)
	}
	code, m = b.do(t, "GET", "/v1/obligations/open", b.agent, "")
	if code != 200 {
		t.Fatalf("obligations: %d %v", code, m)
	}
	if obs, _ := m["open_obligations"].([]any); len(obs) != 0 {
		t.Fatalf("open obligations after cancel: %v", obs)
	}
}

// TestWorkflowStatsAndMetrics: GET /v1/admin/stats counts workflows by
// state and /metrics has asyncgate_workflows{state}, each for the caller's
// tenant alone: an admin of another tenant sees none of the default
// tenant's workflows.
func TestWorkflowStatsAndMetrics(t *testing.T) {
	b := setup(t)
	if code, m := b.do(t, "PUT", "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	for i := 0; i < 2; i++ {
		if code, m := b.do(t, "POST", "/v1/workflows", b.agent, `{"name":"w","steps":[{"name":"a","task_type":"echo"}]}`); code != 201 {
			t.Fatalf("submit: %d %v", code, m)
		}
	}
	code, m := b.do(t, "POST", "/v1/workflows", b.agent, `{"name":"c","steps":[{"name":"a","task_type":"echo"}]}`)
	if code != 201 {
		t.Fatalf("submit: %d %v", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/workflows/"+m["workflow_id"].(string)+"/cancel", b.agent, `{}`); code != 200 {
		t.Fatalf("cancel: %d %v", code, m)
	}
	code, m = b.do(t, "GET", "/v1/admin/stats", b.admin, "")
	wfs, _ := m["workflows_by_state"].(map[string]any)
	if code != 200 || wfs["running"] != float64(2) || wfs["canceled"] != float64(1) || wfs["succeeded"] != float64(0) || wfs["failed"] != float64(0) {
		t.Fatalf("stats: %d %v", code, m)
	}
	got := samples(t, b, b.admin)
	if got[`asyncgate_workflows{state="running"}`] != 2 || got[`asyncgate_workflows{state="canceled"}`] != 1 {
		t.Fatalf("operator's metrics: running %v canceled %v", got[`asyncgate_workflows{state="running"}`], got[`asyncgate_workflows{state="canceled"}`])
	}
	other, err := auth.CreateKey(context.Background(), b.st, auth.NewKeyRequest{Role: engine.RoleAdmin, Principal: "ops.acme", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	code, m = b.do(t, "GET", "/v1/admin/stats", other.APIKey, "")
	if wfs, _ := m["workflows_by_state"].(map[string]any); code != 200 || wfs["running"] != float64(0) || wfs["canceled"] != float64(0) {
		t.Fatalf("another tenant's admin: stats %d %v", code, m)
	}
	if n, ok := samples(t, b, other.APIKey)[`asyncgate_workflows{state="running"}`]; !ok || n != 0 {
		t.Fatalf("another tenant's admin sees %v running workflows (present %v), want 0", n, ok)
	}
}

// TestWorkflowStepStartFields: POST /v1/workflows takes a step's
// delay_seconds, not_before and resource_intents as POST /v1/tasks takes
// them (bad values refused with the same status and code), the request
// hash of an idempotency key covers them, GET shows a delayed step's
// available_at, and the OpenAPI document lists the fields.
func TestWorkflowStepStartFields(t *testing.T) {
	b := setup(t)
	if code, m := b.do(t, "PUT", "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	nb := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	body := func(b string) string {
		return `{"name":"timed","idempotency_key":"t1","final_step":"b","steps":[{"name":"a","task_type":"echo"},` +
			`{"name":"b","task_type":"echo","after":["a"],` + b + `},` +
			`{"name":"c","task_type":"echo","not_before":"` + nb.Format(time.RFC3339) + `"}]}`
	}
	good := body(`"delay_seconds":3600,"resource_intents":[{"resource":"repo:r","predicate":"reads"}]`)
	before := time.Now()
	code, m := b.do(t, "POST", "/v1/workflows", b.agent, good)
	if code != 201 {
		t.Fatalf("submit: %d %v", code, m)
	}
	id := m["workflow_id"].(string)
	stepB := m["steps"].(map[string]any)["b"].(string)
	code, m = b.do(t, "GET", "/v1/workflows/"+id, b.agent, "")
	steps, _ := m["steps"].([]any)
	if code != 200 || len(steps) != 3 {
		t.Fatalf("get: %d %v", code, m)
	}
	sb, sc := steps[1].(map[string]any), steps[2].(map[string]any)
	atB, err := time.Parse(time.RFC3339Nano, fmt.Sprint(sb["available_at"]))
	if err != nil || sb["status"] != "waiting" || atB.Before(before.Add(time.Hour-time.Second)) || atB.After(time.Now().Add(time.Hour)) {
		t.Fatalf("step b: %v, want waiting with available_at an hour after the submission", sb)
	}
	if sc["status"] != "scheduled" || sc["available_at"] != nb.Format(time.RFC3339) {
		t.Fatalf("step c: %v, want scheduled until %s", sc, nb.Format(time.RFC3339))
	}
	code, m = b.do(t, "GET", "/v1/tasks/"+stepB, b.agent, "")
	if code != 200 || fmt.Sprint(m["resource_intents"]) != "[map[predicate:READS resource:REPO:r]]" {
		t.Fatalf("step b's task: %d %v", code, m)
	}
	// The same request again is a duplicate; another start under the key a
	// conflict.
	if code, m := b.do(t, "POST", "/v1/workflows", b.agent, good); code != 200 || m["is_duplicate"] != true {
		t.Fatalf("repeat: %d %v", code, m)
	}
	for _, changed := range []string{
		`"delay_seconds":3601,"resource_intents":[{"resource":"repo:r","predicate":"reads"}]`,
		`"delay_seconds":3600,"resource_intents":[{"resource":"repo:r","predicate":"MUTATES"}]`,
		`"delay_seconds":3600,"resource_intents":[{"resource":"repo:r","predicate":"reads"}],"not_before":"` + nb.Format(time.RFC3339) + `"`,
	} {
		if code, m := b.do(t, "POST", "/v1/workflows", b.agent, body(changed)); code != 409 || m["error"] != "idempotency_conflict" {
			t.Fatalf("%s under the same key: %d %v, want 409 idempotency_conflict", changed, code, m)
		}
	}
	// Bad values: what POST /v1/tasks answers for the same field.
	far := time.Now().Add(400 * 24 * time.Hour).UTC().Format(time.RFC3339)
	many := strings.Repeat(`{"resource":"R:x","predicate":"READS"},`, 17)
	for _, c := range []struct {
		field, code string
		status      int
	}{
		{`"delay_seconds":-1`, "bad_request", 400},
		{`"delay_seconds":"soon"`, "bad_request", 400},
		{`"not_before":"` + far + `"`, "bad_request", 400},
		{`"not_before":"tomorrow"`, "bad_request", 400},
		{`"resource_intents":[{"resource":"FILE:","predicate":"READS"}]`, "invalid_resource", 400},
		{`"resource_intents":[{"resource":"FILE:/a","predicate":"OWNS"}]`, "bad_request", 400},
		{`"resource_intents":[` + many[:len(many)-1] + `]`, "too_large", 413},
	} {
		pc, pm := b.do(t, "POST", "/v1/tasks", b.agent, `{"task_type":"echo",`+c.field+`}`)
		wc, wm := b.do(t, "POST", "/v1/workflows", b.agent, `{"name":"bad","steps":[{"name":"a","task_type":"echo"},{"name":"b","task_type":"echo","after":["a"],`+c.field+`}]}`)
		if pc != c.status || pm["error"] != c.code || wc != pc || wm["error"] != pm["error"] {
			t.Fatalf("%s: POST /v1/tasks %d %v, POST /v1/workflows %d %v; want both %d %s", c.field, pc, pm, wc, wm, c.status, c.code)
		}
	}
	if code, m := b.do(t, "GET", "/v1/workflows", b.agent, ""); code != 200 || len(m["workflows"].([]any)) != 1 {
		t.Fatalf("refused submissions left workflows: %d %v", code, m)
	}
	// The OpenAPI document: the request's step and the step view.
	code, raw := b.raw(t, "GET", "/openapi.json", "", "")
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody struct {
				Content map[string]struct {
					Schema struct {
						Properties map[string]struct {
							Items struct {
								Properties map[string]any `json:"properties"`
							} `json:"items"`
						} `json:"properties"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"requestBody"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if code != 200 || json.Unmarshal(raw, &doc) != nil {
		t.Fatalf("GET /openapi.json: %d", code)
	}
	req := doc.Paths["/v1/workflows"]["post"].RequestBody.Content["application/json"].Schema.Properties["steps"].Items.Properties
	for _, f := range []string{"delay_seconds", "not_before", "resource_intents"} {
		if req[f] == nil {
			t.Errorf("the OpenAPI document's workflow step lacks %s: %v", f, req)
		}
	}
	if doc.Components.Schemas["WorkflowStepView"].Properties["available_at"] == nil {
		t.Errorf("the OpenAPI document's WorkflowStepView lacks available_at")
	}
}

// TestWorkflowArchivedByRetention: once retention archives a workflow's
// final step, GET /v1/workflows/{id} shows the workflow archived, how it
// ended in outcome, its result without a pointer (purged), and the list
// filters on status archived.
func TestWorkflowArchivedByRetention(t *testing.T) {
	clock := host.NewManualClock(time.Now())
	b := setupClock(t, clock)
	ctx := context.Background()
	if code, m := b.do(t, "PUT", "/v1/admin/task-types/echo", b.admin, `{"default_retention_days":1}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	code, m := b.do(t, "POST", "/v1/workflows", b.agent, `{"name":"one","steps":[{"name":"only","task_type":"echo"}]}`)
	if code != 201 {
		t.Fatalf("submit: %d %v", code, m)
	}
	id := m["workflow_id"].(string)
	offers, err := b.eng.Lease(ctx, engine.LeaseRequest{Tenant: auth.DefaultTenant, WorkerID: "echo.w1", MaxTasks: 1})
	if err != nil || len(offers) != 1 {
		t.Fatalf("lease: %v %v", offers, err)
	}
	if _, err := b.eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: auth.DefaultTenant, WorkerID: "echo.w1", LeaseID: offers[0].LeaseID},
		Result: host.Result{Pointer: "inline:aGk=", Summary: "hi"}}); err != nil {
		t.Fatal(err)
	}
	code, m = b.do(t, "GET", "/v1/workflows/"+id, b.agent, "")
	if res, _ := m["result"].(map[string]any); code != 200 || m["status"] != "succeeded" || m["outcome"] != "succeeded" || res["result_pointer"] != "inline:aGk=" {
		t.Fatalf("before retention: %d %v", code, m)
	}
	clock.Advance(25 * time.Hour)
	if code, m := b.do(t, "POST", "/v1/admin/retention/sweep", b.admin, ""); code != 200 || m["archived"] != float64(1) || m["workflows_archived"] != float64(1) {
		t.Fatalf("sweep: %d %v", code, m)
	}
	code, m = b.do(t, "GET", "/v1/workflows/"+id, b.agent, "")
	res, _ := m["result"].(map[string]any)
	steps, _ := m["steps"].([]any)
	if code != 200 || m["status"] != "archived" || m["outcome"] != "succeeded" || m["archived_at"] == nil || m["end_receipt_id"] == "" {
		t.Fatalf("after retention: %d %v", code, m)
	}
	if _, has := res["result_pointer"]; has || res["purged_at"] == nil || res["archived_at"] == nil || res["summary"] != "hi" {
		t.Fatalf("result after retention: %v, want no pointer, purged_at and archived_at, the summary", res)
	}
	if len(steps) != 1 || steps[0].(map[string]any)["status"] != "archived" {
		t.Fatalf("steps after retention: %v", steps)
	}
	code, m = b.do(t, "GET", "/v1/workflows?status=archived", b.agent, "")
	if wfs, _ := m["workflows"].([]any); code != 200 || len(wfs) != 1 || wfs[0].(map[string]any)["outcome"] != "succeeded" {
		t.Fatalf("archived list: %d %v", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/workflows/"+id+"/cancel", b.agent, ""); code != 409 {
		t.Fatalf("canceling an archived workflow: %d %v, want 409", code, m)
	}
}
