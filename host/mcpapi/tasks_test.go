package mcpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
	"github.com/asyncgate/asyncgate/host/store"
)

var rpcID atomic.Int64

// rpc sends a raw JSON-RPC request on c's session and returns its result, or
// its error.
//
// On a connection of protocol 2026-07-28 or later the request carries what
// mcp-go's client stamps on its own requests of that version: the version
// and the client's capabilities in _meta, and the Mcp-Method and Mcp-Name
// headers (the transport adds Mcp-Protocol-Version).
func rpc(t testing.TB, c *client.Client, method string, params any) (json.RawMessage, *mcp.JSONRPCErrorDetails) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var header http.Header
	if v := c.ProtocolVersion(); mcp.IsModernProtocol(v) {
		params, header = stampModern(t, v, method, params)
	}
	res, err := c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: "2.0",
		ID: mcp.NewRequestId(rpcID.Add(1)), Method: method, Params: params, Header: header})
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return res.Result, res.Error
}

// stampModern is params with the version and the client's capabilities in
// _meta (kept when params already say them), and the standard headers of a
// request of protocol version.
func stampModern(t testing.TB, version, method string, params any) (any, http.Header) {
	t.Helper()
	b, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	p := map[string]any{}
	if string(b) != "null" {
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("params of %s are not an object: %s", method, b)
		}
	}
	meta, _ := p["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	if _, ok := meta[mcp.MetaKeyProtocolVersion]; !ok {
		meta[mcp.MetaKeyProtocolVersion] = version
	}
	if _, ok := meta[mcp.MetaKeyClientCapabilities]; !ok {
		meta[mcp.MetaKeyClientCapabilities] = map[string]any{}
	}
	p["_meta"] = meta
	raw, _ := json.Marshal(p)
	header := http.Header{}
	for k, v := range mcp.StandardHeaders(version, mcp.MCPMethod(method), raw) {
		header.Set(k, v)
	}
	return p, header
}

// rpcOK is rpc for a request that must succeed; it decodes the result into out.
func rpcOK(t testing.TB, c *client.Client, method string, params any, out any) {
	t.Helper()
	res, e := rpc(t, c, method, params)
	if e != nil {
		t.Fatalf("%s(%v): error %d %s", method, params, e.Code, e.Message)
	}
	if out != nil {
		if err := json.Unmarshal(res, out); err != nil {
			t.Fatalf("%s: %v in %s", method, err, res)
		}
	}
}

// notes collects a session's notifications.
type notes struct {
	mu  sync.Mutex
	got []mcp.JSONRPCNotification
}

func (n *notes) add(m mcp.JSONRPCNotification) {
	n.mu.Lock()
	n.got = append(n.got, m)
	n.mu.Unlock()
}

// wait waits for a notification that match accepts; the bound is there for
// a hang, not a timing.
func (n *notes) wait(t *testing.T, what string, match func(mcp.JSONRPCNotification) bool) mcp.JSONRPCNotification {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n.mu.Lock()
		for _, m := range n.got {
			if match(m) {
				n.mu.Unlock()
				return m
			}
		}
		n.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no %s notification within 60 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listen opens a session with an event stream (for notifications).
func (b *testBundle) listen(t *testing.T, key string) (*client.Client, *notes) {
	t.Helper()
	c, err := client.NewStreamableHttpClient(b.ts.URL+mcpapi.Path, transport.WithContinuousListening(),
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + key}))
	if err != nil {
		t.Fatal(err)
	}
	n := &notes{}
	c.OnNotification(n.add)
	initializeAt(t, c, mcp.ProtocolVersion20251125) // sessions and event streams: the era of today's clients
	// The client opens its event stream in the background, and a session
	// without one misses notifications (one sent before the stream opened
	// may be lost even when the send succeeds): send a marker until one
	// reaches the client.
	const ready = "notifications/asyncgate_test/stream_ready"
	isReady := func(m mcp.JSONRPCNotification) bool { return m.Method == ready }
	for deadline := time.Now().Add(60 * time.Second); !n.has(isReady); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no notification reached the session's event stream within 60 s")
		}
		if b.mcp.MCPServer().SendNotificationToSpecificClient(c.GetSessionId(), ready, nil) != nil {
			continue // the session is not registered yet
		}
		for wait := time.Now().Add(250 * time.Millisecond); time.Now().Before(wait) && !n.has(isReady); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return c, n
}

// has reports whether a notification that match accepts has arrived.
func (n *notes) has(match func(mcp.JSONRPCNotification) bool) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.got {
		if match(m) {
			return true
		}
	}
	return false
}

type createTask struct {
	Task mcp.Task       `json:"task"`
	Meta map[string]any `json:"_meta"`
}

// complete leases task id as the worker and completes it with result.
func complete(t *testing.T, b *testBundle, id string, res map[string]any) {
	t.Helper()
	worker := b.connect(t, b.worker)
	var lease mcpapi.LeaseResult
	ok(t, worker, "worker_lease_task", map[string]any{"task_types": []string{"echo"}}, &lease)
	if lease.TaskID == nil || *lease.TaskID != id {
		t.Fatalf("leased %+v, want %s", lease, id)
	}
	ok(t, worker, "worker_complete_task", map[string]any{"task_id": id, "run_id": lease.RunID, "result": res, "summary": "echoed"}, nil)
}

