package mcpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
	"github.com/asyncgate/asyncgate/host/mcpapi/mcpapitest"
	"github.com/asyncgate/asyncgate/host/store"
)

// declaredSchema is a listed tool's input schema as a client reads it, and
// compiled as a client that checks arguments against it does (formats
// asserted, as the TypeScript SDK's Ajv does).
func declaredSchema(t *testing.T, tl mcp.Tool) (map[string]any, *jsonschema.Schema) {
	t.Helper()
	raw, err := json.Marshal(tl.InputSchema)
	if len(tl.RawInputSchema) > 0 {
		raw = tl.RawInputSchema
	}
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	if err := c.AddResource("tool.json", bytes.NewReader(raw)); err != nil {
		t.Fatalf("%s: %v", tl.Name, err)
	}
	s, err := c.Compile("tool.json")
	if err != nil {
		t.Fatalf("%s: %v", tl.Name, err)
	}
	return doc, s
}

// schemaAccepts says whether s accepts args, as a validating client checks
// them before it sends the call.
func schemaAccepts(s *jsonschema.Schema, args map[string]any) bool {
	b, _ := json.Marshal(args)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	_ = dec.Decode(&v)
	return s.Validate(v) == nil
}

// TestToolArgumentsOutOfSchemaRefused: every tool's declared input schema
// is what the gate enforces. For each tool a key can list (agent, admin and
// worker keys; the built-in tools and a task type's tool), every bound its
// input schema states — required, type (null included), enum (a value off
// the list, and one differing only in case), minimum, maximum, minLength,
// maxLength, minItems, maxItems, pattern, format, unknown arguments — is
// broken in one call over streamable HTTP with mcp-go's client: a client
// that checks arguments against the schema would not send it (checked
// here), and the gate refuses it, with a tool error naming the argument
// (bad_request, or the code the engine answers the same bound with), before
// the tool runs.
func TestToolArgumentsOutOfSchemaRefused(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	ctx := t.Context()
	clients := map[string]*client.Client{"admin": b.connect(t, b.admin), "agent": b.connect(t, b.agent), "worker": b.connect(t, b.worker)}
	seen := map[string]bool{}
	checked := 0
	for _, role := range []string{"admin", "agent", "worker"} {
		c := clients[role]
		list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range list.Tools {
			if seen[tl.Name] {
				continue
			}
			seen[tl.Name] = true
			doc, compiled := declaredSchema(t, tl)
			if base := mcpapitest.Baseline(doc); !schemaAccepts(compiled, base) {
				t.Fatalf("%s: the baseline %v breaks the declared schema", tl.Name, base)
			}
			cases := mcpapitest.OutOfSchema(tl.Name, doc)
			if len(cases) == 0 && len(doc["properties"].(map[string]any)) > 0 {
				t.Errorf("%s: no bound to break in %v", tl.Name, doc)
			}
			for _, cs := range cases {
				if schemaAccepts(compiled, cs.Args) {
					t.Errorf("%s %s: the declared schema accepts %v: not a case", cs.Tool, cs.What, cs.Args)
					continue
				}
				want, detail := mcpapitest.WantCode(cs), cs.Want
				if tl.Name == "echo" {
					// A task type's tool: its schema is the type's params
					// schema, which the engine checks (in its own words).
					want, detail = host.CodeInvalidParams, "params fail the task type's schema"
				}
				var body mcpapi.ErrorBody
				res := call(t, c, cs.Tool, cs.Args, &body)
				checked++
				if !res.IsError || body.Error != want || !strings.Contains(body.Detail, detail) {
					t.Errorf("%s %s (%s key) %s: got %v %+v, want a tool error %s holding %q", cs.Tool, cs.What, role, shortJSON(cs.Args), res.IsError, body, want, detail)
				}
			}
		}
	}
	for _, name := range []string{"queue_task", "queue_tasks", "submit_workflow", "acquire_resource_leases", "worker_snooze_task", "revoke_resource_lease", "create_schedule", "echo"} {
		if !seen[name] {
			t.Errorf("tool %s was not listed to any key", name)
		}
	}
	// Nothing ran: no task, workflow or schedule was made.
	me := engine.Actor{Tenant: "default", Principal: "root", Role: engine.RoleAdmin}
	if ts, _, err := b.eng.ListTasks(ctx, me, store.TaskFilter{Limit: 100, States: []host.TaskState{host.StateWaiting, host.StateQueued, host.StateScheduled}}); err != nil || len(ts) != 0 {
		t.Errorf("refused calls queued %d tasks (%v)", len(ts), err)
	}
	if ss, _, err := b.eng.ListSchedules(ctx, me, "", 100, 1); err != nil || len(ss) != 0 {
		t.Errorf("refused calls created %d schedules (%v)", len(ss), err)
	}
	t.Logf("%d out-of-schema calls over %d tools refused", checked, len(seen))
}

