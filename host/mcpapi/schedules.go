package mcpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
)

// Schedules (issue 39): an agent's recurring tasks.

var scheduleIDArg = mcp.WithString("schedule_id", mcp.Required(), mcp.Description("The schedule id returned by create_schedule (starts with \"S-\")."))

var nextRunsArg = mcp.WithInteger("next_runs", mcp.Min(1), mcp.Max(engine.MaxNextRuns), mcp.Description("How many next runs to list. Default 5."))

func (s *Server) scheduleTools() {
	s.add(tool("create_schedule", "Create a recurring task",
		`Create a schedule that queues a task of one of your tenant's task types at every fire of a cron expression in a time zone, or every interval_seconds. Each fire queues exactly one task, as you, even when the gate runs on several hosts or restarts; you find the tasks with list_active_tasks (their idempotency_key is "schedule:<schedule_id>:<fire time>").
Give exactly one of cron (five fields: minute hour day-of-month month day-of-week, e.g. "0 9 * * 1-5"; or @hourly, @daily, @weekly, @monthly, @yearly) with an optional timezone (an IANA name such as "Europe/Berlin"; default UTC), or interval_seconds (at least 1).
missed_policy says what happens to fires the gate missed (it was down, or the fire is later than grace_seconds): skip (default) drops them, run_once queues one task for the latest, run_all queues each, up to missed_cap (default 10, at most 100).
Returns the schedule with next_runs. Errors: invalid_cron, invalid_timezone, invalid_interval, invalid_missed_policy, unknown_task_type, invalid_params.`,
		returns[engine.ScheduleView](), writes(false, false), props(
			mcp.WithString("name", mcp.Required(), mcp.MaxLength(host.MaxScheduleName), mcp.Description("A name for the schedule, unique among yours.")),
			mcp.WithString("cron", mcp.Description("A five-field cron expression or a descriptor (@hourly, @daily, …).")),
			mcp.WithString("timezone", mcp.Description("The IANA time zone the cron expression is read in. Default UTC.")),
			mcp.WithInteger("interval_seconds", mcp.Min(host.MinScheduleInterval), mcp.Max(host.MaxScheduleInterval), mcp.Description("Fire every so many seconds instead of a cron expression.")),
			mcp.WithObject("template", mcp.Required(), mcp.Description(`The task to queue at each fire: {"task_type": …, "params": {…}, "priority": 1..10, "recipient_ai": …, "task_summary": …, "max_retries": …}; checked as queue_task checks it.`)),
			mcp.WithString("missed_policy", mcp.Enum(string(host.MissedSkip), string(host.MissedRunOnce), string(host.MissedRunAll)), mcp.Description("What to do with missed fires. Default skip.")),
			mcp.WithInteger("missed_cap", mcp.Min(1), mcp.Max(host.MaxMissedCap), mcp.Description("run_all only: the most missed fires to run. Default 10.")),
			mcp.WithInteger("grace_seconds", mcp.Min(0), mcp.Max(host.MaxScheduleGrace), mcp.Description("How late a fire may be and still run as on time. Default 60.")),
			mcp.WithBoolean("paused", mcp.Description("Create it paused.")))),
		agentRoles, s.createSchedule)

	s.add(tool("list_schedules", "List your schedules",
		`List your schedules (an admin: every schedule of the tenant) with their next runs, paused flag, missed_policy and how many tasks each has queued (fires).`,
		returns[api.ScheduleList](), readOnly(), props(nextRunsArg,
			mcp.WithInteger("limit", mcp.Min(1), mcp.Max(500), mcp.Description("Page size. Default 100.")),
			mcp.WithString("cursor", mcp.Description("The cursor of the previous page, to read the next one.")))),
		agentRoles, s.listSchedules)

	s.add(tool("get_schedule", "Inspect a schedule",
		`Get one of your schedules with its next runs (none while paused), last_fire_at and fires; paused_reason says why the gate paused it (owner_revoked: your keys were all revoked); last_skip is the last time fires were skipped (missed, or its template could not run: error and detail say why); recent_receipts are its latest receipts, oldest first (schedule.created, .updated, .paused, .resumed, .fired with the task_id it queued, .skipped, .deleted). A deleted schedule is not found. A schedule that does not exist or is not yours is a not_found error.`,
		returns[api.ScheduleDetail](), readOnly(), props(scheduleIDArg, nextRunsArg,
			mcp.WithInteger("receipts", mcp.Min(1), mcp.Max(100), mcp.Description("How many of its latest receipts to show. Default 10.")))),
		agentRoles, s.getSchedule)

	s.add(tool("update_schedule", "Change a schedule",
		`Change one of your schedules: its name, its timing (cron with timezone, or interval_seconds: giving either replaces the timing whole; timezone alone moves a cron schedule to another zone), its task template (replaced whole, checked as queue_task checks it), missed_policy, missed_cap or grace_seconds. Arguments left out keep their values. A new timing runs from its first fire after now; fires already queued stay. Returns the schedule with next_runs. Errors as create_schedule's, conflict when you have another schedule of the new name, not_found when it is not yours.`,
		returns[engine.ScheduleView](), writes(true, false), props(scheduleIDArg,
			mcp.WithString("name", mcp.MaxLength(host.MaxScheduleName), mcp.Description("A new name, unique among yours.")),
			mcp.WithString("cron", mcp.Description("A new five-field cron expression or descriptor (replaces interval_seconds).")),
			mcp.WithString("timezone", mcp.Description("The IANA time zone the cron expression is read in (with cron: default UTC).")),
			mcp.WithInteger("interval_seconds", mcp.Min(host.MinScheduleInterval), mcp.Max(host.MaxScheduleInterval), mcp.Description("Fire every so many seconds from now (replaces cron).")),
			mcp.WithObject("template", mcp.Description(`A new task to queue at each fire, whole: {"task_type": …, "params": {…}, …}.`)),
			mcp.WithString("missed_policy", mcp.Enum(string(host.MissedSkip), string(host.MissedRunOnce), string(host.MissedRunAll)), mcp.Description("What to do with missed fires.")),
			mcp.WithInteger("missed_cap", mcp.Min(1), mcp.Max(host.MaxMissedCap), mcp.Description("run_all only: the most missed fires to run.")),
			mcp.WithInteger("grace_seconds", mcp.Min(0), mcp.Max(host.MaxScheduleGrace), mcp.Description("How late a fire may be and still run as on time.")))),
		agentRoles, s.updateSchedule)

	s.add(tool("pause_schedule", "Pause a schedule",
		`Stop a schedule's fires until resume_schedule. Pausing twice is harmless.`,
		returns[engine.ScheduleView](), writes(true, false), props(scheduleIDArg)),
		agentRoles, s.pauseSchedule)

	s.add(tool("resume_schedule", "Resume a schedule",
		`Let a paused schedule fire again from its first fire after now; the fires the pause covered are not run. Resuming a running schedule is harmless. Errors: owner_revoked while the schedule's owner holds no live key.`,
		returns[engine.ScheduleView](), writes(true, false), props(scheduleIDArg)),
		agentRoles, s.resumeSchedule)

	s.add(tool("delete_schedule", "Delete a schedule",
		`Delete a schedule for good; the tasks it already queued stay.`,
		returns[api.ScheduleDeleted](), writes(true, true), props(scheduleIDArg)),
		agentRoles, s.deleteSchedule)
}

