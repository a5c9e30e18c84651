package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2ECLISchedules drives gate schedules create|list|get|update|pause|
// resume|delete (the real binary) against a real gate through the OpenAPI
// contract proxy: tables by default, --json parsed, a bad cron expression
// refused with its code, another agent's schedule not_found.
func TestE2ECLISchedules(t *testing.T) {
	contract(t)
	t.Parallel()
	dir := t.TempDir()
	g := startGate(t, dir)
	u := contractProxy(t, g)
	g.putType(t, "report", map[string]any{}, "")
	keyFile := func(principal string) string {
		f := filepath.Join(t.TempDir(), principal+".key")
		if err := os.WriteFile(f, []byte(g.newKey(t, "agent", principal, "")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	agent, other := keyFile("agent.cron"), keyFile("agent.other")
	if _, errs, code := cli(t, u, agent, "schedules", "create", "bad", "report", "--cron", "0 25 * * *"); code != 1 || !strings.Contains(errs, "invalid_cron") {
		t.Fatalf("bad cron: exit %d %s", code, errs)
	}
	if _, errs, code := cli(t, u, agent, "schedules", "create", "bad", "report", "--cron", "@daily", "--tz", "Moon/Base"); code != 1 || !strings.Contains(errs, "invalid_timezone") {
		t.Fatalf("bad zone: exit %d %s", code, errs)
	}
	out := cliOK(t, u, agent, "schedules", "create", "standup", "report", "--cron", "0 9 * * 1-5", "--tz", "America/New_York",
		"--params", `{"team":"core"}`, "--missed", "run_all", "--missed-cap", "3", "--json")
	var s struct {
		ID       string   `json:"schedule_id"`
		NextRuns []string `json:"next_runs"`
		Policy   string   `json:"missed_policy"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.ID == "" || len(s.NextRuns) != 5 || s.Policy != "run_all" {
		t.Fatalf("create --json: %v %s", err, out)
	}
	mustContain(t, "list", cliOK(t, u, agent, "schedules", "list"), "SCHEDULE", "NEXT RUN", s.ID, "standup", "America/New_York")
	mustContain(t, "get", cliOK(t, u, agent, "schedules", "get", s.ID, "--next-runs", "3"), "next runs", "run_all (cap 3)", "agent.cron")
	if _, errs, code := cli(t, u, other, "schedules", "get", s.ID); code != 1 || !strings.Contains(errs, "not_found") {
		t.Fatalf("another agent's get: exit %d %s", code, errs)
	}
	if _, errs, code := cli(t, u, agent, "schedules", "update", s.ID); code != 2 || !strings.Contains(errs, "nothing to change") {
		t.Fatalf("update without flags: exit %d %s", code, errs)
	}
	if _, errs, code := cli(t, u, agent, "schedules", "update", s.ID, "--cron", "0 25 * * *"); code != 1 || !strings.Contains(errs, "invalid_cron") {
		t.Fatalf("update to a bad cron: exit %d %s", code, errs)
	}
	// --summary alone keeps the rest of the template (its params).
	mustContain(t, "update", cliOK(t, u, agent, "schedules", "update", s.ID, "--name", "standup-eu", "--tz", "Europe/Dublin", "--summary", "daily notes"),
		"standup-eu", "0 9 * * 1-5 (Europe/Dublin)")
	var upd struct {
		Template struct {
			Params  map[string]any `json:"params"`
			Summary string         `json:"task_summary"`
		} `json:"template"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, u, agent, "schedules", "get", s.ID, "--json")), &upd); err != nil ||
		upd.Template.Params["team"] != "core" || upd.Template.Summary != "daily notes" {
		t.Fatalf("template after update --summary: %+v %v", upd, err)
	}
	if _, errs, code := cli(t, u, other, "schedules", "update", s.ID, "--name", "mine"); code != 1 || !strings.Contains(errs, "not_found") {
		t.Fatalf("another agent's update: exit %d %s", code, errs)
	}
	mustContain(t, "pause", cliOK(t, u, agent, "schedules", "pause", s.ID), "paused", "true")
	mustContain(t, "list paused", cliOK(t, u, agent, "schedules", "list"), "paused")
	mustContain(t, "resume", cliOK(t, u, agent, "schedules", "resume", s.ID), "next runs")
	mustContain(t, "delete", cliOK(t, u, agent, "schedules", "delete", s.ID), "deleted")
	if _, errs, code := cli(t, u, agent, "schedules", "get", s.ID); code != 1 || !strings.Contains(errs, "not_found") {
		t.Fatalf("get after delete: exit %d %s", code, errs)
	}
	// Completion offers the group, its commands and the policy values.
	mustContain(t, "completion", strings.Join(completeWords([]string{"schedules"}), " "), "create", "list", "get", "update", "pause", "resume", "delete")
	mustContain(t, "completion --missed", strings.Join(completeWords([]string{"schedules", "create", "--missed"}), " "), "run_once")
}
