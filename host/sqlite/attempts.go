package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// InsertAttempt implements store.Tx. It reads no row, so it does not make
// the rows written behind go out first (rawExec): a failure's batch keeps
// its tasks and receipts in their multi-row statements.
func (w *writeTx) InsertAttempt(ctx context.Context, a *host.Attempt) error {
	body, ended, err := store.AttemptRow(a)
	if err != nil {
		return err
	}
	_, err = w.rawExec(ctx, `INSERT INTO task_attempts (tenant, task_id, lease_id, ended_at, body) VALUES (?,?,?,?,?)`,
		a.Tenant, a.TaskID, a.LeaseID, us(ended), body)
	return err
}

// ListAttempts implements store.Reader.
func (r *reader) ListAttempts(ctx context.Context, tenant, taskID string, limit int) ([]host.Attempt, error) {
	if limit <= 0 || limit > store.MaxAttemptsListed {
		limit = store.MaxAttemptsListed
	}
	rows, err := r.query(ctx, `SELECT body FROM task_attempts WHERE tenant = ? AND task_id = ? ORDER BY seq LIMIT ?`, tenant, taskID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []host.Attempt{}
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		var a host.Attempt
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			return nil, fmt.Errorf("sqlite: attempt of task %s: %w", taskID, err)
		}
		a.Tenant = tenant
		out = append(out, a)
	}
	return out, rows.Err()
}

// GetAttemptByLease implements store.Reader: the task's attempts index
// read from its newest end (a lease is its task's last as a rule).
func (r *reader) GetAttemptByLease(ctx context.Context, tenant, taskID, leaseID string) (*host.Attempt, error) {
	var body string
	err := r.queryRow(ctx, `SELECT body FROM task_attempts WHERE tenant = ? AND task_id = ? AND lease_id = ? ORDER BY seq DESC LIMIT 1`,
		tenant, taskID, leaseID).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("attempt of lease", leaseID)
	}
	if err != nil {
		return nil, err
	}
	var a host.Attempt
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		return nil, fmt.Errorf("sqlite: attempt of task %s: %w", taskID, err)
	}
	a.Tenant = tenant
	return &a, nil
}
