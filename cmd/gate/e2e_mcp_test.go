package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// needNode returns the paths of node and npm. Without them the test fails
// when CI is set (the acceptance test must run there) and is skipped otherwise.
func needNode(t *testing.T) (node, npm string) {
	t.Helper()
	node, errNode := exec.LookPath("node")
	npm, errNpm := exec.LookPath("npm")
	if errNode != nil || errNpm != nil {
		msg := "node and npm are needed for the MCP acceptance test (testdata/mcp-client); install Node 20+"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return node, npm
}

// mcpClientDir installs testdata/mcp-client's pinned dependencies with npm ci
// when node_modules is missing, and returns the folder.
func mcpClientDir(t *testing.T, npm string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "testdata", "mcp-client"))
	if err != nil {
		t.Fatal(err)
	}
	have := func(pkg string) bool {
		_, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", pkg, "package.json"))
		return err == nil
	}
	if have("sdk") && have("inspector-cli") {
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	return dir
}

// TestMCPAcceptance runs testdata/mcp-client/acceptance.mjs, a client built on
// the official MCP TypeScript SDK, against the real gate serve: connect with
// a key, list tools, queue, complete over HTTP, fetch, archive, cancel, read
// obligations and receipts, use the worker shim, and check that another
// tenant's agent sees nothing.
func TestMCPAcceptance(t *testing.T) {
	node, npm := needNode(t)
	clientDir := mcpClientDir(t, npm)
	dir := t.TempDir()
	g := startGate(t, dir)
	g.putType(t, "echo", map[string]any{"poll_suggestion_seconds": 30}, "")
	g.putType(t, "echo", map[string]any{}, "other")

	newKey := func(role, principal, tenant string) string {
		t.Helper()
		out, errOut, code := gateCLI(t, "keys", "create", "--data", dir, "--role", role, "--principal", principal, "--tenant", tenant)
		if code != 0 {
			t.Fatalf("gate keys create: %d %s", code, errOut)
		}
		return strings.TrimSpace(out)
	}
	agent := newKey("agent", "claude.a", "default")
	worker := newKey("worker", "echo.w1", "default")
	other := newKey("agent", "claude.b", "other")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "acceptance.mjs", g.URL, agent, worker, other)
	cmd.Dir = clientDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("acceptance.mjs output:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("acceptance.mjs: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "ACCEPTANCE OK") {
		t.Fatalf("acceptance.mjs did not finish:\n%s", stderr.String())
	}
	for _, step := range []string{"ok agent lists exactly the agent tools", "ok worker completed the task over HTTP",
		"ok fetch_task_result returns the result", "ok cancel_task cancels a queued task",
		"ok another tenant gets not_found for the task", "ok list_open_obligations"} {
		if !strings.Contains(stdout.String(), step) {
			t.Errorf("missing step %q", step)
		}
	}
}

// stdioClient starts `gate args…` as an MCP stdio server and initializes a session.
func stdioClient(t *testing.T, args ...string) *client.Client {
	t.Helper()
	return stdioClientAt(t, mcp.LATEST_PROTOCOL_VERSION, nil, args...)
}