func (s *Server) createSchedule(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in engine.CreateScheduleRequest
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	v, err := s.eng.CreateSchedule(wctx, a, in)
	if err != nil {
		return nil, "", err
	}
	return v, fmt.Sprintf("Schedule %s (%s) created; next run %s.", v.ID, v.Name, firstRun(v)), nil
}

func firstRun(v *engine.ScheduleView) string {
	if len(v.NextRuns) == 0 {
		return "none while paused"
	}
	b, _ := json.Marshal(v.NextRuns[0])
	return string(b)
}

func (s *Server) listSchedules(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		NextRuns int    `json:"next_runs,omitempty"`
		Limit    int    `json:"limit,omitempty"`
		Cursor   string `json:"cursor,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := nonNegative("limit", in.Limit); err != nil {
		return nil, "", err
	}
	if err := nonNegative("next_runs", in.NextRuns); err != nil {
		return nil, "", err
	}
	vs, cur, err := s.eng.ListSchedules(ctx, a, in.Cursor, in.Limit, in.NextRuns)
	if err != nil {
		return nil, "", err
	}
	return api.ScheduleList{Schedules: vs, Cursor: cur}, fmt.Sprintf("%d schedules.", len(vs)), nil
}

func (s *Server) scheduleArgs(req mcp.CallToolRequest) (string, int, error) {
	var in struct {
		ScheduleID string `json:"schedule_id"`
		NextRuns   int    `json:"next_runs,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return "", 0, err
	}
	if err := nonNegative("next_runs", in.NextRuns); err != nil {
		return "", 0, err
	}
	return in.ScheduleID, in.NextRuns, required("schedule_id", in.ScheduleID)
}

