package main

import (
	"strings"
	"testing"
)

// TestE2EPausedTypeIsNotBacklog: through the real binary, on SQLite and
// PostgreSQL, the queued tasks of a type whose leasing an operator paused
// are not a backlog: /v1/admin/stats counts them in paused_by_type, not in
// ready nor in the oldest ready age, and /metrics in asyncgate_tasks_paused,
// not in asyncgate_task_queue_depth nor the oldest pending age. A resume
// puts them back.
func TestE2EPausedTypeIsNotBacklog(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			g := startGateOnStore(t, driver)
			g.putType(t, "slow", map[string]any{}, "")
			agent := g.newKey(t, "agent", "agent.alice", "")
			want(t, call(t, "POST", g.URL+"/v1/admin/task-types/slow/pause", g.Admin, map[string]any{"reason": "maintenance"}), 200, "")
			g.enqueue(t, agent, "slow", map[string]any{})

			stats := func() map[string]any {
				t.Helper()
				r := call(t, "GET", g.URL+"/v1/admin/stats", g.Admin, nil)
				want(t, r, 200, "")
				return r.JSON(t)
			}
			metrics := func() string {
				t.Helper()
				r := call(t, "GET", g.URL+"/metrics", g.Admin, nil)
				want(t, r, 200, "")
				return string(r.Body)
			}
			s := stats()
			paused, _ := s["paused_by_type"].(map[string]any)
			if s["by_state"].(map[string]any)["queued"] != float64(1) || paused["slow"] != float64(1) ||
				s["ready"] != float64(0) || s["oldest_ready_age_seconds"] != float64(0) {
				t.Fatalf("stats with slow paused: %v; want 1 queued, paused_by_type slow 1, ready 0, oldest ready age 0", s)
			}
			m := metrics()
			for _, line := range []string{"asyncgate_task_queue_depth 0\n", "asyncgate_oldest_pending_task_age_seconds 0\n", `asyncgate_tasks_paused{task_type="slow"} 1` + "\n"} {
				if !strings.Contains(m, line) {
					t.Errorf("metrics with slow paused lack %q", line)
				}
			}

			want(t, call(t, "POST", g.URL+"/v1/admin/task-types/slow/resume", g.Admin, nil), 200, "")
			s = stats()
			if paused, _ := s["paused_by_type"].(map[string]any); len(paused) != 0 || s["ready"] != float64(1) || s["oldest_ready_age_seconds"] == float64(0) {
				t.Fatalf("stats with slow resumed: %v; want none paused, 1 ready and its age", s)
			}
			m = metrics()
			if !strings.Contains(m, "asyncgate_task_queue_depth 1\n") || strings.Contains(m, "asyncgate_tasks_paused{") {
				t.Errorf("metrics with slow resumed: want a depth of 1 and no paused type")
			}
		})
	}
}