// stdioClientAt is stdioClient at protocol version, with a notification handler.
func stdioClientAt(t *testing.T, version string, notify func(mcp.JSONRPCNotification), args ...string) *client.Client {
	t.Helper()
	ensureGate(t)
	c, err := client.NewStdioMCPClient(gateBin, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if notify != nil {
		c.OnNotification(notify)
		// NewStdioMCPClient starts the transport but not the client, which
		// is what routes notifications to the handlers (Start is idempotent).
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = version
	req.Params.ClientInfo = mcp.Implementation{Name: "e2e", Version: "1"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Initialize(ctx, req); err != nil {
		t.Fatalf("gate %v: initialize: %v", args, err)
	}
	return c
}

// httpMCPClient opens an MCP session over streamable HTTP at url (the
// gate's /mcp) with key as its bearer and initializes it.
func httpMCPClient(t *testing.T, url, key, name string) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + key}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	req.Params.ClientInfo = mcp.Implementation{Name: name, Version: "1"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Initialize(ctx, req); err != nil {
		t.Fatalf("%s: initialize: %v", url, err)
	}
	return c
}

// callTool calls a tool and decodes its structured content.
func callTool(t *testing.T, c *client.Client, name string, args map[string]any) (map[string]any, bool) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	raw := res.RawStructuredContent
	if len(raw) == 0 {
		raw, _ = json.Marshal(res.StructuredContent)
	}
	if res.IsError && len(res.Content) > 0 { // a tool error is its text: {"error": code, "detail": text}
		if tc, ok := res.Content[0].(mcp.TextContent); ok {
			raw = []byte(tc.Text)
		}
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: structured content %s: %v", name, raw, err)
	}
	return out, res.IsError
}

// TestMCPStdio runs `gate mcp` both ways: as a stdio-to-HTTP bridge to a
// running gate serve (--url, --key), and, after the server stopped, opening
// the data folder itself (--data, --principal).
func TestMCPStdio(t *testing.T) {
	dir := t.TempDir()
	g := startGate(t, dir)
	g.putType(t, "echo", map[string]any{}, "")
	agent := g.newKey(t, "agent", "claude.a", "default")

	bridge := stdioClient(t, "mcp", "--url", g.URL, "--key", agent)
	ack, isErr := callTool(t, bridge, "queue_task", map[string]any{"task_type": "echo"})
	id, _ := ack["task_id"].(string)
	if isErr || !strings.HasPrefix(id, "T-") {
		t.Fatalf("queue_task over the bridge: %v", ack)
	}
	if e, isErr := callTool(t, bridge, "check_task_status", map[string]any{"task_id": "T-NOPE"}); !isErr || e["error"] != "not_found" {
		t.Fatalf("not_found over the bridge: %v", e)
	}
	bad := exec.Command(gateBin, "mcp", "--url", g.URL, "--key", "agw_bad")
	bad.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}` + "\n")
	out, err := bad.Output()
	if err != nil || !strings.Contains(string(out), `"error"`) || !strings.Contains(string(out), "401") {
		t.Fatalf("bad key over the bridge: %v %s", err, out)
	}
	bridge.Close()
	if err := g.Stop(syscall.SIGTERM); err != nil {
		t.Fatalf("gate serve: %v", err)
	}

	// A local principal is held to a key's principal rules: a workflow's
	// address (or any name with '/') is refused before anything is served.
	for _, p := range []string{"workflow/WF-01M8HYB75RHDD9CKJS7KEJRY1H/final", "a b", strings.Repeat("a", 201)} {
		cmd := exec.Command(gateBin, "mcp", "--data", dir, "--principal", p, "--wasm-cache", wasmCache)
		cmd.Stdin = strings.NewReader("")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "is not a principal name") {
			t.Fatalf("gate mcp --principal %q: %v, want a refusal naming the principal:\n%s", p, err, stderr.String())
		}
	}
	// Nor may a local session take the gate's own name, which no key may
	// hold: the gate issues its receipts under it.
	for _, p := range []string{"asyncgate", "AsyncGate"} {
		cmd := exec.Command(gateBin, "mcp", "--data", dir, "--principal", p, "--wasm-cache", wasmCache)
		cmd.Stdin = strings.NewReader("")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "the gate's own name") {
			t.Fatalf("gate mcp --principal %q: %v, want a refusal naming the gate's own name:\n%s", p, err, stderr.String())
		}
	}

	// The shared compilation cache, as gate serve above used: nothing compiles.
	local := stdioClient(t, "mcp", "--data", dir, "--principal", "claude.a", "--wasm-cache", wasmCache)
	st, isErr := callTool(t, local, "check_task_status", map[string]any{"task_id": id})
	if isErr || st["status"] != "queued" {
		t.Fatalf("check_task_status over stdio: %v", st)
	}
	obs, _ := callTool(t, local, "list_open_obligations", nil)
	if n, _ := obs["owed_to_you"].(float64); n != 1 {
		t.Fatalf("obligations over stdio: %v", obs)
	}
	res, isErr := callTool(t, local, "cancel_task", map[string]any{"task_id": id})
	if isErr || res["status"] != "canceled" {
		t.Fatalf("cancel over stdio: %v", res)
	}
	stranger := stdioClient(t, "mcp", "--data", dir, "--principal", "claude.z", "--tenant", "other", "--wasm-cache", wasmCache)
	if e, isErr := callTool(t, stranger, "check_task_status", map[string]any{"task_id": id}); !isErr || e["error"] != "not_found" {
		t.Fatalf("another tenant over stdio: %v", e)
	}
}

// runNode runs a script of testdata/mcp-client and returns its stdout; it
// fails the test when the script fails or does not print done.
func runNode(t *testing.T, node, dir, done string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("node %s:\n%s", strings.Join(args, " "), stdout.String())
	if err != nil || !strings.Contains(stdout.String(), done) {
		t.Fatalf("node %s: %v\n%s", args[0], err, stderr.String())
	}
	return stdout.String()
}

// TestMCPTasksSurviveRestart: with the official TypeScript SDK, an agent
// queues a task as an MCP task through the task-type tool echo and
// disconnects; the gate restarts; a new session lists and gets the task,
// subscribes to it, sees the notifications when a worker completes it, and
// fetches the result with tasks/result; then the SDK's callToolStream and
// tasks/cancel (testdata/mcp-client/tasks.mjs).
func TestMCPTasksSurviveRestart(t *testing.T) {
	node, npm := needNode(t)
	clientDir := mcpClientDir(t, npm)
	dir := t.TempDir()
	g := startGate(t, dir)
	g.putType(t, "echo", map[string]any{"poll_suggestion_seconds": 1, "description": "Echo a text back.",
		"params_schema": map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}, "additionalProperties": false}}, "")
	agent := g.newKey(t, "agent", "claude.a", "default")
	worker := g.newKey(t, "worker", "echo.w1", "default")

	out := runNode(t, node, clientDir, "TASK T-", "tasks.mjs", "queue", g.URL, agent)
	_, after, _ := strings.Cut(out, "TASK ")
	id := strings.TrimSpace(after)
	if err := g.Stop(syscall.SIGTERM); err != nil {
		t.Fatalf("gate serve: %v", err)
	}
	g2 := startGate(t, dir)
	out = runNode(t, node, clientDir, "TASKS OK", "tasks.mjs", "resume", g2.URL, agent, worker, id)
	for _, step := range []string{"ok a new session after the restart lists the task", "ok the subscription sees the update",
		"ok tasks/result returns the result", "ok callToolStream", "ok tasks/cancel cancels"} {
		if !strings.Contains(out, step) {
			t.Errorf("missing step %q", step)
		}
	}
}

// TestMCPWorkflowAsOneTask: with the official TypeScript SDK, submit_workflow
// called as a task gives one MCP task for the whole workflow; another
// session gets it and tasks/result returns the final step's result
// (testdata/mcp-client/workflow.mjs).
func TestMCPWorkflowAsOneTask(t *testing.T) {
	node, npm := needNode(t)
	clientDir := mcpClientDir(t, npm)
	g := startGate(t, t.TempDir())
	g.putType(t, "echo", map[string]any{"poll_suggestion_seconds": 1,
		"params_schema": map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}, "additionalProperties": false}}, "")
	agent := g.newKey(t, "agent", "claude.wf", "default")
	worker := g.newKey(t, "worker", "echo.w1", "default")
	out := runNode(t, node, clientDir, "WORKFLOW OK", "workflow.mjs", g.URL, agent, worker)
	for _, step := range []string{"ok a task-augmented submit_workflow answers with one working task", "ok tasks/result returns the final step's result"} {
		if !strings.Contains(out, step) {
			t.Errorf("missing step %q", step)
		}
	}
}

// inspector runs the MCP Inspector's CLI (@modelcontextprotocol/inspector-cli,
// pinned in testdata/mcp-client) and returns its output and whether it succeeded.
func inspector(t *testing.T, node, dir string, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"index.js"}, args...)...)
	// It finds its package.json relative to the working directory.
	cmd.Dir = filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector-cli", "build")
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestMCPInspectorCLI drives the gate with the MCP Inspector's CLI over
// streamable HTTP and over stdio (gate mcp --url, the bridge): list tools
// (task types included), call a task-type tool, read a task-type resource;
// without a key the Inspector shows the gate's JSON 401 saying how to pass
// one (it starts no OAuth flow: the CLI has no auth provider).
func TestMCPInspectorCLI(t *testing.T) {
	node, npm := needNode(t)
	clientDir := mcpClientDir(t, npm)
	g := startGate(t, t.TempDir())
	g.putType(t, "echo", map[string]any{"params_schema": map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}}, "")
	agent := g.newKey(t, "agent", "claude.a", "default")
	ensureGate(t)
	for _, tr := range []struct {
		name   string
		target []string
	}{
		{"http", []string{g.URL + "/mcp", "--transport", "http", "--header", "Authorization: Bearer " + agent}},
		{"stdio", []string{gateBin, "mcp", "--url", g.URL, "--key", agent}},
	} {
		out, ok := inspector(t, node, clientDir, append(tr.target, "--method", "tools/list")...)
		if !ok || !strings.Contains(out, `"name": "echo"`) || !strings.Contains(out, `"taskSupport": "optional"`) || !strings.Contains(out, `"outputSchema"`) {
			t.Fatalf("%s: tools/list:\n%s", tr.name, out)
		}
		out, ok = inspector(t, node, clientDir, append(tr.target, "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "text=hi")...)
		if !ok || !strings.Contains(out, `"task_id": "T-`) || !strings.Contains(out, "Queued task") {
			t.Fatalf("%s: tools/call echo:\n%s", tr.name, out)
		}
		out, ok = inspector(t, node, clientDir, append(tr.target, "--method", "resources/read", "--uri", "asyncgate://task-types/echo")...)
		if !ok || !strings.Contains(out, `retry_policy`) {
			t.Fatalf("%s: resources/read:\n%s", tr.name, out)
		}
	}
	out, ok := inspector(t, node, clientDir, g.URL+"/mcp", "--transport", "http", "--method", "tools/list")
	if ok || !strings.Contains(out, `"error":"unauthorized"`) || !strings.Contains(out, "Authorization: Bearer") {
		t.Fatalf("no key: the Inspector should show the gate's 401 and how to pass a key:\n%s", out)
	}
}

