package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/mcpapi/mcpapitest"
)

// TestE2EMCPToolArgumentsOutOfSchema: what a tool's declared input schema
// refuses, the gate refuses, on SQLite and PostgreSQL, through the real
// `gate serve` and the official MCP TypeScript SDK
// (testdata/mcp-client/arguments.mjs). For every tool an admin or a worker
// key lists (the built-in tools and a task type's tool), every bound its
// input schema states is broken in one call (mcpapitest.OutOfSchema:
// required, type and null, enum and case, minimum, maximum, lengths, item
// counts, pattern, format, unknown arguments). The SDK's own validator (Ajv
// with formats) refuses each one's arguments, and the gate answers each with
// a tool error naming the argument: bad_request, or the code the engine
// answers the same bound with (mcpapitest.WantCode); a task type's tool
// with invalid_params. Nothing is queued.
func TestE2EMCPToolArgumentsOutOfSchema(t *testing.T) {
	t.Parallel()
	node, npm := needNode(t)
	clientDir := mcpClientDir(t, npm)
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "echo", map[string]any{"params_schema": map[string]any{"type": "object",
				"properties": map[string]any{"text": map[string]any{"type": "string", "maxLength": 10}}, "additionalProperties": false}}, "")
			keys := []struct{ role, key string }{
				{"admin", g.Admin},
				{"worker", g.newKey(t, "worker", "echo.w1", "default")},
			}
			seen := map[string]bool{}
			checked := 0
			for _, k := range keys {
				out := runArgsNode(t, node, clientDir, "list", g.URL, k.key)
				_, list, ok := strings.Cut(out, "TOOLS ")
				if !ok {
					t.Fatalf("no tools listed to the %s key:\n%s", k.role, out)
				}
				list, _, _ = strings.Cut(list, "\n")
				var tools []struct {
					Name        string         `json:"name"`
					InputSchema map[string]any `json:"inputSchema"`
				}
				if err := json.Unmarshal([]byte(list), &tools); err != nil {
					t.Fatal(err)
				}
				var cases []mcpapitest.Case
				for _, tl := range tools {
					if seen[tl.Name] {
						continue
					}
					seen[tl.Name] = true
					cases = append(cases, mcpapitest.OutOfSchema(tl.Name, tl.InputSchema)...)
				}
				file := filepath.Join(t.TempDir(), "cases.json")
				b, _ := json.Marshal(cases)
				if err := os.WriteFile(file, b, 0o600); err != nil {
					t.Fatal(err)
				}
				out = runArgsNode(t, node, clientDir, "call", g.URL, k.key, file)
				byWhat := map[string]mcpapitest.Case{}
				for _, c := range cases {
					byWhat[c.Tool+" "+c.What] = c
				}
				sc := bufio.NewScanner(strings.NewReader(out))
				sc.Buffer(make([]byte, 1<<20), 16<<20)
				n := 0
				for sc.Scan() {
					line := sc.Text()
					if !strings.HasPrefix(line, "{") {
						continue
					}
					var got struct {
						What          string `json:"what"`
						Tool          string `json:"tool"`
						SchemaValid   *bool  `json:"schema_valid"`
						IsError       bool   `json:"is_error"`
						Text          string `json:"text"`
						ProtocolError string `json:"protocol_error"`
					}
					if err := json.Unmarshal([]byte(line), &got); err != nil {
						t.Fatalf("%s: %v", line, err)
					}
					n++
					c := byWhat[got.Tool+" "+got.What]
					if got.SchemaValid == nil || *got.SchemaValid {
						t.Errorf("%s %s: the SDK's validator accepts %v: not a case", got.Tool, got.What, c.Args)
					}
					var body struct{ Error, Detail string }
					_ = json.Unmarshal([]byte(got.Text), &body)
					want, detail := mcpapitest.WantCode(c), c.Want
					if got.Tool == "echo" {
						want, detail = "invalid_params", "params fail the task type's schema"
					}
					if !got.IsError || body.Error != want || !strings.Contains(body.Detail, detail) {
						t.Errorf("%s %s (%s key): %+v, want a tool error %s holding %q", got.Tool, got.What, k.role, got, want, detail)
					}
				}
				if n != len(cases) {
					t.Errorf("%d answers for %d cases", n, len(cases))
				}
				checked += n
			}
			for _, name := range []string{"queue_task", "queue_tasks", "submit_workflow", "acquire_resource_leases", "worker_snooze_task", "revoke_resource_lease", "echo"} {
				if !seen[name] {
					t.Errorf("tool %s was listed to no key", name)
				}
			}
			r := call(t, "GET", g.URL+"/v1/tasks?status=waiting,queued,scheduled,leased", g.Admin, nil)
			if tasks, _ := r.JSON(t)["tasks"].([]any); r.Status != 200 || len(tasks) != 0 {
				t.Errorf("after the refused calls: %d %s", r.Status, r.Body)
			}
			t.Logf("%d out-of-schema calls over %d tools refused", checked, len(seen))
		})
	}
}

// runArgsNode runs arguments.mjs and returns its stdout (not logged: it is
// long); it fails the test when the script fails or does not finish.
func runArgsNode(t *testing.T, node, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"arguments.mjs"}, args...)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || !strings.Contains(stdout.String(), "ARGUMENTS OK") {
		t.Fatalf("node arguments.mjs %s: %v\n%s\n%s", args[0], err, stderr.String(), tail(stdout.String(), 4000))
	}
	return stdout.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
