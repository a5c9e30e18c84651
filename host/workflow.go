package host

import (
	"regexp"
	"strings"
	"time"
)

// Workflows (issue 39): a named graph of steps submitted in one call. Each
// step is a task of its own, enqueued by the gate for the workflow, waiting
// on the steps its after list names through the task dependencies of
// dependency.go. The workflow ends with its final step: in the transaction
// that writes the final step's terminal state.

// WorkflowState is where a workflow is in its lifecycle.
type WorkflowState string

// Workflow states. A workflow is running from its submission until the
// transaction that finishes its final step, and then ends once, for good.
// An ended workflow moves to archived in the transaction in which retention
// archives its final step (engine/retention.go); its Outcome keeps how it
// ended.
const (
	WorkflowRunning   WorkflowState = "running"
	WorkflowSucceeded WorkflowState = "succeeded"
	WorkflowFailed    WorkflowState = "failed"
	WorkflowCanceled  WorkflowState = "canceled"
	// WorkflowArchived is an ended workflow past its final step's
	// retention: the final step's payload was purged, and so was the
	// pointer of the workflow's copy of its result.
	WorkflowArchived WorkflowState = "archived"
)

// WorkflowStates are the workflow states, in lifecycle order.
var WorkflowStates = []WorkflowState{WorkflowRunning, WorkflowSucceeded, WorkflowFailed, WorkflowCanceled, WorkflowArchived}

// Valid reports whether s is a known workflow state.
func (s WorkflowState) Valid() bool {
	switch s {
	case WorkflowRunning, WorkflowSucceeded, WorkflowFailed, WorkflowCanceled, WorkflowArchived:
		return true
	}
	return false
}

// Terminal reports whether the workflow has ended.
func (s WorkflowState) Terminal() bool { return s != WorkflowRunning && s != "" }

// Workflow limits.
const (
	// MaxWorkflowSteps is the most steps one workflow may have.
	MaxWorkflowSteps = 1000
	// PrefixWorkflow prefixes workflow ids.
	PrefixWorkflow = "WF-"
	// workflowRecipientPrefix starts the recipient of every step task: the
	// workflow, not a principal ('/' is outside PrincipalPattern, so no
	// key can be named like it).
	workflowRecipientPrefix = "workflow/"
)

// Workflow is one submitted graph of steps.
type Workflow struct {
	ID        string        `json:"workflow_id"`
	Tenant    string        `json:"tenant"`
	Name      string        `json:"name"`
	CreatedBy string        `json:"created_by"`
	State     WorkflowState `json:"status"`
	// FinalStep names the step whose outcome is the workflow's, and
	// FinalTaskID is its task.
	FinalStep   string `json:"final_step"`
	FinalTaskID string `json:"final_task_id"`
	StepCount   int    `json:"step_count"`
	// CancelRequested is set by a cancel of the workflow: its final step
	// ending without success then ends it canceled rather than failed.
	CancelRequested bool   `json:"cancel_requested"`
	IdempotencyKey  string `json:"idempotency_key,omitempty"`
	// RequestHash identifies what was submitted under IdempotencyKey: a
	// repeat with another request is a conflict.
	RequestHash string `json:"-"`
	// SubmitReceipt is the workflow.submitted receipt (the gate's
	// obligation to the submitter), EndReceipt the one that terminated it.
	SubmitReceipt string `json:"submit_receipt_id"`
	EndReceipt    string `json:"end_receipt_id,omitempty"`
	// Result is the final step's result when the workflow succeeded.
	Result *Result `json:"result,omitempty"`
	// Error says why a workflow failed or was canceled.
	Error string `json:"error_message,omitempty"`
	// Outcome is how the workflow ended (succeeded, failed or canceled),
	// written with its end and kept when it is archived; "" while it runs.
	Outcome WorkflowState `json:"outcome,omitempty"`
	// ArchivedAt is when retention archived it (State archived).
	ArchivedAt *time.Time `json:"archived_at,omitempty"`

	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
}

// Ended is how w ended (succeeded, failed or canceled), archived or not;
// "" while it runs.
func (w *Workflow) Ended() WorkflowState {
	switch {
	case w.State == WorkflowArchived:
		return w.Outcome
	case w.State.Terminal():
		return w.State
	}
	return ""
}

// WorkflowStep is one step of a workflow and its task.
type WorkflowStep struct {
	Tenant     string `json:"-"`
	WorkflowID string `json:"-"`
	Name       string `json:"name"`
	TaskID     string `json:"task_id"`
	// Position is the step's place in the submitted list.
	Position  int            `json:"position"`
	After     []string       `json:"after,omitempty"`
	AfterRule DependencyRule `json:"after_rule,omitempty"`
	// Task is the step's task as a read of the workflow's steps finds it:
	// only its outcome fields (OutcomeOf), or nil when not read.
	Task *Task `json:"-"`
}

// WorkflowRecipient is the recipient of a workflow's step tasks: the
// workflow itself, so the steps' own obligations and inbox items are owed
// to the workflow, not to its submitter, who is owed the workflow's.
func WorkflowRecipient(id string) string { return workflowRecipientPrefix + id }

// WorkflowFinalRecipient is the recipient of a workflow's final step: the
// workflow, marked so that the end of a step reads the workflow row only
// when it is the final one.
func WorkflowFinalRecipient(id string) string { return workflowRecipientPrefix + id + finalSuffix }

const finalSuffix = "/final"

// WorkflowOf returns the workflow a step task belongs to, from its
// recipient, and whether it is the workflow's final step; "" for a task
// that is no workflow's step.
func WorkflowOf(t *Task) (id string, final bool) {
	if t == nil || !strings.HasPrefix(t.Recipient, workflowRecipientPrefix) {
		return "", false
	}
	id = t.Recipient[len(workflowRecipientPrefix):]
	if rest, ok := strings.CutSuffix(id, finalSuffix); ok {
		return rest, true
	}
	return id, false
}

// IsWorkflowRecipient reports whether a receipt or inbox addressee is a
// workflow rather than a principal.
func IsWorkflowRecipient(to string) bool { return strings.HasPrefix(to, workflowRecipientPrefix) }

// StepNamePattern is what a step name may look like.
var StepNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$`)

// Workflow receipt types: the gate owes the submitter the workflow's
// outcome from its submission until it ends.
const (
	ReceiptWorkflowSubmitted ReceiptType = "workflow.submitted" // obligation of the gate to the submitter
	ReceiptWorkflowCompleted ReceiptType = "workflow.completed" // the final step succeeded
	ReceiptWorkflowFailed    ReceiptType = "workflow.failed"    // the final step dead-lettered or was canceled by a failure
	ReceiptWorkflowCanceled  ReceiptType = "workflow.canceled"  // canceled by the submitter or an admin
)

// Workflow errors (all 400: the submission is refused before anything is
// written).
const (
	// CodeInvalidWorkflow: the workflow is malformed (no steps, a bad name,
	// no single final step, a chain deeper than dependencies allow).
	CodeInvalidWorkflow = "invalid_workflow"
	// CodeUnknownStep: an after list or final_step names no step of the
	// workflow.
	CodeUnknownStep = "unknown_step"
	// CodeDuplicateStep: two steps have the same name.
	CodeDuplicateStep = "duplicate_step"
	// CodeWorkflowCycle: the steps' after lists make a cycle.
	CodeWorkflowCycle = "workflow_cycle"
	// CodeTooManySteps: more than MaxWorkflowSteps steps.
	CodeTooManySteps = "too_many_steps"
)
