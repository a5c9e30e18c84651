package sqlrows

import (
	"encoding/json"

	"github.com/asyncgate/asyncgate/host"
)

// TaskColumns are the columns ScanTask reads: every column of tasks.
const TaskColumns = `id, tenant, task_type, created_by, recipient, state, priority, params, summary, idempotency_key,
created_at, updated_at, available_at, lease_id, worker_id, leased_at, lease_expires_at, accepted_at, accept_receipt,
cancel_requested, attempts, max_retries, lease_count, lease_expiries, started_at, completed_at, progress_percent,
progress_message, result, last_error, dead_reason, assign_receipt, seq, version, lease_seconds, resource_intents, traceparent, tracestate, has_waiters`

// TaskInsertColumns are the columns an insert of a task writes, in the
// order of TaskInsertValues: every column but seq (the database numbers the
// rows) and version (1 for a new task). has_waiters is false for a task
// enqueued alone; a workflow inserts its steps with their edges at once, so
// a step another step waits on is born marked.
const TaskInsertColumns = `id, tenant, task_type, created_by, recipient, state, priority, params, summary, idempotency_key,
created_at, updated_at, available_at, lease_id, worker_id, leased_at, lease_expires_at, accepted_at, accept_receipt,
cancel_requested, attempts, max_retries, lease_count, lease_expiries, started_at, completed_at, progress_percent,
progress_message, result, last_error, dead_reason, assign_receipt, lease_seconds, resource_intents, traceparent, tracestate, has_waiters`

// TaskSetColumns are the columns an update of a task writes, in the order
// of TaskSetValues: every column a task's life changes. Not has_waiters:
// an update built from a copy read earlier must not clear the marker an
// enqueue wrote since.
var TaskSetColumns = []string{"state", "priority", "available_at", "updated_at", "lease_id", "worker_id", "leased_at", "lease_expires_at",
	"accepted_at", "accept_receipt", "cancel_requested", "attempts", "max_retries", "lease_count", "lease_expiries", "started_at",
	"completed_at", "progress_percent", "progress_message", "result", "last_error", "dead_reason", "assign_receipt", "lease_seconds"}

// ScanTask reads one row of TaskColumns: the task and its queue position
// (seq).
func ScanTask(sc Scanner) (*host.Task, int64, error) {
	var t host.Task
	var state, params string
	var created, updated, avail int64
	var leasedAt, expires, accepted, started, completed *int64
	var result *string
	var seq int64
	var intents string
	err := sc.Scan(&t.ID, &t.Tenant, &t.Type, &t.CreatedBy, &t.Recipient, &state, &t.Priority, &params, &t.Summary, &t.IdempotencyKey,
		&created, &updated, &avail, &t.LeaseID, &t.WorkerID, &leasedAt, &expires, &accepted, &t.AcceptReceipt,
		&t.CancelRequested, &t.Attempts, &t.MaxRetries, &t.LeaseCount, &t.LeaseExpiries, &started, &completed, &t.ProgressPercent,
		&t.ProgressMessage, &result, &t.LastError, &t.DeadReason, &t.AssignReceipt, &seq, &t.Version, &t.LeaseSeconds, &intents, &t.Traceparent, &t.Tracestate, &t.HasWaiters)
	if err != nil {
		return nil, 0, err
	}
	if t.ResourceIntents, err = host.IntentsFromJSON(intents); err != nil {
		return nil, 0, err
	}
	t.State = host.TaskState(state)
	t.Params = json.RawMessage(params)
	t.CreatedAt, t.UpdatedAt, t.AvailableAt = FromUS(created), FromUS(updated), FromUS(avail)
	t.LeasedAt, t.LeaseExpiresAt, t.AcceptedAt = FromNUS(leasedAt), FromNUS(expires), FromNUS(accepted)
	t.StartedAt, t.CompletedAt = FromNUS(started), FromNUS(completed)
	if result != nil && *result != "" {
		var res host.Result
		if err := json.Unmarshal([]byte(*result), &res); err != nil {
			return nil, 0, err
		}
		t.Result = &res
	}
	return &t, seq, nil
}