func TestTaskTypesAsTools(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	res, err := agent.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var echo *mcp.Tool
	for i := range res.Tools {
		if res.Tools[i].Name == "echo" {
			echo = &res.Tools[i]
		}
	}
	if echo == nil || echo.Execution == nil || echo.Execution.TaskSupport != mcp.TaskSupportOptional {
		t.Fatalf("echo tool: %+v", echo)
	}
	if echo.InputSchema.AdditionalProperties != false || echo.InputSchema.Properties["n"] == nil {
		t.Fatalf("echo input schema is not the params schema: %+v", echo.InputSchema)
	}
	if !strings.Contains(echo.Description, "MCP task") || !strings.Contains(echo.Description, "120") {
		t.Errorf("echo description: %s", echo.Description)
	}

	// A plain call queues it and answers with the acknowledgement.
	var ack mcpapi.TaskTypeCallResult
	r := ok(t, agent, "echo", map[string]any{"n": 1}, &ack)
	if !strings.HasPrefix(ack.TaskID, "T-") || ack.Status != "queued" || ack.Queued == nil || ack.Queued.ReceiptID == "" || ack.Result != nil {
		t.Fatalf("echo ack: %+v", ack)
	}
	if strings.Contains(text(r), "{") {
		t.Errorf("the text repeats the JSON instead of summing up: %s", text(r))
	}
	fails(t, agent, "echo", map[string]any{"n": "one"}, host.CodeInvalidParams)

	// list_task_types, the resource, and the valid types in unknown_task_type.
	var list mcpapi.TaskTypeList
	ok(t, agent, "list_task_types", nil, &list)
	if len(list.TaskTypes) != 1 || list.TaskTypes[0].Name != "echo" || list.TaskTypes[0].Tool != "echo" ||
		list.TaskTypes[0].PollSuggestionSeconds != 120 || list.TaskTypes[0].RetryPolicy.Plugin == "" ||
		list.TaskTypes[0].ResourceURI != "asyncgate://task-types/echo" || len(list.TaskTypes[0].ParamsSchema) == 0 {
		t.Fatalf("list_task_types: %+v", list)
	}
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = list.TaskTypes[0].ResourceURI
	rres, err := agent.ReadResource(context.Background(), rr)
	if err != nil || len(rres.Contents) != 1 {
		t.Fatalf("read %s: %v", rr.Params.URI, err)
	}
	var info mcpapi.TaskTypeInfo
	if err := json.Unmarshal([]byte(rres.Contents[0].(mcp.TextResourceContents).Text), &info); err != nil || info.Name != "echo" || info.ResultChannel == "" {
		t.Fatalf("task type resource: %v %+v", err, info)
	}
	var body mcpapi.ErrorBody
	call(t, agent, "queue_task", map[string]any{"task_type": "nope"}, &body)
	if body.Error != host.CodeUnknownTaskType || !strings.Contains(body.Detail, "Valid task types: echo.") {
		t.Fatalf("unknown type: %+v", body)
	}

	// Workers do not queue: no type tools for them, and calling one is "tool not found".
	worker := b.connect(t, b.worker)
	req := mcp.CallToolRequest{}
	req.Params.Name = "echo"
	if _, err := worker.CallTool(context.Background(), req); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("worker calls echo: %v", err)
	}
}

func TestToolsListChanged(t *testing.T) {
	b := setup(t, mcpapi.Config{WatchInterval: 50 * time.Millisecond})
	agent, n := b.listen(t, b.agent)
	tt := host.NewTaskType("summarize")
	tt.Tenant = "default"
	tt.Description = "Summarize a document."
	if _, err := b.eng.PutTaskType(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	n.wait(t, "tools/list_changed", func(m mcp.JSONRPCNotification) bool { return m.Method == "notifications/tools/list_changed" })
	if got := toolNames(t, agent); !strings.Contains(strings.Join(got, " "), "summarize") {
		t.Fatalf("after adding summarize: %v", got)
	}
	// Another tenant's agent does not see it.
	if got := toolNames(t, b.connect(t, b.other)); strings.Contains(strings.Join(got, " "), "summarize") {
		t.Fatalf("other tenant sees summarize: %v", got)
	}
	// Disabling it changes the list again: the tool is gone.
	n.mu.Lock()
	n.got = nil
	n.mu.Unlock()
	if _, err := b.eng.PatchTaskType(context.Background(), "default", "summarize", json.RawMessage(`{"enabled":false}`)); err != nil {
		t.Fatal(err)
	}
	n.wait(t, "tools/list_changed after disabling", func(m mcp.JSONRPCNotification) bool { return m.Method == "notifications/tools/list_changed" })
	if got := toolNames(t, agent); strings.Contains(strings.Join(got, " "), "summarize") {
		t.Fatalf("after disabling summarize: %v", got)
	}
}

// FuzzMCPMessage posts arbitrary JSON-RPC messages on a session: the gate
// answers every one without a 5xx, and a request gets a JSON-RPC answer.
func FuzzMCPMessage(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"T-1"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tasks/result","params":{"taskId":7}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tasks/list","params":{"cursor":"zz"}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tasks/cancel","params":null}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"n":1},"task":{"ttl":-1}}}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo","arguments":[1]}}`,
		`{"jsonrpc":"2.0","id":7,"method":"resources/subscribe","params":{"uri":"asyncgate://tasks/%zz"}}`,
		`{"jsonrpc":"2.0","id":8,"method":"resources/unsubscribe","params":{}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":"echo"}`,
		`[{"jsonrpc":"2.0","id":9,"method":"tasks/list"}]`,
		`not json`,
	} {
		f.Add(seed)
	}
	b := setup(f, mcpapi.Config{TaskResultWait: time.Millisecond})
	c := b.connectAt(f, b.agent, mcp.ProtocolVersion20251125)
	sid := c.GetSessionId()
	f.Fuzz(func(t *testing.T, msg string) {
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+mcpapi.Path, strings.NewReader(msg))
		req.Header.Set("Authorization", "Bearer "+b.agent)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", mcp.ProtocolVersion20251125)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("%q: %d %s", msg, resp.StatusCode, body)
		}
		var head struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal([]byte(msg), &head) == nil && len(head.ID) > 0 && resp.StatusCode == http.StatusOK &&
			strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && !json.Valid(body) {
			t.Fatalf("%q: answer is not JSON: %s", msg, body)
		}
	})
}

