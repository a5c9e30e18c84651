package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needNode returns the paths of node and npm. Without them the test fails
// when CI is set (the acceptance test must run there) and is skipped otherwise.
func needNode(t *testing.T) (node, npm string) {
	t.Helper()
	node, errNode := exec.LookPath("node")
	npm, errNpm := exec.LookPath("npm")
	if errNode != nil || errNpm != nil {
		msg := "node and npm are needed for the MCP acceptance test (test/mcp-client); install Node 20+"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return node, npm
}

// mcpClientDir installs test/mcp-client's pinned dependencies with npm ci
// when node_modules is missing, and returns the folder.
func mcpClientDir(t *testing.T, npm string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "test", "mcp-client"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err == nil {
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

// TestMCPAcceptance runs test/mcp-client/acceptance.mjs, a client built on
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
