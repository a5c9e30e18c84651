package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
)

// TestInboxOverHTTP runs the inbox through its routes: queue_task's ack
// names the inbox, a completion appears in the bootstrap (delivered, not
// read), mark-read sets read, and bad input is a 4xx with a code.
func TestInboxOverHTTP(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if code, m := b.do(t, http.MethodPut, "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	code, ack := b.do(t, http.MethodPost, "/v1/tasks", b.agent, `{"task_type":"echo","params":{}}`)
	if code != 201 || !strings.Contains(ack["inbox"].(string), "agent.a's inbox") {
		t.Fatalf("enqueue = %d %v", code, ack)
	}
	taskID := ack["task_id"].(string)
	code, bs := b.do(t, http.MethodGet, "/v1/session/bootstrap", b.agent, "")
	if code != 200 || len(bs["owed_to_you"].([]any)) != 1 || len(bs["inbox"].([]any)) != 0 || bs["principal"] != "agent.a" {
		t.Fatalf("bootstrap before = %d %v", code, bs)
	}
	offers, err := b.eng.Lease(ctx, engine.LeaseRequest{Tenant: auth.DefaultTenant, WorkerID: "echo.w1", MaxTasks: 1})
	if err != nil || len(offers) != 1 {
		t.Fatalf("lease %v %v", offers, err)
	}
	if _, err := b.eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: auth.DefaultTenant, WorkerID: "echo.w1", LeaseID: offers[0].LeaseID},
		Result: host.Result{Pointer: "s3://bucket/out.json", Summary: "3 pages"}}); err != nil {
		t.Fatal(err)
	}
	code, bs = b.do(t, http.MethodGet, "/v1/session/bootstrap", b.agent, "")
	items := bs["inbox"].([]any)
	if code != 200 || len(items) != 1 || len(bs["owed_to_you"].([]any)) != 0 {
		t.Fatalf("bootstrap after = %d %v", code, bs)
	}
	it := items[0].(map[string]any)
	if it["kind"] != "completed" || it["task_id"] != taskID || it["delivered_at"] == nil || it["read_at"] != nil || !strings.Contains(it["summary"].(string), "3 pages") {
		t.Fatalf("item %v", it)
	}
	id := it["inbox_id"].(string)
	for _, bad := range []struct{ body, code string }{
		{`{"inbox_ids":[]}`, "bad_request"}, {`{"inbox_ids":"x"}`, "bad_request"}, {`{"nope":1}`, "bad_request"}, {`{"inbox_ids":["I-NOPE"]}`, "not_found"},
	} {
		if c, m := b.do(t, http.MethodPost, "/v1/inbox/mark-read", b.agent, bad.body); c/100 != 4 || m["error"] != bad.code {
			t.Errorf("mark-read %s = %d %v, want %s", bad.body, c, m, bad.code)
		}
	}
	if c, m := b.do(t, http.MethodPost, "/v1/inbox/mark-read", b.agent, `{"inbox_ids":["`+id+`"]}`); c != 200 || m["marked"] != float64(1) {
		t.Fatalf("mark-read = %d %v", c, m)
	}
	if c, m := b.do(t, http.MethodGet, "/v1/inbox?unread=true", b.agent, ""); c != 200 || len(m["items"].([]any)) != 0 {
		t.Fatalf("unread after mark-read = %d %v", c, m)
	}
	if c, m := b.do(t, http.MethodGet, "/v1/inbox", b.agent, ""); c != 200 || m["items"].([]any)[0].(map[string]any)["read_at"] == nil {
		t.Fatalf("inbox = %d %v", c, m)
	}
	for _, q := range []string{"?unread=maybe", "?limit=-1", "?limit=501", "?cursor=x", "?recipient=agent.b"} {
		if c, m := b.do(t, http.MethodGet, "/v1/inbox"+q, b.agent, ""); c/100 != 4 || m["error"] == nil {
			t.Errorf("GET /v1/inbox%s = %d %v, want a 4xx with a code", q, c, m)
		}
	}
	if c, m := b.do(t, http.MethodGet, "/v1/inbox?recipient=agent.a", b.admin, ""); c != 200 || len(m["items"].([]any)) != 1 {
		t.Fatalf("admin reads agent.a's inbox = %d %v", c, m)
	}
	if c, _ := b.do(t, http.MethodGet, "/v1/session/bootstrap", "", ""); c != 401 {
		t.Fatalf("bootstrap without a key = %d", c)
	}
}

