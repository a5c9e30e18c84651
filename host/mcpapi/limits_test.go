package mcpapi_test

import (
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestNegativeLimitRefused checks that every tool taking a limit refuses a
// negative one with bad_request, as the HTTP door refuses its query
// parameter, instead of answering a default page; zero is the default.
func TestNegativeLimitRefused(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	admin := b.connect(t, b.admin)
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
		for _, n := range []int{-1, -100} {
			a := map[string]any{"limit": n}
			for k, v := range args {
				a[k] = v
			}
			var body mcpapi.ErrorBody
			res := call(t, admin, name, a, &body)
			if !res.IsError || body.Error != host.CodeBadRequest || !strings.Contains(body.Detail, "limit must be a non-negative integer") {
				t.Errorf("%s limit %d: %+v", name, n, body)
			}
		}
	}
	ok(t, admin, "list_active_tasks", map[string]any{"limit": 0}, nil)
}