func (s *Server) getSchedule(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		ScheduleID string `json:"schedule_id"`
		NextRuns   int    `json:"next_runs,omitempty"`
		Receipts   int    `json:"receipts,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := nonNegative("next_runs", in.NextRuns); err != nil {
		return nil, "", err
	}
	if err := nonNegative("receipts", in.Receipts); err != nil {
		return nil, "", err
	}
	if err := required("schedule_id", in.ScheduleID); err != nil {
		return nil, "", err
	}
	id := in.ScheduleID
	v, err := s.eng.GetSchedule(ctx, a, id, in.NextRuns)
	if err != nil {
		return nil, "", err
	}
	rs, err := s.eng.LatestScheduleReceipts(ctx, a, id, in.Receipts)
	if err != nil {
		return nil, "", err
	}
	text := fmt.Sprintf("Schedule %s (%s): next run %s, %d fires so far.", v.ID, v.Name, firstRun(v), v.Fires)
	if ls := v.LastSkip; ls != nil {
		text += fmt.Sprintf(" Last skip at %s: %d fires", ls.At.Format(time.RFC3339), ls.Skipped)
		if ls.Error != "" {
			text += fmt.Sprintf(" (%s: %s)", ls.Error, ls.Detail)
		}
		text += "."
	}
	return api.ScheduleDetail{ScheduleView: v, RecentReceipts: rs}, text, nil
}

func (s *Server) updateSchedule(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		ScheduleID string `json:"schedule_id"`
		engine.UpdateScheduleRequest
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := required("schedule_id", in.ScheduleID); err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	v, err := s.eng.UpdateSchedule(wctx, a, in.ScheduleID, in.UpdateScheduleRequest)
	if err != nil {
		return nil, "", err
	}
	return v, fmt.Sprintf("Schedule %s (%s) updated; next run %s.", v.ID, v.Name, firstRun(v)), nil
}

func (s *Server) pauseSchedule(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	id, _, err := s.scheduleArgs(req)
	if err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	v, err := s.eng.PauseSchedule(wctx, a, id)
	if err != nil {
		return nil, "", err
	}
	return v, fmt.Sprintf("Schedule %s is paused.", v.ID), nil
}

func (s *Server) resumeSchedule(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	id, _, err := s.scheduleArgs(req)
	if err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	v, err := s.eng.ResumeSchedule(wctx, a, id)
	if err != nil {
		return nil, "", err
	}
	return v, fmt.Sprintf("Schedule %s is running; next run %s.", v.ID, firstRun(v)), nil
}

func (s *Server) deleteSchedule(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	id, _, err := s.scheduleArgs(req)
	if err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	if err := s.eng.DeleteSchedule(wctx, a, id); err != nil {
		return nil, "", err
	}
	return api.ScheduleDeleted{ScheduleID: id, Status: "deleted"}, fmt.Sprintf("Schedule %s is deleted.", id), nil
}
