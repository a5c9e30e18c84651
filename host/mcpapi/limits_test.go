package mcpapi_test

import (
	"fmt"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestLimitBounds checks that every tool taking a limit refuses one
// outside the range its input schema declares (1..500, get_task_progress
// 1..1000) with bad_request naming the argument and the range, instead of
// answering a default or a capped page, as a client that checks the
// arguments against the schema refuses them; a limit in range, or none,
// answers.
func TestLimitBounds(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	admin := b.connect(t, b.admin)
	ok(t, admin, "queue_task", map[string]any{"task_type": "echo"}, nil)
	tools := map[string]map[string]any{
		"list_active_tasks":     {},
		"list_workflows":        {},
		"list_schedules":        {},
		"list_inbox":            {},
		"session_bootstrap":     {},
		"list_open_obligations": {},
		"get_task_progress":     {"task_id": "T-nope"},
	}
	// Every listed tool with a limit argument is checked here.
	list, err := admin.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if _, has := tool.InputSchema.Properties["limit"]; has {
			if _, ok := tools[tool.Name]; !ok {
				t.Errorf("tool %s takes a limit and is not checked here", tool.Name)
			}
		}
	}
	for name, args := range tools {
		most := 500
		if name == "get_task_progress" {
			most = 1000
		}
		with := func(n any) map[string]any {
			a := map[string]any{}
			for k, v := range args {
				a[k] = v
			}
			if n != nil {
				a["limit"] = n
			}
			return a
		}
		for _, n := range []int{-100, -1, 0, most + 1, 100000} {
			var body mcpapi.ErrorBody
			res := call(t, admin, name, with(n), &body)
			want := fmt.Sprintf("limit must be 1..%d, got %d", most, n)
			if !res.IsError || body.Error != host.CodeBadRequest || body.Detail != want {
				t.Errorf("%s limit %d: %+v, want bad_request %q", name, n, body, want)
			}
		}
		for _, n := range []any{1, most, nil} {
			var body mcpapi.ErrorBody
			res := call(t, admin, name, with(n), &body)
			if res.IsError && body.Error != host.CodeNotFound { // get_task_progress of T-nope
				t.Errorf("%s limit %v: %+v", name, n, body)
			}
		}
	}
}
