package httpapi

import (
	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// The schedules' operations in the OpenAPI document (issue 39).
func init() {
	openapi.Enum(host.MissedSkip, host.MissedRunOnce, host.MissedRunAll)
	agents := []string{"agent", "admin"}
	runs := openapi.Param{Name: "next_runs", Type: "integer", Max: engine.MaxNextRuns, Description: "how many next runs to list, 1..100 (default 5)"}
	openapi.Add(
		openapi.Op{Method: "POST", Path: "/v1/schedules", Tag: "schedules", Roles: agents, Strict: true, Body: engine.CreateScheduleRequest{}, BodyRequired: true,
			Summary:   "Create a schedule: a task enqueued at each fire of a cron expression (in a time zone) or an interval, as the caller (201)",
			Responses: map[int]any{201: engine.ScheduleView{}}},
		openapi.Op{Method: "GET", Path: "/v1/schedules", Tag: "schedules", Roles: agents,
			Summary: "List the caller's schedules (an admin: the tenant's) with their next runs",
			Query: []openapi.Param{{Name: "cursor", Description: "the cursor of the previous page"},
				{Name: "limit", Type: "integer", Max: engine.MaxPage, Description: "page size, 1..500 (default 100)"}, runs},
			Responses: map[int]any{200: api.ScheduleList{}}},
		openapi.Op{Method: "GET", Path: "/v1/schedules/:id", Tag: "schedules", Roles: agents, Summary: "A schedule with its next runs and its last skip",
			Query: []openapi.Param{runs}, Responses: map[int]any{200: engine.ScheduleView{}}},
		openapi.Op{Method: "GET", Path: "/v1/schedules/:id/receipts", Tag: "schedules", Roles: agents,
			Summary: "A schedule's own receipts (created, updated, paused, resumed, fired, skipped, deleted) in ledger order; a deleted schedule's too",
			Query: []openapi.Param{{Name: "cursor", Description: "the cursor of the previous page"},
				{Name: "limit", Type: "integer", Max: engine.MaxPage, Description: "page size, 1..500 (default 100)"}},
			Responses: map[int]any{200: ReceiptList{}}},
		openapi.Op{Method: "PATCH", Path: "/v1/schedules/:id", Tag: "schedules", Roles: agents, Strict: true, Body: engine.UpdateScheduleRequest{}, BodyRequired: true,
			Summary:   "Change a schedule's name, timing, template or missed-runs policy (fields left out keep their values; a new timing runs from its first fire after now)",
			Responses: map[int]any{200: engine.ScheduleView{}}},
		openapi.Op{Method: "POST", Path: "/v1/schedules/:id/pause", Tag: "schedules", Roles: agents,
			Summary: "Pause a schedule: no fires until it is resumed", Responses: map[int]any{200: engine.ScheduleView{}}},
		openapi.Op{Method: "POST", Path: "/v1/schedules/:id/resume", Tag: "schedules", Roles: agents,
			Summary: "Resume a schedule from its first fire after now (the fires the pause covered are not run)", Responses: map[int]any{200: engine.ScheduleView{}}},
		openapi.Op{Method: "DELETE", Path: "/v1/schedules/:id", Tag: "schedules", Roles: agents,
			Summary: "Delete a schedule (the tasks it enqueued stay)", Responses: map[int]any{200: api.ScheduleDeleted{}}},
	)
}
