package mcpapi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestScheduleTools: create, inspect with next runs, list, pause and resume
// a schedule over streamable HTTP; bad fields are their codes; another agent
// of the tenant is told not_found.
func TestScheduleTools(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	fails(t, agent, "create_schedule", map[string]any{"name": "x", "cron": "99 * * * *", "template": map[string]any{"task_type": "echo"}}, "invalid_cron")
	fails(t, agent, "create_schedule", map[string]any{"name": "x", "cron": "@daily", "timezone": "Atlantis/Capital", "template": map[string]any{"task_type": "echo"}}, "invalid_timezone")
	fails(t, agent, "create_schedule", map[string]any{"name": "x", "template": map[string]any{"task_type": "echo"}}, "invalid_interval")
	fails(t, agent, "create_schedule", map[string]any{"name": "x", "interval_seconds": 5, "missed_policy": "never", "template": map[string]any{"task_type": "echo"}}, "invalid_missed_policy")
	fails(t, agent, "create_schedule", map[string]any{"name": "x", "interval_seconds": 5, "template": map[string]any{"task_type": "echo", "params": map[string]any{"n": "one"}}}, "invalid_params")
	var v engine.ScheduleView
	ok(t, agent, "create_schedule", map[string]any{"name": "hourly", "cron": "@hourly", "timezone": "Asia/Kolkata",
		"template": map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}}, "missed_policy": "run_all", "missed_cap": 3}, &v)
	if v.Schedule == nil || v.Owner != "agent.a" || len(v.NextRuns) != 5 || v.MissedCap != 3 {
		t.Fatalf("created: %+v", v)
	}
	// Asia/Kolkata is UTC+05:30: @hourly fires at :30 UTC.
	if v.NextRuns[0].Minute() != 30 {
		t.Fatalf("@hourly in Kolkata: %v", v.NextRuns)
	}
	var got engine.ScheduleView
	ok(t, agent, "get_schedule", map[string]any{"schedule_id": v.ID, "next_runs": 8}, &got)
	if len(got.NextRuns) != 8 {
		t.Fatalf("get_schedule next runs: %v", got.NextRuns)
	}
	// A negative count is refused, as ?next_runs=-1 is over HTTP, not
	// read as the default.
	fails(t, agent, "get_schedule", map[string]any{"schedule_id": v.ID, "next_runs": -3}, "bad_request")
	fails(t, agent, "list_schedules", map[string]any{"next_runs": -1}, "bad_request")
	var list api.ScheduleList
	ok(t, agent, "list_schedules", nil, &list)
	if len(list.Schedules) != 1 || list.Schedules[0].ID != v.ID {
		t.Fatalf("list: %+v", list)
	}
	ok(t, agent, "pause_schedule", map[string]any{"schedule_id": v.ID}, &got)
	if !got.Paused || len(got.NextRuns) != 0 {
		t.Fatalf("paused: %+v", got)
	}
	ok(t, agent, "resume_schedule", map[string]any{"schedule_id": v.ID}, &got)
	if got.Paused || len(got.NextRuns) != 5 {
		t.Fatalf("resumed: %+v", got)
	}
	fails(t, agent, "update_schedule", map[string]any{"schedule_id": v.ID}, "bad_request")
	fails(t, agent, "update_schedule", map[string]any{"schedule_id": v.ID, "cron": "99 * * * *"}, "invalid_cron")
	fails(t, agent, "update_schedule", map[string]any{"schedule_id": v.ID, "bogus": 1}, "bad_request")
	fails(t, agent, "update_schedule", map[string]any{"name": "x"}, "bad_request")
	var upd engine.ScheduleView
	ok(t, agent, "update_schedule", map[string]any{"schedule_id": v.ID, "name": "every 90s", "interval_seconds": 90, "missed_policy": "skip"}, &upd)
	if upd.Name != "every 90s" || upd.IntervalSeconds != 90 || upd.Cron != "" || upd.Timezone != "" || upd.MissedPolicy != "skip" || upd.MissedCap != 0 || len(upd.NextRuns) != 5 {
		t.Fatalf("updated: %+v", *upd.Schedule)
	}
	// Another agent of the same tenant.
	mk, err := auth.CreateKey(context.Background(), b.eng.Store(), auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "agent.m", Tenant: "default"})
	if err != nil {
		t.Fatal(err)
	}
	mallory := b.connect(t, mk.APIKey)
	for _, name := range []string{"get_schedule", "pause_schedule", "resume_schedule", "delete_schedule"} {
		fails(t, mallory, name, map[string]any{"schedule_id": v.ID}, "not_found")
	}
	fails(t, mallory, "update_schedule", map[string]any{"schedule_id": v.ID, "name": "mine"}, "not_found")
	ok(t, mallory, "list_schedules", nil, &list)
	if len(list.Schedules) != 0 {
		t.Fatalf("another agent lists %d schedules", len(list.Schedules))
	}
	var del api.ScheduleDeleted
	ok(t, agent, "delete_schedule", map[string]any{"schedule_id": v.ID}, &del)
	fails(t, agent, "get_schedule", map[string]any{"schedule_id": v.ID}, "not_found")
}

