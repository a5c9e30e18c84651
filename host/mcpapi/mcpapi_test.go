package mcpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi"
	"github.com/asyncgate/asyncgate/host/mcpapi"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/sqlite/sqlitetest"
	"github.com/asyncgate/asyncgate/host/store"
)

// testBundle is an in-process gate (real SQLite store, engine with the real
// built-in plugins, HTTP door with the MCP door mounted) behind an httptest
// server on 127.0.0.1.
type testBundle struct {
	eng    *engine.Engine
	mcp    *mcpapi.Server
	ts     *httptest.Server
	admin  string
	agent  string // tenant default, principal agent.a
	other  string // tenant other, principal agent.b
	worker string // tenant default, worker echo.w1
}

func setup(t testing.TB, cfg mcpapi.Config, opts ...func(*engine.Config)) *testBundle {
	t.Helper()
	st, err := sqlite.Open(sqlitetest.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// MaxWait well above any test's bound, so a long-poll that is not ended
	// by Close would outlast the test's own deadline.
	ecfg := engine.Config{Store: st, Logger: log, Plugins: registryPlugins{builtins}, MaxWait: 10 * time.Minute}
	for _, o := range opts {
		o(&ecfg)
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Engine, cfg.Logger = eng, log
	cfg.ValidateOutput = true // every result is checked against its tool's output schema
	ms, err := mcpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Engine: eng, Logger: log, AuthCacheTTL: -1}, httpapi.WithRoutes(ms.Mount))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ms.Close(); ts.Close(); eng.Close(); st.Close() })
	b := &testBundle{eng: eng, mcp: ms, ts: ts}
	ctx := context.Background()
	for _, k := range []struct {
		dst                *string
		role, name, tenant string
	}{
		{&b.admin, engine.RoleAdmin, "root", "default"},
		{&b.agent, engine.RoleAgent, "agent.a", "default"},
		{&b.other, engine.RoleAgent, "agent.b", "other"},
		{&b.worker, engine.RoleWorker, "echo.w1", "default"},
	} {
		ck, err := auth.CreateKey(ctx, st, auth.NewKeyRequest{Role: k.role, Principal: k.name, Tenant: k.tenant})
		if err != nil {
			t.Fatal(err)
		}
		*k.dst = ck.APIKey
	}
	for _, tenant := range []string{"default", "other"} {
		tt := host.NewTaskType("echo")
		tt.Tenant = tenant
		tt.PollSuggestionSeconds = 120
		tt.ParamsSchema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":false}`)
		if _, err := eng.PutTaskType(ctx, tt); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// connect opens an initialized MCP session over streamable HTTP with key.
func (b *testBundle) connect(t testing.TB, key string) *client.Client {
	t.Helper()
	return b.connectAt(t, key, mcp.LATEST_PROTOCOL_VERSION)
}

// connectAt is connect at protocol version.
func (b *testBundle) connectAt(t testing.TB, key, version string) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(b.ts.URL+mcpapi.Path,
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + key}))
	if err != nil {
		t.Fatal(err)
	}
	initializeAt(t, c, version)
	return c
}

func initialize(t testing.TB, c *client.Client) {
	t.Helper()
	initializeAt(t, c, mcp.LATEST_PROTOCOL_VERSION)
}

