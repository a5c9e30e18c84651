package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
)

// TestSnooze: POST /v1/leases/{id}/snooze gives the task back until
// snooze_seconds from now without using an attempt; a bad duration is 400
// and changes nothing; another worker's snooze is refused as a snooze of an
// unknown lease is.
func TestSnooze(t *testing.T) {
	b := setup(t)
	other, err := auth.CreateKey(context.Background(), b.st, auth.NewKeyRequest{Role: engine.RoleWorker, Principal: "echo.w2"})
	if err != nil {
		t.Fatal(err)
	}
	if code, m := b.do(t, http.MethodPut, "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/tasks", b.agent, `{"task_type":"echo","params":{}}`); code != 201 && code != 200 {
		t.Fatalf("enqueue: %d %v", code, m)
	}
	code, m := b.do(t, "POST", "/v1/leases", b.worker, `{"worker_id":"echo.w1"}`)
	if code != 200 {
		t.Fatalf("lease: %d %v", code, m)
	}
	lease := m["leases"].([]any)[0].(map[string]any)
	id := lease["lease_id"].(string)
	for _, body := range []string{`{}`, `{"snooze_seconds":0}`, `{"snooze_seconds":-5}`, `{"snooze_seconds":99999999999}`, `{"snooze_seconds":"60"}`, `{"snooze_seconds":60,"extra":1}`} {
		if code, m := b.do(t, "POST", "/v1/leases/"+id+"/snooze", b.worker, body); code != http.StatusBadRequest || m["error"] != "bad_request" {
			t.Fatalf("snooze %s: %d %v, want 400 bad_request", body, code, m)
		}
	}
	// A snooze that names no duration says the field is missing, not "got 0".
	if _, m := b.do(t, "POST", "/v1/leases/"+id+"/snooze", b.worker, `{}`); !strings.Contains(fmt.Sprint(m["detail"]), "snooze_seconds is required") {
		t.Fatalf("snooze {}: %v, want the missing field named", m)
	}
	if code, m := b.do(t, "POST", "/v1/leases/"+id+"/snooze", other.APIKey, `{"snooze_seconds":60}`); code != http.StatusNotFound || m["error"] != "not_found" {
		t.Fatalf("another worker's snooze: %d %v, want 404 not_found, as for an unknown lease", code, m)
	}
	before := time.Now()
	code, m = b.do(t, "POST", "/v1/leases/"+id+"/snooze", b.worker, `{"snooze_seconds":60,"reason":"upstream rate limit"}`)
	if code != 200 || m["status"] != "snoozed" || m["task_status"] != "scheduled" {
		t.Fatalf("snooze: %d %v", code, m)
	}
	at, err := time.Parse(time.RFC3339Nano, m["available_at"].(string))
	if err != nil || at.Before(before.Add(59*time.Second)) || at.After(time.Now().Add(61*time.Second)) {
		t.Fatalf("available_at %v (%v), want about a minute from now", m["available_at"], err)
	}
	if code, _ := b.raw(t, "POST", "/v1/leases", b.worker, `{"worker_id":"echo.w1"}`); code != http.StatusNoContent {
		t.Fatalf("lease after snooze: %d, want 204 (the task waits a minute)", code)
	}
	code, m = b.do(t, "GET", "/v1/tasks/"+lease["task"].(map[string]any)["task_id"].(string), b.agent, "")
	if code != 200 || m["attempts"].(float64) != 0 {
		t.Fatalf("task after snooze: %d %v, want attempts 0", code, m)
	}
	// The same lease again: it ended with the first snooze; the answer is
	// a 200 no-op that says so, not "snoozed".
	code, m = b.do(t, "POST", "/v1/leases/"+id+"/snooze", b.worker, `{"snooze_seconds":60}`)
	if code != 200 || m["status"] != "ended" || m["task_status"] != nil || m["available_at"] != nil {
		t.Fatalf("snooze of a lease that ended: %d %v, want 200 status ended, no task named", code, m)
	}
}

