package sqlrows

import (
	"encoding/json"

	"github.com/asyncgate/asyncgate/host"
)

// ScheduleColumns are the columns ScanSchedule reads and ScheduleValues
// writes, in order.
const ScheduleColumns = `id, tenant, owner, name, cron, timezone, interval_seconds, anchor_at, template,
missed_policy, missed_cap, grace_seconds, paused, next_fire_at, last_fire_at, fires, created_at, updated_at, paused_reason, last_skip`

// ScanSchedule reads a row of ScheduleColumns.
func ScanSchedule(r Scanner) (*host.Schedule, error) {
	var s host.Schedule
	var anchor, next, created, updated int64
	var last *int64
	var tmpl, policy, skip string
	if err := r.Scan(&s.ID, &s.Tenant, &s.Owner, &s.Name, &s.Cron, &s.Timezone, &s.IntervalSeconds, &anchor, &tmpl,
		&policy, &s.MissedCap, &s.GraceSeconds, &s.Paused, &next, &last, &s.Fires, &created, &updated, &s.PausedReason, &skip); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(tmpl), &s.Template); err != nil {
		return nil, err
	}
	if skip != "" {
		s.LastSkip = new(host.ScheduleSkip)
		if err := json.Unmarshal([]byte(skip), s.LastSkip); err != nil {
			return nil, err
		}
	}
	s.MissedPolicy = host.MissedPolicy(policy)
	s.AnchorAt, s.NextFireAt, s.CreatedAt, s.UpdatedAt = FromUS(anchor), FromUS(next), FromUS(created), FromUS(updated)
	s.LastFireAt = FromNUS(last)
	return &s, nil
}

// ScheduleValues are a schedule's values for ScheduleColumns.
func ScheduleValues(s *host.Schedule) ([]any, error) {
	tmpl, err := json.Marshal(s.Template)
	if err != nil {
		return nil, err
	}
	return []any{s.ID, s.Tenant, s.Owner, s.Name, s.Cron, s.Timezone, s.IntervalSeconds, US(s.AnchorAt), string(tmpl),
		string(s.MissedPolicy), s.MissedCap, s.GraceSeconds, s.Paused, US(s.NextFireAt), NUS(s.LastFireAt), s.Fires,
		US(s.CreatedAt), US(s.UpdatedAt), s.PausedReason, LastSkip(s)}, nil
}

// LastSkip is s.LastSkip as its column keeps it: JSON, "" for none.
func LastSkip(s *host.Schedule) string {
	if s.LastSkip == nil {
		return ""
	}
	b, err := json.Marshal(s.LastSkip)
	if err != nil { // a struct of times, strings and a number
		return ""
	}
	return string(b)
}