// TaskInsertValues are t's values in the order of TaskInsertColumns. They
// are copies: the caller may change t before the row is written.
func TaskInsertValues(t *host.Task) ([]any, error) {
	res, err := ResultJSON(t.Result)
	if err != nil {
		return nil, err
	}
	var pct *float64
	if t.ProgressPercent != nil {
		pct = new(*t.ProgressPercent)
	}
	return []any{t.ID, t.Tenant, t.Type, t.CreatedBy, t.Recipient, string(t.State), t.Priority, string(t.Params), t.Summary, t.IdempotencyKey,
		US(t.CreatedAt), US(t.UpdatedAt), US(t.AvailableAt), t.LeaseID, t.WorkerID, NUS(t.LeasedAt), NUS(t.LeaseExpiresAt), NUS(t.AcceptedAt), t.AcceptReceipt,
		t.CancelRequested, t.Attempts, t.MaxRetries, t.LeaseCount, t.LeaseExpiries, NUS(t.StartedAt), NUS(t.CompletedAt), pct,
		t.ProgressMessage, res, t.LastError, t.DeadReason, t.AssignReceipt, t.LeaseSeconds, host.IntentsJSON(t.ResourceIntents), t.Traceparent, t.Tracestate, t.HasWaiters}, nil
}

// TaskSetValues are t's values in the order of TaskSetColumns.
func TaskSetValues(t *host.Task) ([]any, error) {
	res, err := ResultJSON(t.Result)
	if err != nil {
		return nil, err
	}
	return []any{string(t.State), t.Priority, US(t.AvailableAt), US(t.UpdatedAt), t.LeaseID, t.WorkerID, NUS(t.LeasedAt), NUS(t.LeaseExpiresAt),
		NUS(t.AcceptedAt), t.AcceptReceipt, t.CancelRequested, t.Attempts, t.MaxRetries, t.LeaseCount, t.LeaseExpiries, NUS(t.StartedAt),
		NUS(t.CompletedAt), t.ProgressPercent, t.ProgressMessage, res, t.LastError, t.DeadReason, t.AssignReceipt, t.LeaseSeconds}, nil
}

// OutcomeColumns are the columns ScanOutcome reads: only what a
// dependency's outcome needs (host.OutcomeOf, host.FinishedAs), never the
// params, so an offer of a task with many dependencies reads little.
const OutcomeColumns = `id, task_type, state, completed_at, result, last_error, dead_reason`

// ScanOutcome reads one row of OutcomeColumns into a task that holds only
// those fields.
func ScanOutcome(sc Scanner) (*host.Task, error) {
	var t host.Task
	var state string
	var completed *int64
	var result *string
	if err := sc.Scan(&t.ID, &t.Type, &state, &completed, &result, &t.LastError, &t.DeadReason); err != nil {
		return nil, err
	}
	t.State = host.TaskState(state)
	t.CompletedAt = FromNUS(completed)
	if result != nil && *result != "" {
		var res host.Result
		if err := json.Unmarshal([]byte(*result), &res); err != nil {
			return nil, err
		}
		t.Result = &res
	}
	return &t, nil
}

// DependencyCheckColumns are the columns ScanDependencyCheck reads: what an
// enqueue checks of each task its after list names (visibility to the
// caller, host.FinishedAs, whether it waits itself, its marker), never the
// params, so naming a dependency reads little of it.
const DependencyCheckColumns = `id, tenant, task_type, created_by, recipient, worker_id, state, result, dead_reason, has_waiters`

// ScanDependencyCheck reads one row of DependencyCheckColumns into a task
// that holds only those fields.
func ScanDependencyCheck(sc Scanner) (*host.Task, error) {
	var t host.Task
	var state string
	var result *string
	if err := sc.Scan(&t.ID, &t.Tenant, &t.Type, &t.CreatedBy, &t.Recipient, &t.WorkerID, &state, &result, &t.DeadReason, &t.HasWaiters); err != nil {
		return nil, err
	}
	t.State = host.TaskState(state)
	if result != nil && *result != "" {
		var res host.Result
		if err := json.Unmarshal([]byte(*result), &res); err != nil {
			return nil, err
		}
		t.Result = &res
	}
	return &t, nil
}
