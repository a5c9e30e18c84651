package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestE2EListLimitsOneRule: on SQLite and PostgreSQL, every list route
// refuses a limit outside 1..its maximum (500; 1000 for a task's progress,
// the outbox and the resource lease lists) with 400 bad_request "limit must
// be 1..N, got X", answers 200 at the maximum and the default when the
// limit is left out; next_runs on the schedule routes likewise (1..100).
// The OpenAPI document declares the bounds (the contract check validates
// each request against it) and every route it gives a limit is walked
// here. MCP's list tools refuse alike, and the CLI passes the refusal
// through instead of cutting the page.
func TestE2EListLimitsOneRule(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			contract(t)
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "")
			agent := g.newKey(t, "agent", "agent.lim", "")
			task := g.enqueue(t, agent, "job", map[string]any{})
			r := call(t, "POST", g.URL+"/v1/schedules", agent, map[string]any{"name": "s", "interval_seconds": 3600,
				"template": map[string]any{"task_type": "job"}})
			want(t, r, 201, "")
			sched := r.JSON(t)["schedule_id"].(string)
			want(t, call(t, "POST", g.URL+"/v1/resource-leases", agent, map[string]any{
				"intents": []map[string]any{{"resource": "repo/x", "predicate": "MUTATES"}}, "ttl_ms": 60000}), 201, "")

			type route struct {
				path, key, param string
				max              int
			}
			routes := []route{
				{"/v1/tasks", agent, "limit", 500},
				{"/v1/tasks/" + task + "/progress", agent, "limit", 1000},
				{"/v1/obligations/open", agent, "limit", 500},
				{"/v1/receipts?task_id=" + task, agent, "limit", 500},
				{"/v1/session/bootstrap", agent, "limit", 500},
				{"/v1/inbox", agent, "limit", 500},
				{"/v1/workflows", agent, "limit", 500},
				{"/v1/schedules", agent, "limit", 500},
				{"/v1/schedules", agent, "next_runs", 100},
				{"/v1/schedules/" + sched, agent, "next_runs", 100},
				{"/v1/schedules/" + sched + "/receipts", agent, "limit", 500},
				{"/v1/admin/dead-letters", g.Admin, "limit", 500},
				{"/v1/admin/outbox", g.Admin, "limit", 1000},
				{"/v1/admin/resource-leases", g.Admin, "limit", 1000},
				{"/v1/admin/resource-leases/events", g.Admin, "limit", 1000},
			}
			for _, rt := range routes {
				u := g.URL + rt.path
				sep := "?"
				if strings.Contains(rt.path, "?") {
					sep = "&"
				}
				for _, n := range []int{0, -1, rt.max + 1, 100_000} {
					r := call(t, "GET", fmt.Sprintf("%s%s%s=%d", u, sep, rt.param, n), rt.key, nil)
					want(t, r, 400, "bad_request")
					if d, _ := r.JSON(t)["detail"].(string); d != fmt.Sprintf("%s must be 1..%d, got %d", rt.param, rt.max, n) {
						t.Errorf("GET %s %s=%d: detail %q", rt.path, rt.param, n, d)
					}
				}
				r := call(t, "GET", fmt.Sprintf("%s%s%s=abc", u, sep, rt.param), rt.key, nil)
				want(t, r, 400, "bad_request")
				if d, _ := r.JSON(t)["detail"].(string); d != fmt.Sprintf(`%s must be 1..%d, got "abc"`, rt.param, rt.max) {
					t.Errorf("GET %s %s=abc: detail %q", rt.path, rt.param, d)
				}
				want(t, call(t, "GET", fmt.Sprintf("%s%s%s=%d", u, sep, rt.param, rt.max), rt.key, nil), 200, "")
				want(t, call(t, "GET", fmt.Sprintf("%s%s%s=1", u, sep, rt.param), rt.key, nil), 200, "")
				want(t, call(t, "GET", u, rt.key, nil), 200, "")
			}
			// next_runs: the count asked for, the default left out.
			runs := func(q string) int {
				v := call(t, "GET", g.URL+"/v1/schedules/"+sched+q, agent, nil).JSON(t)
				return len(v["next_runs"].([]any))
			}
			if n, d := runs("?next_runs=100"), runs(""); n != 100 || d != 5 {
				t.Errorf("next_runs=100 listed %d runs, none asked %d; want 100 and 5", n, d)
			}

			// Every route the document gives a limit or next_runs is walked above.
			doc := contractFor(t, g.URL).doc
			for path, item := range doc.Paths.Map() {
				if item.Get == nil {
					continue
				}
				for _, p := range item.Get.Parameters {
					if p.Value.In != "query" || p.Value.Name != "limit" && p.Value.Name != "next_runs" {
						continue
					}
					s := p.Value.Schema.Value
					if s.Min == nil || *s.Min != 1 || s.Max == nil {
						t.Errorf("GET %s: %s is not declared 1..N: min %v max %v", path, p.Value.Name, s.Min, s.Max)
						continue
					}
					if !slices.ContainsFunc(routes, func(rt route) bool {
						return rt.param == p.Value.Name && int(*s.Max) == rt.max && samePath(path, rt.path)
					}) {
						t.Errorf("GET %s %s (1..%v) is not walked", path, p.Value.Name, *s.Max)
					}
				}
			}

			// MCP's list tools.
			mc := stdioClient(t, "mcp", "--url", g.URL, "--key", agent)
			tools := []struct {
				name, param string
				max         int
				args        map[string]any
			}{
				{"list_active_tasks", "limit", 500, nil},
				{"list_open_obligations", "limit", 500, nil},
				{"session_bootstrap", "limit", 500, nil},
				{"list_inbox", "limit", 500, nil},
				{"list_workflows", "limit", 500, nil},
				{"list_schedules", "limit", 500, nil},
				{"list_schedules", "next_runs", 100, nil},
				{"get_schedule", "next_runs", 100, map[string]any{"schedule_id": sched}},
				{"get_task_progress", "limit", 1000, map[string]any{"task_id": task}},
			}
			for _, tl := range tools {
				args := func(n int) map[string]any {
					a := map[string]any{tl.param: n}
					for k, v := range tl.args {
						a[k] = v
					}
					return a
				}
				for _, n := range []int{0, tl.max + 1} {
					out, isErr := callTool(t, mc, tl.name, args(n))
					d, _ := out["detail"].(string)
					if !isErr || out["error"] != "bad_request" || !strings.Contains(d, fmt.Sprintf("%s must be 1..%d, got %d", tl.param, tl.max, n)) {
						t.Errorf("MCP %s %s %d: %v (error %v), want bad_request naming %s", tl.name, tl.param, n, out, isErr, tl.param)
					}
				}
				if out, isErr := callTool(t, mc, tl.name, args(tl.max)); isErr {
					t.Errorf("MCP %s %s %d: %v", tl.name, tl.param, tl.max, out)
				}
			}

			// The CLI passes the gate's refusal through, and a page at the maximum.
			keyFile := filepath.Join(t.TempDir(), "agent.key")
			if err := os.WriteFile(keyFile, []byte(agent), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, sub := range [][]string{{"workflows", "list"}, {"tasks", "list"}, {"schedules", "list"}} {
				for _, n := range []string{"0", "501"} {
					_, stderr, code := cli(t, g.URL, keyFile, append(sub, "--limit", n)...)
					if code == 0 || !strings.Contains(stderr, "limit must be 1..500, got "+n) {
						t.Errorf("gate %s --limit %s: exit %d, stderr %q; want the gate's refusal", strings.Join(sub, " "), n, code, stderr)
					}
				}
				if _, stderr, code := cli(t, g.URL, keyFile, append(sub, "--limit", "500")...); code != 0 {
					t.Errorf("gate %s --limit 500: exit %d, stderr %q", strings.Join(sub, " "), code, stderr)
				}
			}
		})
	}
}

// samePath reports whether the document's path template (with {id}-style
// segments) matches the concrete path (its query cut off).
func samePath(template, path string) bool {
	path, _, _ = strings.Cut(path, "?")
	ts, ps := strings.Split(template, "/"), strings.Split(path, "/")
	if len(ts) != len(ps) {
		return false
	}
	for i := range ts {
		if ts[i] != ps[i] && !strings.HasPrefix(ts[i], "{") {
			return false
		}
	}
	return true
}