// initializeAt starts c and initializes a session at protocol version.
func initializeAt(t testing.TB, c *client.Client, version string) {
	t.Helper()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = version
	req.Params.ClientInfo = mcp.Implementation{Name: "mcpapi-test", Version: "1"}
	res, err := c.Initialize(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.ServerInfo.Name != "asyncgate" || !strings.Contains(res.Instructions, "list_open_obligations") {
		t.Fatalf("initialize: %+v", res)
	}
}

// call calls a tool and decodes its structured content into out (when not
// nil). It fails the test on a protocol error; tool errors are returned.
func call(t *testing.T, c *client.Client, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(res.Content) == 0 {
		t.Fatalf("%s: no text content", name)
	}
	if out != nil && res.IsError {
		// A tool error's body is its text (it has no structured content).
		if err := json.Unmarshal([]byte(text(res)), out); err != nil {
			t.Fatalf("%s: error text %q: %v", name, text(res), err)
		}
	} else if out != nil {
		if err := json.Unmarshal(structured(t, res), out); err != nil {
			t.Fatalf("%s: structured content: %v", name, err)
		}
	}
	return res
}

func structured(t *testing.T, res *mcp.CallToolResult) []byte {
	t.Helper()
	if len(res.RawStructuredContent) > 0 {
		return res.RawStructuredContent
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func text(res *mcp.CallToolResult) string {
	var sb strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String()
}

// ok calls a tool that must succeed.
func ok(t *testing.T, c *client.Client, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res := call(t, c, name, args, out)
	if res.IsError {
		t.Fatalf("%s(%v): tool error %s", name, args, text(res))
	}
	return res
}

// fails calls a tool that must fail with code, both in the structured
// content and in the text.
func fails(t *testing.T, c *client.Client, name string, args map[string]any, code string) {
	t.Helper()
	var body mcpapi.ErrorBody
	res := call(t, c, name, args, &body)
	if !res.IsError {
		t.Fatalf("%s(%v): want tool error %s, got success %s", name, args, code, text(res))
	}
	if body.Error != code || body.Detail == "" {
		t.Fatalf("%s(%v): want error %s, got %+v", name, args, code, body)
	}
	if res.StructuredContent != nil || len(res.RawStructuredContent) > 0 {
		t.Fatalf("%s: a tool error with structured content (clients check it against the output schema): %s", name, text(res))
	}
}

func toolNames(t *testing.T, c *client.Client) []string {
	t.Helper()
	res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		if tl.Description == "" || tl.InputSchema.Type != "object" {
			t.Errorf("tool %s has no description or input schema", tl.Name)
		}
		names = append(names, tl.Name)
	}
	sort.Strings(names)
	return names
}

// agentToolNames are an agent's tools in a tenant whose one task type is echo
// (a tool of its own).
var agentToolNames = []string{"acquire_resource_leases", "archive_task_email", "archive_task_result", "cancel_task", "cancel_workflow", "check_task_status",
	"create_resource_session", "create_schedule", "delete_schedule", "echo", "end_resource_session", "fetch_task_email", "fetch_task_result", "get_receipt", "get_receipt_chain",
	"get_schedule", "get_task_progress", "get_workflow", "heartbeat_resource_leases", "heartbeat_resource_session", "list_active_tasks", "list_inbox", "list_open_obligations",
	"list_resource_holders", "list_schedules", "list_task_types", "list_workflows", "mark_read", "pause_schedule", "queue_task", "queue_tasks", "release_resource_leases", "resume_schedule",
	"send_email", "session_bootstrap", "store_task_result_in_memory", "submit_workflow", "update_schedule", "verify_resource_leases"}

func TestToolsByRole(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	got := toolNames(t, b.connect(t, b.agent))
	if fmt.Sprint(got) != fmt.Sprint(agentToolNames) {
		t.Errorf("agent tools: %v\nwant %v", got, agentToolNames)
	}
	adminTools := append(slices.Clone(agentToolNames), "revoke_resource_lease")
	sort.Strings(adminTools)
	if got := toolNames(t, b.connect(t, b.admin)); fmt.Sprint(got) != fmt.Sprint(adminTools) {
		t.Errorf("admin tools: %v", got)
	}
	want := []string{"acquire_resource_leases", "check_task_status", "create_resource_session", "end_resource_session", "fetch_task_result", "get_receipt", "get_receipt_chain", "get_task_progress",
		"heartbeat_resource_leases", "heartbeat_resource_session", "list_active_tasks", "list_open_obligations", "list_resource_holders", "list_task_types", "release_resource_leases", "verify_resource_leases",
		"worker_complete_task", "worker_fail_task", "worker_heartbeat_task", "worker_lease_task", "worker_snooze_task"}
	if got := toolNames(t, b.connect(t, b.worker)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("worker tools: %v\nwant %v", got, want)
	}
}

func TestWorkerShimRefusedForAgentKeys(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	for _, name := range []string{"worker_lease_task", "worker_heartbeat_task", "worker_complete_task", "worker_fail_task", "worker_snooze_task"} {
		hidden(t, agent, name, map[string]any{"task_id": "T-x", "run_id": "lease-x"})
	}
	worker := b.connect(t, b.worker)
	hidden(t, worker, "queue_task", map[string]any{"task_type": "echo"})
}

// hidden calls a tool the caller's role may not use: the role filter hides it,
// so the call is refused as an unknown tool (a JSON-RPC error), never run.
func hidden(t *testing.T, c *client.Client, name string, args map[string]any) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(context.Background(), req)
	if err == nil {
		t.Fatalf("%s: want it refused as an unknown tool, got result %s", name, text(res))
	}
	if want := "tool '" + name + "' not found"; !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: got error %q, want one saying %q", name, err, want)
	}
}

func TestAuth(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, auth := range []string{"", "Bearer agw_nope", "Basic abc", "Bearer " + b.agent + "x"} {
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+mcpapi.Path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb httpapi.ErrorBody
		err = json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		if resp.StatusCode != 401 || err != nil || eb.Error != host.CodeUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("auth %q: %d %+v %v", auth, resp.StatusCode, eb, err)
		}
	}
	// The SDK client with a bad key cannot initialize.
	c, err := client.NewStreamableHttpClient(b.ts.URL+mcpapi.Path, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer agw_bad"}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	if _, err := c.Initialize(context.Background(), req); err == nil {
		t.Error("initialize with a bad key succeeded")
	}
}

func TestLocalhostProtection(t *testing.T) {
	post := func(b *testBundle, host string) int {
		body := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+mcpapi.Path, strings.NewReader(body))
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+b.agent)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	b := setup(t, mcpapi.Config{})
	if got := post(b, "gate.example.com"); got != http.StatusForbidden {
		t.Errorf("loopback listener, public Host: %d, want 403", got)
	}
	if got := post(b, "localhost:8080"); got == http.StatusForbidden {
		t.Errorf("Host localhost refused")
	}
	open := setup(t, mcpapi.Config{AllowAnyHost: true})
	if got := post(open, "gate.example.com"); got == http.StatusForbidden {
		t.Errorf("AllowAnyHost: public Host still refused")
	}
}

