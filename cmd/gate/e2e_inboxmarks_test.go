package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
)

// TestE2EInboxMarksOnlyTheActor (issue 37): an inbox mark records what the
// item's own recipient did (seed 002: fetched_at tracks that that AI
// accessed the work). When the task's creator or an admin fetches the
// result of a task handed to another agent, or the creator stores it in
// memory, the recipient's item keeps fetched_at and promoted_to_memory_at
// null; the recipient's own fetch and promotion set them. On SQLite and
// PostgreSQL.
func TestE2EInboxMarksOnlyTheActor(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			rcv := newLedgerReceiver(t)
			dir := t.TempDir()
			cfg := filepath.Join(dir, "gate.json")
			conf := `{"delivery":{"retention_sweep_seconds":-1,"sink":{"url":"` + rcv.URL + `/ingest","timeout_seconds":5}}}`
			if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--config", cfg}
			if driver == "postgres" {
				args = append(args, "--db", postgresSchema(t))
			}
			g := startGate(t, filepath.Join(dir, "data"), args...)
			g.putType(t, "handoff", map[string]any{"default_result_channel": "inline"}, "")
			alice, bob := g.newKey(t, "agent", "agent.alice", ""), g.newKey(t, "agent", "agent.bob", "")
			worker := g.newKey(t, "worker", "handoff.1", "")
			r := call(t, "POST", g.URL+"/v1/tasks", alice, map[string]any{"task_type": "handoff", "recipient_ai": "agent.bob"})
			want(t, r, 201, "")
			id := r.JSON(t)["task_id"].(string)
			g.completeOne(t, worker, "handoff.1", id, map[string]any{"worker_id": "handoff.1",
				"result_base64": base64.StdEncoding.EncodeToString([]byte("for bob"))})

			// bob's item as an admin sees it (an admin's look marks nothing).
			item := func() map[string]any {
				t.Helper()
				var l struct {
					Items []map[string]any `json:"items"`
				}
				call(t, "GET", g.URL+"/v1/inbox?recipient=agent.bob&task_id="+id, g.Admin, nil).Into(t, &l)
				if len(l.Items) != 1 {
					t.Fatalf("bob's items of %s: %+v", id, l.Items)
				}
				return l.Items[0]
			}
			unmarked := func(what string) {
				t.Helper()
				if it := item(); it["fetched_at"] != nil || it["promoted_to_memory_at"] != nil || it["delivered_at"] != nil || it["read_at"] != nil {
					t.Fatalf("%s marked bob's item: %v", what, it)
				}
			}
			if got := string(g.fetchContent(t, alice, id)); got != "for bob" {
				t.Fatalf("alice fetched %q", got)
			}
			unmarked("the creator's fetch")
			g.fetchContent(t, g.Admin, id)
			unmarked("an admin's fetch")
			want(t, call(t, "POST", g.URL+"/v1/tasks/"+id+"/store-in-memory", alice, map[string]any{}), 200, "")
			unmarked("the creator's store-in-memory")

			if got := string(g.fetchContent(t, bob, id)); got != "for bob" {
				t.Fatalf("bob fetched %q", got)
			}
			if it := item(); it["fetched_at"] == nil || it["promoted_to_memory_at"] != nil {
				t.Fatalf("bob's fetch: %v", it)
			}
			want(t, call(t, "POST", g.URL+"/v1/tasks/"+id+"/store-in-memory", bob, map[string]any{}), 200, "")
			if it := item(); it["promoted_to_memory_at"] == nil {
				t.Fatalf("bob's store-in-memory: %v", it)
			}
		})
	}
}
