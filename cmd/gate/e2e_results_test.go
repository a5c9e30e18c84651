package main

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

// completeOne leases the one queued task of taskType for worker and completes
// it with body; it returns the completion's answer.
func (g *gateProc) completeOne(t *testing.T, key, worker, taskID string, body map[string]any) map[string]any {
	t.Helper()
	o := g.lease(t, key, worker, nil)
	if len(o) != 1 || o[0].Task.ID != taskID {
		t.Fatalf("lease for %s: %+v", taskID, o)
	}
	r := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", key, body)
	want(t, r, 200, "")
	return r.JSON(t)
}

// fetchContent fetches a task's result and returns its bytes, checking the
// checksum the gate reports.
func (g *gateProc) fetchContent(t *testing.T, key, taskID string) []byte {
	t.Helper()
	r := call(t, "GET", g.URL+"/v1/tasks/"+taskID+"/result", key, nil)
	want(t, r, 200, "")
	var out struct {
		Content       []byte `json:"content_base64"`
		ChecksumValid *bool  `json:"checksum_valid"`
	}
	r.Into(t, &out)
	if out.ChecksumValid == nil || !*out.ChecksumValid {
		t.Fatalf("result of %s: checksum not valid: %.300s", taskID, r.Body)
	}
	return out.Content
}

// TestE2EResultsStayWithTheirTenant: results stored by the file channel are
// owned per tenant and task. A worker of one tenant cannot complete with a
// pointer to another tenant's stored result, and archiving one tenant's
// result leaves another tenant's equal result in place.
func TestE2EResultsStayWithTheirTenant(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	for _, tenant := range []string{"acme", "globex"} {
		g.putType(t, "report", map[string]any{"default_result_channel": "inline"}, tenant)
	}
	agentA, workerA := g.newKey(t, "agent", "agent.a", "acme"), g.newKey(t, "worker", "report.a", "acme")
	agentB, workerB := g.newKey(t, "agent", "agent.b", "globex"), g.newKey(t, "worker", "report.b", "globex")

	// The same 200 KiB result in both tenants: over the inline limit, so the
	// gate routes it to the file channel.
	payload := bytes.Repeat([]byte("same result, two tenants\n"), 200<<10/25)
	body := map[string]any{"result_base64": base64.StdEncoding.EncodeToString(payload)}
	taskA := g.enqueue(t, agentA, "report", nil)
	ptrA, _ := g.completeOne(t, workerA, "report.a", taskA, body)["result_pointer"].(string)
	taskB := g.enqueue(t, agentB, "report", nil)
	ptrB, _ := g.completeOne(t, workerB, "report.b", taskB, body)["result_pointer"].(string)
	if !strings.HasPrefix(ptrA, "file:") || !strings.HasPrefix(ptrB, "file:") || ptrA == ptrB {
		t.Fatalf("equal results of two tenants must be two objects: %q and %q", ptrA, ptrB)
	}

	// A worker of tenant B completes with tenant A's pointer: refused, and
	// the task stays leased (nothing recorded).
	stolen := g.enqueue(t, agentB, "report", nil)
	o := g.lease(t, workerB, "report.b", nil)
	if len(o) != 1 || o[0].Task.ID != stolen {
		t.Fatalf("lease: %+v", o)
	}
	for _, forged := range []map[string]any{
		{"result_pointer": ptrA},
		{"result_pointer": ptrA, "result_channel": "file"},
		{"result_pointer": ptrA, "result_channel": "s3"}, // the pointer's own prefix still names the file channel
		{"result_pointer": "file:" + stolen + "/" + strings.Repeat("a", 64)},
	} {
		want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", workerB, forged), 422, "foreign_pointer")
	}
	want(t, call(t, "POST", g.URL+"/worker/complete", workerB,
		map[string]any{"task_id": stolen, "run_id": o[0].LeaseID, "result_pointer": ptrA}), 422, "foreign_pointer")
	if st := call(t, "GET", g.URL+"/v1/tasks/"+stolen, agentB, nil).JSON(t)["status"]; st != "leased" {
		t.Fatalf("a refused completion changed the task: %v", st)
	}
	// Pointers of channels the gate does not manage are the worker's to give.
	want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", workerB,
		map[string]any{"result_pointer": "s3://bucket/out.json", "result_channel": "s3"}), 200, "")

	// Archiving tenant A's result removes only A's object.
	if got := g.fetchContent(t, agentA, taskA); !bytes.Equal(got, payload) {
		t.Fatal("tenant A's result differs")
	}
	want(t, call(t, "POST", g.URL+"/v1/tasks/"+taskA+"/archive", agentA, nil), 200, "")
	if got := g.fetchContent(t, agentB, taskB); !bytes.Equal(got, payload) {
		t.Fatal("tenant B's result differs after tenant A archived an equal one")
	}
	want(t, call(t, "GET", g.URL+"/v1/tasks/"+taskA+"/result", agentA, nil), 404, "not_found")
	// And tenant B's agent cannot see tenant A's task at all.
	want(t, call(t, "GET", g.URL+"/v1/tasks/"+taskA+"/result", agentB, nil), 404, "not_found")
}

// TestE2ECompleteRepeatWithPayload: repeating a completion that carried an
// inline payload answers the first outcome with duplicate: true, on the
// canonical route and on the seeds' /worker/complete.
func TestE2ECompleteRepeatWithPayload(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	g.putType(t, "echo", map[string]any{"default_result_channel": "inline"}, "")
	agent, worker := g.newKey(t, "agent", "agent.r", ""), g.newKey(t, "worker", "echo.1", "")
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 64<<10)) // goes to the file channel
	for _, body := range []map[string]any{
		{"result": map[string]any{"answer": 42}},
		{"result_base64": base64.StdEncoding.EncodeToString([]byte("raw bytes"))},
		{"result_base64": big},
	} {
		id := g.enqueue(t, agent, "echo", nil)
		o := g.lease(t, worker, "echo.1", nil)
		if len(o) != 1 || o[0].Task.ID != id {
			t.Fatalf("lease: %+v", o)
		}
		first := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, body)
		want(t, first, 200, "")
		again := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, body)
		want(t, again, 200, "")
		f, a := first.JSON(t), again.JSON(t)
		if f["duplicate"] != false || a["duplicate"] != true || a["receipt_id"] != f["receipt_id"] || a["result_pointer"] != f["result_pointer"] {
			t.Fatalf("repeat of %v:\nfirst %s\nagain %s", body, first.Body, again.Body)
		}

		// The seeds' route, with task_id and run_id in the body.
		id = g.enqueue(t, agent, "echo", nil)
		o = g.lease(t, worker, "echo.1", nil)
		if len(o) != 1 || o[0].Task.ID != id {
			t.Fatalf("lease: %+v", o)
		}
		env := map[string]any{"task_id": id, "run_id": o[0].LeaseID}
		for k, v := range body {
			env[k] = v
		}
		first = call(t, "POST", g.URL+"/worker/complete", worker, env)
		want(t, first, 200, "")
		again = call(t, "POST", g.URL+"/worker/complete", worker, env)
		want(t, again, 200, "")
		f, a = first.JSON(t), again.JSON(t)
		if a["duplicate"] != true || a["notification_id"] != f["notification_id"] {
			t.Fatalf("seed repeat of %v:\nfirst %s\nagain %s", body, first.Body, again.Body)
		}
	}
}