// TestMCPBridgeNotifications: gate mcp --url holds the session's event
// stream open, so a stdio client hears notifications/tasks/status when a task
// it queued as an MCP task completes.
func TestMCPBridgeNotifications(t *testing.T) {
	g := startGate(t, t.TempDir())
	g.putType(t, "echo", map[string]any{}, "")
	agent := g.newKey(t, "agent", "claude.a", "default")
	worker := g.newKey(t, "worker", "echo.w1", "default")
	var mu sync.Mutex
	var notes []mcp.JSONRPCNotification
	c := stdioClientAt(t, mcp.ProtocolVersion20251125, func(n mcp.JSONRPCNotification) {
		mu.Lock()
		notes = append(notes, n)
		mu.Unlock()
	}, "mcp", "--url", g.URL, "--key", agent)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: "2.0", ID: mcp.NewRequestId(int64(100)), Method: "tools/call",
		Params: map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{}}})
	if err != nil || res.Error != nil {
		t.Fatalf("task-augmented call over the bridge: %v %+v", err, res)
	}
	var created struct {
		Task mcp.Task `json:"task"`
	}
	if err := json.Unmarshal(res.Result, &created); err != nil || !strings.HasPrefix(created.Task.TaskId, "T-") {
		t.Fatalf("create task: %v %s", err, res.Result)
	}
	offers := g.lease(t, worker, "echo.w1", nil)
	if len(offers) != 1 || offers[0].Task.ID != created.Task.TaskId {
		t.Fatalf("lease: %+v", offers)
	}
	want(t, call(t, "POST", g.URL+"/v1/leases/"+offers[0].LeaseID+"/complete", worker, map[string]any{"result": map[string]any{"ok": true}}), 200, "")
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		var seen bool
		for _, n := range notes {
			seen = seen || (n.Method == "notifications/tasks/status" && n.Params.AdditionalFields["taskId"] == created.Task.TaskId &&
				n.Params.AdditionalFields["status"] == "completed")
		}
		mu.Unlock()
		if seen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completed status notification over the bridge within 20 s: %+v", notes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMCPStdioKeyRevoked: `gate mcp --data --key` reads its key again while