// TestDurableTasks drives MCP Tasks: a task-augmented call queues a gate
// task, which another session of the same key (not the one that queued it)
// gets, lists, fetches and cancels; another tenant cannot see it.
func TestDurableTasks(t *testing.T) {
	b := setup(t, mcpapi.Config{TaskResultWait: 300 * time.Millisecond})
	first := b.connect(t, b.agent)
	var ct createTask
	rpcOK(t, first, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"n": 7}, "task": map[string]any{}}, &ct)
	id := ct.Task.TaskId
	if !strings.HasPrefix(id, "T-") || ct.Task.Status != mcp.TaskStatusWorking || ct.Task.PollInterval == nil ||
		*ct.Task.PollInterval != 120000 || ct.Task.CreatedAt == "" || ct.Meta["io.modelcontextprotocol/model-immediate-response"] == nil {
		t.Fatalf("create task: %+v", ct)
	}
	first.Close()

	// A new session of the same key finds it.
	again := b.connect(t, b.agent)
	var got mcp.Task
	rpcOK(t, again, "tasks/get", map[string]any{"taskId": id}, &got)
	if got.TaskId != id || got.Status != mcp.TaskStatusWorking || got.StatusMessage != "queued" {
		t.Fatalf("tasks/get: %+v", got)
	}
	var list struct {
		Tasks []mcp.Task `json:"tasks"`
	}
	rpcOK(t, again, "tasks/list", nil, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].TaskId != id {
		t.Fatalf("tasks/list: %+v", list)
	}
	// Still working: tasks/result gives up after TaskResultWait, saying so.
	if _, e := rpc(t, again, "tasks/result", map[string]any{"taskId": id}); e == nil || e.Code != -32000 || !strings.Contains(e.Message, "still working") {
		t.Fatalf("tasks/result on a working task: %+v", e)
	}
	// Another tenant: an unknown task.
	other := b.connect(t, b.other)
	if _, e := rpc(t, other, "tasks/get", map[string]any{"taskId": id}); e == nil || e.Code != -32602 {
		t.Fatalf("other tenant tasks/get: %+v", e)
	}
	if _, e := rpc(t, other, "tasks/cancel", map[string]any{"taskId": id}); e == nil || e.Code != -32602 {
		t.Fatalf("other tenant tasks/cancel: %+v", e)
	}

	complete(t, b, id, map[string]any{"answer": 42})
	got = mcp.Task{}
	rpcOK(t, again, "tasks/get", map[string]any{"taskId": id}, &got)
	if got.Status != mcp.TaskStatusCompleted || got.PollInterval != nil {
		t.Fatalf("tasks/get after completion: %+v", got)
	}
	var tr struct {
		StructuredContent mcpapi.TaskTypeCallResult `json:"structuredContent"`
		Content           []mcp.TextContent         `json:"content"`
		IsError           bool                      `json:"isError"`
		Meta              map[string]map[string]any `json:"_meta"`
	}
	rpcOK(t, again, "tasks/result", map[string]any{"taskId": id}, &tr)
	sc := tr.StructuredContent
	if tr.IsError || sc.TaskID != id || sc.Status != "succeeded" || sc.Result == nil || string(sc.Result.Content) != `{"answer":42}` ||
		sc.Result.ChecksumValid == nil || !*sc.Result.ChecksumValid || len(tr.Content) != 1 || !strings.Contains(tr.Content[0].Text, "echoed") ||
		tr.Meta["io.modelcontextprotocol/related-task"]["taskId"] != id {
		t.Fatalf("tasks/result: %+v", tr)
	}
	if _, e := rpc(t, again, "tasks/cancel", map[string]any{"taskId": id}); e == nil || e.Code != -32602 || !strings.Contains(e.Message, "conflict") {
		t.Fatalf("tasks/cancel of a completed task: %+v", e)
	}

	// Cancel a queued one; its result is a canceled tool error.
	rpcOK(t, again, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{"ttl": 60000}}, &ct)
	var canceled mcp.Task
	rpcOK(t, again, "tasks/cancel", map[string]any{"taskId": ct.Task.TaskId}, &canceled)
	if canceled.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/cancel: %+v", canceled)
	}
	var ctr struct {
		Content []mcp.TextContent `json:"content"`
		IsError bool              `json:"isError"`
	}
	rpcOK(t, again, "tasks/result", map[string]any{"taskId": ct.Task.TaskId}, &ctr)
	var body mcpapi.ErrorBody
	if !ctr.IsError || len(ctr.Content) != 1 || json.Unmarshal([]byte(ctr.Content[0].Text), &body) != nil || body.Error != mcpapi.CodeTaskCanceled {
		t.Fatalf("tasks/result of a canceled task: %+v", ctr)
	}

	// Bad input: protocol errors, not panics.
	if _, e := rpc(t, again, "tasks/get", map[string]any{}); e == nil || e.Code != -32602 {
		t.Fatalf("tasks/get without taskId: %+v", e)
	}
	if _, e := rpc(t, again, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"n": "x"}, "task": map[string]any{}}); e == nil ||
		e.Code != -32602 || !strings.Contains(e.Message, "invalid_params") {
		t.Fatalf("task-augmented call with bad params: %+v", e)
	}
	// -32601, as mcp-go answers it; on 2026-07-28 with HTTP 404 (as mcp-go
	// answers that version), which mcp-go's client takes for the end of a
	// session: asked on 2025-11-25 here, on 2026-07-28 in
	// TestModernAnswersMapStatus.
	legacy := b.connectAt(t, b.agent, mcp.ProtocolVersion20251125)
	if _, e := rpc(t, legacy, "tools/call", map[string]any{"name": "check_task_status", "arguments": map[string]any{"task_id": id}, "task": map[string]any{}}); e == nil || e.Code != -32601 {
		t.Fatalf("task-augmented call of a tool that is not task-capable: %+v", e)
	}
}