// TestAgentAndWorkerRoundTrip drives every agent tool and every worker tool
// through one task's life: queue, status, obligations, lease, heartbeat,
// progress, complete, fetch, archive, receipts.
func TestAgentAndWorkerRoundTrip(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	worker := b.connect(t, b.worker)

	var ack struct {
		TaskID                string `json:"task_id"`
		Status                string `json:"status"`
		IsDuplicate           bool   `json:"is_duplicate"`
		PollSuggestionSeconds int    `json:"poll_suggestion_seconds"`
		EstimatedRuntime      int    `json:"estimated_runtime_seconds"`
		InboxOnComplete       bool   `json:"inbox_on_complete"`
		ReceiptID             string `json:"receipt_id"`
		NextStep              string `json:"next_step"`
	}
	res := ok(t, agent, "queue_task", map[string]any{"task_type": "echo", "params": map[string]any{"n": 7}, "priority": 7,
		"idempotency_key": "k1", "task_summary": "echo seven"}, &ack)
	if ack.TaskID == "" || ack.Status != "queued" || ack.IsDuplicate || ack.PollSuggestionSeconds != 120 || !ack.InboxOnComplete ||
		ack.ReceiptID == "" || ack.EstimatedRuntime == 0 || !strings.Contains(ack.NextStep, "120 seconds") {
		t.Fatalf("ack: %+v", ack)
	}
	if !strings.Contains(text(res), "check_task_status") {
		t.Errorf("ack text has no guidance: %s", text(res))
	}
	var dup struct {
		TaskID      string `json:"task_id"`
		IsDuplicate bool   `json:"is_duplicate"`
	}
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo", "params": map[string]any{"n": 7}, "idempotency_key": "k1"}, &dup)
	if dup.TaskID != ack.TaskID || !dup.IsDuplicate {
		t.Fatalf("duplicate: %+v", dup)
	}

	var st struct {
		TaskID     string `json:"task_id"`
		Status     string `json:"status"`
		Priority   int    `json:"priority"`
		RetryCount int    `json:"retry_count"`
		CanRetry   bool   `json:"can_retry"`
		HasResult  bool   `json:"has_result"`
		NextStep   string `json:"next_step"`
		Assign     string `json:"assign_receipt_id"`
	}
	ok(t, agent, "check_task_status", map[string]any{"task_id": ack.TaskID}, &st)
	if st.Status != "queued" || st.Priority != 7 || !st.CanRetry || st.HasResult || st.Assign != ack.ReceiptID || !strings.Contains(st.NextStep, "120") {
		t.Fatalf("status: %+v", st)
	}
	var list mcpapi.TaskList
	ok(t, agent, "list_active_tasks", nil, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].TaskID != ack.TaskID || list.Tasks[0].TaskSummary != "echo seven" {
		t.Fatalf("list: %+v", list)
	}
	var obs mcpapi.ObligationsResult
	ok(t, agent, "list_open_obligations", nil, &obs)
	if len(obs.OpenObligations) != 1 || obs.OpenObligations[0].ReceiptID != ack.ReceiptID || obs.OwedToYou != 1 || obs.YouOwe != 0 ||
		obs.Relationship.Principal != "agent.a" {
		t.Fatalf("obligations: %+v", obs)
	}

	// The worker leases (and accepts) over MCP.
	var lease struct {
		TaskID          *string         `json:"task_id"`
		RunID           string          `json:"run_id"`
		TaskType        string          `json:"task_type"`
		Params          json.RawMessage `json:"params"`
		Attempt         int             `json:"attempt"`
		AcceptReceiptID string          `json:"accept_receipt_id"`
	}
	ok(t, worker, "worker_lease_task", map[string]any{"task_types": []string{"echo"}, "lease_seconds": 600}, &lease)
	if lease.TaskID == nil || *lease.TaskID != ack.TaskID || lease.RunID == "" || lease.TaskType != "echo" ||
		string(lease.Params) != `{"n":7}` || lease.Attempt != 1 || lease.AcceptReceiptID == "" {
		t.Fatalf("lease: %+v", lease)
	}
	var none struct {
		TaskID  *string `json:"task_id"`
		Message string  `json:"message"`
	}
	ok(t, worker, "worker_lease_task", nil, &none)
	if none.TaskID != nil || none.Message == "" {
		t.Fatalf("empty lease: %+v", none)
	}
	// The worker now owes the task.
	ok(t, worker, "list_open_obligations", map[string]any{"role": "obligor"}, &obs)
	if len(obs.OpenObligations) != 1 || obs.OpenObligations[0].ReceiptID != lease.AcceptReceiptID || obs.YouOwe != 1 {
		t.Fatalf("worker obligations: %+v", obs)
	}

	var hb api.HeartbeatResponse
	ok(t, worker, "worker_heartbeat_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID,
		"progress_percent": 50, "progress_message": "half", "extend_lease_seconds": 900}, &hb)
	if hb.Status != "ok" || hb.CancelRequested || hb.LeaseExpiresAt.IsZero() {
		t.Fatalf("heartbeat: %+v", hb)
	}
	// The gate's clock, as over HTTP, for a worker to judge its lease by.
	if d := time.Since(hb.ServerTime); d < -time.Minute || d > time.Minute {
		t.Fatalf("heartbeat server_time %v, want the gate's clock now", hb.ServerTime)
	}
	var prog api.ProgressResponse
	ok(t, agent, "get_task_progress", map[string]any{"task_id": ack.TaskID}, &prog)
	if prog.Status != "leased" || len(prog.Progress) != 1 || prog.ProgressPercent == nil || *prog.ProgressPercent != 50 || prog.ProgressMessage != "half" {
		t.Fatalf("progress: %+v", prog)
	}

	var done api.CompleteResponse
	ok(t, worker, "worker_complete_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID,
		"result": map[string]any{"answer": 42}, "summary": "echoed"}, &done)
	if done.Status != "completed" || done.TaskID != ack.TaskID || done.ReceiptID == "" || done.ResultChannel != "inline" ||
		done.ResultPointer != "inline:"+base64.StdEncoding.EncodeToString([]byte(`{"answer":42}`)) ||
		!strings.HasPrefix(done.ResultChecksum, "sha256:") || done.Duplicate {
		t.Fatalf("complete: %+v", done)
	}
	var again api.CompleteResponse
	ok(t, worker, "worker_complete_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID, "result_pointer": "inline:eA=="}, &again)
	if !again.Duplicate || again.ReceiptID != done.ReceiptID {
		t.Fatalf("second complete: %+v", again)
	}

	ok(t, agent, "check_task_status", map[string]any{"task_id": ack.TaskID}, &st)
	if st.Status != "succeeded" || !st.HasResult || st.CanRetry || !strings.Contains(st.NextStep, "fetch_task_result") {
		t.Fatalf("status after completion: %+v", st)
	}
	var fr api.ResultResponse
	ok(t, agent, "fetch_task_result", map[string]any{"task_id": ack.TaskID}, &fr)
	if string(fr.Content) != `{"answer":42}` || fr.ChecksumValid == nil || !*fr.ChecksumValid || fr.Summary != "echoed" || fr.Channel != "inline" {
		t.Fatalf("result: %+v", fr)
	}
	var arch mcpapi.ArchiveResult
	ok(t, agent, "archive_task_result", map[string]any{"task_id": ack.TaskID}, &arch)
	if arch.Status != "archived" || arch.ArchivedAt == nil {
		t.Fatalf("archive: %+v", arch)
	}

	// The ledger: the assignment is discharged by the completion.
	var rc api.ReceiptResponse
	ok(t, agent, "get_receipt", map[string]any{"receipt_id": ack.ReceiptID}, &rc)
	if rc.Type != host.ReceiptAssigned || rc.TerminatedBy != done.ReceiptID || rc.To != "agent.a" {
		t.Fatalf("receipt: %+v", rc)
	}
	var chain mcpapi.ChainResult
	ok(t, agent, "get_receipt_chain", map[string]any{"receipt_id": done.ReceiptID}, &chain)
	types := map[host.ReceiptType]bool{}
	for _, l := range chain.Chain {
		types[l.Type] = true
	}
	if len(chain.Chain) != 3 || chain.Chain[0].ID != done.ReceiptID || !types[host.ReceiptAssigned] || !types[host.ReceiptAccepted] {
		t.Fatalf("chain: %+v", chain)
	}
	ok(t, agent, "list_open_obligations", nil, &obs)
	if len(obs.OpenObligations) != 0 || obs.OwedToYou != 0 {
		t.Fatalf("obligations after completion: %+v", obs)
	}
	ok(t, agent, "list_active_tasks", nil, &list)
	if len(list.Tasks) != 0 {
		t.Fatalf("active after completion: %+v", list)
	}
	ok(t, agent, "list_active_tasks", map[string]any{"status": []string{"succeeded"}}, &list)
	if len(list.Tasks) != 1 {
		t.Fatalf("succeeded list: %+v", list)
	}
}