// TestRetentionSweepRouteAndMetrics: the admin route runs a sweep (agents
// are refused), and retention events show in /metrics.
func TestRetentionSweepRouteAndMetrics(t *testing.T) {
	b := setup(t)
	if c, m := b.do(t, http.MethodPost, "/v1/admin/retention/sweep", b.agent, ""); c != 403 {
		t.Fatalf("agent sweep = %d %v", c, m)
	}
	c, m := b.do(t, http.MethodPost, "/v1/admin/retention/sweep", b.admin, "")
	if c != 200 || m["archived"] != float64(0) || m["payloads_purged"] != float64(0) {
		t.Fatalf("sweep = %d %v", c, m)
	}
	b.srv.cfg.Metrics.OnEvent(engine.Event{Kind: engine.EvArchived, Tenant: "default", TaskType: "echo"})
	b.srv.cfg.Metrics.OnEvent(engine.Event{Kind: engine.EvPayloadPurged, Tenant: "default", TaskType: "echo"})
	metrics := b.scrape(t)
	for _, want := range []string{`asyncgate_tasks_archived_total{task_type="echo",tenant="default"} 1`, `asyncgate_payloads_purged_total{task_type="echo",tenant="default"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestGateWideDeliveryRoutesAreOperatorsOnly: the outbox (every tenant's
// receipts and results) and the retention sweep (every tenant's tasks) answer
// only admins of the default tenant; another tenant's admin gets 403 and
// changes nothing.
func TestGateWideDeliveryRoutesAreOperatorsOnly(t *testing.T) {
	b := setup(t)
	ck, err := auth.CreateKey(context.Background(), b.st, auth.NewKeyRequest{Role: engine.RoleAdmin, Principal: "ops.globex", Tenant: "globex"})
	if err != nil {
		t.Fatal(err)
	}
	routes := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/admin/outbox", ""},
		{http.MethodPost, "/v1/admin/outbox/retry", `{}`},
		{http.MethodPost, "/v1/admin/retention/sweep", ""},
	}
	for _, r := range routes {
		for _, key := range []string{ck.APIKey, b.agent, b.worker} {
			if c, m := b.do(t, r.method, r.path, key, r.body); c != 403 || m["error"] != "forbidden" || m["detail"] == "" {
				t.Errorf("%s %s with a non-operator key = %d %v, want 403 forbidden", r.method, r.path, c, m)
			}
		}
		if c, m := b.do(t, r.method, r.path, b.admin, r.body); c != 200 {
			t.Errorf("%s %s by an operator = %d %v, want 200", r.method, r.path, c, m)
		}
	}
	// They act on every tenant: ?tenant= names none of them, and is refused
	// (checkQuery), not ignored, whoever sends it.
	for _, key := range []string{ck.APIKey, b.admin} {
		if c, m := b.do(t, http.MethodGet, "/v1/admin/outbox?tenant=globex", key, ""); c != 400 || m["error"] != "bad_request" || !strings.Contains(m["detail"].(string), `"tenant"`) {
			t.Errorf("GET /v1/admin/outbox?tenant=globex = %d %v, want 400 bad_request naming tenant", c, m)
		}
	}
}

// TestInboxRoutesRefuseQueryTheyDoNotTake: a query parameter the inbox or
// the session bootstrap does not take — principal= as the obligations
// routes spell it, recipient= on the bootstrap — is a 400 bad_request that
// names the parameter and those the route takes, never ignored with the
// caller's own inbox as the answer.
func TestInboxRoutesRefuseQueryTheyDoNotTake(t *testing.T) {
	b := setup(t)
	for _, c := range []struct{ q, names, takes string }{
		{"/v1/inbox?principal=agent.b", `"principal"`, "recipient"},
		{"/v1/inbox?unread=true&principal=agent.a", `"principal"`, "recipient"},
		{"/v1/inbox?recipent=agent.b", `"recipent"`, "recipient"},
		{"/v1/session/bootstrap?recipient=agent.b", `"recipient"`, "only limit"},
		{"/v1/session/bootstrap?principal=agent.b", `"principal"`, "only limit"},
		{"/v1/session/bootstrap?cursor=x", `"cursor"`, "only limit"},
	} {
		code, m := b.do(t, http.MethodGet, c.q, b.agent, "")
		d, _ := m["detail"].(string)
		if code != 400 || m["error"] != "bad_request" || !strings.Contains(d, c.names) || !strings.Contains(d, c.takes) {
			t.Errorf("GET %s = %d %v, want 400 bad_request naming %s and %s", c.q, code, m, c.names, c.takes)
		}
	}
	for _, q := range []string{"/v1/inbox?unread=true&task_id=T-x&cursor=&limit=5", "/v1/inbox?tenant=default", "/v1/session/bootstrap?limit=5", "/v1/session/bootstrap"} {
		if code, m := b.do(t, http.MethodGet, q, b.agent, ""); code != 200 {
			t.Errorf("GET %s = %d %v, want 200", q, code, m)
		}
	}
	if code, _ := b.do(t, http.MethodGet, "/v1/inbox?principal=agent.b", "", ""); code != 401 {
		t.Errorf("GET /v1/inbox?principal= without a key = %d, want 401", code)
	}
}

// TestEveryStateCountedAtZero: /v1/admin/stats' by_state and the
// asyncgate_tasks_by_state gauge show every state a task can be counted
// in, 0 included: the state whose last task left (leased, once the task
// completed) reads 0 rather than vanishing.
func TestEveryStateCountedAtZero(t *testing.T) {
	b := setup(t)
	if c, m := b.do(t, "PUT", "/v1/admin/task-types/echo", b.admin, `{}`); c != 200 {
		t.Fatalf("PUT task type: %d %v", c, m)
	}
	if c, m := b.do(t, "POST", "/v1/tasks", b.agent, `{"task_type":"echo"}`); c != 201 {
		t.Fatalf("enqueue: %d %v", c, m)
	}
	c, m := b.do(t, "POST", "/v1/leases", b.worker, `{"worker_id":"echo.w1"}`)
	leases, _ := m["leases"].([]any)
	if c != 200 || len(leases) != 1 {
		t.Fatalf("lease: %d %v", c, m)
	}
	lease := leases[0].(map[string]any)["lease_id"].(string)
	if c, m := b.do(t, "POST", "/v1/leases/"+lease+"/complete", b.worker, `{"result_pointer":"s3://b/k"}`); c != 200 {
		t.Fatalf("complete: %d %v", c, m)
	}
	c, m = b.do(t, "GET", "/v1/admin/stats", b.admin, "")
	by, _ := m["by_state"].(map[string]any)
	if c != 200 || len(by) != 7 || by["succeeded"] != float64(1) {
		t.Fatalf("stats: %d %v, want the seven states, succeeded 1", c, m)
	}
	metrics := b.scrape(t)
	for _, st := range []string{"waiting", "queued", "scheduled", "leased", "canceled", "dead_letter"} {
		if by[st] != float64(0) {
			t.Errorf("by_state[%s] = %v, want 0", st, by[st])
		}
		if want := `asyncgate_tasks_by_state{state="` + st + `"} 0`; !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