// TestTaskNotifications: a connected session hears notifications/tasks/status
// for its task, and notifications/resources/updated for a task resource it
// subscribed to; the resource reads as check_task_status.
func TestTaskNotifications(t *testing.T) {
	b := setup(t, mcpapi.Config{WatchInterval: 50 * time.Millisecond})
	agent, n := b.listen(t, b.agent)
	var ct createTask
	rpcOK(t, agent, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{}}, &ct)
	id := ct.Task.TaskId
	uri := mcpapi.TaskURIPrefix + id
	rpcOK(t, agent, "resources/subscribe", map[string]any{"uri": uri}, nil)
	if _, e := rpc(t, agent, "resources/subscribe", map[string]any{"uri": "asyncgate://task-types/echo"}); e == nil || e.Code != -32602 {
		t.Fatalf("subscribe to a task type: %+v", e)
	}
	other := b.connect(t, b.other)
	if _, e := rpc(t, other, "resources/subscribe", map[string]any{"uri": uri}); e == nil || e.Code != -32602 {
		t.Fatalf("another tenant subscribes: %+v", e)
	}

	complete(t, b, id, map[string]any{"ok": true})
	st := n.wait(t, "tasks/status completed", func(m mcp.JSONRPCNotification) bool {
		return m.Method == "notifications/tasks/status" && m.Params.AdditionalFields["taskId"] == id &&
			m.Params.AdditionalFields["status"] == string(mcp.TaskStatusCompleted)
	})
	if !strings.Contains(st.Params.AdditionalFields["statusMessage"].(string), "echoed") {
		t.Errorf("status message: %v", st.Params.AdditionalFields)
	}
	n.wait(t, "resources/updated", func(m mcp.JSONRPCNotification) bool {
		return m.Method == "notifications/resources/updated" && m.Params.AdditionalFields["uri"] == uri
	})
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = uri
	res, err := agent.ReadResource(context.Background(), rr)
	if err != nil {
		t.Fatal(err)
	}
	var status mcpapi.TaskStatus
	if err := json.Unmarshal([]byte(res.Contents[0].(mcp.TextResourceContents).Text), &status); err != nil || status.State != host.StateSucceeded || !status.HasResult {
		t.Fatalf("task resource: %v %+v", err, status)
	}
	rr.Params.URI = mcpapi.ReceiptURIPrefix + status.AssignReceipt + "/chain"
	if res, err = agent.ReadResource(context.Background(), rr); err != nil || !strings.Contains(res.Contents[0].(mcp.TextResourceContents).Text, "task.assigned") {
		t.Fatalf("receipt chain resource: %v %+v", err, res)
	}
	// The receipt id is unescaped as a task's is: an escaped letter names
	// the same receipt, an escaped slash no receipt.
	rr.Params.URI = mcpapi.ReceiptURIPrefix + "%" + fmt.Sprintf("%02X", status.AssignReceipt[0]) + status.AssignReceipt[1:] + "/chain"
	if res, err = agent.ReadResource(context.Background(), rr); err != nil || !strings.Contains(res.Contents[0].(mcp.TextResourceContents).Text, "task.assigned") {
		t.Fatalf("receipt chain resource by %s: %v %+v", rr.Params.URI, err, res)
	}
	rr.Params.URI = mcpapi.ReceiptURIPrefix + status.AssignReceipt + "%2Fx/chain"
	if _, err = agent.ReadResource(context.Background(), rr); err == nil || !strings.Contains(err.Error(), "receipt_id") {
		t.Fatalf("receipt chain resource by %s: %v; want it refused", rr.Params.URI, err)
	}
	rr.Params.URI = uri
	if _, err := other.ReadResource(context.Background(), rr); err == nil {
		t.Fatal("another tenant read the task resource")
	}
}

