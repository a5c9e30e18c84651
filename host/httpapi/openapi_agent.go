package httpapi

import (
	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// The agent API's operations in the OpenAPI document.
func init() {
	openapi.Enum(host.StateWaiting, host.StateQueued, host.StateScheduled, host.StateLeased, host.StateSucceeded, host.StateCanceled, host.StateDeadLetter, host.StateArchived)
	openapi.Enum(host.RuleAllSucceeded, host.RuleAnySucceeded, host.RuleAllFinished)
	agents := []string{"agent", "admin"}
	anyKey := []string{"agent", "worker", "admin"}
	page := []openapi.Param{
		{Name: "cursor", Description: "the cursor of the previous page"},
		{Name: "limit", Type: "integer", Max: engine.MaxPage, Description: "page size, 1..500 (default 100)"},
	}
	str := openapi.Schema{"type": "string"}
	openapi.Add(
		openapi.Op{Method: "POST", Path: "/v1/tasks", Tag: "tasks", Roles: agents, Strict: true, Body: engine.EnqueueRequest{}, BodyRequired: true,
			Summary:   "Queue a task (201; 200 with is_duplicate for a repeated idempotency key)",
			Responses: map[int]any{201: engine.EnqueueResult{}, 200: engine.EnqueueResult{}}},
		openapi.Op{Method: "POST", Path: "/v1/tasks/batch", Tag: "tasks", Roles: agents, Strict: true, Body: EnqueueBatchBody{}, BodyRequired: true,
			Summary:   "Queue up to 1,000 tasks in one call, each with its own idempotency key and answer (200 with one result per task)",
			Responses: map[int]any{200: EnqueueBatchResponse{}}},
		openapi.Op{Method: "GET", Path: "/v1/tasks", Tag: "tasks", Roles: anyKey,
			Summary: "List the tasks the caller may see, oldest first",
			Query: append([]openapi.Param{
				{Name: "status", List: true, Description: "states, comma-separated or repeated"},
				{Name: "task_type", List: true, Description: "task types, comma-separated or repeated"},
				{Name: "recipient_ai"},
				{Name: "tenant", Description: "must be the key's tenant when given"},
			}, page...),
			Responses: map[int]any{200: TaskList{}}},
		openapi.Op{Method: "GET", Path: "/v1/tasks/:id", Tag: "tasks", Roles: anyKey, Summary: "A task", Responses: map[int]any{200: &host.Task{}}},
		openapi.Op{Method: "GET", Path: "/v1/tasks/:id/progress", Tag: "tasks", Roles: anyKey, Summary: "A task's progress history, newest first",
			Query: []openapi.Param{{Name: "limit", Type: "integer", Max: engine.MaxLongPage, Description: "most updates, 1..1000 (default 100)"}}, Responses: map[int]any{200: api.ProgressResponse{}}},
		openapi.Op{Method: "GET", Path: "/v1/tasks/:id/attempts", Tag: "tasks", Roles: anyKey,
			Summary:   "A task's attempts, oldest first: each lease, its worker, times, duration, outcome and error; a live lease last (outcome running)",
			Responses: map[int]any{200: api.AttemptsResponse{}}},
		openapi.Op{Method: "GET", Path: "/v1/tasks/:id/timeline", Tag: "tasks", Roles: anyKey,
			Summary:   "A task's history as events, oldest first: its receipts, lease grants, expiries and progress",
			Responses: map[int]any{200: api.TimelineResponse{}}},
		openapi.Op{Method: "POST", Path: "/v1/tasks/:id/cancel", Tag: "tasks", Roles: agents, Strict: true,
			Body: struct {
				Reason string `json:"reason,omitempty"`
			}{},
			Summary: "Cancel a task (queued: at once; leased: cancel_requested)", Responses: map[int]any{200: &host.Task{}}},
		openapi.Op{Method: "GET", Path: "/v1/tasks/:id/result", Tag: "tasks", Roles: anyKey,
			Summary:   "Fetch a finished task's result through its channel (404 not_found, saying when, once it was archived and its payload released)",
			Query:     []openapi.Param{{Name: "lease_id", Description: "a worker's live lease whose task waits (or waited) on this one: read a dependency's result under it"}},
			Responses: map[int]any{200: api.ResultResponse{}}},
		openapi.Op{Method: "POST", Path: "/v1/tasks/:id/archive", Tag: "tasks", Roles: agents,
			Summary: "Archive a task's result: archived_at, then the channel's ack and the pointer purged (purged_at); 409 conflict while a task queued after it has not finished and the ack would release its payload",
			Responses: map[int]any{200: openapi.Schema{
				"type": "object", "required": []string{"task_id", "status"},
				"properties": map[string]any{"task_id": str, "status": openapi.Schema{"const": "archived"},
					"archived_at": openapi.Schema{"type": []string{"string", "null"}, "format": "date-time"}}}}},
		openapi.Op{Method: "GET", Path: "/v1/obligations/open", Tag: "receipts", Roles: anyKey,
			Summary: "Open obligations of a principal",
			Query: append([]openapi.Param{{Name: "principal"}, {Name: "principal_id"}, {Name: "role", Enum: []string{"obligor", "obligee"}},
				{Name: "tenant", Description: "must be the key's tenant when given"}}, page...),
			Responses: map[int]any{200: api.ObligationsResponse{}}},
		openapi.Op{Method: "GET", Path: "/v1/receipts", Tag: "receipts", Roles: anyKey, Summary: "A task's receipts in ledger order",
			Query:     append([]openapi.Param{{Name: "task_id"}, {Name: "tenant"}}, page...),
			Responses: map[int]any{200: ReceiptList{}}},
		openapi.Op{Method: "POST", Path: "/v1/receipts", Tag: "receipts", Roles: anyKey, Strict: true, Body: AppendReceiptBody{}, BodyRequired: true,
			Summary:   "Append a task.progress or task.escalated receipt (201; 200 with duplicate for a repeated dedupe_key); it ends no obligation: a parent it would end is 403",
			Responses: map[int]any{201: api.ReceiptResponse{}, 200: api.ReceiptResponse{}}},
		openapi.Op{Method: "POST", Path: "/v1/receipts/check-terminator", Tag: "receipts", Roles: anyKey, Strict: true, BodyRequired: true,
			Body: struct {
				ParentReceiptID string `json:"parent_receipt_id"`
			}{},
			Summary: "Whether a receipt has been terminated", Responses: map[int]any{200: engine.TerminatorCheck{}}},
		openapi.Op{Method: "GET", Path: "/v1/receipts/:id", Tag: "receipts", Roles: anyKey, Summary: "A receipt and what terminated it",
			Responses: map[int]any{200: api.ReceiptResponse{}}},
		openapi.Op{Method: "GET", Path: "/v1/receipts/:id/chain", Tag: "receipts", Roles: anyKey, Summary: "A receipt's chain up through its parents, nearest first",
			Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"receipt_id", "chain"},
				"properties": map[string]any{"receipt_id": str, "chain": openapi.Schema{"type": "array", "items": openapi.Ref(engine.ChainLink{})}}}}},
	)
}
