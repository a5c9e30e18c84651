package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Workflows (docs/http.md "Workflows"): a named graph of steps submitted in
// one call. Each step is a task; after names the steps it waits on, and its
// worker receives their outcomes. The workflow's outcome is its final
// step's, and the gate owes the submitter one obligation for it.

// WorkflowStep is one step of a submitted workflow.
type WorkflowStep struct {
	Name       string          `json:"name"`
	TaskType   string          `json:"task_type"`
	Params     json.RawMessage `json:"params,omitempty"`
	Priority   int             `json:"priority,omitempty"`
	MaxRetries *int            `json:"max_retries,omitempty"`
	Summary    string          `json:"task_summary,omitempty"`
	After      []string        `json:"after,omitempty"`
	AfterRule  string          `json:"after_rule,omitempty"`
	// DelaySeconds and NotBefore delay the step's start as an enqueue's
	// (EnqueueOptions.Delay, NotBefore): counted from the submission, not
	// from the end of the steps in After; a step with After starts when
	// both its rule is met and its time has come.
	DelaySeconds int        `json:"delay_seconds,omitempty"`
	NotBefore    *time.Time `json:"not_before,omitempty"`
	// ResourceIntents are resource leases the step's task needs while it
	// runs, besides its type's (EnqueueOptions.ResourceIntents).
	ResourceIntents []ResourceIntent `json:"resource_intents,omitempty"`
}

// Step is a WorkflowStep with params encoded from any value; it panics
// only on params encoding/json cannot encode (a programming error).
func Step(name, taskType string, params any, after ...string) WorkflowStep {
	var p json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			panic(fmt.Sprintf("client.Step %s: params: %v", name, err))
		}
		p = b
	}
	return WorkflowStep{Name: name, TaskType: taskType, Params: p, After: after}
}

// NewWorkflow is a workflow to submit.
type NewWorkflow struct {
	Name  string         `json:"name"`
	Steps []WorkflowStep `json:"steps"`
	// FinalStep names the step whose outcome is the workflow's; "": the one
	// step nothing waits on.
	FinalStep      string `json:"final_step,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Submitted is the gate's acknowledgement of a submitted workflow.
type Submitted struct {
	WorkflowID  string            `json:"workflow_id"`
	Status      string            `json:"status"`
	IsDuplicate bool              `json:"is_duplicate"`
	ReceiptID   string            `json:"receipt_id"`
	Steps       map[string]string `json:"steps"` // step name → task id
}

// Workflow is a workflow as the gate shows it.
type Workflow struct {
	WorkflowID      string      `json:"workflow_id"`
	Name            string      `json:"name"`
	CreatedBy       string      `json:"created_by"`
	Status          string      `json:"status"` // running, succeeded, failed, canceled, archived
	FinalStep       string      `json:"final_step"`
	FinalTaskID     string      `json:"final_task_id"`
	StepCount       int         `json:"step_count"`
	CancelRequested bool        `json:"cancel_requested"`
	SubmitReceiptID string      `json:"submit_receipt_id"`
	EndReceiptID    string      `json:"end_receipt_id,omitempty"`
	Result          *TaskResult `json:"result,omitempty"`
	ErrorMessage    string      `json:"error_message,omitempty"`
	// Outcome is how the workflow ended (succeeded, failed, canceled),
	// kept once it is archived; "" while it runs.
	Outcome string `json:"outcome,omitempty"`
	// ArchivedAt is when retention archived it (Status archived): its
	// final step's payload was purged, and Result has no pointer.
	ArchivedAt  *time.Time `json:"archived_at,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// Steps are the workflow's steps with their tasks' states (GetWorkflow
	// only; a list leaves them out).
	Steps []WorkflowStepState `json:"steps,omitempty"`
}

// Terminal reports whether the workflow has ended.
func (w *Workflow) Terminal() bool { return w.Status != "running" && w.Status != "" }

// WorkflowStepState is one step of a workflow and its task's state.
type WorkflowStepState struct {
	Name     string `json:"name"`
	TaskID   string `json:"task_id"`
	TaskType string `json:"task_type"`
	Status   string `json:"status"` // waiting, queued, scheduled, leased, succeeded, ...
	// AvailableAt is when a step not yet running may first start, while
	// that is ahead (a delayed step: status scheduled, or waiting on its
	// after steps).
	AvailableAt  *time.Time  `json:"available_at,omitempty"`
	After        []string    `json:"after,omitempty"`
	AfterRule    string      `json:"after_rule,omitempty"`
	Final        bool        `json:"final,omitempty"`
	CompletedAt  *time.Time  `json:"completed_at,omitempty"`
	Result       *TaskResult `json:"result,omitempty"`
	ErrorMessage string      `json:"error_message,omitempty"`
}

// SubmitWorkflow submits a workflow. The gate checks the whole graph before
// it queues anything: a bad one is a 400 APIError with code unknown_step,
// duplicate_step, workflow_cycle, too_many_steps, invalid_workflow, or a
// step's field as an enqueue's (unknown_task_type, invalid_params,
// invalid_resource, bad_request; 413 too_large).
func (c *Client) SubmitWorkflow(ctx context.Context, w NewWorkflow) (*Submitted, error) {
	var out Submitted
	if _, err := c.Do(ctx, http.MethodPost, "/v1/workflows", w, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetWorkflow returns a workflow with its steps. Another principal's
// workflow is a 404 not_found, as an unknown id is.
func (c *Client) GetWorkflow(ctx context.Context, id string) (*Workflow, error) {
	var out Workflow
	if _, err := c.Do(ctx, http.MethodGet, "/v1/workflows/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListWorkflows returns a page of the caller's workflows (an admin's: the
// tenant's), newest first, optionally of one status, and the cursor of the
// next page.
func (c *Client) ListWorkflows(ctx context.Context, status, cursor string, limit int) ([]Workflow, string, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/workflows"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		Workflows []Workflow `json:"workflows"`
		Cursor    string     `json:"cursor"`
	}
	if _, err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, "", err
	}
	return out.Workflows, out.Cursor, nil
}

// CancelWorkflow cancels a workflow: every step not finished is canceled
// (a leased one flagged). A workflow already succeeded or failed is a 409
// conflict.
func (c *Client) CancelWorkflow(ctx context.Context, id, reason string) (*Workflow, error) {
	var body any
	if reason != "" {
		body = map[string]string{"reason": reason}
	}
	var out Workflow
	if _, err := c.Do(ctx, http.MethodPost, "/v1/workflows/"+url.PathEscape(id)+"/cancel", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WaitWorkflow polls a workflow until it ends or ctx ends, every interval
// (0: 1 s), and returns it.
func (c *Client) WaitWorkflow(ctx context.Context, id string, interval time.Duration) (*Workflow, error) {
	if interval <= 0 {
		interval = time.Second
	}
	for {
		w, err := c.GetWorkflow(ctx, id)
		if err != nil {
			return nil, err
		}
		if w.Terminal() {
			return w, nil
		}
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-time.After(interval):
		}
	}
}
