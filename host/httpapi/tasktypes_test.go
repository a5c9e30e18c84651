package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
)

// TestWrongMethodIs405 asks every route with a method it does not have: the
// answer is 405 method_not_allowed in the error shape with an Allow header
// naming the route's methods; an unknown path stays 404.
func TestWrongMethodIs405(t *testing.T) {
	b := setup(t)
	byPath := map[string][]string{}
	for _, r := range b.srv.Echo().Routes() {
		if strings.HasPrefix(r.Method, "echo_") {
			continue
		}
		byPath[r.Path] = append(byPath[r.Path], r.Method)
	}
	if len(byPath) < 30 {
		t.Fatalf("only %d routes found", len(byPath))
	}
	fill := strings.NewReplacer(":name", "echo", ":lease_id", "lease-x", ":id", "x", ":task_id", "x")
	for path, methods := range byPath {
		if path == "/v1/receipts/check-terminator" || path == "/v1/tasks/batch" {
			continue // also matches GET /v1/receipts/:id or /v1/tasks/:id: a lookup, not a wrong method
		}
		sort.Strings(methods)
		want := strings.Join(methods, ", ")
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if strings.Contains(want, m) {
				continue
			}
			req, _ := http.NewRequest(m, b.ts.URL+fill.Replace(path), strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer "+b.admin)
			res, err := b.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body ErrorBody
			_ = json.NewDecoder(res.Body).Decode(&body)
			res.Body.Close()
			if res.StatusCode != 405 || body.Error != CodeMethodNotAllowed || body.Detail == "" || res.Header.Get("Allow") != want {
				t.Errorf("%s %s = %d %+v Allow %q; want 405 method_not_allowed, Allow %q", m, path, res.StatusCode, body, res.Header.Get("Allow"), want)
			}
		}
	}
	for _, p := range []string{"/nope", "/v1/tasks/x/nope", "/v1/admin/task-types/a/b", "/ui/%3Cscript%3E"} {
		code, body := b.do(t, http.MethodGet, p, b.admin, "")
		if code != 404 || body["error"] != "not_found" {
			t.Errorf("GET %s = %d %v, want 404 not_found", p, code, body)
		}
		// The answer echoes the path: never to be sniffed as a page.
		res, err := b.ts.Client().Get(b.ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no X-Content-Type-Options: nosniff", p)
		}
	}
}

// TestHandlersNotFoundIs404: a route's own handler answering echo's 404
// (a file route whose file is not there) is a 404, not a 405 naming the
// very method the request used.
func TestHandlersNotFoundIs404(t *testing.T) {
	b := setup(t, WithRoutes(func(e *echo.Echo, _ echo.MiddlewareFunc) {
		e.GET("/extra/*", func(c echo.Context) error { return echo.ErrNotFound })
	}))
	code, body := b.do(t, http.MethodGet, "/extra/x", b.admin, "")
	if code != 404 || body["error"] != "not_found" {
		t.Errorf("GET /extra/x = %d %v, want 404 not_found", code, body)
	}
	code, body = b.do(t, http.MethodPost, "/extra/x", b.admin, "")
	if code != 405 || body["error"] != CodeMethodNotAllowed {
		t.Errorf("POST /extra/x = %d %v, want 405", code, body)
	}
}

// TestTaskTypePatchAndDelete: PATCH merges (a PUT-style partial body used
// to erase params_schema), DELETE is refused while tasks are open.
func TestTaskTypePatchAndDelete(t *testing.T) {
	b := setup(t)
	code, body := b.do(t, http.MethodPut, "/v1/admin/task-types/code.gen", b.admin,
		`{"params_schema":{"type":"object","required":["prompt"]},"lease_seconds":120,"description":"d"}`)
	if code != 200 {
		t.Fatalf("PUT = %d %v", code, body)
	}
	code, body = b.do(t, http.MethodPatch, "/v1/admin/task-types/code.gen", b.admin, `{"enabled":false,"description":null}`)
	if code != 200 {
		t.Fatalf("PATCH = %d %v", code, body)
	}
	if body["enabled"] != false || body["params_schema"] == nil || body["lease_seconds"] != float64(120) || body["description"] != nil {
		t.Fatalf("PATCH {enabled:false} did not merge: %v", body)
	}
	code, body = b.do(t, http.MethodGet, "/v1/admin/task-types/code.gen", b.admin, "")
	if code != 200 || body["params_schema"] == nil || body["enabled"] != false {
		t.Fatalf("GET after PATCH = %d %v", code, body)
	}
	for _, bad := range []string{`{"task_type":"other"}`, `{"lease_seconds":-1}`, `{"no_such_field":1}`, `[1]`, `{"params_schema":{"type":7}}`} {
		if code, body = b.do(t, http.MethodPatch, "/v1/admin/task-types/code.gen", b.admin, bad); code != 400 || body["error"] != "bad_request" {
			t.Errorf("PATCH %s = %d %v, want 400 bad_request", bad, code, body)
		}
	}
	if code, body = b.do(t, http.MethodPatch, "/v1/admin/task-types/nope", b.admin, `{"enabled":true}`); code != 404 {
		t.Errorf("PATCH of an unknown type = %d %v", code, body)
	}
	code, body = b.do(t, http.MethodPatch, "/v1/admin/task-types/code.gen", b.admin, `{"enabled":true}`)
	if code != 200 || body["enabled"] != true {
		t.Fatalf("re-enable = %d %v", code, body)
	}

	// DELETE: refused while a task is open, allowed once none is.
	code, body = b.do(t, http.MethodPost, "/v1/tasks", b.agent, `{"task_type":"code.gen","params":{"prompt":"p"}}`)
	if code != 201 {
		t.Fatalf("enqueue = %d %v", code, body)
	}
	taskID := body["task_id"].(string)
	if code, body = b.do(t, http.MethodDelete, "/v1/admin/task-types/code.gen", b.admin, ""); code != 409 || body["error"] != "conflict" || !strings.Contains(body["detail"].(string), taskID) {
		t.Fatalf("DELETE with an open task = %d %v, want 409 conflict naming %s", code, body, taskID)
	}
	if _, err := b.eng.Cancel(context.Background(), engine.Actor{Tenant: auth.DefaultTenant, Principal: "agent.a", Role: engine.RoleAgent}, taskID, ""); err != nil {
		t.Fatal(err)
	}
	if code, body = b.do(t, http.MethodDelete, "/v1/admin/task-types/code.gen", b.admin, ""); code != 200 || body["status"] != "deleted" {
		t.Fatalf("DELETE = %d %v", code, body)
	}
	if code, body = b.do(t, http.MethodGet, "/v1/admin/task-types/code.gen", b.admin, ""); code != 404 {
		t.Fatalf("GET after DELETE = %d %v", code, body)
	}
	if code, body = b.do(t, http.MethodPost, "/v1/tasks", b.agent, `{"task_type":"code.gen","params":{"prompt":"p"}}`); code != 400 || body["error"] != "unknown_task_type" {
		t.Fatalf("enqueue after DELETE = %d %v", code, body)
	}
	if code, body = b.do(t, http.MethodGet, "/v1/tasks/"+taskID, b.agent, ""); code != 200 {
		t.Fatalf("a finished task of a deleted type = %d %v", code, body)
	}
	if code, _ = b.do(t, http.MethodDelete, "/v1/admin/task-types/code.gen", b.admin, ""); code != 404 {
		t.Fatalf("second DELETE = %d", code)
	}
	if code, _ = b.do(t, http.MethodDelete, "/v1/admin/task-types/echo", b.agent, ""); code != 403 {
		t.Fatalf("DELETE by an agent = %d", code)
	}
}
