package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2EScheduleSkipsAreVisible: a schedule whose task type an admin
// disabled skips its fires; its owner sees why, on SQLite and PostgreSQL,
// through the real binary and the OpenAPI contract proxy: gate schedules
// get shows the last skip with its error, gate schedules receipts lists the
// schedule.skipped receipt, GET /v1/receipts?task_id= with the schedule id
// answers the same, and another agent is told not_found.
func TestE2EScheduleSkipsAreVisible(t *testing.T) {
	contract(t)
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			u := contractProxy(t, g)
			g.putType(t, "report", map[string]any{}, "")
			keyFile := func(principal string) (string, string) {
				k := g.newKey(t, "agent", principal, "")
				f := filepath.Join(t.TempDir(), principal+".key")
				if err := os.WriteFile(f, []byte(k+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				return f, k
			}
			agent, agentKey := keyFile("agent.cron")
			other, _ := keyFile("agent.other")
			var s struct {
				ID string `json:"schedule_id"`
			}
			if err := json.Unmarshal([]byte(cliOK(t, u, agent, "schedules", "create", "tick", "report", "--every", "1s", "--json")), &s); err != nil || s.ID == "" {
				t.Fatalf("create: %v", err)
			}
			want(t, call(t, "PATCH", g.URL+"/v1/admin/task-types/report", g.Admin, map[string]any{"enabled": false}), 200, "")
			var got struct {
				LastSkip *struct {
					Error     string `json:"error"`
					ReceiptID string `json:"receipt_id"`
				} `json:"last_skip"`
			}
			for deadline := time.Now().Add(30 * time.Second); ; {
				if err := json.Unmarshal([]byte(cliOK(t, u, agent, "schedules", "get", s.ID, "--json")), &got); err != nil {
					t.Fatal(err)
				}
				if got.LastSkip != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no skip shown 30 s after the schedule's task type was disabled")
				}
				time.Sleep(200 * time.Millisecond)
			}
			if got.LastSkip.Error != "task_type_disabled" {
				t.Fatalf("last skip: %+v, want task_type_disabled", got.LastSkip)
			}
			mustContain(t, "get", cliOK(t, u, agent, "schedules", "get", s.ID), "last skip", "skip error", "task_type_disabled")
			mustContain(t, "receipts", cliOK(t, u, agent, "schedules", "receipts", s.ID), "RECEIPT", "schedule.created", "schedule.skipped", "task_type_disabled", got.LastSkip.ReceiptID)
			var page struct {
				Receipts []struct {
					Type string `json:"receipt_type"`
				} `json:"receipts"`
			}
			if err := json.Unmarshal([]byte(cliOK(t, u, agent, "schedules", "receipts", s.ID, "--json", "--limit", "1")), &page); err != nil ||
				len(page.Receipts) != 1 || page.Receipts[0].Type != "schedule.created" {
				t.Fatalf("receipts --json --limit 1: %v %+v", err, page)
			}
			r := call(t, "GET", u+"/v1/receipts?task_id="+s.ID, agentKey, nil)
			want(t, r, 200, "")
			if !strings.Contains(string(r.Body), "schedule.skipped") {
				t.Fatalf("GET /v1/receipts?task_id=%s: %s", s.ID, r.Body)
			}
			if _, errs, code := cli(t, u, other, "schedules", "receipts", s.ID); code != 1 || !strings.Contains(errs, "not_found") {
				t.Fatalf("another agent's receipts: exit %d %s", code, errs)
			}
		})
	}
}
