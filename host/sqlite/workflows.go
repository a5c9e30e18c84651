package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// Workflows (issue 39). Their rows are never written behind and their
// statements read no task except WorkflowSteps, so all but that one skip
// writing the rows held behind first.

// InsertWorkflow implements store.Tx: the workflow row and one statement
// for every step.
func (w *writeTx) InsertWorkflow(ctx context.Context, wf *host.Workflow, steps []host.WorkflowStep) error {
	vals, err := sqlrows.WorkflowValues(wf)
	if err != nil {
		return err
	}
	_, err = w.rawExec(ctx, `INSERT INTO workflows (`+sqlrows.WorkflowColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, vals...)
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return host.Errorf(host.CodeConflict, "a workflow with this id or idempotency key exists")
		}
		return err
	}
	rows, err := sqlrows.WorkflowStepsJSON(steps)
	if err != nil {
		return err
	}
	_, err = w.rawExec(ctx, `INSERT INTO workflow_steps (tenant, workflow_id, position, step, task_id, after_steps, after_rule)
SELECT ?, ?, json_extract(j.value, '$.p'), json_extract(j.value, '$.s'), json_extract(j.value, '$.t'), json_extract(j.value, '$.a'), json_extract(j.value, '$.r')
FROM json_each(?) j`, wf.Tenant, wf.ID, rows)
	return err
}

// UpdateWorkflow implements store.Tx.
func (w *writeTx) UpdateWorkflow(ctx context.Context, wf *host.Workflow, from host.WorkflowState) error {
	vals, err := sqlrows.WorkflowSetValues(wf)
	if err != nil {
		return err
	}
	res, err := w.rawExec(ctx, `UPDATE workflows SET state = ?, cancel_requested = ?, end_receipt = ?, result = ?, error = ?, updated_at = ?, completed_at = ?,
outcome = ?, archived_at = ? WHERE tenant = ? AND id = ? AND state = ?`, append(vals, wf.Tenant, wf.ID, string(from))...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return store.ErrFenced
	}
	return nil
}

// GetWorkflow implements store.Reader.
func (r *reader) GetWorkflow(ctx context.Context, tenant, id string) (*host.Workflow, error) {
	wf, err := sqlrows.ScanWorkflow(r.rawQueryRow(ctx, `SELECT `+sqlrows.WorkflowColumns+` FROM workflows WHERE tenant = ? AND id = ?`, tenant, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("workflow", id)
	}
	return wf, err
}

// FindWorkflowByIdempotency implements store.Reader.
func (r *reader) FindWorkflowByIdempotency(ctx context.Context, tenant, createdBy, key string) (*host.Workflow, error) {
	wf, err := sqlrows.ScanWorkflow(r.rawQueryRow(ctx, `SELECT `+sqlrows.WorkflowColumns+` FROM workflows WHERE tenant = ? AND created_by = ? AND idempotency_key = ? AND idempotency_key <> ''`, tenant, createdBy, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return wf, err
}

// ListWorkflows implements store.Reader.
func (r *reader) ListWorkflows(ctx context.Context, f store.WorkflowFilter) ([]*host.Workflow, string, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	q := `SELECT ` + sqlrows.WorkflowColumns + ` FROM workflows WHERE tenant = ?`
	args := []any{f.Tenant}
	if f.CreatedBy != "" {
		q += ` AND created_by = ?`
		args = append(args, f.CreatedBy)
	}
	if states := f.AllStates(); len(states) > 0 {
		q += ` AND state IN (` + strings.TrimSuffix(strings.Repeat("?,", len(states)), ",") + `)`
		for _, st := range states {
			args = append(args, string(st))
		}
	}
	if f.Cursor != "" {
		q += ` AND id < ?`
		args = append(args, f.Cursor)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, f.Limit+1)
	rows, err := r.rawQuery(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	var out []*host.Workflow
	for rows.Next() {
		wf, err := sqlrows.ScanWorkflow(rows)
		if err != nil {
			return nil, "", err
		}
		out = append(out, wf)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	cur := ""
	if len(out) > f.Limit {
		out, cur = out[:f.Limit], out[f.Limit-1].ID
	}
	return out, cur, nil
}

// workflowStepColumns are a step's columns and its task's outcome columns
// and available_at.
var workflowStepColumns = sqlrows.Prefixed("s", sqlrows.WorkflowStepColumns) + ", " + sqlrows.Prefixed("t", sqlrows.WorkflowStepTaskColumns)

// WorkflowSteps implements store.Reader. It reads the steps' tasks, so it
// writes the rows held behind first.
func (r *reader) WorkflowSteps(ctx context.Context, tenant, id string) ([]host.WorkflowStep, error) {
	rows, err := r.query(ctx, `SELECT `+workflowStepColumns+` FROM workflow_steps s
JOIN tasks t ON t.tenant = s.tenant AND t.id = s.task_id
WHERE s.tenant = ? AND s.workflow_id = ? ORDER BY s.position`, tenant, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []host.WorkflowStep
	for rows.Next() {
		s, err := sqlrows.ScanWorkflowStep(rows)
		if err != nil {
			return nil, err
		}
		s.Tenant, s.WorkflowID = tenant, id
		out = append(out, s)
	}
	return out, rows.Err()
}

// WorkflowCounts implements store.Reader.
func (r *reader) WorkflowCounts(ctx context.Context, tenant string) (map[host.WorkflowState]int64, error) {
	q, args := `SELECT state, count(*) FROM workflows GROUP BY state`, []any{}
	if tenant != "" {
		q, args = `SELECT state, count(*) FROM workflows WHERE tenant = ? GROUP BY state`, []any{tenant}
	}
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[host.WorkflowState]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[host.WorkflowState(st)] = n
	}
	return out, rows.Err()
}
