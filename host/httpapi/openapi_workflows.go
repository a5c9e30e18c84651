package httpapi

import (
	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// The workflow operations in the OpenAPI document (issue 39).
func init() {
	openapi.Enum(host.WorkflowRunning, host.WorkflowSucceeded, host.WorkflowFailed, host.WorkflowCanceled, host.WorkflowArchived)
	// A workflow's outcome is how it ended (endWorkflow), kept when it is
	// archived: never running or archived.
	openapi.FieldEnum(host.Workflow{}, "outcome", host.WorkflowSucceeded, host.WorkflowFailed, host.WorkflowCanceled)
	agents := []string{"agent", "admin"}
	openapi.Add(
		openapi.Op{Method: "POST", Path: "/v1/workflows", Tag: "workflows", Roles: agents, Strict: true, Body: engine.WorkflowRequest{}, BodyRequired: true,
			Summary:   "Submit a workflow: named steps (tasks) with after edges and a final step (201; 200 with is_duplicate for a repeated idempotency key)",
			Responses: map[int]any{201: engine.WorkflowResult{}, 200: engine.WorkflowResult{}}},
		openapi.Op{Method: "GET", Path: "/v1/workflows", Tag: "workflows", Roles: agents,
			Summary: "List the caller's workflows (an admin's: the tenant's), newest first",
			Query: []openapi.Param{
				{Name: "status", List: true, Description: "states, comma-separated or repeated: running, succeeded, failed, canceled, archived"},
				{Name: "cursor", Description: "the cursor of the previous page"},
				{Name: "limit", Type: "integer", Max: engine.MaxPage, Description: "page size, 1..500 (default 100)"},
			},
			Responses: map[int]any{200: WorkflowList{}}},
		openapi.Op{Method: "GET", Path: "/v1/workflows/:id", Tag: "workflows", Roles: agents,
			Summary: "A workflow with its steps and their states", Responses: map[int]any{200: engine.WorkflowView{}}},
		openapi.Op{Method: "POST", Path: "/v1/workflows/:id/cancel", Tag: "workflows", Roles: agents, Strict: true, Body: CancelBody{},
			Summary: "Cancel a workflow: every step not finished is canceled (a leased one flagged)", Responses: map[int]any{200: &host.Workflow{}}},
	)
}