// TestResultThroughFileChannel completes a task with a result too large for
// the inline channel: the gate routes it to the real file channel, which
// stores it in its granted folder under the task's own name; the agent
// fetches it back through the plugin and archiving acks it, which removes
// the task's folder. A worker may not hand in a file pointer of its own.
func TestResultThroughFileChannel(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	worker := b.connect(t, b.worker)
	var ack struct {
		TaskID string `json:"task_id"`
	}
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo"}, &ack)
	var lease struct {
		TaskID *string `json:"task_id"`
		RunID  string  `json:"run_id"`
	}
	ok(t, worker, "worker_lease_task", nil, &lease)
	if lease.TaskID == nil || *lease.TaskID != ack.TaskID {
		t.Fatalf("lease: %+v", lease)
	}

	// A worker's made-up pointer into the file channel is refused, and the
	// lease stays live for the real completion.
	fails(t, worker, "worker_complete_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID,
		"result_pointer": "file:" + ack.TaskID + "/" + strings.Repeat("ab", 32)}, host.CodeForeignPointer)

	big := `{"text":"` + strings.Repeat("x", 10000) + `"}` // over the inline channel's 4096 bytes
	sum := sha256.Sum256([]byte(big))
	hexSum := hex.EncodeToString(sum[:])
	var done api.CompleteResponse
	ok(t, worker, "worker_complete_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID,
		"result": json.RawMessage(big), "summary": "big"}, &done)
	if done.Status != "completed" || done.ResultChannel != "file" || done.ResultPointer != "file:"+ack.TaskID+"/"+hexSum ||
		done.ResultChecksum != "sha256:"+hexSum {
		t.Fatalf("complete: %+v (want file:%s/%s)", done, ack.TaskID, hexSum)
	}
	taskDir := filepath.Join(resultsDir, ack.TaskID[len(ack.TaskID)-2:], ack.TaskID)
	stored, err := os.ReadFile(filepath.Join(taskDir, hexSum))
	if err != nil || string(stored) != big {
		t.Fatalf("the file channel did not store the payload in its folder: %d bytes, %v", len(stored), err)
	}

	var fr api.ResultResponse
	ok(t, agent, "fetch_task_result", map[string]any{"task_id": ack.TaskID}, &fr)
	if fr.Channel != "file" || fr.ResultPointer != done.ResultPointer || fr.ChecksumValid == nil || !*fr.ChecksumValid ||
		string(fr.Content) != big {
		t.Fatalf("fetch: channel %q pointer %q checksum_valid %v, %d bytes of content", fr.Channel, fr.ResultPointer, fr.ChecksumValid, len(fr.Content))
	}
	var arch mcpapi.ArchiveResult
	ok(t, agent, "archive_task_result", map[string]any{"task_id": ack.TaskID}, &arch)
	if arch.Status != "archived" || arch.ArchivedAt == nil {
		t.Fatalf("archive: %+v", arch)
	}
	if _, err := os.Stat(taskDir); !os.IsNotExist(err) {
		t.Fatalf("archive did not ack through the file channel: %s still there (%v)", taskDir, err)
	}
}

