package api

import (
	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// ScheduleDetail is a schedule with its latest receipts, oldest first (MCP
// get_schedule): what it fired, what it skipped and why, who changed it.
type ScheduleDetail struct {
	*engine.ScheduleView
	RecentReceipts []*host.Receipt `json:"recent_receipts"`
}

// ScheduleList is a page of schedules with their next runs (GET
// /v1/schedules, MCP list_schedules). Cursor is "" on the last page.
type ScheduleList struct {
	Schedules []*engine.ScheduleView `json:"schedules"`
	Cursor    string                 `json:"cursor"`
}

// ScheduleDeleted answers a schedule's deletion.
type ScheduleDeleted struct {
	ScheduleID string `json:"schedule_id"`
	Status     string `json:"status"` // "deleted"
}
