package main

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestE2EWorkflowAndScheduleListsRefuseMadeUpCursors: GET /v1/workflows and
// GET /v1/schedules, and the MCP tools list_workflows and list_schedules,
// answer a cursor they never handed out with bad_request "bad cursor", as
// every other list does, on SQLite and PostgreSQL; the cursors they hand
// out still page through every item once.
func TestE2EWorkflowAndScheduleListsRefuseMadeUpCursors(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "ta")
			agent := g.newKey(t, "agent", "agent.a", "ta")
			var wfs, scheds []string
			for i := range 3 {
				r := call(t, "POST", g.URL+"/v1/workflows", agent, map[string]any{"name": fmt.Sprint("wf", i),
					"steps": []map[string]any{{"name": "only", "task_type": "job"}}})
				want(t, r, 201, "")
				wfs = append(wfs, r.JSON(t)["workflow_id"].(string))
				r = call(t, "POST", g.URL+"/v1/schedules", agent, map[string]any{"name": fmt.Sprint("s", i), "interval_seconds": 3600,
					"template": map[string]any{"task_type": "job"}})
				want(t, r, 201, "")
				scheds = append(scheds, r.JSON(t)["schedule_id"].(string))
			}

			// Paging with the cursors the lists hand out.
			page := func(path, field, idField string) []string {
				var seen []string
				cur := ""
				for range 5 {
					r := call(t, "GET", g.URL+path+"?limit=2&cursor="+url.QueryEscape(cur), agent, nil)
					want(t, r, 200, "")
					m := r.JSON(t)
					for _, it := range m[field].([]any) {
						seen = append(seen, it.(map[string]any)[idField].(string))
					}
					if cur, _ = m["cursor"].(string); cur == "" {
						return seen
					}
				}
				t.Fatalf("%s: more pages than items", path)
				return nil
			}
			for _, l := range []struct {
				path, field, idField string
				ids                  []string
			}{{"/v1/workflows", "workflows", "workflow_id", wfs}, {"/v1/schedules", "schedules", "schedule_id", scheds}} {
				got := page(l.path, l.field, l.idField)
				slices.Sort(got)
				if !slices.Equal(got, l.ids) {
					t.Fatalf("%s pages: %v, want %v", l.path, got, l.ids)
				}
			}

			// Made-up cursors.
			bad := func(id string) []string {
				return []string{"garbage", id[:3], id + "0", id[:len(id)-1], strings.ToLower(id), id[:len(id)-1] + "'", "1"}
			}
			for path, cursors := range map[string][]string{
				"/v1/workflows": append(bad(wfs[0]), scheds[0]),
				"/v1/schedules": append(bad(scheds[0]), wfs[0]),
			} {
				for _, c := range cursors {
					r := call(t, "GET", g.URL+path+"?cursor="+url.QueryEscape(c), agent, nil)
					want(t, r, 400, "bad_request")
					if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(d, "bad cursor") {
						t.Fatalf("GET %s?cursor=%q: detail %q", path, c, d)
					}
				}
			}

			mc := stdioClient(t, "mcp", "--url", g.URL, "--key", agent)
			for _, tool := range []string{"list_workflows", "list_schedules"} {
				if out, isErr := callTool(t, mc, tool, map[string]any{"cursor": "garbage"}); !isErr || out["error"] != "bad_request" {
					t.Fatalf("MCP %s with a made-up cursor: %v (error %v), want bad_request", tool, out, isErr)
				}
				first, isErr := callTool(t, mc, tool, map[string]any{"limit": 1})
				if isErr || first["cursor"] == "" {
					t.Fatalf("MCP %s limit 1: %v", tool, first)
				}
				if out, isErr := callTool(t, mc, tool, map[string]any{"limit": 1, "cursor": first["cursor"]}); isErr {
					t.Fatalf("MCP %s with its own cursor: %v", tool, out)
				}
			}
		})
	}
}