// it serves, as the HTTP door does. Once the key is revoked (through the
// running gate serve, on the same data folder), the session's next requests
// are refused with the HTTP door's error, within about the key check
// interval; the process stays up and keeps refusing.
func TestMCPStdioKeyRevoked(t *testing.T) {
	dir := t.TempDir()
	g := startGate(t, dir)
	g.putType(t, "echo", map[string]any{}, "")
	r := call(t, "POST", g.URL+"/v1/admin/keys", g.Admin, map[string]any{"role": "agent", "principal": "claude.r"})
	want(t, r, 201, "")
	k := r.JSON(t)
	key, kid := k["api_key"].(string), k["key_id"].(string)

	c := stdioClient(t, "mcp", "--data", dir, "--key", key, "--wasm-cache", wasmCache)
	if ack, isErr := callTool(t, c, "queue_task", map[string]any{"task_type": "echo"}); isErr {
		t.Fatalf("queue_task before the revocation: %v", ack)
	}
	want(t, call(t, "DELETE", g.URL+"/v1/admin/keys/"+kid, g.Admin, nil), 200, "")

	const refused = "unauthorized: the API key is not valid or was revoked"
	status := func() error {
		req := mcp.CallToolRequest{}
		req.Params.Name = "list_active_tasks"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := c.CallTool(ctx, req)
		return err
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := status()
		if err != nil && strings.Contains(err.Error(), refused) {
			break
		}
		if err != nil {
			t.Fatalf("list_active_tasks after the revocation: %v, want %q", err, refused)
		}
		if time.Now().After(deadline) {
			t.Fatal("the stdio session still serves its key 60 s after the key was revoked")
		}
	}
	if err := status(); err == nil || !strings.Contains(err.Error(), refused) {
		t.Fatalf("the next call after the refusal: %v, want %q", err, refused)
	}
}