// TestToolArgumentBoundsNamed: the three loose edges a probe found, each
// refused with the argument and its bound named: priority 0 (the declared
// range is 1..10; over HTTP 0 means the type's default), a limit over 500
// (HTTP answers a default page), a resource lease predicate in lower case
// (the declared enum is READS, MUTATES; HTTP takes any case); in range,
// each is served.
func TestToolArgumentBoundsNamed(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	for _, tc := range []struct {
		tool   string
		args   map[string]any
		detail string
	}{
		{"queue_task", map[string]any{"task_type": "echo", "priority": 0}, "priority must be 1..10, got 0"},
		{"queue_task", map[string]any{"task_type": "echo", "priority": 11}, "priority must be 1..10, got 11"},
		{"list_active_tasks", map[string]any{"limit": 501}, "limit must be 1..500, got 501"},
		{"list_open_obligations", map[string]any{"limit": 0}, "limit must be 1..500, got 0"},
		{"acquire_resource_leases", map[string]any{"intents": []any{map[string]any{"resource": "FILE:/a", "predicate": "reads"}}},
			`intents[0].predicate must be one of "READS", "MUTATES", got "reads" (values are case-sensitive: did you mean "READS"?)`},
		{"list_resource_holders", map[string]any{"resources": []string{"FILE:/a"}, "predicate": "mutates"},
			`predicate must be one of "READS", "MUTATES", got "mutates"`},
		{"queue_task", map[string]any{"task_type": "echo", "resource_intents": []any{map[string]any{"resource": "FILE:/a", "predicate": "Mutates"}}},
			`resource_intents[0].predicate must be one of "READS", "MUTATES", got "Mutates"`},
		{"queue_task", map[string]any{"task_type": "echo", "task_summary": nil}, "task_summary must be a string, got null"},
	} {
		var body mcpapi.ErrorBody
		res := call(t, agent, tc.tool, tc.args, &body)
		if !res.IsError || body.Error != host.CodeBadRequest || !strings.Contains(body.Detail, tc.detail) {
			t.Errorf("%s %v: %+v, want bad_request %q", tc.tool, tc.args, body, tc.detail)
		}
	}
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo", "priority": 10}, nil)
	ok(t, agent, "list_active_tasks", map[string]any{"limit": 500}, nil)
	var got mcpapi.AcquireToolResult
	ok(t, agent, "acquire_resource_leases", map[string]any{"intents": []any{map[string]any{"resource": "FILE:/a", "predicate": "READS"}}}, &got)
	if !got.Granted {
		t.Errorf("acquire READS: %+v", got)
	}
	// Task-augmented, submit_workflow is checked alike; the refusal is the
	// JSON-RPC error a bad workflow is (-32602, the gate's code first).
	raw, e := rpc(t, agent, "tools/call", map[string]any{"name": "submit_workflow", "task": map[string]any{},
		"arguments": map[string]any{"name": "w", "steps": []any{map[string]any{"name": "a", "task_type": "echo", "priority": 0}}}})
	if e == nil || e.Code != mcp.INVALID_PARAMS || !strings.Contains(e.Message, "bad_request: steps[0].priority must be 1..10, got 0") {
		t.Errorf("task-augmented submit_workflow with priority 0: %s %+v", raw, e)
	}
}

func shortJSON(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 200 {
		return string(b[:200]) + fmt.Sprintf("…(%d bytes)", len(b))
	}
	return string(b)
}

// TestToolArgumentsNotAnObjectRefused: every tool called with arguments
// that are not a JSON object (an array, a string, a number) is refused
// with bad_request saying so, in JSON's words — no Go type in the detail —
// before it runs; and a wrong-typed argument the schema leaves to the
// handler is named by its path.
func TestToolArgumentsNotAnObjectRefused(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	ctx := t.Context()
	seen := map[string]bool{}
	for _, key := range []string{b.admin, b.agent, b.worker} {
		c := b.connect(t, key)
		list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range list.Tools {
			if seen[tl.Name] {
				continue
			}
			seen[tl.Name] = true
			for _, args := range []any{[]any{1}, "x", 5} {
				req := mcp.CallToolRequest{}
				req.Params.Name, req.Params.Arguments = tl.Name, args
				res, err := c.CallTool(ctx, req)
				if err != nil {
					t.Fatalf("%s %v: %v", tl.Name, args, err)
				}
				want, detail := host.CodeBadRequest, "arguments must be a JSON object, not "
				if tl.Name == "echo" {
					// A task type's tool: its arguments are the task's params.
					want, detail = host.CodeInvalidParams, "params must be a JSON object"
				}
				var body mcpapi.ErrorBody
				if !res.IsError || json.Unmarshal([]byte(text(res)), &body) != nil || body.Error != want ||
					!strings.HasPrefix(body.Detail, detail) || strings.Contains(body.Detail, "Go ") {
					t.Errorf("%s with arguments %v: %v %s", tl.Name, args, res.IsError, text(res))
				}
			}
		}
	}
	if len(seen) < 20 {
		t.Fatalf("only %d tools listed", len(seen))
	}
	me := engine.Actor{Tenant: "default", Principal: "root", Role: engine.RoleAdmin}
	if ts, _, err := b.eng.ListTasks(ctx, me, store.TaskFilter{Limit: 100, States: []host.TaskState{host.StateWaiting, host.StateQueued, host.StateScheduled}}); err != nil || len(ts) != 0 {
		t.Errorf("refused calls queued %d tasks (%v)", len(ts), err)
	}
}
