package sqlite

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// Schedules (issue 39). SQLite has one writer: a claim inside Update holds
// its rows until the batch commits, so no other writer can fire them.

func (r *reader) schedules(ctx context.Context, q string, args ...any) ([]*host.Schedule, error) {
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*host.Schedule
	for rows.Next() {
		s, err := sqlrows.ScanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// GetSchedule implements store.Reader.
func (r *reader) GetSchedule(ctx context.Context, tenant, id string) (*host.Schedule, error) {
	out, err := r.schedules(ctx, `SELECT `+sqlrows.ScheduleColumns+` FROM schedules WHERE id = ? AND tenant = ?`, id, tenant)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, notFound("schedule", id)
	}
	return out[0], nil
}

// ListSchedules implements store.Reader.
func (r *reader) ListSchedules(ctx context.Context, tenant, owner, afterID string, limit int) ([]*host.Schedule, error) {
	return r.schedules(ctx, `SELECT `+sqlrows.ScheduleColumns+` FROM schedules
WHERE tenant = ? AND (? = '' OR owner = ?) AND id > ? ORDER BY id LIMIT ?`, tenant, owner, owner, afterID, limit)
}

// CountSchedules implements store.Reader.
func (r *reader) CountSchedules(ctx context.Context, tenant, owner string) (int, error) {
	var n int
	err := r.rawQueryRow(ctx, `SELECT count(*) FROM schedules WHERE tenant = ? AND owner = ?`, tenant, owner).Scan(&n)
	return n, err
}

// DueSchedules implements store.Reader.
func (r *reader) DueSchedules(ctx context.Context, now time.Time, limit int) ([]*host.Schedule, error) {
	return r.schedules(ctx, `SELECT `+sqlrows.ScheduleColumns+` FROM schedules INDEXED BY schedules_due
WHERE paused = 0 AND next_fire_at <= ? ORDER BY next_fire_at LIMIT ?`, us(now), limit)
}

// ClaimSchedules implements store.Tx.
func (w *writeTx) ClaimSchedules(ctx context.Context, ids []string, now time.Time) ([]*host.Schedule, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(ids)+1)
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(args, us(now))
	return w.schedules(ctx, `SELECT `+sqlrows.ScheduleColumns+` FROM schedules
WHERE id IN (?`+strings.Repeat(",?", len(ids)-1)+`) AND paused = 0 AND next_fire_at <= ? ORDER BY next_fire_at`, args...)
}

// InsertSchedule implements store.Tx.
func (w *writeTx) InsertSchedule(ctx context.Context, s *host.Schedule) error {
	vals, err := sqlrows.ScheduleValues(s)
	if err != nil {
		return err
	}
	res, err := w.exec(ctx, `INSERT INTO schedules (`+sqlrows.ScheduleColumns+`)
VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING`, vals...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return host.Errorf(host.CodeConflict, "a schedule named %q exists", s.Name)
	}
	return nil
}

// UpdateSchedule implements store.Tx.
func (w *writeTx) UpdateSchedule(ctx context.Context, s *host.Schedule) error {
	tmpl, err := json.Marshal(s.Template)
	if err != nil {
		return err
	}
	res, err := w.exec(ctx, `UPDATE schedules SET paused = ?, next_fire_at = ?, last_fire_at = ?, fires = ?, updated_at = ?, paused_reason = ?,
name = ?, cron = ?, timezone = ?, interval_seconds = ?, anchor_at = ?, template = ?, missed_policy = ?, missed_cap = ?, grace_seconds = ?,
last_skip = ? WHERE id = ? AND tenant = ?`, s.Paused, us(s.NextFireAt), nus(s.LastFireAt), s.Fires, us(s.UpdatedAt), s.PausedReason,
		s.Name, s.Cron, s.Timezone, s.IntervalSeconds, us(s.AnchorAt), string(tmpl), string(s.MissedPolicy), s.MissedCap, s.GraceSeconds,
		sqlrows.LastSkip(s),
		s.ID, s.Tenant)
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return host.Errorf(host.CodeConflict, "a schedule named %q exists", s.Name)
		}
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return notFound("schedule", s.ID)
	}
	return nil
}

// DeleteSchedule implements store.Tx.
func (w *writeTx) DeleteSchedule(ctx context.Context, tenant, id string) error {
	res, err := w.exec(ctx, `DELETE FROM schedules WHERE id = ? AND tenant = ?`, id, tenant)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return notFound("schedule", id)
	}
	return nil
}
