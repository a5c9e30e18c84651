package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestE2ETrustBetweenPrincipals drives `gate serve` on each store with the
// principals of one task (its creator, its recipient, the worker holding
// it, an admin) trying to take from each other what only the gate or the
// task's creator should have:
//
//   - ending the worker's task.accepted obligation by an appended receipt
//     (a task.escalated, or any other type that terminates it) while its
//     lease is live, so the ledger would say an escalation the lease
//     engine never made ended the worker's promise;
//   - using up, as the task's recipient, the waiters its creator's own
//     fan-in needs.
func TestE2ETrustBetweenPrincipals(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			contract(t)
			t.Parallel()
			var extra []string
			if db == "postgres" {
				extra = []string{"--db", postgresSchema(t)}
			}
			g := startGate(t, t.TempDir(), extra...)
			g.putType(t, "echo", map[string]any{}, "")
			t.Run("appended receipts end no obligation", func(t *testing.T) { testAppendedTerminators(t, g) })
			t.Run("creator keeps waiter room", func(t *testing.T) { testCreatorWaiterRoom(t, g) })
		})
	}
}

func testAppendedTerminators(t *testing.T, g *gateProc) {
	a := g.newKey(t, "agent", "agent.ta", "")
	b := g.newKey(t, "agent", "agent.tb", "")
	w := g.newKey(t, "worker", "echo.tw", "")
	r := call(t, "POST", g.URL+"/v1/tasks", a, map[string]any{"task_type": "echo", "recipient_ai": "agent.tb"})
	want(t, r, 201, "")
	task, assign := r.JSON(t)["task_id"].(string), r.JSON(t)["receipt_id"].(string)
	var o offer
	for _, got := range g.lease(t, w, "echo.tw", map[string]any{"task_types": []string{"echo"}, "max_tasks": 10}) {
		if got.Task.ID == task {
			o = got
		}
	}
	if o.LeaseID == "" {
		t.Fatalf("echo.tw was not offered %s", task)
	}
	r = call(t, "POST", g.URL+"/v1/leases/"+o.LeaseID+"/accept", w, nil)
	want(t, r, 200, "")
	accept := r.JSON(t)["receipt_id"].(string)

	terminator := func(id string) string {
		t.Helper()
		r := call(t, "POST", g.URL+"/v1/receipts/check-terminator", g.Admin, map[string]any{"parent_receipt_id": id})
		want(t, r, 200, "")
		s, _ := r.JSON(t)["terminator_receipt_id"].(string)
		return s
	}
	openFor := func(key, role string) map[string]bool {
		t.Helper()
		var out struct {
			Open []struct {
				ID string `json:"receipt_id"`
			} `json:"open_obligations"`
		}
		r := call(t, "GET", g.URL+"/v1/obligations/open?role="+role+"&limit=500", key, nil)
		want(t, r, 200, "")
		r.Into(t, &out)
		m := map[string]bool{}
		for _, ob := range out.Open {
			m[ob.ID] = true
		}
		return m
	}
	if !openFor(w, "obligor")[accept] {
		t.Fatalf("the worker's task.accepted %s is not among its open obligations", accept)
	}

	// Every principal of the task, and an admin, naming the worker's
	// acceptance as the parent of a receipt type that would end it: 403,
	// nothing written.
	types := []string{"task.escalated", "task.completed", "task.failed", "task.canceled", "task.retry_scheduled",
		"task.released", "task.snoozed", "email.sent", "email.failed", "workflow.completed", "workflow.failed", "workflow.canceled"}
	for _, key := range []struct{ name, key string }{{"worker", w}, {"creator", a}, {"recipient", b}, {"admin", g.Admin}} {
		for _, typ := range types {
			r := call(t, "POST", g.URL+"/v1/receipts", key.key, map[string]any{"receipt_type": typ, "task_id": task, "parents": []string{accept},
				"body": map[string]any{"escalation_reason": "forged", "result_pointer": "s3://b/k"}})
			if r.Status != 403 || r.JSON(t)["error"] != "forbidden" {
				t.Fatalf("%s appending %s naming the live lease's task.accepted: %d %s, want 403 forbidden", key.name, typ, r.Status, r.Body)
			}
		}
	}
	if term := terminator(accept); term != "" {
		t.Fatalf("the worker's task.accepted was ended by %s while its lease is live", term)
	}
	if !openFor(w, "obligor")[accept] {
		t.Fatalf("the worker's task.accepted %s left its open obligations", accept)
	}
	// The MCP door appends no receipt at all: its tools that name receipts
	// only read them, and show the acceptance open.
	for _, key := range []string{w, a} {
		mc := stdioClient(t, "mcp", "--url", g.URL, "--key", key)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		tools, err := mc.ListTools(ctx, mcp.ListToolsRequest{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range tools.Tools {
			if strings.Contains(tool.Name, "receipt") && tool.Name != "get_receipt" && tool.Name != "get_receipt_chain" {
				t.Fatalf("MCP tool %s names receipts: if it appends one, it must refuse a parent it would end", tool.Name)
			}
		}
		out, isErr := callTool(t, mc, "get_receipt", map[string]any{"receipt_id": accept})
		if isErr || out["receipt_id"] != accept || out["terminated_by"] != nil && out["terminated_by"] != "" {
			t.Fatalf("get_receipt over MCP: %v", out)
		}
	}

	// A malformed addressee is bad input (400), not a refusal of who may be
	// addressed (403): to anyone's key, the task's parties' included.
	for _, key := range []string{w, a, g.Admin} {
		for _, name := range []string{"bad name", "agent.ta\n", "\u202eagent.ta"} {
			want(t, call(t, "POST", g.URL+"/v1/receipts", key, map[string]any{"receipt_type": "task.escalated", "task_id": task, "to": name,
				"parents": []string{assign}, "body": map[string]any{"escalation_reason": "x"}}), 400, "bad_request")
		}
	}

	// An escalation is still the caller's to write: informational, naming
	// what it does not end (the assignment).
	want(t, call(t, "POST", g.URL+"/v1/receipts", w, map[string]any{"receipt_type": "task.escalated", "task_id": task, "to": "agent.ta",
		"parents": []string{assign}, "body": map[string]any{"escalation_reason": "need a human"}}), 201, "")
	want(t, call(t, "POST", g.URL+"/v1/receipts", a, map[string]any{"receipt_type": "task.progress", "task_id": task,
		"parents": []string{accept}}), 201, "")
	if term := terminator(accept); term != "" {
		t.Fatalf("an informational receipt ended the worker's task.accepted: %s", term)
	}

	// The real completion ends both obligations, as the lease engine's.
	want(t, call(t, "POST", g.URL+"/v1/leases/"+o.LeaseID+"/complete", w, map[string]any{"result": map[string]any{"ok": true}}), 200, "")
	for _, id := range []string{accept, assign} {
		term := terminator(id)
		if term == "" {
			t.Fatalf("obligation %s is open after the completion", id)
		}
		r := call(t, "GET", g.URL+"/v1/receipts/"+term, g.Admin, nil)
		want(t, r, 200, "")
		if m := r.JSON(t); m["receipt_type"] != "task.completed" || m["from"] != "echo.tw" {
			t.Fatalf("obligation %s was ended by %v from %v, want the worker's task.completed", id, m["receipt_type"], m["from"])
		}
	}
	if openFor(w, "obligor")[accept] {
		t.Fatalf("the worker's task.accepted %s is still open after its completion", accept)
	}
}

// testCreatorWaiterRoom: the recipient of a task queues as many waiters on
// it as it can; the creator can still queue its own fan-in after it.
func testCreatorWaiterRoom(t *testing.T, g *gateProc) {
	a := g.newKey(t, "agent", "agent.wa", "")
	b := g.newKey(t, "agent", "agent.wb", "")
	r := call(t, "POST", g.URL+"/v1/tasks", a, map[string]any{"task_type": "echo", "recipient_ai": "agent.wb", "delay_seconds": 3600})
	want(t, r, 201, "")
	dep := r.JSON(t)["task_id"].(string)
	tasks := make([]map[string]any, 1000)
	for i := range tasks {
		tasks[i] = map[string]any{"task_type": "echo", "after": []string{dep}, "idempotency_key": fmt.Sprintf("wb-%d", i)}
	}
	r = call(t, "POST", g.URL+"/v1/tasks/batch", b, map[string]any{"tasks": tasks})
	want(t, r, 200, "")
	var out struct {
		Results []struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		} `json:"results"`
		Succeeded int `json:"succeeded"`
	}
	r.Into(t, &out)
	refused := 0
	for _, res := range out.Results {
		if !res.OK {
			if res.Error != "too_many_waiters" {
				t.Fatalf("a recipient's waiter refused with %q, want too_many_waiters", res.Error)
			}
			refused++
		}
	}
	if refused == 0 {
		t.Fatalf("the recipient queued all %d of its 1,000 waiters: none of the bound is kept for the creator", out.Succeeded)
	}
	// The creator's own fan-in: a waiter on its task and another of its own.
	other := g.enqueue(t, a, "echo", nil)
	r = call(t, "POST", g.URL+"/v1/tasks", a, map[string]any{"task_type": "echo", "after": []string{dep, other}})
	want(t, r, 201, "")
	if s := r.JSON(t)["status"]; s != "waiting" {
		t.Fatalf("the creator's fan-in is %v, want waiting", s)
	}
	// The recipient stays refused.
	want(t, call(t, "POST", g.URL+"/v1/tasks", b, map[string]any{"task_type": "echo", "after": []string{dep}}), 409, "too_many_waiters")
	// And at the MCP door: the recipient is refused, the creator is not.
	mb := stdioClient(t, "mcp", "--url", g.URL, "--key", b)
	if out, isErr := callTool(t, mb, "queue_task", map[string]any{"task_type": "echo", "after": []string{dep}}); !isErr || out["error"] != "too_many_waiters" {
		t.Fatalf("the recipient's queue_task after the creator's task over MCP: %v", out)
	}
	ma := stdioClient(t, "mcp", "--url", g.URL, "--key", a)
	if out, isErr := callTool(t, ma, "queue_task", map[string]any{"task_type": "echo", "after": []string{dep}}); isErr || out["status"] != "waiting" {
		t.Fatalf("the creator's queue_task after its own task over MCP: %v", out)
	}
}