// TestPauseTaskType: an admin pauses a task type's leasing and resumes it;
// agents and workers may not; enqueue is accepted meanwhile and lease calls
// get nothing; the task type's view says it is paused, and that view can be
// PUT back without resuming it.
func TestPauseTaskType(t *testing.T) {
	b := setup(t)
	if code, m := b.do(t, http.MethodPut, "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	for _, key := range []string{b.agent, b.worker} {
		for _, verb := range []string{"pause", "resume"} {
			if code, m := b.do(t, "POST", "/v1/admin/task-types/echo/"+verb, key, `{}`); code != http.StatusForbidden {
				t.Fatalf("%s by a non-admin: %d %v, want 403", verb, code, m)
			}
		}
	}
	// Another tenant's admin: refused when it names this tenant, and its
	// own tenant has no such type (404), so it cannot pause ours.
	globex, err := auth.CreateKey(context.Background(), b.st, auth.NewKeyRequest{Role: engine.RoleAdmin, Principal: "ops.globex", Tenant: "globex"})
	if err != nil {
		t.Fatal(err)
	}
	if code, m := b.do(t, "POST", "/v1/admin/task-types/echo/pause?tenant=default", globex.APIKey, `{}`); code != http.StatusForbidden {
		t.Fatalf("another tenant's admin naming this tenant: %d %v, want 403", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/admin/task-types/echo/pause", globex.APIKey, `{}`); code != http.StatusNotFound {
		t.Fatalf("another tenant's admin: %d %v, want 404 (no echo in its tenant)", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/admin/task-types/nope/pause", b.admin, `{}`); code != http.StatusNotFound {
		t.Fatalf("pause of an unknown type: %d %v, want 404", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/admin/task-types/nope/resume", b.admin, `{}`); code != http.StatusNotFound || m["error"] != "not_found" {
		t.Fatalf("resume of an unknown type: %d %v, want 404 not_found", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/admin/task-types/echo/pause", b.admin, `{"reason":"x","extra":1}`); code != http.StatusBadRequest {
		t.Fatalf("pause with an unknown field: %d %v, want 400", code, m)
	}
	code, m := b.do(t, "POST", "/v1/admin/task-types/echo/pause", b.admin, `{"reason":"upstream outage"}`)
	if code != 200 || m["status"] != "paused" || m["paused"].(map[string]any)["paused_by"] != "root" {
		t.Fatalf("pause: %d %v", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/tasks", b.agent, `{"task_type":"echo","params":{}}`); code != 201 {
		t.Fatalf("enqueue while paused: %d %v, want 201", code, m)
	}
	if code, _ := b.raw(t, "POST", "/v1/leases", b.worker, `{"worker_id":"echo.w1"}`); code != http.StatusNoContent {
		t.Fatalf("lease while paused: %d, want 204", code)
	}
	code, raw := b.raw(t, "GET", "/v1/admin/task-types/echo", b.admin, "")
	var view map[string]any
	if err := json.Unmarshal(raw, &view); err != nil || code != 200 || view["paused"].(map[string]any)["reason"] != "upstream outage" {
		t.Fatalf("task type view: %d %s", code, raw)
	}
	if code, m := b.do(t, http.MethodPut, "/v1/admin/task-types/echo", b.admin, string(raw)); code != 200 || m["paused"] == nil {
		t.Fatalf("PUT of the GET answer: %d %v, want 200 and still paused", code, m)
	}
	code, m = b.do(t, "GET", "/v1/admin/task-types", b.admin, "")
	if code != 200 || m["task_types"].([]any)[0].(map[string]any)["paused"] == nil {
		t.Fatalf("list: %d %v", code, m)
	}
	code, m = b.do(t, "POST", "/v1/admin/task-types/echo/resume", b.admin, "")
	if code != 200 || m["status"] != "resumed" || m["was_paused"] != true {
		t.Fatalf("resume: %d %v", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/leases", b.worker, `{"worker_id":"echo.w1"}`); code != 200 || len(m["leases"].([]any)) != 1 {
		t.Fatalf("lease after resume: %d %v", code, m)
	}
	if code, m := b.do(t, "GET", "/v1/admin/task-types/echo", b.admin, ""); code != 200 || m["paused"] != nil {
		t.Fatalf("view after resume: %d %v", code, m)
	}
}

// TestEndedTaskStatusToHolder: the worker whose completion was taken hears,
// on its lease's next call, lease_expired with task_status (single call and
// batch entry); another worker hears the words of a lease that never
// existed and no task_status.
func TestEndedTaskStatusToHolder(t *testing.T) {
	b := setup(t)
	other, err := auth.CreateKey(context.Background(), b.st, auth.NewKeyRequest{Role: engine.RoleWorker, Principal: "echo.w2"})
	if err != nil {
		t.Fatal(err)
	}
	if code, m := b.do(t, http.MethodPut, "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/tasks", b.agent, `{"task_type":"echo","params":{}}`); code != 201 {
		t.Fatalf("enqueue: %d %v", code, m)
	}
	code, m := b.do(t, "POST", "/v1/leases", b.worker, `{"worker_id":"echo.w1"}`)
	if code != 200 {
		t.Fatalf("lease: %d %v", code, m)
	}
	id := m["leases"].([]any)[0].(map[string]any)["lease_id"].(string)
	if code, m := b.do(t, "POST", "/v1/leases/"+id+"/complete", b.worker, `{"result_pointer":"s3://x"}`); code != 200 {
		t.Fatalf("complete: %d %v", code, m)
	}
	code, m = b.do(t, "POST", "/v1/leases/"+id+"/heartbeat", b.worker, `{}`)
	if code != 409 || m["error"] != "lease_expired" || m["task_status"] != "succeeded" {
		t.Fatalf("the holder's heartbeat: %d %v, want 409 lease_expired task_status succeeded", code, m)
	}
	code, m = b.do(t, "POST", "/v1/leases/batch", b.worker, `{"entries":[{"lease_id":"`+id+`","heartbeat":{}}]}`)
	if r := m["results"].([]any)[0].(map[string]any); code != 200 || r["error"] != "lease_expired" || r["task_status"] != "succeeded" {
		t.Fatalf("the holder's batch heartbeat: %d %v", code, m)
	}
	_, never := b.do(t, "POST", "/v1/leases/lease-never/heartbeat", other.APIKey, `{}`)
	code, m = b.do(t, "POST", "/v1/leases/"+id+"/heartbeat", other.APIKey, `{}`)
	want := strings.ReplaceAll(never["detail"].(string), "lease-never", id)
	if _, told := m["task_status"]; code != 409 || told || m["detail"] != want {
		t.Fatalf("another worker's heartbeat: %d %v, want 409 %q and no task_status", code, m, want)
	}
	code, m = b.do(t, "POST", "/v1/leases/batch", other.APIKey, `{"entries":[{"lease_id":"`+id+`","heartbeat":{}}]}`)
	if r := m["results"].([]any)[0].(map[string]any); code != 200 || r["task_status"] != nil || r["detail"] != want {
		t.Fatalf("another worker's batch heartbeat: %d %v", code, m)
	}
}
