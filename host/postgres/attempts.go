package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// InsertAttempt implements store.Tx. Its body is JSON, which holds no NUL
// byte and only valid UTF-8, so it may be written behind with the batch
// (writebehind.go); nothing else writes task_attempts.
func (w *writeTx) InsertAttempt(ctx context.Context, a *host.Attempt) error {
	body, ended, err := store.AttemptRow(a)
	if err != nil {
		return err
	}
	if w.deferWrites {
		// Written behind with the batch's other attempts, one statement.
		w.bh.attempts = append(w.bh.attempts, []any{a.Tenant, a.TaskID, a.LeaseID, us(ended), body})
		return nil
	}
	_, err = w.ss.exec(w.c(ctx), attemptInsert, a.Tenant, a.TaskID, a.LeaseID, us(ended), body)
	return err
}

// ListAttempts implements store.Reader.
func (r *reader) ListAttempts(ctx context.Context, tenant, taskID string, limit int) ([]host.Attempt, error) {
	if limit <= 0 || limit > store.MaxAttemptsListed {
		limit = store.MaxAttemptsListed
	}
	out := []host.Attempt{}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var body string
		if err := rows.Scan(&body); err != nil {
			return err
		}
		var a host.Attempt
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			return fmt.Errorf("postgres: attempt of task %s: %w", taskID, err)
		}
		a.Tenant = tenant
		out = append(out, a)
		return nil
	}, `SELECT body FROM task_attempts WHERE tenant = $1 AND task_id = $2 ORDER BY seq LIMIT $3`, tenant, taskID, limit)
	return out, err
}

// GetAttemptByLease implements store.Reader: the task's attempts index
// read from its newest end (a lease is its task's last as a rule).
func (r *reader) GetAttemptByLease(ctx context.Context, tenant, taskID, leaseID string) (*host.Attempt, error) {
	var a *host.Attempt
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var body string
		if err := rows.Scan(&body); err != nil {
			return err
		}
		a = &host.Attempt{}
		if err := json.Unmarshal([]byte(body), a); err != nil {
			return fmt.Errorf("postgres: attempt of task %s: %w", taskID, err)
		}
		a.Tenant = tenant
		return nil
	}, `SELECT body FROM task_attempts WHERE tenant = $1 AND task_id = $2 AND lease_id = $3 ORDER BY seq DESC LIMIT 1`, tenant, taskID, leaseID)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, notFound("attempt of lease", leaseID)
	}
	return a, nil
}
