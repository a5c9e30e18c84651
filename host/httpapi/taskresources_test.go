package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// TestTaskResourceIntentsHTTP: a task type names resource intents over the
// admin API (bad ones refused 400 with a code naming the intent); two tasks
// that MUTATE one resource are not leased at once over the worker API; the
// admin listing shows the task's resource lease; completing the task
// releases it and the second task is then offered.
func TestTaskResourceIntentsHTTP(t *testing.T) {
	b := setup(t)
	for _, c := range []struct{ body, code string }{
		{`{"resource_intents":[{"resource":"FILE:","predicate":"MUTATES"}]}`, "invalid_resource"},
		{`{"resource_intents":[{"resource":"FILE:/a","predicate":"WRITES"}]}`, "bad_request"},
		{`{"resource_intents":[{"resource":"FILE:/a"}]}`, "bad_request"},
		{`{"resource_intents":{"resource":"FILE:/a"}}`, "bad_request"},
	} {
		code, body := b.do(t, http.MethodPut, "/v1/admin/task-types/edit", b.admin, c.body)
		if code != 400 || body["error"] != c.code || body["detail"] == nil {
			t.Fatalf("PUT %s = %d %v, want 400 %s", c.body, code, body, c.code)
		}
		if c.code != "bad_request" || strings.Contains(c.body, "WRITES") {
			if !strings.Contains(body["detail"].(string), "resource_intents[0]") {
				t.Fatalf("detail does not name the intent: %v", body)
			}
		}
	}
	if code, _ := b.do(t, http.MethodGet, "/v1/admin/task-types/edit", b.admin, ""); code != 404 {
		t.Fatalf("a refused task type was stored: %d", code)
	}
	code, body := b.do(t, http.MethodPut, "/v1/admin/task-types/edit", b.admin,
		`{"lease_seconds":60,"resource_intents":[{"resource":"file:/repo/./x.go","predicate":"mutates"}]}`)
	intents, _ := body["resource_intents"].([]any)
	if code != 200 || len(intents) != 1 || intents[0].(map[string]any)["resource"] != "FILE:/repo/x.go" || intents[0].(map[string]any)["predicate"] != "MUTATES" {
		t.Fatalf("PUT = %d %v", code, body)
	}
	var tasks []string
	for i := 0; i < 2; i++ {
		code, body = b.do(t, http.MethodPost, "/v1/tasks", b.agent, `{"task_type":"edit","params":{}}`)
		if code != 201 {
			t.Fatalf("enqueue = %d %v", code, body)
		}
		tasks = append(tasks, body["task_id"].(string))
	}
	code, body = b.do(t, http.MethodPost, "/v1/leases", b.worker, `{"worker_id":"echo.w1","max_tasks":10}`)
	leases, _ := body["leases"].([]any)
	if code != 200 || len(leases) != 1 {
		t.Fatalf("lease = %d %v, want one offer", code, body)
	}
	offer := leases[0].(map[string]any)
	if offer["task"].(map[string]any)["task_id"] != tasks[0] {
		t.Fatalf("offered %v, want %s", offer["task"], tasks[0])
	}
	code, body = b.do(t, http.MethodGet, "/v1/admin/resource-leases?resource=FILE:/repo/x.go", b.admin, "")
	held, _ := body["leases"].([]any)
	if code != 200 || len(held) != 1 || held[0].(map[string]any)["task_id"] != tasks[0] || held[0].(map[string]any)["holder"] != "echo.w1" ||
		held[0].(map[string]any)["expires_at"] != offer["lease_expires_at"] {
		t.Fatalf("admin listing = %d %v", code, body)
	}
	rl := held[0].(map[string]any)["lease_id"].(string)
	// The resource door cannot end a task's lease; the worker ends the task.
	code, body = b.do(t, http.MethodPost, "/v1/resource-leases/release", b.admin, `{"lease_ids":["`+rl+`"]}`)
	if code != 409 || body["error"] != "conflict" || !strings.Contains(body["detail"].(string), tasks[0]) {
		t.Fatalf("release of a task's resource lease = %d %v", code, body)
	}
	code, body = b.do(t, http.MethodPost, "/v1/leases", b.worker, `{"worker_id":"echo.w1"}`)
	if code != 204 && (code != 200 || len(body["leases"].([]any)) != 0) {
		t.Fatalf("second MUTATES task offered while the first runs: %d %v", code, body)
	}
	code, body = b.do(t, http.MethodPost, "/v1/leases/"+offer["lease_id"].(string)+"/complete", b.worker,
		`{"worker_id":"echo.w1","result_pointer":"inline:aGk=","result_channel":"inline"}`)
	if code != 200 {
		t.Fatalf("complete = %d %v", code, body)
	}
	code, body = b.do(t, http.MethodGet, "/v1/admin/resource-leases?resource=FILE:/repo/x.go", b.admin, "")
	if code != 200 || body["leases"].([]any)[0].(map[string]any)["state"] != "released" {
		t.Fatalf("after complete = %d %v", code, body)
	}
	// The second task stepped aside for a second; a long poll gets it.
	code, body = b.do(t, http.MethodPost, "/v1/leases", b.worker, `{"worker_id":"echo.w1","wait_seconds":10}`)
	leases, _ = body["leases"].([]any)
	if code != 200 || len(leases) != 1 || leases[0].(map[string]any)["task"].(map[string]any)["task_id"] != tasks[1] {
		t.Fatalf("after the release: lease = %d %v", code, body)
	}
	// An enqueue names its own intents; a bad one is refused naming it.
	code, body = b.do(t, http.MethodPost, "/v1/tasks", b.agent, `{"task_type":"edit","params":{},"resource_intents":[{"resource":"REPO:\u0007","predicate":"READS"}]}`)
	if code != 400 || body["error"] != "invalid_resource" || !strings.Contains(body["detail"].(string), "resource_intents[0]") {
		t.Fatalf("enqueue with a bad intent = %d %v", code, body)
	}
	code, body = b.do(t, http.MethodPost, "/v1/tasks", b.agent, `{"task_type":"edit","params":{},"resource_intents":[{"resource":"repo:r","predicate":"READS"}]}`)
	if code != 201 {
		t.Fatalf("enqueue with an intent = %d %v", code, body)
	}
	code, body = b.do(t, http.MethodGet, "/v1/tasks/"+body["task_id"].(string), b.agent, "")
	if got, _ := body["resource_intents"].([]any); code != 200 || len(got) != 2 {
		t.Fatalf("task with the type's and its own intents = %d %v", code, body)
	}
	metrics := b.scrape(t)
	for _, want := range []string{`asyncgate_resource_leases_granted_total{predicate="MUTATES",tenant="default"} 2`, `asyncgate_resource_leases_held{predicate="MUTATES"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