func TestCancelAndFail(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	worker := b.connect(t, b.worker)
	queue := func() string {
		var ack struct {
			TaskID string `json:"task_id"`
		}
		ok(t, agent, "queue_task", map[string]any{"task_type": "echo"}, &ack)
		return ack.TaskID
	}
	// A queued task is canceled at once.
	id := queue()
	var task host.Task
	ok(t, agent, "cancel_task", map[string]any{"task_id": id, "reason": "not needed"}, &task)
	if task.State != host.StateCanceled {
		t.Fatalf("cancel queued: %+v", task)
	}
	ok(t, agent, "cancel_task", map[string]any{"task_id": id}, &task) // twice is harmless

	// A leased task is flagged; the worker learns it from its heartbeat and fails it.
	id = queue()
	var lease struct {
		TaskID *string `json:"task_id"`
		RunID  string  `json:"run_id"`
	}
	ok(t, worker, "worker_lease_task", nil, &lease)
	if lease.TaskID == nil || *lease.TaskID != id {
		t.Fatalf("lease: %+v", lease)
	}
	ok(t, agent, "cancel_task", map[string]any{"task_id": id}, &task)
	if task.State != host.StateLeased || !task.CancelRequested {
		t.Fatalf("cancel leased: %+v", task)
	}
	var hb api.HeartbeatResponse
	res := ok(t, worker, "worker_heartbeat_task", map[string]any{"task_id": id, "run_id": lease.RunID}, &hb)
	if !hb.CancelRequested || !strings.Contains(text(res), "worker_fail_task") {
		t.Fatalf("heartbeat after cancel: %+v", hb)
	}
	var fr api.FailResponse
	ok(t, worker, "worker_fail_task", map[string]any{"task_id": id, "run_id": lease.RunID, "error_message": "stopped"}, &fr)
	if fr.Status != "canceled" {
		t.Fatalf("fail after cancel: %+v", fr)
	}

	// A non-retryable failure dead-letters the task.
	id = queue()
	ok(t, worker, "worker_lease_task", map[string]any{"worker_id": "echo.w1"}, &lease)
	ok(t, worker, "worker_fail_task", map[string]any{"task_id": id, "run_id": lease.RunID, "error_message": "boom", "retryable": false}, &fr)
	if fr.Status != "dead_letter" || fr.WillRetry {
		t.Fatalf("fatal fail: %+v", fr)
	}
	var st mcpapi.TaskStatus
	ok(t, agent, "check_task_status", map[string]any{"task_id": id}, &st)
	if st.NextStep == "" || st.CanRetry {
		t.Fatalf("status of dead letter: %+v", st)
	}
	var raw map[string]any
	ok(t, agent, "check_task_status", map[string]any{"task_id": id}, &raw)
	if raw["status"] != "dead_letter" || raw["error_message"] != "boom" {
		t.Fatalf("dead letter: %v", raw)
	}

	// A retryable failure is retried later.
	id = queue()
	ok(t, worker, "worker_lease_task", nil, &lease)
	ok(t, worker, "worker_fail_task", map[string]any{"task_id": id, "run_id": lease.RunID, "error_message": "flaky"}, &fr)
	if fr.Status != "failed" || !fr.WillRetry || fr.RetryScheduledAt == nil {
		t.Fatalf("retryable fail: %+v", fr)
	}

	// A snooze gives the task back for a while without using an attempt;
	// the task is scheduled until then.
	id = queue()
	ok(t, worker, "worker_lease_task", nil, &lease)
	fails(t, worker, "worker_snooze_task", map[string]any{"task_id": id, "run_id": lease.RunID, "snooze_seconds": 0}, host.CodeBadRequest)
	fails(t, worker, "worker_snooze_task", map[string]any{"task_id": id, "run_id": lease.RunID}, host.CodeBadRequest)
	var sr api.SnoozeResponse
	ok(t, worker, "worker_snooze_task", map[string]any{"task_id": id, "run_id": lease.RunID, "snooze_seconds": 600, "reason": "rate limited"}, &sr)
	if sr.Status != "snoozed" || sr.TaskID != id || sr.AvailableAt == nil || time.Until(*sr.AvailableAt) < 590*time.Second {
		t.Fatalf("snooze: %+v", sr)
	}
	ok(t, agent, "check_task_status", map[string]any{"task_id": id}, &raw)
	if raw["status"] != "scheduled" || raw["attempts"] != float64(0) {
		t.Fatalf("snoozed task: %v, want scheduled with no attempt used", raw)
	}
	fails(t, worker, "worker_fail_task", map[string]any{"task_id": id, "run_id": lease.RunID, "error_message": "late"}, host.CodeLeaseExpired)
	// The same run again: it ended with the snooze; nothing is snoozed
	// now, and the answer says so.
	var again api.SnoozeResponse
	ok(t, worker, "worker_snooze_task", map[string]any{"task_id": id, "run_id": lease.RunID, "snooze_seconds": 600}, &again)
	if again.Status != "ended" || again.TaskID != "" || again.AvailableAt != nil {
		t.Fatalf("a second snooze of the run: %+v, want status ended naming no task", again)
	}
}

