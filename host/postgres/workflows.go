package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// Workflows (issue 39): the workflow row and its steps, in tables of their
// own; the steps' tasks and edges are written as any task's.

// InsertWorkflow implements store.Tx: the workflow row and one statement
// for every step.
func (w *writeTx) InsertWorkflow(ctx context.Context, wf *host.Workflow, steps []host.WorkflowStep) error {
	vals, err := sqlrows.WorkflowValues(wf)
	if err != nil {
		return err
	}
	_, err = w.ss.exec(w.c(ctx), `INSERT INTO workflows (`+sqlrows.WorkflowColumns+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20)`, vals...)
	if err != nil {
		if pgCode(err) == "23505" {
			return host.WrapError(host.CodeConflict, err, "a workflow with this id or idempotency key exists")
		}
		return err
	}
	rows, err := sqlrows.WorkflowStepsJSON(steps)
	if err != nil {
		return err
	}
	_, err = w.ss.exec(w.c(ctx), `INSERT INTO workflow_steps (tenant, workflow_id, position, step, task_id, after_steps, after_rule)
SELECT $1, $2, j.p, j.s, j.t, j.a, j.r FROM jsonb_to_recordset($3::jsonb) AS j(p integer, s text, t text, a text, r text)`, wf.Tenant, wf.ID, rows)
	return err
}

// UpdateWorkflow implements store.Tx.
func (w *writeTx) UpdateWorkflow(ctx context.Context, wf *host.Workflow, from host.WorkflowState) error {
	vals, err := sqlrows.WorkflowSetValues(wf)
	if err != nil {
		return err
	}
	n, err := w.ss.exec(w.c(ctx), `UPDATE workflows SET state = $1, cancel_requested = $2, end_receipt = $3, result = $4, error = $5, updated_at = $6, completed_at = $7,
outcome = $8, archived_at = $9 WHERE tenant = $10 AND id = $11 AND state = $12`, append(vals, wf.Tenant, wf.ID, string(from))...)
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrFenced
	}
	return nil
}

func (r *reader) workflows(ctx context.Context, q string, args ...any) ([]*host.Workflow, error) {
	var out []*host.Workflow
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		wf, err := sqlrows.ScanWorkflow(rows)
		if err != nil {
			return err
		}
		out = append(out, wf)
		return nil
	}, q, args...)
	return out, err
}

// GetWorkflow implements store.Reader: inside Update it locks the row.
func (r *reader) GetWorkflow(ctx context.Context, tenant, id string) (*host.Workflow, error) {
	out, err := r.workflows(ctx, `SELECT `+sqlrows.WorkflowColumns+` FROM workflows WHERE tenant = $1 AND id = $2`+r.lockRow(), tenant, id)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, notFound("workflow", id)
	}
	return out[0], nil
}

// FindWorkflowByIdempotency implements store.Reader.
func (r *reader) FindWorkflowByIdempotency(ctx context.Context, tenant, createdBy, key string) (*host.Workflow, error) {
	out, err := r.workflows(ctx, `SELECT `+sqlrows.WorkflowColumns+` FROM workflows WHERE tenant = $1 AND created_by = $2 AND idempotency_key = $3 AND idempotency_key <> ''`, tenant, createdBy, key)
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out[0], nil
}

// ListWorkflows implements store.Reader.
func (r *reader) ListWorkflows(ctx context.Context, f store.WorkflowFilter) ([]*host.Workflow, string, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var a args
	q := `SELECT ` + sqlrows.WorkflowColumns + ` FROM workflows WHERE tenant = ` + a.add(f.Tenant)
	if f.CreatedBy != "" {
		q += ` AND created_by = ` + a.add(f.CreatedBy)
	}
	if states := f.AllStates(); len(states) > 0 {
		in := make([]string, len(states))
		for i, st := range states {
			in[i] = a.add(string(st))
		}
		q += ` AND state IN (` + strings.Join(in, ", ") + `)`
	}
	if f.Cursor != "" {
		q += ` AND id < ` + a.add(f.Cursor)
	}
	q += ` ORDER BY id DESC LIMIT ` + a.add(f.Limit+1)
	out, err := r.workflows(ctx, q, a...)
	if err != nil {
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

// WorkflowSteps implements store.Reader.
func (r *reader) WorkflowSteps(ctx context.Context, tenant, id string) ([]host.WorkflowStep, error) {
	var out []host.WorkflowStep
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		s, err := sqlrows.ScanWorkflowStep(rows)
		if err != nil {
			return err
		}
		s.Tenant, s.WorkflowID = tenant, id
		out = append(out, s)
		return nil
	}, `SELECT `+workflowStepColumns+` FROM workflow_steps s
JOIN tasks t ON t.tenant = s.tenant AND t.id = s.task_id
WHERE s.tenant = $1 AND s.workflow_id = $2 ORDER BY s.position`, tenant, id)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	return out, err
}

// WorkflowCounts implements store.Reader.
func (r *reader) WorkflowCounts(ctx context.Context, tenant string) (map[host.WorkflowState]int64, error) {
	q, args := `SELECT state, count(*) FROM workflows GROUP BY state`, []any{}
	if tenant != "" {
		q, args = `SELECT state, count(*) FROM workflows WHERE tenant = $1 GROUP BY state`, []any{tenant}
	}
	out := map[host.WorkflowState]int64{}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return err
		}
		out[host.WorkflowState(st)] = n
		return nil
	}, q, args...)
	return out, err
}