// TestEveryToolHasAnOutputSchema checks every tool any role lists, the
// task-type tools included, for an object output schema (setup turns on
// output validation, so every test's results are checked against them).
func TestEveryToolHasAnOutputSchema(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	seen := map[string]bool{}
	for _, key := range []string{b.admin, b.agent, b.worker} {
		res, err := b.connect(t, key).ListTools(context.Background(), mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range res.Tools {
			seen[tl.Name] = true
			if s := tl.OutputSchema; s.Type != "object" || len(s.Properties) == 0 {
				t.Errorf("tool %s: output schema %+v", tl.Name, s)
			}
		}
	}
	if len(seen) < 16 {
		t.Errorf("only %d tools seen", len(seen))
	}
}

// TestMissingSessionID: a request after initialize without Mcp-Session-Id
// is a JSON-RPC error with status 400; without a key, a JSON 401 saying how
// to pass one.
func TestMissingSessionID(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	post := func(key string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+mcpapi.Path, strings.NewReader(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	resp, body := post(b.agent)
	var msg struct {
		ID    int `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
		json.Unmarshal(body, &msg) != nil || msg.ID != 3 || msg.Error.Code != -32000 || !strings.Contains(msg.Error.Message, "Mcp-Session-Id") {
		t.Fatalf("no session id: %d %s", resp.StatusCode, body)
	}
	// Another key cannot use the session of this one.
	c := b.connectAt(t, b.agent, mcp.ProtocolVersion20251125)
	req, _ := http.NewRequest(http.MethodPost, b.ts.URL+mcpapi.Path, strings.NewReader(`{"jsonrpc":"2.0","id":4,"method":"tasks/list"}`))
	req.Header.Set("Authorization", "Bearer "+b.admin)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.GetSessionId())
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := io.ReadAll(r2.Body)
	r2.Body.Close()
	if r2.StatusCode != http.StatusNotFound || !strings.Contains(string(b2), "not a live session of your key") {
		t.Fatalf("another key's session: %d %s", r2.StatusCode, b2)
	}
	// Nor end it: the DELETE is refused and the owner's session goes on.
	del, _ := http.NewRequest(http.MethodDelete, b.ts.URL+mcpapi.Path, nil)
	del.Header.Set("Authorization", "Bearer "+b.admin)
	del.Header.Set("Mcp-Session-Id", c.GetSessionId())
	r3, err := http.DefaultClient.Do(del)
	if err != nil {
		t.Fatal(err)
	}
	b3, _ := io.ReadAll(r3.Body)
	r3.Body.Close()
	if r3.StatusCode != http.StatusNotFound || !strings.Contains(string(b3), "not a live session of your key") {
		t.Fatalf("another key ends the session: %d %s", r3.StatusCode, b3)
	}
	if _, err := c.ListTools(context.Background(), mcp.ListToolsRequest{}); err != nil {
		t.Fatalf("the owner's session after another key's DELETE: %v", err)
	}
	// Its owner ends it: after that the id answers as an unknown session
	// (404), for its owner and for any other key that would take it up.
	own, _ := http.NewRequest(http.MethodDelete, b.ts.URL+mcpapi.Path, nil)
	own.Header.Set("Authorization", "Bearer "+b.agent)
	own.Header.Set("Mcp-Session-Id", c.GetSessionId())
	r4, err := http.DefaultClient.Do(own)
	if err != nil {
		t.Fatal(err)
	}
	r4.Body.Close()
	if r4.StatusCode != http.StatusOK {
		t.Fatalf("the owner's DELETE: %d", r4.StatusCode)
	}
	for _, key := range []string{b.agent, b.admin} {
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+mcpapi.Path, strings.NewReader(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", c.GetSessionId())
		r5, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b5, _ := io.ReadAll(r5.Body)
		r5.Body.Close()
		if r5.StatusCode != http.StatusNotFound {
			t.Fatalf("a request on an ended session: %d %.300s", r5.StatusCode, b5)
		}
	}

	resp, body = post("")
	var e mcpapi.ErrorBody
	if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal(body, &e) != nil || e.Error != host.CodeUnauthorized ||
		!strings.Contains(e.Detail, "Authorization: Bearer") {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
}

// TestStdioTasks: the task methods over stdio, where the session is the
// process: a task queued there is found over HTTP by the same principal, and
// its status notifications are written on the stdio session.
func TestStdioTasks(t *testing.T) {
	b := setup(t, mcpapi.Config{WatchInterval: 50 * time.Millisecond})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- b.mcp.ServeStdio(ctx, engine.Actor{Tenant: "default", Principal: "agent.a", Role: engine.RoleAgent}, inR, outW)
		outW.Close()
	}()
	c := client.NewClient(transport.NewIO(outR, inW, io.NopCloser(&bytes.Buffer{})))
	n := &notes{}
	c.OnNotification(n.add)
	initialize(t, c)
	var ct createTask
	rpcOK(t, c, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"n": 2}, "task": map[string]any{}}, &ct)
	h := b.connect(t, b.agent)
	var got mcp.Task
	rpcOK(t, h, "tasks/get", map[string]any{"taskId": ct.Task.TaskId}, &got)
	if got.Status != mcp.TaskStatusWorking {
		t.Fatalf("tasks/get over HTTP of a stdio task: %+v", got)
	}
	var st api.ProgressResponse
	ok(t, c, "get_task_progress", map[string]any{"task_id": ct.Task.TaskId}, &st)
	complete(t, b, ct.Task.TaskId, map[string]any{"ok": true})
	n.wait(t, "tasks/status completed over stdio", func(m mcp.JSONRPCNotification) bool {
		return m.Method == "notifications/tasks/status" && m.Params.AdditionalFields["taskId"] == ct.Task.TaskId &&
			m.Params.AdditionalFields["status"] == string(mcp.TaskStatusCompleted)
	})
	cancel()
	inW.Close()
	if err := <-served; err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
}

// TestTasksCancelOfAFinishedTaskIsAnError: tasks/cancel of a task that was
// already terminal before the call — canceled included — is invalid params,
// as the spec words it; the cancel that cancels succeeds, and a repeated
// cancel of a leased task (not terminal: cancellation requested) still
// answers working.
func TestTasksCancelOfAFinishedTaskIsAnError(t *testing.T) {
	b := setup(t, mcpapi.Config{TaskResultWait: 300 * time.Millisecond})
	c := b.connect(t, b.agent)
	var ct createTask
	rpcOK(t, c, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{}}, &ct)
	var got mcp.Task
	rpcOK(t, c, "tasks/cancel", map[string]any{"taskId": ct.Task.TaskId}, &got)
	if got.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/cancel of a queued task: %+v", got)
	}
	if res, e := rpc(t, c, "tasks/cancel", map[string]any{"taskId": ct.Task.TaskId}); e == nil || e.Code != -32602 || !strings.Contains(e.Message, "conflict") {
		t.Fatalf("tasks/cancel of a cancelled task: %s %+v", res, e)
	}

	rpcOK(t, c, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{}}, &ct)
	worker := b.connect(t, b.worker)
	var lease mcpapi.LeaseResult
	ok(t, worker, "worker_lease_task", map[string]any{"task_types": []string{"echo"}}, &lease)
	if lease.TaskID == nil || *lease.TaskID != ct.Task.TaskId {
		t.Fatalf("leased %+v, want %s", lease, ct.Task.TaskId)
	}
	for i := range 2 {
		got = mcp.Task{}
		rpcOK(t, c, "tasks/cancel", map[string]any{"taskId": ct.Task.TaskId}, &got)
		if got.Status != mcp.TaskStatusWorking || !strings.Contains(got.StatusMessage, "cancellation requested") {
			t.Fatalf("tasks/cancel #%d of a leased task: %+v", i+1, got)
		}
	}
}

// TestStatusNotificationsOnlyToWhoMaySeeTheTask: a worker key whose
// principal has the name of an agent's cannot read the agent's task, and so
// does not hear of it either; the agent does. The gate makes no such key
// now (a principal has one role); one made before that rule is planted.
func TestStatusNotificationsOnlyToWhoMaySeeTheTask(t *testing.T) {
	b := setup(t, mcpapi.Config{TaskResultWait: 300 * time.Millisecond, WatchInterval: 50 * time.Millisecond})
	ctx := context.Background()
	_, err := auth.CreateKey(ctx, b.eng.Store(), auth.NewKeyRequest{Role: engine.RoleWorker, Principal: "agent.a", Tenant: "default"})
	if !host.IsCode(err, host.CodeConflict) {
		t.Fatalf("a worker key named like an agent's: %v, want conflict", err)
	}
	secret := auth.KeyPrefix + "planted-before-one-role-per-principal"
	if err := b.eng.Store().Update(ctx, func(tx store.Tx) error {
		return tx.PutKey(ctx, store.Key{ID: host.NewID(host.PrefixKey), Hash: auth.HashKey(secret), Prefix: secret[:10],
			Role: engine.RoleWorker, Tenant: "default", Principal: "agent.a", CreatedAt: time.Now().UTC().Truncate(time.Microsecond)})
	}); err != nil {
		t.Fatal(err)
	}
	wc, wn := b.listen(t, secret)
	agent, an := b.listen(t, b.agent)
	var ct createTask
	rpcOK(t, agent, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{}}, &ct)
	id := ct.Task.TaskId
	if _, e := rpc(t, wc, "tasks/get", map[string]any{"taskId": id}); e == nil || !strings.Contains(e.Message, "not_found") {
		t.Fatalf("the worker key reads the agent's task: %+v", e)
	}
	rpcOK(t, agent, "tasks/cancel", map[string]any{"taskId": id}, nil)
	isStatus := func(m mcp.JSONRPCNotification) bool {
		return m.Method == "notifications/tasks/status" && m.Params.AdditionalFields["taskId"] == id
	}
	an.wait(t, "tasks/status to the agent", isStatus)
	// The watcher notifies every session in one pass: a marker sent to the
	// worker's stream now arrives after anything that pass sent it.
	const marker = "notifications/asyncgate_test/after"
	if err := b.mcp.MCPServer().SendNotificationToSpecificClient(wc.GetSessionId(), marker, nil); err != nil {
		t.Fatal(err)
	}
	wn.wait(t, "marker", func(m mcp.JSONRPCNotification) bool { return m.Method == marker })
	wn.mu.Lock()
	defer wn.mu.Unlock()
	for _, m := range wn.got {
		if isStatus(m) {
			t.Fatalf("the worker key heard of a task it cannot see: %+v", m.Params)
		}
	}
}

// TestRevokedKeyLosesItsEventStream: once its key is revoked, a session's
// open event stream ends (within KeyCheckInterval and a watcher pass) and
// hears nothing more, while another key's session of the same principal
// still hears of the principal's tasks.
func TestRevokedKeyLosesItsEventStream(t *testing.T) {
	b := setup(t, mcpapi.Config{TaskResultWait: 300 * time.Millisecond, WatchInterval: 50 * time.Millisecond, KeyCheckInterval: 100 * time.Millisecond})
	ctx := context.Background()
	revoked, err := auth.CreateKey(ctx, b.eng.Store(), auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "agent.z", Tenant: "default"})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := auth.CreateKey(ctx, b.eng.Store(), auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "agent.z", Tenant: "default"})
	if err != nil {
		t.Fatal(err)
	}
	c := b.connectAt(t, revoked.APIKey, mcp.ProtocolVersion20251125)
	// The revoked key's event stream, read raw to see it end.
	req, _ := http.NewRequest(http.MethodGet, b.ts.URL+mcpapi.Path, nil)
	req.Header.Set("Authorization", "Bearer "+revoked.APIKey)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.GetSessionId())
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20251125)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	resp, err := http.DefaultClient.Do(req.WithContext(sctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("event stream: %d", resp.StatusCode)
	}
	var mu sync.Mutex
	var stream bytes.Buffer
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			mu.Lock()
			stream.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	received := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(stream.String(), s)
	}
	const ready = "notifications/asyncgate_test/stream_ready"
	for deadline := time.Now().Add(20 * time.Second); !received(ready); time.Sleep(20 * time.Millisecond) {
		_ = b.mcp.MCPServer().SendNotificationToSpecificClient(c.GetSessionId(), ready, nil)
		if time.Now().After(deadline) {
			t.Fatal("the event stream did not open within 20 s")
		}
	}
	other, n := b.listen(t, kept.APIKey)
	var ct createTask
	rpcOK(t, other, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{}}, &ct)

	if err := auth.RevokeKey(ctx, b.eng.Store(), revoked.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked key's event stream is still open 10 s after the revocation")
	}
	complete(t, b, ct.Task.TaskId, map[string]any{"secret": 1})
	n.wait(t, "tasks/status to the kept key", func(m mcp.JSONRPCNotification) bool {
		return m.Method == "notifications/tasks/status" && m.Params.AdditionalFields["taskId"] == ct.Task.TaskId
	})
	if received("notifications/tasks/status") {
		mu.Lock()
		t.Fatalf("the revoked key's stream heard of a task: %s", stream.String())
	}
}

// slowReads are the registry's plugins with result channels that take
// delay to read a result (or until the read's context ends).
type slowReads struct {
	registryPlugins
	delay time.Duration
}

func (p slowReads) Channel(name string) (host.Channel, error) {
	ch, err := p.registryPlugins.Channel(name)
	if err != nil {
		return nil, err
	}
	return slowChannel{ch, p.delay}, nil
}

type slowChannel struct {
	host.Channel
	delay time.Duration
}

func (c slowChannel) Get(ctx context.Context, pointer string) ([]byte, error) {
	select {
	case <-time.After(c.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return c.Channel.Get(ctx, pointer)
}

// TestTasksResultFetchHasItsOwnBound: reading a finished task's result is
// not bounded by what is left of tasks/result's wait: a read that takes
// longer than the whole wait still answers the result.
func TestTasksResultFetchHasItsOwnBound(t *testing.T) {
	const wait = 200 * time.Millisecond
	b := setup(t, mcpapi.Config{TaskResultWait: wait}, func(c *engine.Config) {
		c.Plugins = slowReads{registryPlugins{builtins}, 3 * wait}
	})
	agent := b.connect(t, b.agent)
	var ct createTask
	rpcOK(t, agent, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{}}, &ct)
	complete(t, b, ct.Task.TaskId, map[string]any{"answer": 42})
	var tr struct {
		StructuredContent mcpapi.TaskTypeCallResult `json:"structuredContent"`
		Content           []mcp.TextContent         `json:"content"`
		IsError           bool                      `json:"isError"`
	}
	rpcOK(t, agent, "tasks/result", map[string]any{"taskId": ct.Task.TaskId}, &tr)
	if tr.IsError || tr.StructuredContent.Result == nil || string(tr.StructuredContent.Result.Content) != `{"answer":42}` {
		t.Fatalf("tasks/result of a succeeded task whose read outlasts the wait: %+v", tr)
	}
}

// TestDurableTaskArchived: a durable MCP task whose gate task retention
// archived keeps how it ended: tasks/get completed with "(archived)" (not
// failed), tasks/result what is left of its result (summary, no pointer),
// not an error; a canceled one stays cancelled.
func TestDurableTaskArchived(t *testing.T) {
	b, clock := setupRetention(t)
	agent := b.connect(t, b.agent)
	var done, dropped createTask
	rpcOK(t, agent, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"n": 1}, "task": map[string]any{}}, &done)
	rpcOK(t, agent, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"n": 2}, "task": map[string]any{}}, &dropped)
	complete(t, b, done.Task.TaskId, map[string]any{"answer": 42})
	ok(t, agent, "cancel_task", map[string]any{"task_id": dropped.Task.TaskId}, nil)

	clock.Advance(25 * time.Hour)
	if rep, err := b.eng.RetentionSweep(context.Background()); err != nil || rep.Archived != 2 {
		t.Fatalf("sweep: %+v %v", rep, err)
	}
	var got mcp.Task
	rpcOK(t, agent, "tasks/get", map[string]any{"taskId": done.Task.TaskId}, &got)
	if got.Status != mcp.TaskStatusCompleted || !strings.Contains(got.StatusMessage, "archived") {
		t.Fatalf("tasks/get of an archived succeeded task: %+v", got)
	}
	var tr struct {
		StructuredContent mcpapi.TaskTypeCallResult `json:"structuredContent"`
		IsError           bool                      `json:"isError"`
	}
	rpcOK(t, agent, "tasks/result", map[string]any{"taskId": done.Task.TaskId}, &tr)
	res, _ := json.Marshal(tr.StructuredContent.Result)
	if tr.IsError || tr.StructuredContent.Status != "archived" || strings.Contains(string(res), "result_pointer") || !strings.Contains(string(res), `"summary":"echoed"`) {
		t.Fatalf("tasks/result of an archived succeeded task: %+v %s", tr, res)
	}
	rpcOK(t, agent, "tasks/get", map[string]any{"taskId": dropped.Task.TaskId}, &got)
	if got.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/get of an archived canceled task: %+v", got)
	}
}

// setupRetention is setup on a clock the test moves, with task type echo
// kept one day past its end (retention sweeps then archive what ended).
func setupRetention(t *testing.T) (*testBundle, *host.ManualClock) {
	t.Helper()
	clock := host.NewManualClock(time.Now())
	b := setup(t, mcpapi.Config{TaskResultWait: 300 * time.Millisecond}, func(c *engine.Config) { c.Clock = clock })
	tt := host.NewTaskType("echo")
	tt.Tenant, tt.DefaultRetentionDays = "default", 1
	if _, err := b.eng.PutTaskType(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	return b, clock
}

// TestTaskCallOfAToolTheKeyMayNotUse: a task-augmented call of a tool the
// key's role may not use answers "tool not found", as the plain call does
// and as tools/list hides it — not an answer telling the tool exists.
func TestTaskCallOfAToolTheKeyMayNotUse(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent, _ := b.listen(t, b.agent)
	worker, _ := b.listen(t, b.worker)
	for _, c := range []struct {
		who  *client.Client
		tool string
	}{{agent, "worker_complete_task"}, {agent, "revoke_resource_lease"}, {worker, "queue_task"}, {worker, "submit_workflow"}, {agent, "no_such_tool"}} {
		_, e := rpc(t, c.who, "tools/call", map[string]any{"name": c.tool, "arguments": map[string]any{}, "task": map[string]any{}})
		if e == nil || !strings.Contains(e.Message, "not found") {
			t.Errorf("a task call of %s by a key that may not use it: %+v, want tool not found", c.tool, e)
		}
	}
}

// TestTasksGetSaysWhoCanceledAndWhy: tasks/get and tasks/list of a task
// canceled with a reason, or whose cancel is requested while it is leased,
// name who asked and quote the reason as that principal's words; a
// workflow canceled with a reason says the same as an MCP task.
func TestTasksGetSaysWhoCanceledAndWhy(t *testing.T) {
	b := setup(t, mcpapi.Config{TaskResultWait: 300 * time.Millisecond})
	c := b.connect(t, b.agent)
	const want = `canceled by agent.a: agent.a wrote: "not needed"`
	var queued createTask
	rpcOK(t, c, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{}}, &queued)
	ok(t, c, "cancel_task", map[string]any{"task_id": queued.Task.TaskId, "reason": "not needed"}, nil)
	var got mcp.Task
	rpcOK(t, c, "tasks/get", map[string]any{"taskId": queued.Task.TaskId}, &got)
	if got.Status != mcp.TaskStatusCancelled || got.StatusMessage != want {
		t.Fatalf("tasks/get of a canceled task: %q %q, want %q", got.Status, got.StatusMessage, want)
	}

	var leased createTask
	rpcOK(t, c, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{}}, &leased)
	worker := b.connect(t, b.worker)
	var lease mcpapi.LeaseResult
	ok(t, worker, "worker_lease_task", map[string]any{"task_types": []string{"echo"}}, &lease)
	if lease.TaskID == nil || *lease.TaskID != leased.Task.TaskId {
		t.Fatalf("leased %+v, want %s", lease, leased.Task.TaskId)
	}
	ok(t, c, "cancel_task", map[string]any{"task_id": leased.Task.TaskId, "reason": "not needed"}, nil)
	const asked = `(cancellation requested by agent.a: agent.a wrote: "not needed")`
	got = mcp.Task{}
	rpcOK(t, c, "tasks/get", map[string]any{"taskId": leased.Task.TaskId}, &got)
	if got.Status != mcp.TaskStatusWorking || !strings.HasSuffix(got.StatusMessage, asked) {
		t.Fatalf("tasks/get of a leased task whose cancel is requested: %q %q, want it to end %q", got.Status, got.StatusMessage, asked)
	}
	// tasks/cancel's own answer names who asked, as tasks/get then does.
	var third createTask
	rpcOK(t, c, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{}}, &third)
	ok(t, worker, "worker_lease_task", map[string]any{"task_types": []string{"echo"}}, &lease)
	if lease.TaskID == nil || *lease.TaskID != third.Task.TaskId {
		t.Fatalf("leased %+v, want %s", lease, third.Task.TaskId)
	}
	got = mcp.Task{}
	rpcOK(t, c, "tasks/cancel", map[string]any{"taskId": third.Task.TaskId}, &got)
	const viaCancel = `(cancellation requested by agent.a: agent.a wrote: "canceled with MCP tasks/cancel")`
	if got.Status != mcp.TaskStatusWorking || !strings.HasSuffix(got.StatusMessage, viaCancel) {
		t.Fatalf("tasks/cancel of a leased task: %q %q, want it to end %q", got.Status, got.StatusMessage, viaCancel)
	}

	var list struct {
		Tasks []mcp.Task `json:"tasks"`
	}
	rpcOK(t, c, "tasks/list", map[string]any{}, &list)
	seen := map[string]string{}
	for _, x := range list.Tasks {
		seen[x.TaskId] = x.StatusMessage
	}
	if seen[queued.Task.TaskId] != want || !strings.HasSuffix(seen[leased.Task.TaskId], asked) {
		t.Fatalf("tasks/list: %q and %q", seen[queued.Task.TaskId], seen[leased.Task.TaskId])
	}

	var sub mcpapi.SubmitWorkflowResult
	ok(t, c, "submit_workflow", map[string]any{"name": "one", "steps": []map[string]any{{"name": "x", "task_type": "echo"}}}, &sub)
	ok(t, c, "cancel_workflow", map[string]any{"workflow_id": sub.WorkflowID, "reason": "not needed"}, nil)
	got = mcp.Task{}
	rpcOK(t, c, "tasks/get", map[string]any{"taskId": sub.WorkflowID}, &got)
	if got.Status != mcp.TaskStatusCancelled || got.StatusMessage != want {
		t.Fatalf("tasks/get of a canceled workflow: %q %q, want %q", got.Status, got.StatusMessage, want)
	}
	ok(t, c, "submit_workflow", map[string]any{"name": "two", "steps": []map[string]any{{"name": "x", "task_type": "echo"}}}, &sub)
	ok(t, c, "cancel_workflow", map[string]any{"workflow_id": sub.WorkflowID}, nil)
	got = mcp.Task{}
	rpcOK(t, c, "tasks/get", map[string]any{"taskId": sub.WorkflowID}, &got)
	if got.Status != mcp.TaskStatusCancelled || got.StatusMessage != "canceled by agent.a" {
		t.Fatalf("tasks/get of a workflow canceled without a reason: %q %q", got.Status, got.StatusMessage)
	}
}

func TestCanceledMessage(t *testing.T) {
	for _, c := range []struct{ err, archived, want string }{
		{"", "", "canceled"},
		{"canceled", "", "canceled"},
		{"canceled by agent.a", "", "canceled by agent.a"},
		{"canceled by agent.a: not needed", "", `canceled by agent.a: agent.a wrote: "not needed"`},
		{"canceled by a:b: x: y", " (archived)", `canceled (archived) by a:b: a:b wrote: "x: y"`},
		{"canceled by asyncgate: dependency T-1 failed", "", "canceled by asyncgate: dependency T-1 failed"},
		{"canceled: why\nnot", "", `canceled: the canceler wrote: "why\nnot"`},
		{"step a was canceled by agent.a, so final step b could not run", "", "canceled: step a was canceled by agent.a, so final step b could not run"},
	} {
		if got := mcpapi.CanceledMessage(c.err, c.archived); got != c.want {
			t.Errorf("CanceledMessage(%q, %q) = %q, want %q", c.err, c.archived, got, c.want)
		}
	}
}

// TestTaskIDParamIsBounded: tasks/get, tasks/result and tasks/cancel with a
// taskId far longer than any id the gate makes are refused as invalid
// params in a short answer that does not echo the id back.
func TestTaskIDParamIsBounded(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	c := b.connect(t, b.agent)
	long := "T-" + strings.Repeat("A", 100_000)
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		res, e := rpc(t, c, m, map[string]any{"taskId": long})
		if e == nil || e.Code != -32602 || !strings.Contains(e.Message, "longer than") {
			b, _ := json.Marshal(e)
			t.Fatalf("%s with a 100 kB taskId: %.200s %.300s (%d bytes); want invalid params saying it is too long", m, res, b, len(b))
		}
		if b, _ := json.Marshal(e); len(b) > 1000 {
			t.Fatalf("%s with a 100 kB taskId: a %d-byte error, echoing the id", m, len(b))
		}
	}
}
