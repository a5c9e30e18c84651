package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// setupGate starts a gate with a task type "echo", an agent and a worker key.
type bundle struct {
	g      *gateProc
	agent  string // agent.kee
	worker string // echo.w1
}

func setup(t *testing.T, typeFields map[string]any, extra ...string) bundle {
	t.Helper()
	g := startGate(t, t.TempDir(), extra...)
	if typeFields == nil {
		typeFields = map[string]any{}
	}
	g.putType(t, "echo", typeFields, "")
	return bundle{g: g, agent: g.newKey(t, "agent", "agent.kee", ""), worker: g.newKey(t, "worker", "echo.w1", "")}
}

func TestE2EFullCycleAndReceipts(t *testing.T) {
	contract(t)
	t.Parallel()
	b := setup(t, nil)
	g := b.g

	// Enqueue: the rich ack, then a duplicate idempotency key.
	r := call(t, "POST", g.URL+"/v1/tasks", b.agent, map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}, "idempotency_key": "k-1", "task_summary": "say hi"})
	want(t, r, 201, "")
	ack := r.JSON(t)
	for _, f := range []string{"task_id", "status", "is_duplicate", "estimated_runtime_seconds", "poll_suggestion_seconds", "inbox_on_complete", "receipt_id"} {
		if _, ok := ack[f]; !ok {
			t.Fatalf("ack lacks %s: %s", f, r.Body)
		}
	}
	if ack["status"] != "queued" || ack["is_duplicate"] != false || ack["inbox_on_complete"] != true {
		t.Fatalf("ack %s", r.Body)
	}
	id, assign := ack["task_id"].(string), ack["receipt_id"].(string)
	r = call(t, "POST", g.URL+"/v1/tasks", b.agent, map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}, "idempotency_key": "k-1"})
	want(t, r, 200, "")
	if d := r.JSON(t); d["is_duplicate"] != true || d["task_id"] != id {
		t.Fatalf("duplicate ack %s", r.Body)
	}

	// The obligation is open until the task ends.
	r = call(t, "GET", g.URL+"/v1/obligations/open?role=obligee", b.agent, nil)
	want(t, r, 200, "")
	var obl struct {
		Server          map[string]any   `json:"server"`
		Relationship    map[string]any   `json:"relationship"`
		OpenObligations []map[string]any `json:"open_obligations"`
		Cursor          *string          `json:"cursor"`
	}
	r.Into(t, &obl)
	if obl.Server == nil || obl.Relationship == nil || obl.Cursor == nil || len(obl.OpenObligations) != 1 || obl.OpenObligations[0]["receipt_id"] != assign {
		t.Fatalf("open obligations %s", r.Body)
	}

	offers := g.lease(t, b.worker, "echo.w1", map[string]any{"max_tasks": 10, "task_types": []string{"echo"}})
	if len(offers) != 1 || offers[0].Task.ID != id || offers[0].RunID != offers[0].LeaseID {
		t.Fatalf("offers %+v", offers)
	}
	lid := offers[0].LeaseID
	lu := g.URL + "/v1/leases/" + lid

	r = call(t, "POST", lu+"/accept", b.worker, nil)
	want(t, r, 200, "")
	accept := r.JSON(t)["receipt_id"].(string)
	r = call(t, "POST", lu+"/accept", b.worker, map[string]any{})
	want(t, r, 200, "")
	if r.JSON(t)["receipt_id"] != accept {
		t.Fatalf("second accept wrote a new receipt: %s", r.Body)
	}

	r = call(t, "POST", lu+"/heartbeat", b.worker, map[string]any{"progress_percent": 40, "progress_message": "four of ten", "extend_lease_seconds": 600})
	want(t, r, 200, "")
	if hb := r.JSON(t); hb["status"] != "ok" || hb["cancel_requested"] != false {
		t.Fatalf("heartbeat %s", r.Body)
	}
	r = call(t, "GET", g.URL+"/v1/tasks/"+id+"/progress", b.agent, nil)
	want(t, r, 200, "")
	var pr struct {
		ProgressPercent float64          `json:"progress_percent"`
		ProgressMessage string           `json:"progress_message"`
		Progress        []map[string]any `json:"progress"`
	}
	r.Into(t, &pr)
	if pr.ProgressPercent != 40 || pr.ProgressMessage != "four of ten" || len(pr.Progress) != 1 {
		t.Fatalf("progress %s", r.Body)
	}

	// Not locatable → 422, and nothing changes.
	want(t, call(t, "POST", lu+"/complete", b.worker, map[string]any{"summary": "done"}), 422, "not_locatable")
	// An inline payload for a channel that does not exist → a clear 400, nothing stored.
	want(t, call(t, "POST", lu+"/complete", b.worker, map[string]any{"result": map[string]any{"x": 1}, "result_channel": "nope"}), 400, "bad_request")

	done := map[string]any{"result_pointer": "s3://bucket/out.json", "result_channel": "s3", "summary": "said hi",
		"metadata": map[string]any{"tokens": 3}, "artifacts": []map[string]any{{"type": "s3", "url": "s3://bucket/out.json"}}}
	r = call(t, "POST", lu+"/complete", b.worker, done)
	want(t, r, 200, "")
	comp := r.JSON(t)
	if comp["status"] != "completed" || comp["duplicate"] != false || comp["task_id"] != id {
		t.Fatalf("complete %s", r.Body)
	}
	r = call(t, "POST", lu+"/complete", b.worker, done)
	want(t, r, 200, "")
	if d := r.JSON(t); d["duplicate"] != true || d["receipt_id"] != comp["receipt_id"] {
		t.Fatalf("repeated complete %s", r.Body)
	}
	// Any other call on the finished lease is lease_expired.
	want(t, call(t, "POST", lu+"/heartbeat", b.worker, nil), 409, "lease_expired")
	want(t, call(t, "POST", lu+"/fail", b.worker, map[string]any{"error_message": "late"}), 409, "lease_expired")

	r = call(t, "GET", g.URL+"/v1/tasks/"+id, b.agent, nil)
	want(t, r, 200, "")
	task := r.JSON(t)
	if task["status"] != "succeeded" || task["result"].(map[string]any)["result_pointer"] != "s3://bucket/out.json" {
		t.Fatalf("task %s", r.Body)
	}
	r = call(t, "GET", g.URL+"/v1/tasks/"+id+"/result", b.agent, nil)
	want(t, r, 409, "conflict") // no channels to fetch an s3 pointer through
	r = call(t, "POST", g.URL+"/v1/tasks/"+id+"/archive", b.agent, nil)
	want(t, r, 200, "")
	if r.JSON(t)["archived_at"] == nil {
		t.Fatalf("archive %s", r.Body)
	}

	// Receipts: assigned, accepted, completed, in ledger order.
	r = call(t, "GET", g.URL+"/v1/receipts?task_id="+id, b.agent, nil)
	want(t, r, 200, "")
	var rl struct {
		Receipts []map[string]any `json:"receipts"`
	}
	r.Into(t, &rl)
	var types []string
	for _, rc := range rl.Receipts {
		types = append(types, rc["receipt_type"].(string))
	}
	if strings.Join(types, ",") != "task.assigned,task.accepted,task.completed" {
		t.Fatalf("receipts %v", types)
	}
	r = call(t, "GET", g.URL+"/v1/receipts/"+assign, b.agent, nil)
	want(t, r, 200, "")
	if r.JSON(t)["terminated_by"] != comp["receipt_id"] {
		t.Fatalf("receipt %s", r.Body)
	}
	r = call(t, "POST", g.URL+"/v1/receipts/check-terminator", b.agent, map[string]any{"parent_receipt_id": accept})
	want(t, r, 200, "")
	if ct := r.JSON(t); ct["has_terminator"] != true || ct["terminator_receipt_id"] != comp["receipt_id"] {
		t.Fatalf("check-terminator %s", r.Body)
	}
	r = call(t, "GET", g.URL+"/v1/receipts/"+comp["receipt_id"].(string)+"/chain", b.agent, nil)
	want(t, r, 200, "")
	var ch struct {
		Chain []map[string]any `json:"chain"`
	}
	r.Into(t, &ch)
	if len(ch.Chain) != 3 {
		t.Fatalf("chain %s", r.Body)
	}
	r = call(t, "GET", g.URL+"/v1/obligations/open", b.agent, nil)
	want(t, r, 200, "")
	r.Into(t, &obl)
	if len(obl.OpenObligations) != 0 {
		t.Fatalf("obligations left open: %s", r.Body)
	}

	// A principal appends a progress receipt; a repeated dedupe key returns it.
	pbody := map[string]any{"receipt_type": "task.progress", "task_id": id, "parents": []string{assign}, "body": map[string]any{"note": "x"}, "dedupe_key": "p1"}
	r = call(t, "POST", g.URL+"/v1/receipts", b.agent, pbody)
	want(t, r, 201, "")
	rid := r.JSON(t)["receipt_id"]
	r = call(t, "POST", g.URL+"/v1/receipts", b.agent, pbody)
	want(t, r, 200, "")
	if d := r.JSON(t); d["receipt_id"] != rid || d["duplicate"] != true {
		t.Fatalf("dedupe %s", r.Body)
	}
	want(t, call(t, "POST", g.URL+"/v1/receipts", b.agent, map[string]any{"receipt_type": "task.completed", "parents": []string{assign}}), 403, "forbidden")

	// List with filters and a cursor.
	for i := 0; i < 3; i++ {
		g.enqueue(t, b.agent, "echo", map[string]any{"i": i})
	}
	r = call(t, "GET", g.URL+"/v1/tasks?status=queued&task_type=echo&limit=2", b.agent, nil)
	want(t, r, 200, "")
	var tl struct {
		Tasks  []map[string]any `json:"tasks"`
		Cursor string           `json:"cursor"`
	}
	r.Into(t, &tl)
	if len(tl.Tasks) != 2 || tl.Cursor == "" {
		t.Fatalf("page 1 %s", r.Body)
	}
	r = call(t, "GET", g.URL+"/v1/tasks?status=queued&task_type=echo&limit=2&cursor="+tl.Cursor, b.agent, nil)
	want(t, r, 200, "")
	r.Into(t, &tl)
	if len(tl.Tasks) != 1 {
		t.Fatalf("page 2 %s", r.Body)
	}
	want(t, call(t, "GET", g.URL+"/v1/tasks?status=nope", b.agent, nil), 400, "bad_request")

	// Graceful stop, then the ledger verifies.
	if err := g.Stop(syscall.SIGTERM); err != nil {
		t.Fatalf("gate exit: %v\n%s", err, g.Log())
	}
	if !strings.Contains(g.Log(), "msg=stopped") {
		t.Fatalf("no clean stop logged:\n%s", g.Log())
	}
	out, errOut, code := gateCLI(t, "ledger", "verify", "--data", g.dir, "--json")
	if code != 0 || !strings.Contains(out, `"ok": true`) {
		t.Fatalf("ledger verify: %d %s %s", code, out, errOut)
	}
	// A checkpoint hash kept from this verify must be found by later ones;
	// one the ledger never had fails the verify, and a malformed one is a usage error.
	var rep struct {
		HeadHash string `json:"head_hash"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.HeadHash == "" {
		t.Fatalf("ledger verify --json: %v %s", err, out)
	}
	if out, errOut, code := gateCLI(t, "ledger", "verify", "--data", g.dir, "--expect-checkpoint", rep.HeadHash); code != 0 {
		t.Fatalf("verify against its own checkpoint: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := gateCLI(t, "ledger", "verify", "--data", g.dir, "--expect-checkpoint", strings.Repeat("ab", 32)); code != 1 || !strings.Contains(errOut, "not in the checkpoint chain") {
		t.Fatalf("verify against a checkpoint the ledger never had: %d %s", code, errOut)
	}
	if _, _, code := gateCLI(t, "ledger", "verify", "--data", g.dir, "--expect-checkpoint", "xyz"); code != 2 {
		t.Fatalf("a malformed checkpoint hash: exit %d, want 2", code)
	}
}

func TestE2EFailRetryCancelRelease(t *testing.T) {
	contract(t)
	t.Parallel()
	b := setup(t, map[string]any{"default_max_retries": 1, "requeue_delay_seconds": 0})
	g := b.g
	id := g.enqueue(t, b.agent, "echo", nil)
	o := g.lease(t, b.worker, "echo.w1", nil)
	if len(o) != 1 {
		t.Fatalf("offers %v", o)
	}
	// Release: back to the queue without using an attempt.
	r := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/release", b.worker, map[string]any{"reason": "busy"})
	want(t, r, 200, "")
	if d := r.JSON(t); d["task_status"] != "queued" {
		t.Fatalf("release %s", r.Body)
	}
	want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/release", b.worker, nil), 200, "") // no-op
	o = g.lease(t, b.worker, "echo.w1", nil)
	if len(o) != 1 || o[0].Task.ID != id {
		t.Fatalf("re-lease %v", o)
	}
	// Worker fails once: retried (max_retries 1).
	r = call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", b.worker, map[string]any{"error_message": "boom", "metadata": map[string]any{"http_status": 504}})
	want(t, r, 200, "")
	if d := r.JSON(t); d["status"] != "failed" || d["will_retry"] != true {
		t.Fatalf("fail %s", r.Body)
	}
	// Retry delay comes from the default backoff; the task is scheduled
	// until then.
	r = call(t, "GET", g.URL+"/v1/tasks/"+id, b.agent, nil)
	if d := r.JSON(t); d["status"] != "scheduled" || d["attempts"] != float64(1) {
		t.Fatalf("after fail %s", r.Body)
	}
	// Cancel a queued task: at once; again: a no-op; a finished task: 409.
	id2 := g.enqueue(t, b.agent, "echo", nil)
	r = call(t, "POST", g.URL+"/v1/tasks/"+id2+"/cancel", b.agent, map[string]any{"reason": "changed my mind"})
	want(t, r, 200, "")
	if r.JSON(t)["status"] != "canceled" {
		t.Fatalf("cancel %s", r.Body)
	}
	want(t, call(t, "POST", g.URL+"/v1/tasks/"+id2+"/cancel", b.agent, nil), 200, "")

	// Cancel a leased task: the worker learns it from its heartbeat.
	id3 := g.enqueue(t, b.agent, "echo", map[string]any{"third": true})
	var lid string
	for _, of := range g.lease(t, b.worker, "echo.w1", map[string]any{"max_tasks": 5}) {
		if of.Task.ID == id3 {
			lid = of.LeaseID
		}
	}
	if lid == "" {
		t.Fatal("third task not offered")
	}
	want(t, call(t, "POST", g.URL+"/v1/tasks/"+id3+"/cancel", b.agent, nil), 200, "")
	r = call(t, "POST", g.URL+"/v1/leases/"+lid+"/heartbeat", b.worker, nil)
	want(t, r, 200, "")
	if r.JSON(t)["cancel_requested"] != true {
		t.Fatalf("heartbeat after cancel %s", r.Body)
	}
	r = call(t, "POST", g.URL+"/v1/leases/"+lid+"/release", b.worker, nil)
	want(t, r, 200, "")
	if r.JSON(t)["task_status"] != "canceled" {
		t.Fatalf("release after cancel %s", r.Body)
	}
}

func TestE2EDeadLettersRedriveWorkersKeys(t *testing.T) {
	contract(t)
	t.Parallel()
	b := setup(t, map[string]any{"default_max_retries": 0})
	g := b.g
	id := g.enqueue(t, b.agent, "echo", nil)
	o := g.lease(t, b.worker, "echo.w1", nil)
	r := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", b.worker, map[string]any{"error_message": "fatal", "retryable": true})
	want(t, r, 200, "")
	if d := r.JSON(t); d["status"] != "dead_letter" || d["will_retry"] != false {
		t.Fatalf("fail %s", r.Body)
	}
	r = call(t, "GET", g.URL+"/v1/admin/dead-letters", g.Admin, nil)
	want(t, r, 200, "")
	if !strings.Contains(string(r.Body), id) {
		t.Fatalf("dead letters %s", r.Body)
	}
	want(t, call(t, "GET", g.URL+"/v1/admin/dead-letters", b.agent, nil), 403, "forbidden")
	r = call(t, "POST", g.URL+"/v1/admin/dead-letters/"+id+"/redrive", g.Admin, nil)
	want(t, r, 200, "")
	if r.JSON(t)["status"] != "queued" {
		t.Fatalf("redrive %s", r.Body)
	}
	want(t, call(t, "POST", g.URL+"/v1/admin/dead-letters/"+id+"/redrive", g.Admin, nil), 409, "conflict")
	want(t, call(t, "POST", g.URL+"/v1/admin/dead-letters/T-NOPE/redrive", g.Admin, nil), 404, "not_found")

	r = call(t, "GET", g.URL+"/v1/admin/workers", g.Admin, nil)
	want(t, r, 200, "")
	if !strings.Contains(string(r.Body), `"worker_id":"echo.w1"`) {
		t.Fatalf("workers %s", r.Body)
	}

	// Task types: list, get, bad schema, bad name, unknown field.
	r = call(t, "GET", g.URL+"/v1/admin/task-types", g.Admin, nil)
	want(t, r, 200, "")
	if !strings.Contains(string(r.Body), `"task_type":"echo"`) || !strings.Contains(string(r.Body), `"default_max_retries":0`) {
		t.Fatalf("task types %s", r.Body)
	}
	want(t, call(t, "GET", g.URL+"/v1/admin/task-types/echo", g.Admin, nil), 200, "")
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/bad", g.Admin, map[string]any{"params_schema": map[string]any{"type": 12}}), 400, "bad_request")
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/Bad Name", g.Admin, map[string]any{}), 400, "bad_request")
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/x", g.Admin, map[string]any{"colour": "red"}), 400, "bad_request")
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/x", g.Admin, map[string]any{"task_type": "y"}), 400, "bad_request")
	// A schema is enforced at enqueue.
	g.putType(t, "typed", map[string]any{"params_schema": map[string]any{"type": "object", "required": []string{"path"}, "properties": map[string]any{"path": map[string]any{"type": "string"}}}}, "")
	want(t, call(t, "POST", g.URL+"/v1/tasks", b.agent, map[string]any{"task_type": "typed", "params": map[string]any{"path": 3}}), 400, "invalid_params")
	want(t, call(t, "POST", g.URL+"/v1/tasks", b.agent, map[string]any{"task_type": "typed", "params": map[string]any{"path": "/a"}}), 201, "")
	g.putType(t, "off", map[string]any{"enabled": false}, "")
	want(t, call(t, "POST", g.URL+"/v1/tasks", b.agent, map[string]any{"task_type": "off"}), 400, "task_type_disabled")

	// Keys over HTTP: create, list (no hashes), revoke → 401.
	r = call(t, "POST", g.URL+"/v1/admin/keys", g.Admin, map[string]any{"role": "agent", "principal": "temp"})
	want(t, r, 201, "")
	k := r.JSON(t)
	key, kid := k["api_key"].(string), k["key_id"].(string)
	want(t, call(t, "GET", g.URL+"/v1/tasks", key, nil), 200, "")
	r = call(t, "GET", g.URL+"/v1/admin/keys", g.Admin, nil)
	want(t, r, 200, "")
	if !strings.Contains(string(r.Body), kid) || strings.Contains(string(r.Body), key) || strings.Contains(string(r.Body), `"hash"`) {
		t.Fatalf("keys list %s", r.Body)
	}
	want(t, call(t, "DELETE", g.URL+"/v1/admin/keys/"+kid, g.Admin, nil), 200, "")
	want(t, call(t, "GET", g.URL+"/v1/tasks", key, nil), 401, "unauthorized")
	want(t, call(t, "DELETE", g.URL+"/v1/admin/keys/K-NOPE", g.Admin, nil), 404, "not_found")
	want(t, call(t, "POST", g.URL+"/v1/admin/keys", g.Admin, map[string]any{"role": "root", "principal": "x"}), 400, "bad_request")
	want(t, call(t, "POST", g.URL+"/v1/admin/keys", g.Admin, map[string]any{"role": "worker", "principal": "noinstance"}), 400, "invalid_worker_id")

	// The spec's worker key route.
	r = call(t, "POST", g.URL+"/admin/workers/create_key", g.Admin, map[string]any{"worker_id": "openrouter.001", "capabilities": []string{"x"}})
	want(t, r, 200, "")
	if d := r.JSON(t); d["worker_id"] != "openrouter.001" || !strings.HasPrefix(d["api_key"].(string), "agw_") {
		t.Fatalf("create_key %s", r.Body)
	}

	// Health, readiness, metrics.
	want(t, call(t, "GET", g.URL+"/healthz", "", nil), 200, "")
	want(t, call(t, "GET", g.URL+"/readyz", "", nil), 200, "")
	want(t, call(t, "GET", g.URL+"/metrics", "", nil), 401, "unauthorized")
	want(t, call(t, "GET", g.URL+"/metrics", b.agent, nil), 403, "forbidden")
	r = call(t, "GET", g.URL+"/metrics", g.Admin, nil)
	want(t, r, 200, "")
	for _, m := range []string{"asyncgate_tasks_queued_total", "asyncgate_tasks_failed_total", "asyncgate_tasks_dead_lettered_total",
		"asyncgate_task_duration_seconds", "asyncgate_tasks_by_type", "asyncgate_workers_active", "asyncgate_worker_heartbeat_age_seconds",
		"asyncgate_task_queue_depth", "asyncgate_oldest_pending_task_age_seconds", "asyncgate_receipts_total", "asyncgate_http_request_duration_seconds",
		"asyncgate_store_writers 1", "asyncgate_store_batches_total", "asyncgate_store_batched_updates_total", "asyncgate_store_writer_busy_seconds_total"} {
		if !strings.Contains(string(r.Body), m) {
			t.Errorf("metrics lack %s", m)
		}
	}
}

func TestE2EBadInputAndAuth(t *testing.T) {
	contract(t)
	t.Parallel()
	b := setup(t, nil, "--body-limit", "4096")
	g := b.g
	big := `{"task_type":"echo","params":{"x":"` + strings.Repeat("a", 5000) + `"}}`
	cases := []struct {
		name, method, path, key string
		body                    any
		status                  int
		code                    string
	}{
		{"no key", "GET", "/v1/tasks", "", nil, 401, "unauthorized"},
		{"bad key", "GET", "/v1/tasks", "agw_nope", nil, 401, "unauthorized"},
		{"not agw", "GET", "/v1/tasks", "hello", nil, 401, "unauthorized"},
		{"unknown route", "GET", "/v2/whatever", b.agent, nil, 404, "not_found"},
		{"unknown v1 route", "GET", "/v1/nothing", b.agent, nil, 404, "not_found"},
		{"wrong method", "DELETE", "/v1/tasks", b.agent, nil, 405, "method_not_allowed"},
		{"malformed json", "POST", "/v1/tasks", b.agent, `{"task_type":`, 400, "bad_request"},
		{"not an object", "POST", "/v1/tasks", b.agent, `[1,2]`, 400, "bad_request"},
		{"two values", "POST", "/v1/tasks", b.agent, `{"task_type":"echo"}{}`, 400, "bad_request"},
		{"wrong type", "POST", "/v1/tasks", b.agent, `{"task_type":5}`, 400, "bad_request"},
		{"unknown field", "POST", "/v1/tasks", b.agent, `{"task_type":"echo","colour":"red"}`, 400, "bad_request"},
		{"params not object", "POST", "/v1/tasks", b.agent, `{"task_type":"echo","params":[1]}`, 400, "invalid_params"},
		{"priority range", "POST", "/v1/tasks", b.agent, `{"task_type":"echo","priority":11}`, 400, "bad_request"},
		{"no task type", "POST", "/v1/tasks", b.agent, `{}`, 400, "bad_request"},
		{"unknown task type", "POST", "/v1/tasks", b.agent, `{"task_type":"nope"}`, 400, "unknown_task_type"},
		{"too large", "POST", "/v1/tasks", b.agent, big, 413, "too_large"},
		{"worker enqueues", "POST", "/v1/tasks", b.worker, `{"task_type":"echo"}`, 403, "forbidden"},
		{"agent leases", "POST", "/v1/leases", b.agent, `{"worker_id":"echo.w1"}`, 403, "forbidden"},
		{"agent admin", "GET", "/v1/admin/keys", b.agent, nil, 403, "forbidden"},
		{"worker as other", "POST", "/v1/leases", b.worker, `{"worker_id":"echo.w2"}`, 403, "forbidden"},
		{"admin leases", "POST", "/v1/leases", g.Admin, `{"worker_id":"nodot"}`, 403, "forbidden"},
		{"max tasks", "POST", "/v1/leases", b.worker, `{"max_tasks":1000}`, 400, "bad_request"},
		{"negative wait", "POST", "/v1/leases", b.worker, `{"wait_seconds":-1}`, 400, "bad_request"},
		{"gone lease", "POST", "/v1/leases/lease-NOPE/heartbeat", b.worker, nil, 409, "lease_expired"},
		{"gone lease complete", "POST", "/v1/leases/lease-NOPE/complete", b.worker, `{"result_pointer":"x:y"}`, 409, "lease_expired"},
		{"progress range", "POST", "/v1/leases/lease-NOPE/heartbeat", b.worker, `{"progress_percent":101}`, 400, "bad_request"},
		{"bad base64", "POST", "/v1/leases/lease-NOPE/complete", b.worker, `{"result_base64":"!!"}`, 400, "bad_request"},
		{"no task", "GET", "/v1/tasks/T-NOPE", b.agent, nil, 404, "not_found"},
		{"no receipt", "GET", "/v1/receipts/R-NOPE", b.agent, nil, 404, "not_found"},
		{"receipts need task", "GET", "/v1/receipts", b.agent, nil, 400, "bad_request"},
		{"terminator needs id", "POST", "/v1/receipts/check-terminator", b.agent, `{}`, 400, "bad_request"},
		{"receipt body array", "POST", "/v1/receipts", b.agent, `{"receipt_type":"task.progress","body":[1]}`, 400, "bad_request"},
		{"bad limit", "GET", "/v1/tasks?limit=x", b.agent, nil, 400, "bad_request"},
		{"obligations of another", "GET", "/v1/obligations/open?principal=someone", b.agent, nil, 403, "forbidden"},
		{"obligations role", "GET", "/v1/obligations/open?role=boss", b.agent, nil, 400, "bad_request"},
		{"seed admin leases", "POST", "/lease", g.Admin, `{"worker_id":"openrouter-001"}`, 403, "forbidden"},
		{"seed need run", "POST", "/worker/heartbeat", b.worker, `{"task_id":"T-1"}`, 400, "bad_request"},
	}
	for _, c := range cases {
		r := call(t, c.method, g.URL+c.path, c.key, c.body)
		if r.Status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, r.Status, c.status, r.Body)
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(r.Body, &m); err != nil || m["error"] != c.code || m["detail"] == "" {
			t.Errorf("%s: body %s, want error %q with a detail", c.name, r.Body, c.code)
		}
	}
	// Nothing was written by the bad calls: no task exists.
	r := call(t, "GET", g.URL+"/v1/tasks", g.Admin, nil)
	var tl struct {
		Tasks []any `json:"tasks"`
	}
	r.Into(t, &tl)
	if len(tl.Tasks) != 0 {
		t.Fatalf("bad input wrote tasks: %s", r.Body)
	}
	if strings.Contains(g.Log(), "level=ERROR") {
		t.Fatalf("bad input logged errors:\n%s", g.Log())
	}
}

func TestE2ETenantsAndVisibility(t *testing.T) {
	contract(t)
	t.Parallel()
	b := setup(t, nil)
	g := b.g
	g.putType(t, "echo", map[string]any{}, "acme")
	acmeAgent := g.newKey(t, "agent", "agent.kee", "acme") // same name, other tenant
	acmeWorker := g.newKey(t, "worker", "echo.w1", "acme")
	other := g.newKey(t, "agent", "agent.other", "")

	id := g.enqueue(t, b.agent, "echo", map[string]any{"secret": 1})
	want(t, call(t, "GET", g.URL+"/v1/tasks/"+id, acmeAgent, nil), 404, "not_found")
	want(t, call(t, "POST", g.URL+"/v1/tasks/"+id+"/cancel", acmeAgent, nil), 404, "not_found")
	want(t, call(t, "GET", g.URL+"/v1/tasks/"+id, other, nil), 404, "not_found") // same tenant, not a party
	if o := g.lease(t, acmeWorker, "echo.w1", nil); len(o) != 0 {
		t.Fatalf("acme worker leased a default task: %v", o)
	}
	o := g.lease(t, b.worker, "echo.w1", nil)
	if len(o) != 1 {
		t.Fatalf("offers %v", o)
	}
	// Another tenant's worker (same worker id) cannot touch the lease.
	want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", acmeWorker, map[string]any{"result_pointer": "x:y"}), 409, "lease_expired")
	// The holding worker sees the task it holds.
	want(t, call(t, "GET", g.URL+"/v1/tasks/"+id, b.worker, nil), 200, "")

	// A tenant admin manages only its tenant.
	acmeAdmin := g.newKey(t, "admin", "ops", "acme")
	want(t, call(t, "GET", g.URL+"/v1/admin/task-types?tenant=default", acmeAdmin, nil), 403, "forbidden")
	r := call(t, "GET", g.URL+"/v1/admin/keys", acmeAdmin, nil)
	want(t, r, 200, "")
	if strings.Contains(string(r.Body), `"tenant":"default"`) {
		t.Fatalf("acme admin sees default keys: %s", r.Body)
	}
	want(t, call(t, "POST", g.URL+"/v1/admin/keys?tenant=default", acmeAdmin, map[string]any{"role": "agent", "principal": "x"}), 403, "forbidden")
	// A tenant in the body does not choose it: naming another is refused.
	want(t, call(t, "POST", g.URL+"/v1/admin/keys", acmeAdmin, map[string]any{"role": "agent", "principal": "x", "tenant": "default"}), 400, "tenant_mismatch")
}

func TestE2ESeedShapes(t *testing.T) {
	contract(t)
	t.Parallel()
	b := setup(t, map[string]any{"default_max_retries": 2})
	g := b.g

	// Lease Protocol: POST /lease → one offer object.
	want(t, call(t, "POST", g.URL+"/lease", b.worker, map[string]any{"worker_id": "echo.w1"}), 204, "")
	r := call(t, "POST", g.URL+"/v1/tasks", b.agent, map[string]any{"task_type": "echo", "task_summary": "Generate Python function",
		"params": map[string]any{"task_body": "Create a function", "payload_pointer": "depotgate://artifact/1", "language": "python", "expected_outcome_kind": "artifact_pointer"}})
	want(t, r, 201, "")
	id := r.JSON(t)["task_id"].(string)
	r = call(t, "POST", g.URL+"/lease", b.worker, map[string]any{"worker_id": "echo.w1", "capabilities": []string{"python"}, "max_tasks": 1, "preferred_kinds": []string{"echo"}, "extra": "ignored"})
	want(t, r, 200, "")
	var so struct {
		LeaseID        string         `json:"lease_id"`
		LeaseExpiresAt time.Time      `json:"lease_expires_at"`
		Task           map[string]any `json:"task"`
	}
	r.Into(t, &so)
	top := r.JSON(t)
	if len(top) != 3 || so.LeaseID == "" || so.LeaseExpiresAt.IsZero() {
		t.Fatalf("offer shape %s", r.Body)
	}
	for k, v := range map[string]any{"task_id": id, "principal_ai": "agent.kee", "task_type": "echo", "task_summary": "Generate Python function",
		"task_body": "Create a function", "payload_pointer": "depotgate://artifact/1", "expected_outcome_kind": "artifact_pointer"} {
		if so.Task[k] != v {
			t.Fatalf("task.%s = %v, want %v: %s", k, so.Task[k], v, r.Body)
		}
	}
	if in, _ := so.Task["inputs"].(map[string]any); in["language"] != "python" {
		t.Fatalf("inputs %s", r.Body)
	}
	r = call(t, "POST", g.URL+"/lease/"+so.LeaseID+"/heartbeat", b.worker, map[string]any{})
	want(t, r, 200, "")
	if r.JSON(t)["lease_expires_at"] == nil {
		t.Fatalf("heartbeat %s", r.Body)
	}
	want(t, call(t, "POST", g.URL+"/lease/lease-NOPE/heartbeat", b.worker, nil), 409, "lease_expired")
	want(t, call(t, "POST", g.URL+"/v1/leases/"+so.LeaseID+"/complete", b.worker, map[string]any{"result_pointer": "depotgate://artifact/out"}), 200, "")

	// Spec worker interface: POST /worker/lease → TaskEnvelope, 204 idle.
	for _, prefix := range []string{"/worker", "/workers"} {
		leasePath := prefix + "/lease"
		if prefix == "/workers" {
			leasePath = "/workers/lease_task"
			r = call(t, "POST", g.URL+leasePath, b.worker, map[string]any{"worker_id": "echo.w1"})
			want(t, r, 200, "")
			if d := r.JSON(t); d["task_id"] != nil || d["message"] != "No tasks available" {
				t.Fatalf("lease_task idle %s", r.Body)
			}
		} else {
			want(t, call(t, "POST", g.URL+leasePath, b.worker, map[string]any{"worker_id": "echo.w1"}), 204, "")
		}
		id := g.enqueue(t, b.agent, "echo", map[string]any{"prompt": "hi"})
		r = call(t, "POST", g.URL+leasePath, b.worker, map[string]any{"worker_id": "echo.w1", "task_types": []string{"echo"}, "lease_seconds": 300})
		want(t, r, 200, "")
		var env map[string]any
		r.Into(t, &env)
		for _, f := range []string{"task_id", "run_id", "task_type", "params", "priority", "lease_expires_at", "metadata"} {
			if _, ok := env[f]; !ok {
				t.Fatalf("envelope lacks %s: %s", f, r.Body)
			}
		}
		if env["task_id"] != id || env["params"].(map[string]any)["prompt"] != "hi" {
			t.Fatalf("envelope %s", r.Body)
		}
		run := env["run_id"].(string)
		r = call(t, "POST", g.URL+prefix+"/heartbeat", b.worker, map[string]any{"task_id": id, "run_id": run, "progress_percent": 45.5, "progress_message": "Processed 450/1000 files", "extend_lease_seconds": 300})
		want(t, r, 200, "")
		if d := r.JSON(t); d["status"] != "ok" || d["lease_expires_at"] == nil {
			t.Fatalf("heartbeat %s", r.Body)
		}
		// The wrong task for the run is lease_expired, with the spec's "message".
		r = call(t, "POST", g.URL+prefix+"/heartbeat", b.worker, map[string]any{"task_id": "T-OTHER", "run_id": run})
		want(t, r, 409, "lease_expired")
		if r.JSON(t)["message"] == nil {
			t.Fatalf("seed error without message: %s", r.Body)
		}
		// Fail once (will retry), then the retried task completes later.
		r = call(t, "POST", g.URL+prefix+"/fail", b.worker, map[string]any{"task_id": id, "run_id": run, "error_message": "OpenRouter API timeout", "retryable": true, "metadata": map[string]any{"http_status": 504}})
		want(t, r, 200, "")
		if d := r.JSON(t); d["status"] != "failed" || d["will_retry"] != true || d["retry_scheduled_at"] == nil {
			t.Fatalf("fail %s", r.Body)
		}
		// Complete on a fresh task.
		id2 := g.enqueue(t, b.agent, "echo", map[string]any{"prompt": "again"})
		r = call(t, "POST", g.URL+leasePath, b.worker, map[string]any{"worker_id": "echo.w1"})
		want(t, r, 200, "")
		r.Into(t, &env)
		if env["task_id"] != id2 {
			t.Fatalf("expected the fresh task, got %s", r.Body)
		}
		r = call(t, "POST", g.URL+prefix+"/complete", b.worker, map[string]any{"task_id": id2, "run_id": env["run_id"], "summary": "Consulted 3 models",
			"result_channel": "email", "result_pointer": "message-id-xyz@mail.com", "result_checksum": "sha256:abcdef", "metadata": map[string]any{"models_queried": 3}})
		want(t, r, 200, "")
		if d := r.JSON(t); d["status"] != "completed" || d["notification_sent"] != true {
			t.Fatalf("complete %s", r.Body)
		}
		// Retries exhausted → dead_letter with notification_sent.
		id3 := g.enqueue(t, b.agent, "echo", map[string]any{"n": 3})
		for i := 0; ; i++ {
			r = call(t, "POST", g.URL+leasePath, b.worker, map[string]any{"worker_id": "echo.w1"})
			want(t, r, 200, "")
			r.Into(t, &env)
			if env["task_id"] != id3 {
				t.Fatalf("expected %s, got %s", id3, r.Body)
			}
			r = call(t, "POST", g.URL+prefix+"/fail", b.worker, map[string]any{"task_id": id3, "run_id": env["run_id"], "error_message": "x", "retryable": false})
			want(t, r, 200, "")
			d := r.JSON(t)
			if d["status"] == "dead_letter" && d["will_retry"] == false && d["notification_sent"] == true {
				break
			}
			t.Fatalf("non-retryable failure %s", r.Body)
		}
	}
}

func TestE2ELongPollWakeUp(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	g := b.g
	type result struct {
		offers []offer
		err    error
	}
	got := make(chan result, 1)
	go func() {
		r, err := tryCall("POST", g.URL+"/v1/leases", b.worker, map[string]any{"worker_id": "echo.w1", "wait_seconds": 25, "max_tasks": 4})
		if err != nil || r.Status != 200 {
			got <- result{err: fmt.Errorf("lease: %v %d %s", err, r.Status, r.Body)}
			return
		}
		var out struct {
			Leases []offer `json:"leases"`
		}
		err = json.Unmarshal(r.Body, &out)
		got <- result{offers: out.Leases, err: err}
	}()
	// Wait until the long-poll is parked (the worker shows up in the registry), then enqueue.
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(string(call(t, "GET", g.URL+"/v1/admin/workers", g.Admin, nil).Body), "echo.w1") {
		if time.Now().After(deadline) {
			t.Fatal("the long-poll never registered its worker")
		}
		time.Sleep(20 * time.Millisecond)
	}
	id := g.enqueue(t, b.agent, "echo", nil)
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.offers) != 1 || res.offers[0].Task.ID != id {
		t.Fatalf("long-poll answered %+v, want task %s", res.offers, id)
	}

	// A long-poll in flight does not hold up a graceful shutdown: it answers 204.
	got2 := make(chan resp, 1)
	go func() {
		r, _ := tryCall("POST", g.URL+"/v1/leases", b.worker, map[string]any{"worker_id": "echo.w1", "wait_seconds": 30})
		got2 <- r
	}()
	time.Sleep(200 * time.Millisecond) // let it park; if it has not, it gets a 204 or a refused connection either way
	if err := g.Stop(syscall.SIGTERM); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, g.Log())
	}
	if r := <-got2; r.Status != 0 && r.Status != 204 {
		t.Fatalf("long-poll during shutdown answered %d %s", r.Status, r.Body)
	}
}

func TestE2EKeysAndLedgerCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The keys command works on an existing gate; it never creates one.
	if _, errOut, code := gateCLI(t, "keys", "create", "--data", dir, "--role", "agent", "--principal", "cli.agent"); code == 0 || !strings.Contains(errOut, "no gate database") {
		t.Fatalf("keys create in a folder without a gate: %d %q", code, errOut)
	}
	g := startGate(t, dir)
	out, errOut, code := gateCLI(t, "keys", "create", "--data", dir, "--role", "agent", "--principal", "cli.agent", "--tenant", "t1")
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "agw_") {
		t.Fatalf("keys create: %d %q %q", code, out, errOut)
	}
	agentKey := strings.TrimSpace(out)
	// A flag value the gate would refuse is bad usage (exit 2), named.
	for _, bad := range [][]string{{"--role", "wizard", "--principal", "x"}, {"--role", "worker", "--principal", "noinstance"}, {"--role", "agent", "--principal", "asyncgate"}} {
		if _, errOut, code := gateCLI(t, append([]string{"keys", "create", "--data", dir}, bad...)...); code != 2 || !strings.Contains(errOut, "gate keys create:") {
			t.Fatalf("keys create %v: exit %d %q, want 2 and the reason", bad, code, errOut)
		}
	}
	want(t, call(t, "GET", g.URL+"/v1/tasks", agentKey, nil), 200, "")
	out, _, code = gateCLI(t, "keys", "list", "--data", dir, "--json")
	var ks []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &ks) != nil || len(ks) != 2 {
		t.Fatalf("keys list: %d %s", code, out)
	}
	var agentID string
	for _, k := range ks {
		if k["principal"] == "cli.agent" {
			agentID = k["key_id"].(string)
		}
		if _, ok := k["hash"]; ok {
			t.Fatal("keys list shows hashes")
		}
	}
	if _, _, code = gateCLI(t, "keys", "revoke", "--data", dir, agentID); code != 0 {
		t.Fatal("revoke")
	}
	// The gate caches keys for up to 5 s; a revocation made offline lands within that.
	deadline := time.Now().Add(20 * time.Second)
	for call(t, "GET", g.URL+"/v1/tasks", agentKey, nil).Status != 401 {
		if time.Now().After(deadline) {
			t.Fatal("revoked key still works")
		}
		time.Sleep(200 * time.Millisecond)
	}
	g.Stop(syscall.SIGTERM)
	out, _, code = gateCLI(t, "ledger", "verify", "--data", dir, "--json")
	if code != 0 || !strings.Contains(out, `"ok": true`) {
		t.Fatalf("ledger verify: %d %s", code, out)
	}
}

func TestE2EConfigFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gate.json")
	os.WriteFile(cfg, []byte(`{"listen":"127.0.0.1:0","data":"`+filepath.Join(dir, "data")+`","metrics_public":true,"body_limit_bytes":2048}`), 0o600)
	cmdDir := filepath.Join(dir, "data")
	g := startGate(t, cmdDir, "--config", cfg)
	want(t, call(t, "GET", g.URL+"/metrics", "", nil), 200, "")
	want(t, call(t, "POST", g.URL+"/v1/tasks", g.Admin, `{"task_type":"`+strings.Repeat("x", 3000)+`"}`), 413, "too_large")

	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"listen":"127.0.0.1:0","colour":"red"}`), 0o600)
	_, errOut, code := gateCLI(t, "serve", "--config", bad, "--data", filepath.Join(dir, "d2"))
	if code != 2 || !strings.Contains(errOut, "colour") {
		t.Fatalf("bad config: %d %s", code, errOut)
	}
	_, errOut, code = gateCLI(t, "serve", "--db", "postgres://u:pw@localhost/x", "--data", filepath.Join(dir, "d3"), "--listen", "127.0.0.1:0")
	// No such PostgreSQL role here: the start fails, and the password is never printed.
	if code == 0 || strings.Contains(errOut, "pw@") || strings.Contains(errOut, ":pw") {
		t.Fatalf("postgres: %d %s", code, errOut)
	}
}

// syncList is a list safe for concurrent appends.
type syncList struct {
	mu sync.Mutex
	v  []string
}

func (l *syncList) add(s ...string) { l.mu.Lock(); l.v = append(l.v, s...); l.mu.Unlock() }
func (l *syncList) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.v...)
}