// TestErrorCodes checks that tool errors carry the HTTP API's codes.
func TestErrorCodes(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	other := b.connect(t, b.other)
	worker := b.connect(t, b.worker)

	fails(t, agent, "queue_task", map[string]any{}, host.CodeBadRequest)
	fails(t, agent, "queue_task", map[string]any{"task_type": "echo", "taskType": "x"}, host.CodeBadRequest)
	fails(t, agent, "queue_task", map[string]any{"task_type": "nope"}, host.CodeUnknownTaskType)
	fails(t, agent, "queue_task", map[string]any{"task_type": "echo", "params": map[string]any{"n": "seven"}}, host.CodeInvalidParams)
	fails(t, agent, "queue_task", map[string]any{"task_type": "echo", "priority": 11}, host.CodeBadRequest)
	fails(t, agent, "check_task_status", map[string]any{}, host.CodeBadRequest)
	fails(t, agent, "check_task_status", map[string]any{"task_id": "T-NOPE"}, host.CodeNotFound)
	fails(t, agent, "get_receipt", map[string]any{"receipt_id": "R-NOPE"}, host.CodeNotFound)
	fails(t, agent, "list_open_obligations", map[string]any{"role": "boss"}, host.CodeBadRequest)
	fails(t, agent, "list_active_tasks", map[string]any{"status": []string{"running"}}, host.CodeBadRequest)

	var ack struct {
		TaskID    string `json:"task_id"`
		ReceiptID string `json:"receipt_id"`
	}
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo"}, &ack)
	fails(t, agent, "fetch_task_result", map[string]any{"task_id": ack.TaskID}, host.CodeConflict)
	fails(t, agent, "archive_task_result", map[string]any{"task_id": ack.TaskID}, host.CodeConflict)

	// Another tenant sees nothing of it.
	for _, name := range []string{"check_task_status", "get_task_progress", "cancel_task", "fetch_task_result", "archive_task_result"} {
		fails(t, other, name, map[string]any{"task_id": ack.TaskID}, host.CodeNotFound)
	}
	fails(t, other, "get_receipt", map[string]any{"receipt_id": ack.ReceiptID}, host.CodeNotFound)
	fails(t, other, "get_receipt_chain", map[string]any{"receipt_id": ack.ReceiptID}, host.CodeNotFound)
	var list mcpapi.TaskList
	ok(t, other, "list_active_tasks", nil, &list)
	var obs mcpapi.ObligationsResult
	ok(t, other, "list_open_obligations", nil, &obs)
	if len(list.Tasks) != 0 || len(obs.OpenObligations) != 0 {
		t.Fatalf("other tenant sees %+v %+v", list, obs)
	}

	// Worker errors.
	var lease struct {
		RunID string `json:"run_id"`
	}
	ok(t, worker, "worker_lease_task", nil, &lease)
	fails(t, worker, "worker_lease_task", map[string]any{"worker_id": "echo.someone-else"}, host.CodeForbidden)
	fails(t, worker, "worker_lease_task", map[string]any{"wait_seconds": -1}, host.CodeBadRequest)
	fails(t, worker, "worker_complete_task", map[string]any{"task_id": ack.TaskID}, host.CodeBadRequest)
	fails(t, worker, "worker_complete_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID, "summary": "nowhere"}, host.CodeNotLocatable)
	fails(t, worker, "worker_heartbeat_task", map[string]any{"task_id": ack.TaskID, "run_id": "lease-STALE"}, host.CodeLeaseExpired)
	fails(t, worker, "worker_heartbeat_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID, "progress_percent": 101}, host.CodeBadRequest)
	fails(t, worker, "worker_fail_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID}, host.CodeBadRequest)
	ok(t, worker, "worker_complete_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID, "result_pointer": "s3://b/k", "result_channel": "s3"}, nil)
	fails(t, agent, "cancel_task", map[string]any{"task_id": ack.TaskID}, host.CodeConflict)
	fails(t, worker, "worker_fail_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID, "error_message": "late"}, host.CodeLeaseExpired)
}

// TestLeaseWaitEndsOnClose checks that a worker's long-poll ends when the
// gate begins to shut down, with "no task" rather than an error.
func TestLeaseWaitEndsOnClose(t *testing.T) {
	b := setup(t, mcpapi.Config{MaxLeaseWait: 10 * time.Minute})
	worker := b.connect(t, b.worker)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = "worker_lease_task"
		req.Params.Arguments = map[string]any{"wait_seconds": 600}
		res, err := worker.CallTool(context.Background(), req)
		if err != nil {
			res = mcp.NewToolResultError(err.Error())
		}
		done <- res
	}()
	// The lease call records the worker before it parks: wait for that, so
	// Close finds the call inside the engine (a call that came after Close
	// would end at once too, so this is not a race on the outcome).
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, err := b.eng.Workers(context.Background(), "default")
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease call did not reach the engine within 30 s (worker echo.w1 never seen)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.mcp.Close()
	// Bounded far under the 600 s lease wait: a Close that does not end the
	// long-poll fails here instead of answering "no task" when the wait runs out.
	select {
	case res := <-done:
		if res.IsError || !strings.Contains(text(res), "No task") {
			t.Fatalf("lease after Close: %s", text(res))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the 600 s long-poll was still parked 30 s after Close")
	}
}

// TestStdio serves a session over pipes, as gate mcp does, and talks to it
// with mcp-go's stdio client transport.
func TestStdio(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- b.mcp.ServeStdio(ctx, engine.Actor{Tenant: "default", Principal: "agent.a", Role: engine.RoleAgent}, inR, outW)
		outW.Close()
	}()
	c := client.NewClient(transport.NewIO(outR, inW, io.NopCloser(&bytes.Buffer{})))
	initialize(t, c)
	if got := toolNames(t, c); fmt.Sprint(got) != fmt.Sprint(agentToolNames) {
		t.Errorf("stdio tools: %v", got)
	}
	var ack struct {
		TaskID string `json:"task_id"`
	}
	ok(t, c, "queue_task", map[string]any{"task_type": "echo"}, &ack)
	// The HTTP door sees the same task for the same principal.
	h := b.connect(t, b.agent)
	var st mcpapi.TaskStatus
	ok(t, h, "check_task_status", map[string]any{"task_id": ack.TaskID}, &st)
	if st.State != host.StateQueued || st.CreatedBy != "agent.a" {
		t.Fatalf("status: %+v", st)
	}
	cancel()
	inW.Close()
	if err := <-served; err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
}

// TestStdioKeyRevoked: a stdio session served with a key reads the key again
// (KeyCheckInterval); once it is revoked in the store, the session's
// requests are refused with the HTTP door's error, and keep being refused.
func TestStdioKeyRevoked(t *testing.T) {
	b := setup(t, mcpapi.Config{KeyCheckInterval: 50 * time.Millisecond})
	ctx := context.Background()
	k, err := auth.CreateKey(ctx, b.eng.Store(), auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "agent.r", Tenant: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.mcp.ServeStdioKey(ctx, "agw_unknown", strings.NewReader(""), io.Discard); host.ErrorCode(err) != host.CodeUnauthorized {
		t.Fatalf("an unknown key: %v, want unauthorized", err)
	}
	inW, outR, served := stdioKeySession(t, b, "Bearer "+k.APIKey) // as gate mcp --key takes it
	c := client.NewClient(transport.NewIO(outR, inW, io.NopCloser(&bytes.Buffer{})))
	initialize(t, c)
	ok(t, c, "queue_task", map[string]any{"task_type": "echo"}, nil)
	if err := auth.RevokeKey(ctx, b.eng.Store(), k.ID); err != nil {
		t.Fatal(err)
	}
	const refused = "unauthorized: the API key is not valid or was revoked"
	list := func() error {
		req := mcp.CallToolRequest{}
		req.Params.Name = "list_active_tasks"
		cctx, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		_, err := c.CallTool(cctx, req)
		return err
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := list()
		if err != nil && strings.Contains(err.Error(), refused) {
			break
		}
		if err != nil {
			t.Fatalf("after the revocation: %v, want %q", err, refused)
		}
		if time.Now().After(deadline) {
			t.Fatal("the stdio session still serves its key 60 s after the key was revoked")
		}
	}
	if err := list(); err == nil || !strings.Contains(err.Error(), refused) {
		t.Fatalf("the next call: %v, want %q", err, refused)
	}
	if _, err := c.ListTools(ctx, mcp.ListToolsRequest{}); err == nil || !strings.Contains(err.Error(), refused) {
		t.Fatalf("tools/list: %v, want %q", err, refused)
	}
	inW.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("ServeStdioKey: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("ServeStdioKey still serves 60 s after its input ended")
	}
}

// stdioKeySession serves a stdio session of key (ServeStdioKey) on pipes
// until the test ends, and returns its input, its output and what
// ServeStdioKey returned, sent once it has (its output is closed then).
func stdioKeySession(t *testing.T, b *testBundle, key string) (*io.PipeWriter, *io.PipeReader, <-chan error) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	served := make(chan error, 1)
	go func() {
		served <- b.mcp.ServeStdioKey(ctx, key, inR, outW)
		outW.Close()
	}()
	return inW, outR, served
}

// outputLines is a stdio session's output, a line at a time, closed when the
// output ends.
func outputLines(out io.Reader) <-chan string {
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return lines
}

// TestStdioRevokedAnswersOnlyRequests: once a stdio session's key is
// revoked, a request is refused, but a response to a request of the gate's
// (an id and no method) is not answered: an error carrying its id would read
// as the answer to the client's own request of that id.
func TestStdioRevokedAnswersOnlyRequests(t *testing.T) {
	b := setup(t, mcpapi.Config{KeyCheckInterval: 50 * time.Millisecond})
	ctx := context.Background()
	k, err := auth.CreateKey(ctx, b.eng.Store(), auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "agent.r", Tenant: "default"})
	if err != nil {
		t.Fatal(err)
	}
	inW, outR, _ := stdioKeySession(t, b, k.APIKey)
	lines := outputLines(outR)
	send := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(inW, msg+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the session ended")
			}
			return l
		case <-time.After(60 * time.Second):
			t.Fatal("no answer within 60 s")
		}
		return ""
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + mcp.ProtocolVersion20251125 + `","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	next()
	if err := auth.RevokeKey(ctx, b.eng.Store(), k.ID); err != nil {
		t.Fatal(err)
	}
	const refused = "unauthorized: the API key is not valid or was revoked"
	for id := 2; ; id++ {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, id))
		if l := next(); strings.Contains(l, refused) {
			break
		}
		if id > 10000 {
			t.Fatal("the revoked key is still served")
		}
	}
	send(`{"jsonrpc":"2.0","id":7,"result":{}}`)
	send(`{"jsonrpc":"2.0","id":"after","method":"ping"}`)
	if l := next(); !strings.Contains(l, `"id":"after"`) || !strings.Contains(l, refused) {
		t.Fatalf("after a response line: %s, want only the refusal of the ping that followed it", l)
	}
}

// TestRevocationEndsARequestInFlight: a worker_lease_task long-polling when
// its session's key is revoked ends with the session instead of leasing a
// task for a key that can no longer complete it.
func TestRevocationEndsARequestInFlight(t *testing.T) {
	for _, over := range []string{"stdio", "http"} {
		t.Run(over, func(t *testing.T) { revocationInFlight(t, over) })
	}
}

func revocationInFlight(t *testing.T, over string) {
	b := setup(t, mcpapi.Config{KeyCheckInterval: 50 * time.Millisecond, WatchInterval: 20 * time.Millisecond, MaxLeaseWait: 5 * time.Minute})
	ctx := context.Background()
	k, err := auth.CreateKey(ctx, b.eng.Store(), auth.NewKeyRequest{Role: engine.RoleWorker, Principal: "echo.w9", Tenant: "default"})
	if err != nil {
		t.Fatal(err)
	}
	var c *client.Client
	if over == "http" {
		c = b.connect(t, k.APIKey)
	} else {
		inW, outR, _ := stdioKeySession(t, b, k.APIKey)
		c = client.NewClient(transport.NewIO(outR, inW, io.NopCloser(&bytes.Buffer{})))
		initialize(t, c)
	}
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	polled := make(chan answer, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = "worker_lease_task"
		req.Params.Arguments = map[string]any{"worker_id": "echo.w9", "task_types": []string{"echo"}, "wait_seconds": 120}
		res, err := c.CallTool(ctx, req)
		polled <- answer{res, err}
	}()
	// The call has reached the engine once its worker sighting is stored
	// (the lease call records it before it claims and waits).
	seen := func() bool {
		found := false
		err := b.eng.Store().View(ctx, func(r store.Reader) error {
			ws, err := r.ListWorkers(ctx, "default")
			for _, w := range ws {
				found = found || w.ID == "echo.w9"
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return found
	}
	for deadline := time.Now().Add(60 * time.Second); !seen(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lease call never reached the engine")
		}
	}
	if err := auth.RevokeKey(ctx, b.eng.Store(), k.ID); err != nil {
		t.Fatal(err)
	}
	// The session is dropped once a request of it is refused (the door
	// checks the key on every request, and drops the session then). A
	// call of a tool that does not exist answers nothing else.
	const refused = "unauthorized: the API key is not valid or was revoked"
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		req := mcp.CallToolRequest{}
		req.Params.Name = "no_such_tool"
		_, err := c.CallTool(ctx, req)
		if err != nil && (strings.Contains(err.Error(), refused) || strings.Contains(err.Error(), "authorization required")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the revoked key's session still answers: %v", err)
		}
	}
	// The long-poll (120 s asked) ends with its session: 20 s is a bound on
	// a hang, not a timing.
	var got answer
	select {
	case got = <-polled:
	case <-time.After(20 * time.Second):
		t.Fatal("the long-poll of a revoked key's session did not end within 20 s of the session's end")
	}
	// A task queued now is nobody's.
	qr, err := b.eng.Enqueue(ctx, engine.Actor{Tenant: "default", Principal: "agent.a", Role: engine.RoleAgent}, engine.EnqueueRequest{TaskType: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if got.err == nil && !got.res.IsError && !strings.Contains(fmt.Sprint(got.res.StructuredContent), "No tasks available") {
		t.Errorf("the revoked key's lease call answered %+v", got.res.StructuredContent)
	}
	tk, err := b.eng.GetTask(ctx, engine.Actor{Tenant: "default", Principal: "ops", Role: engine.RoleAdmin}, qr.TaskID)
	if err != nil || tk.State != host.StateQueued {
		t.Fatalf("a task queued after the revocation: %s (worker %s), %v; want it queued", tk.State, tk.WorkerID, err)
	}
}