// TestGetScheduleShowsItsReceipts: a schedule whose task type was disabled
// skips its fire; get_schedule shows its owner the last skip with the error
// and its latest receipts (the skip among them), a bad count is a
// bad_request, and another agent is told not_found.
func TestGetScheduleShowsItsReceipts(t *testing.T) {
	clock := host.NewManualClock(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
	b := setup(t, mcpapi.Config{}, func(c *engine.Config) { c.Clock, c.ScheduleTick = clock, -1 })
	agent := b.connect(t, b.agent)
	var v engine.ScheduleView
	ok(t, agent, "create_schedule", map[string]any{"name": "tick", "interval_seconds": 60, "template": map[string]any{"task_type": "echo"}}, &v)
	ctx := context.Background()
	if _, err := b.eng.PatchTaskType(ctx, "default", "echo", json.RawMessage(`{"enabled":false}`)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	if n, err := b.eng.FireSchedules(ctx); err != nil || n != 0 {
		t.Fatalf("fire with the type disabled: %d %v", n, err)
	}
	var got api.ScheduleDetail
	ok(t, agent, "get_schedule", map[string]any{"schedule_id": v.ID, "receipts": 5}, &got)
	if got.ScheduleView == nil || got.LastSkip == nil || got.LastSkip.Error != host.CodeTaskTypeDisabled || got.LastSkip.Skipped != 1 {
		t.Fatalf("get_schedule's last skip: %+v", got.ScheduleView)
	}
	if len(got.RecentReceipts) != 2 || got.RecentReceipts[0].Type != host.ReceiptScheduleCreated ||
		got.RecentReceipts[1].Type != host.ReceiptScheduleSkipped || got.RecentReceipts[1].ID != got.LastSkip.ReceiptID {
		t.Fatalf("get_schedule's recent receipts: %+v", got.RecentReceipts)
	}
	ok(t, agent, "get_schedule", map[string]any{"schedule_id": v.ID, "receipts": 1}, &got)
	if len(got.RecentReceipts) != 1 || got.RecentReceipts[0].Type != host.ReceiptScheduleSkipped {
		t.Fatalf("get_schedule's latest receipt: %+v", got.RecentReceipts)
	}
	fails(t, agent, "get_schedule", map[string]any{"schedule_id": v.ID, "receipts": -1}, "bad_request")
	fails(t, agent, "get_schedule", map[string]any{"schedule_id": v.ID, "receipts": "all"}, "bad_request")
	mk, err := auth.CreateKey(ctx, b.eng.Store(), auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "agent.m", Tenant: "default"})
	if err != nil {
		t.Fatal(err)
	}
	fails(t, b.connect(t, mk.APIKey), "get_schedule", map[string]any{"schedule_id": v.ID}, "not_found")
}
