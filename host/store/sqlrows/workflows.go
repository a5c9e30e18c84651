package sqlrows

import (
	"encoding/json"

	"github.com/asyncgate/asyncgate/host"
)

// WorkflowColumns are the columns of a workflow row (issue 39), in the
// order ScanWorkflow reads them and WorkflowValues gives them.
const WorkflowColumns = `tenant, id, name, created_by, state, final_step, final_task_id, step_count, cancel_requested, idempotency_key, request_hash, submit_receipt, end_receipt, result, error, created_at, updated_at, completed_at, outcome, archived_at`

// ScanWorkflow reads one row of WorkflowColumns.
func ScanWorkflow(sc Scanner) (*host.Workflow, error) {
	var w host.Workflow
	var state string
	var result *string
	var created, updated int64
	var completed, archived *int64
	var outcome string
	if err := sc.Scan(&w.Tenant, &w.ID, &w.Name, &w.CreatedBy, &state, &w.FinalStep, &w.FinalTaskID, &w.StepCount, &w.CancelRequested,
		&w.IdempotencyKey, &w.RequestHash, &w.SubmitReceipt, &w.EndReceipt, &result, &w.Error, &created, &updated, &completed,
		&outcome, &archived); err != nil {
		return nil, err
	}
	w.State, w.Outcome = host.WorkflowState(state), host.WorkflowState(outcome)
	w.CreatedAt, w.UpdatedAt, w.CompletedAt, w.ArchivedAt = FromUS(created), FromUS(updated), FromNUS(completed), FromNUS(archived)
	if result != nil && *result != "" {
		w.Result = &host.Result{}
		if err := json.Unmarshal([]byte(*result), w.Result); err != nil {
			return nil, err
		}
	}
	return &w, nil
}

// WorkflowValues are w's values in WorkflowColumns order.
func WorkflowValues(w *host.Workflow) ([]any, error) {
	result, err := workflowResult(w.Result)
	if err != nil {
		return nil, err
	}
	return []any{w.Tenant, w.ID, w.Name, w.CreatedBy, string(w.State), w.FinalStep, w.FinalTaskID, w.StepCount, w.CancelRequested,
		w.IdempotencyKey, w.RequestHash, w.SubmitReceipt, w.EndReceipt, result, w.Error, US(w.CreatedAt), US(w.UpdatedAt), NUS(w.CompletedAt),
		string(w.Outcome), NUS(w.ArchivedAt)}, nil
}

// WorkflowSetValues are the values an update of a workflow writes, in the
// order state, cancel_requested, end_receipt, result, error, updated_at,
// completed_at, outcome, archived_at.
func WorkflowSetValues(w *host.Workflow) ([]any, error) {
	result, err := workflowResult(w.Result)
	if err != nil {
		return nil, err
	}
	return []any{string(w.State), w.CancelRequested, w.EndReceipt, result, w.Error, US(w.UpdatedAt), NUS(w.CompletedAt),
		string(w.Outcome), NUS(w.ArchivedAt)}, nil
}

func workflowResult(r *host.Result) (*string, error) {
	if r == nil {
		return nil, nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	s := string(b)
	return &s, nil
}

// WorkflowStepColumns are the step columns ScanWorkflowStep reads first,
// before the step task's WorkflowStepTaskColumns.
const WorkflowStepColumns = `position, step, task_id, after_steps, after_rule`

// WorkflowStepTaskColumns are the step task's columns ScanWorkflowStep
// reads: its OutcomeColumns and available_at (a step's view shows a
// delayed step scheduled).
const WorkflowStepTaskColumns = OutcomeColumns + `, available_at`

// ScanWorkflowStep reads one row of WorkflowStepColumns followed by the
// step task's WorkflowStepTaskColumns.
func ScanWorkflowStep(sc Scanner) (host.WorkflowStep, error) {
	var s host.WorkflowStep
	var after, rule string
	var t host.Task
	var state string
	var completed *int64
	var result *string
	var avail int64
	if err := sc.Scan(&s.Position, &s.Name, &s.TaskID, &after, &rule,
		&t.ID, &t.Type, &state, &completed, &result, &t.LastError, &t.DeadReason, &avail); err != nil {
		return s, err
	}
	t.AvailableAt = FromUS(avail)
	s.AfterRule = host.DependencyRule(rule)
	if after != "" && after != "[]" {
		if err := json.Unmarshal([]byte(after), &s.After); err != nil {
			return s, err
		}
	}
	t.State, t.CompletedAt = host.TaskState(state), FromNUS(completed)
	if result != nil && *result != "" {
		t.Result = &host.Result{}
		if err := json.Unmarshal([]byte(*result), t.Result); err != nil {
			return s, err
		}
	}
	s.Task = &t
	return s, nil
}

// WorkflowStepRow is one step as the SQL drivers send it in a JSON array,
// so one statement inserts every step of a workflow.
type WorkflowStepRow struct {
	Position int    `json:"p"`
	Step     string `json:"s"`
	TaskID   string `json:"t"`
	After    string `json:"a"`
	Rule     string `json:"r"`
}

// WorkflowStepsJSON is steps as a JSON array of WorkflowStepRow.
func WorkflowStepsJSON(steps []host.WorkflowStep) (string, error) {
	out := make([]WorkflowStepRow, len(steps))
	for i, s := range steps {
		after := s.After
		if after == nil {
			after = []string{}
		}
		a, err := json.Marshal(after)
		if err != nil {
			return "", err
		}
		out[i] = WorkflowStepRow{Position: s.Position, Step: s.Name, TaskID: s.TaskID, After: string(a), Rule: string(s.AfterRule)}
	}
	b, err := json.Marshal(out)
	return string(b), err
}
