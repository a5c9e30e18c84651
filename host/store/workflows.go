package store

import (
	"context"
	"slices"

	"github.com/asyncgate/asyncgate/host"
)

// WorkflowReader reads workflows (issue 39): the workflow rows and their
// steps, in tables of their own beside the tasks their steps are.
type WorkflowReader interface {
	// GetWorkflow returns a workflow or host.CodeNotFound. Inside Update it
	// locks the row (PostgreSQL: FOR UPDATE) until commit, so two writers
	// ending or canceling one workflow are ordered (storetest: Workflow*).
	GetWorkflow(ctx context.Context, tenant, id string) (*host.Workflow, error)
	// FindWorkflowByIdempotency returns the workflow createdBy submitted
	// with key, or nil and no error.
	FindWorkflowByIdempotency(ctx context.Context, tenant, createdBy, key string) (*host.Workflow, error)
	// ListWorkflows lists workflows newest first from the cursor on, with
	// the cursor of the next page.
	ListWorkflows(ctx context.Context, f WorkflowFilter) ([]*host.Workflow, string, error)
	// WorkflowSteps returns a workflow's steps in submitted order, each
	// with its task's outcome fields (sqlrows.OutcomeColumns) in Task.
	WorkflowSteps(ctx context.Context, tenant, id string) ([]host.WorkflowStep, error)
	// WorkflowCounts counts a tenant's workflows ("" for every tenant's)
	// by state; a state none is in is absent (storetest:
	// WorkflowCountsByState). It reads an index of (tenant, state): its
	// cost grows with the workflows kept.
	WorkflowCounts(ctx context.Context, tenant string) (map[host.WorkflowState]int64, error)
}

// WorkflowWriter writes workflows.
type WorkflowWriter interface {
	// InsertWorkflow records a new workflow and its steps, in the
	// transaction that inserts the steps' tasks. A clash on the id or on
	// (tenant, created_by, idempotency_key) is host.CodeConflict.
	InsertWorkflow(ctx context.Context, w *host.Workflow, steps []host.WorkflowStep) error
	// UpdateWorkflow writes w's state, cancel flag, result, error, end
	// receipt, outcome and times (archived_at too) if the stored workflow is still in state from;
	// otherwise it writes nothing and returns ErrFenced. So a workflow
	// ends once whatever the number of writers.
	UpdateWorkflow(ctx context.Context, w *host.Workflow, from host.WorkflowState) error
}

// WorkflowFilter selects workflows for ListWorkflows.
type WorkflowFilter struct {
	Tenant string
	// CreatedBy, when set, keeps only that principal's workflows.
	CreatedBy string
	// State, when set, keeps only workflows in that state; States, when
	// set, only those in one of them (both: in either).
	State  host.WorkflowState
	States []host.WorkflowState
	// Cursor is the id of the last workflow of the previous page.
	Cursor string
	Limit  int
}

// AllStates is the states f keeps (State and States), each once; none
// keeps every state.
func (f WorkflowFilter) AllStates() []host.WorkflowState {
	var out []host.WorkflowState
	for _, st := range append([]host.WorkflowState{f.State}, f.States...) {
		if st != "" && !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	return out
}