// TestMCPInspectorDocumented runs the MCP Inspector commands docs/mcp.md
// shows (the lines starting with scripts/mcp-inspector), as written, with
// bash from the repository's root, against a real gate: only the gate's
// address is put in for the documented one, and the key comes from
// ASYNCGATE_KEY as the page says.
func TestMCPInspectorDocumented(t *testing.T) {
	_, npm := needNode(t)
	mcpClientDir(t, npm) // installed from the lock file, as the script would
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "mcp.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "scripts/mcp-inspector ") {
			cmds = append(cmds, line)
		}
	}
	if len(cmds) != 2 {
		t.Fatalf("docs/mcp.md shows %d Inspector commands, want the 2 this test checks: %q", len(cmds), cmds)
	}
	g := startGate(t, t.TempDir())
	agent := g.newKey(t, "agent", "claude.i", "default")
	wants := [][]string{{`"name": "queue_task"`, `"name": "list_open_obligations"`}, {`open_obligations`}}
	for i, c := range cmds {
		if !strings.Contains(c, "http://127.0.0.1:8080/mcp") || !strings.Contains(c, `"Authorization: Bearer $ASYNCGATE_KEY"`) {
			t.Fatalf("the documented command changed shape: %s", c)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bash, "-c", strings.ReplaceAll(c, "http://127.0.0.1:8080", g.URL))
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "ASYNCGATE_KEY="+agent)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
		for _, w := range wants[i] {
			if !strings.Contains(string(out), w) {
				t.Fatalf("%s: the output lacks %s:\n%s", c, w, out)
			}
		}
	}
}

