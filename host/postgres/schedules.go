package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// Schedules (issue 39). The firer's claim locks the due rows with FOR
// UPDATE SKIP LOCKED: a host never waits for the rows another host is
// firing, and a row whose fire committed is no longer due when read again.

func (r *reader) schedules(ctx context.Context, q string, args ...any) ([]*host.Schedule, error) {
	var out []*host.Schedule
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		s, err := sqlrows.ScanSchedule(rows)
		if err != nil {
			return err
		}
		out = append(out, s)
		return nil
	}, q, args...)
	return out, err
}

// GetSchedule implements store.Reader; inside Update it locks the row.
func (r *reader) GetSchedule(ctx context.Context, tenant, id string) (*host.Schedule, error) {
	q := `SELECT ` + sqlrows.ScheduleColumns + ` FROM schedules WHERE id = $1 AND tenant = $2`
	if r.write {
		q += ` FOR UPDATE`
	}
	out, err := r.schedules(ctx, q, id, tenant)
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
WHERE tenant = $1 AND ($2 = '' OR owner = $2) AND id > $3 ORDER BY id LIMIT $4`, tenant, owner, afterID, limit)
}

// CountSchedules implements store.Reader.
func (r *reader) CountSchedules(ctx context.Context, tenant, owner string) (int, error) {
	var n int
	err := r.ss.queryRow(r.c(ctx), []any{&n}, `SELECT count(*) FROM schedules WHERE tenant = $1 AND owner = $2`, tenant, owner)
	return n, err
}

// DueSchedules implements store.Reader.
func (r *reader) DueSchedules(ctx context.Context, now time.Time, limit int) ([]*host.Schedule, error) {
	return r.schedules(ctx, `SELECT `+sqlrows.ScheduleColumns+` FROM schedules
WHERE NOT paused AND next_fire_at <= $1 ORDER BY next_fire_at LIMIT $2`, us(now), limit)
}

// ClaimSchedules implements store.Tx.
func (w *writeTx) ClaimSchedules(ctx context.Context, ids []string, now time.Time) ([]*host.Schedule, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return w.schedules(ctx, `SELECT `+sqlrows.ScheduleColumns+` FROM schedules
WHERE id = ANY($1::text[]) AND NOT paused AND next_fire_at <= $2 ORDER BY next_fire_at FOR UPDATE SKIP LOCKED`, ids, us(now))
}

// InsertSchedule implements store.Tx.
func (w *writeTx) InsertSchedule(ctx context.Context, s *host.Schedule) error {
	vals, err := sqlrows.ScheduleValues(s)
	if err != nil {
		return err
	}
	n, err := w.ss.exec(w.c(ctx), `INSERT INTO schedules (`+sqlrows.ScheduleColumns+`)
VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20) ON CONFLICT DO NOTHING`, vals...)
	if err != nil {
		return err
	}
	if n == 0 {
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
	n, err := w.ss.exec(w.c(ctx), `UPDATE schedules SET paused = $1, next_fire_at = $2, last_fire_at = $3, fires = $4, updated_at = $5, paused_reason = $6,
name = $7, cron = $8, timezone = $9, interval_seconds = $10, anchor_at = $11, template = $12, missed_policy = $13, missed_cap = $14, grace_seconds = $15,
last_skip = $16 WHERE id = $17 AND tenant = $18`, s.Paused, us(s.NextFireAt), nus(s.LastFireAt), s.Fires, us(s.UpdatedAt), s.PausedReason,
		s.Name, s.Cron, s.Timezone, s.IntervalSeconds, us(s.AnchorAt), string(tmpl), string(s.MissedPolicy), s.MissedCap, s.GraceSeconds,
		sqlrows.LastSkip(s), s.ID, s.Tenant)
	if err != nil {
		if pgCode(err) == "23505" {
			return host.WrapError(host.CodeConflict, err, fmt.Sprintf("a schedule named %q exists", s.Name))
		}
		return err
	}
	if n == 0 {
		return notFound("schedule", s.ID)
	}
	return nil
}

// DeleteSchedule implements store.Tx.
func (w *writeTx) DeleteSchedule(ctx context.Context, tenant, id string) error {
	n, err := w.ss.exec(w.c(ctx), `DELETE FROM schedules WHERE id = $1 AND tenant = $2`, id, tenant)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFound("schedule", id)
	}
	return nil
}
