package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// TestSchedulesDoor: create, get with next runs, list, pause, resume and
// delete over HTTP; each bad field is a 400 with its own code; another
// agent's schedule answers 404 not_found exactly as an unknown id.
func TestSchedulesDoor(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	other, err := auth.CreateKey(ctx, b.st, auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "agent.b"})
	if err != nil {
		t.Fatal(err)
	}
	if code, m := b.do(t, http.MethodPut, "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	for body, want := range map[string]string{
		`{"name":"n","cron":"* *","template":{"task_type":"echo"}}`:                                                     "invalid_cron",
		`{"name":"n","cron":"@hourly","timezone":"Nowhere/City","template":{"task_type":"echo"}}`:                       "invalid_timezone",
		`{"name":"n","interval_seconds":0,"template":{"task_type":"echo"}}`:                                             "invalid_interval",
		`{"name":"n","interval_seconds":5,"missed_policy":"sometimes","template":{"task_type":"echo"}}`:                 "invalid_missed_policy",
		`{"name":"n","interval_seconds":5,"missed_policy":"run_all","missed_cap":1000,"template":{"task_type":"echo"}}`: "invalid_missed_policy",
		`{"name":"n","interval_seconds":5,"template":{"task_type":"nope"}}`:                                             "unknown_task_type",
		`{"name":"n","interval_seconds":5,"template":{"task_type":"echo"},"extra":1}`:                                   "bad_request",
	} {
		if code, m := b.do(t, "POST", "/v1/schedules", b.agent, body); code != http.StatusBadRequest || m["error"] != want {
			t.Errorf("create %s: %d %v, want 400 %s", body, code, m, want)
		}
	}
	if code, m := b.do(t, "POST", "/v1/schedules", b.worker, `{"name":"n","interval_seconds":5,"template":{"task_type":"echo"}}`); code != http.StatusForbidden {
		t.Fatalf("a worker creates a schedule: %d %v", code, m)
	}
	code, m := b.do(t, "POST", "/v1/schedules", b.agent, `{"name":"daily","cron":"0 6 * * 1-5","timezone":"Europe/Paris","template":{"task_type":"echo","params":{"x":1}}}`)
	if code != http.StatusCreated || m["owner"] != "agent.a" || len(m["next_runs"].([]any)) != 5 || m["missed_policy"] != "skip" {
		t.Fatalf("create: %d %v", code, m)
	}
	id := m["schedule_id"].(string)
	if code, m := b.do(t, "POST", "/v1/schedules", b.agent, `{"name":"daily","interval_seconds":5,"template":{"task_type":"echo"}}`); code != http.StatusConflict {
		t.Fatalf("same name again: %d %v", code, m)
	}
	if code, m := b.do(t, "GET", "/v1/schedules/"+id+"?next_runs=10", b.agent, ""); code != 200 || len(m["next_runs"].([]any)) != 10 {
		t.Fatalf("get: %d %v", code, m)
	}
	// PATCH: bad input refused with its code; the change applied.
	for body, want := range map[string]string{
		`{}`:                                "bad_request",
		`{"cron":"61 * * * *"}`:             "invalid_cron",
		`{"timezone":"Nowhere/X"}`:          "invalid_timezone",
		`{"interval_seconds":0}`:            "invalid_interval",
		`{"missed_cap":3}`:                  "invalid_missed_policy",
		`{"name":"n","extra":1}`:            "bad_request",
		`{"NAME":"n"}`:                      "bad_request",
		`{"template":{"task_type":"nope"}}`: "unknown_task_type",
	} {
		if code, m := b.do(t, http.MethodPatch, "/v1/schedules/"+id, b.agent, body); code != http.StatusBadRequest || m["error"] != want {
			t.Errorf("patch %s: %d %v, want 400 %s", body, code, m, want)
		}
	}
	code, m = b.do(t, http.MethodPatch, "/v1/schedules/"+id, b.agent, `{"name":"weekly","cron":"0 7 * * 1","template":{"task_type":"echo","params":{"x":2}}}`)
	if code != 200 || m["name"] != "weekly" || m["cron"] != "0 7 * * 1" || m["timezone"] != nil || m["template"].(map[string]any)["params"].(map[string]any)["x"] != float64(2) {
		t.Fatalf("patch: %d %v", code, m)
	}
	if code, m := b.do(t, http.MethodPatch, "/v1/schedules/"+id, b.worker, `{"name":"w"}`); code != http.StatusForbidden {
		t.Fatalf("a worker patches a schedule: %d %v", code, m)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/schedules/%s", ""}, {"POST", "/v1/schedules/%s/pause", ""}, {"POST", "/v1/schedules/%s/resume", ""},
		{http.MethodPatch, "/v1/schedules/%s", `{"name":"mine"}`}, {"DELETE", "/v1/schedules/%s", ""},
	} {
		_, foreign := b.raw(t, c.method, sprintf(c.path, id), other.APIKey, c.body)
		_, unknown := b.raw(t, c.method, sprintf(c.path, "S-01NOSUCHSCHEDULE"), other.APIKey, c.body)
		code, m := b.do(t, c.method, sprintf(c.path, id), other.APIKey, c.body)
		if code != http.StatusNotFound || m["error"] != "not_found" || len(foreign) == 0 ||
			string(foreign) != replaceID(string(unknown), "S-01NOSUCHSCHEDULE", id) {
			t.Fatalf("%s %s by another agent: %d %s (unknown id: %s)", c.method, c.path, code, foreign, unknown)
		}
	}
	if code, m := b.do(t, "GET", "/v1/schedules", other.APIKey, ""); code != 200 || len(m["schedules"].([]any)) != 0 {
		t.Fatalf("another agent's list: %d %v", code, m)
	}
	if code, m := b.do(t, "GET", "/v1/schedules?next_runs=2", b.admin, ""); code != 200 || len(m["schedules"].([]any)) != 1 {
		t.Fatalf("admin list: %d %v", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/schedules/"+id+"/pause", b.agent, ""); code != 200 || m["paused"] != true || len(m["next_runs"].([]any)) != 0 {
		t.Fatalf("pause: %d %v", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/schedules/"+id+"/resume", b.admin, ""); code != 200 || m["paused"] != false {
		t.Fatalf("admin resume: %d %v", code, m)
	}
	if code, m := b.do(t, "DELETE", "/v1/schedules/"+id, b.agent, ""); code != 200 || m["status"] != "deleted" {
		t.Fatalf("delete: %d %v", code, m)
	}
	if code, _ := b.do(t, "GET", "/v1/schedules/"+id, b.agent, ""); code != http.StatusNotFound {
		t.Fatalf("get after delete: %d", code)
	}
}

func sprintf(format, id string) string { return strings.Replace(format, "%s", id, 1) }

func replaceID(s, from, to string) string { return strings.ReplaceAll(s, from, to) }

// TestScheduleStopsWhenOwnerKeyRevoked: an agent's every-second schedule
// stops queueing tasks once an admin revokes the agent's key over HTTP; the
// schedule shows paused_reason owner_revoked to the admin, and an admin's
// resume is 409 owner_revoked while the owner holds no live key.
func TestScheduleStopsWhenOwnerKeyRevoked(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	mal, err := auth.CreateKey(ctx, b.st, auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "agent.m"})
	if err != nil {
		t.Fatal(err)
	}
	if code, m := b.do(t, http.MethodPut, "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	code, m := b.do(t, "POST", "/v1/schedules", mal.APIKey, `{"name":"spam","interval_seconds":1,"template":{"task_type":"echo"}}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	id := m["schedule_id"].(string)
	if code, m := b.do(t, "DELETE", "/v1/admin/keys/"+mal.ID, b.admin, ""); code != 200 {
		t.Fatalf("revoke: %d %v", code, m)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := b.eng.FireSchedules(ctx); err != nil {
			t.Fatal(err)
		}
		code, m = b.do(t, "GET", "/v1/schedules/"+id, b.admin, "")
		if code == 200 && m["paused"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the revoked owner's schedule still runs after 10 s: %d %v", code, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if m["paused_reason"] != "owner_revoked" || m["fires"] != float64(0) {
		t.Fatalf("paused schedule: %v", m)
	}
	ts, _, err := b.eng.ListTasks(ctx, engine.Actor{Tenant: "default", Principal: "root", Role: engine.RoleAdmin}, store.TaskFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range ts {
		if tk.CreatedBy == "agent.m" {
			t.Fatalf("task %s queued as the revoked agent", tk.ID)
		}
	}
	if code, m := b.do(t, "POST", "/v1/schedules/"+id+"/resume", b.admin, ""); code != http.StatusConflict || m["error"] != "owner_revoked" {
		t.Fatalf("admin resume while the owner is revoked: %d %v", code, m)
	}
}

// TestScheduleReceiptsDoor: the fires a schedule skipped because its task
// type was disabled are visible to its owner: GET /v1/schedules/{id} shows
// the last skip with its error, GET /v1/schedules/{id}/receipts lists the
// schedule's receipts a page at a time (and GET /v1/receipts?task_id= with
// the schedule's id the same), another agent gets 404 not_found as for an
// unknown id, and a bad cursor or limit is a 400.
func TestScheduleReceiptsDoor(t *testing.T) {
	clock := host.NewManualClock(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
	b := setupClock(t, clock)
	ctx := context.Background()
	other, err := auth.CreateKey(ctx, b.st, auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "agent.b"})
	if err != nil {
		t.Fatal(err)
	}
	if code, m := b.do(t, http.MethodPut, "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	code, m := b.do(t, "POST", "/v1/schedules", b.agent, `{"name":"tick","interval_seconds":60,"template":{"task_type":"echo"}}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	id := m["schedule_id"].(string)
	if code, m := b.do(t, http.MethodPatch, "/v1/admin/task-types/echo", b.admin, `{"enabled":false}`); code != 200 {
		t.Fatalf("disable the task type: %d %v", code, m)
	}
	clock.Advance(time.Minute)
	if n, err := b.eng.FireSchedules(ctx); err != nil || n != 0 {
		t.Fatalf("fire with the type disabled: %d %v", n, err)
	}
	code, m = b.do(t, "GET", "/v1/schedules/"+id, b.agent, "")
	skip, _ := m["last_skip"].(map[string]any)
	if code != 200 || skip == nil || skip["error"] != host.CodeTaskTypeDisabled || skip["skipped"] != float64(1) || skip["detail"] == "" || skip["receipt_id"] == "" {
		t.Fatalf("the schedule shows no last skip: %d %v", code, m)
	}
	var types []string
	cursor := ""
	for range 10 {
		code, m := b.do(t, "GET", "/v1/schedules/"+id+"/receipts?limit=1&cursor="+cursor, b.agent, "")
		if code != 200 {
			t.Fatalf("the schedule's receipts: %d %v", code, m)
		}
		for _, rc := range m["receipts"].([]any) {
			rc := rc.(map[string]any)
			types = append(types, rc["receipt_type"].(string))
			if rc["receipt_type"] == "schedule.skipped" {
				body := rc["body"].(map[string]any)
				if rc["receipt_id"] != skip["receipt_id"] || body["error"] != host.CodeTaskTypeDisabled || body["schedule_id"] != id {
					t.Fatalf("the skip receipt: %v, the view's last skip %v", rc, skip)
				}
			}
		}
		if cursor = m["cursor"].(string); cursor == "" {
			break
		}
	}
	if strings.Join(types, ",") != "schedule.created,schedule.skipped" {
		t.Fatalf("the schedule's receipts: %v, want created and skipped", types)
	}
	if code, m := b.do(t, "GET", "/v1/receipts?task_id="+id, b.agent, ""); code != 200 || len(m["receipts"].([]any)) != 2 {
		t.Fatalf("GET /v1/receipts?task_id=%s: %d %v", id, code, m)
	}
	if code, m := b.do(t, "GET", "/v1/schedules/"+id+"/receipts", b.admin, ""); code != 200 || len(m["receipts"].([]any)) != 2 {
		t.Fatalf("an admin lists the schedule's receipts: %d %v", code, m)
	}
	_, foreign := b.raw(t, "GET", "/v1/schedules/"+id+"/receipts", other.APIKey, "")
	_, unknown := b.raw(t, "GET", "/v1/schedules/S-01NOSUCHSCHEDULE/receipts", other.APIKey, "")
	if code, m := b.do(t, "GET", "/v1/schedules/"+id+"/receipts", other.APIKey, ""); code != http.StatusNotFound || m["error"] != "not_found" ||
		string(foreign) != replaceID(string(unknown), "S-01NOSUCHSCHEDULE", id) {
		t.Fatalf("another agent lists the schedule's receipts: %d %s (unknown id: %s)", code, foreign, unknown)
	}
	for _, q := range []string{"?cursor=zzz", "?limit=x"} {
		if code, m := b.do(t, "GET", "/v1/schedules/"+id+"/receipts"+q, b.agent, ""); code != http.StatusBadRequest || m["error"] != "bad_request" {
			t.Fatalf("receipts%s: %d %v, want 400 bad_request", q, code, m)
		}
	}
	if code, _ := b.do(t, "GET", "/v1/schedules/"+id+"/receipts", b.worker, ""); code != http.StatusForbidden {
		t.Fatalf("a worker lists a schedule's receipts: %d", code)
	}
}