// TestMCPBridgeSurvivesRestart: sessions live in the gate's memory, so after
// a restart the gate answers the bridge's old session 404; gate mcp --url
// then opens a new session with the client's initialize and sends the
// request again, so the stdio client goes on without noticing, and finds
// the task it queued before.
func TestMCPBridgeSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	g := startGate(t, dir)
	g.putType(t, "echo", map[string]any{}, "")
	agent := g.newKey(t, "agent", "claude.a", "default")
	// 2025-11-25: a version with sessions (2026-07-28 has none).
	c := stdioClientAt(t, mcp.ProtocolVersion20251125, nil, "mcp", "--url", g.URL, "--key", agent)
	ack, isErr := callTool(t, c, "queue_task", map[string]any{"task_type": "echo"})
	id, _ := ack["task_id"].(string)
	if isErr || id == "" {
		t.Fatalf("queue_task: %v", ack)
	}
	if err := g.Stop(syscall.SIGTERM); err != nil {
		t.Fatalf("gate serve: %v", err)
	}
	startGate(t, dir, "--listen", strings.TrimPrefix(g.URL, "http://"))
	res, isErr := callTool(t, c, "list_active_tasks", map[string]any{})
	if b, _ := json.Marshal(res); isErr || !strings.Contains(string(b), id) {
		t.Fatalf("list_active_tasks over the bridge after the restart: %s", b)
	}
}

// TestMCPBridgeAnswersLinesThatAreNoRequest: `gate mcp --url` answers a
// stdin line that is not JSON with -32700 and one that is JSON but no
// message (a number, an empty batch) with -32600, id null, on stdout —
// it used to log them and leave the client waiting — and sends neither to
// the gate; a request after them is served.
func TestMCPBridgeAnswersLinesThatAreNoRequest(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	agent := g.newKey(t, "agent", "claude.lines", "default")
	cmd := exec.Command(gateBin, "mcp", "--url", g.URL, "--key", agent)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := `not json
[]
5
{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}
`
	if _, err := io.WriteString(in, lines); err != nil {
		t.Fatal(err)
	}
	got := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			got <- sc.Text()
		}
		close(got)
	}()
	var codes []int
	initialized := false
	for len(codes) < 3 || !initialized {
		var l string
		select {
		case line, ok := <-got:
			if !ok {
				t.Fatalf("stdout ended after %v (initialize answered %v): %s", codes, initialized, errb.String())
			}
			l = line
		case <-time.After(30 * time.Second):
			t.Fatalf("stdout answered %v (initialize answered %v) within 30 s: %s", codes, initialized, errb.String())
		}
		var m struct {
			ID    json.RawMessage `json:"id"`
			Error *struct {
				Code int `json:"code"`
			} `json:"error"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("stdout line %q: %v", l, err)
		}
		switch {
		case m.Error != nil && string(m.ID) == "null":
			codes = append(codes, m.Error.Code)
		case string(m.ID) == "7" && m.Result != nil:
			initialized = true
		default:
			t.Fatalf("unexpected stdout line %q", l)
		}
	}
	if fmt.Sprint(codes) != "[-32700 -32600 -32600]" {
		t.Fatalf("stdout answers %v, want [-32700 -32600 -32600]", codes)
	}
	// The input ends: so does the bridge, its event stream with it.
	in.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the bridge exited with %v: %s", err, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the bridge still runs 20 s after its input ended: %s", errb.String())
	}
	// An input that ends right after its initialize: the event stream's
	// goroutine may start after the end was read, and the bridge used to
	// wait on it forever.
	for i := range 3 {
		quick := exec.Command(gateBin, "mcp", "--url", g.URL, "--key", agent)
		quick.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n")
		var qout, qerr bytes.Buffer
		quick.Stdout, quick.Stderr = &qout, &qerr
		if err := quick.Start(); err != nil {
			t.Fatal(err)
		}
		qdone := make(chan error, 1)
		go func() { qdone <- quick.Wait() }()
		select {
		case err := <-qdone:
			if err != nil || !strings.Contains(qout.String(), `"result"`) {
				t.Fatalf("run %d: exit %v, stdout %q, stderr %s", i, err, qout.String(), qerr.String())
			}
		case <-time.After(20 * time.Second):
			_ = quick.Process.Kill()
			t.Fatalf("run %d: the bridge still runs 20 s after its input (one initialize) ended: %s", i, qerr.String())
		}
	}
}
