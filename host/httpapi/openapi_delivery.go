package httpapi

import (
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// The delivery API's operations (issue 13) in the OpenAPI document.
func init() {
	admins := []string{"admin"}
	agents := []string{"agent", "admin"}
	anyKey := []string{"agent", "admin", "worker"}
	limit := openapi.Param{Name: "limit", Type: "integer", Max: engine.MaxPage, Description: "page size, 1..500 (default 100)"}
	openapi.Add(
		openapi.Op{Method: "GET", Path: "/v1/session/bootstrap", Tag: "inbox", Roles: anyKey, Query: []openapi.Param{limit},
			Summary:   "Session start: open obligations and unread inbox items (marks them delivered, never read)",
			Responses: map[int]any{200: engine.Bootstrap{}}},
		openapi.Op{Method: "GET", Path: "/v1/inbox", Tag: "inbox", Roles: anyKey,
			Query: []openapi.Param{{Name: "unread", Type: "boolean"}, {Name: "task_id"}, {Name: "recipient", Description: "another principal's inbox (admins)"},
				{Name: "cursor"}, limit},
			Summary: "Inbox items, oldest first (marks the caller's own delivered)", Responses: map[int]any{200: api.InboxList{}}},
		openapi.Op{Method: "POST", Path: "/v1/inbox/mark-read", Tag: "inbox", Roles: anyKey, Strict: true, Body: MarkReadBody{}, BodyRequired: true,
			Summary: "Mark inbox items read (the only way read_at is set)", Responses: map[int]any{200: engine.MarkReadResult{}}},
		openapi.Op{Method: "POST", Path: "/v1/tasks/:id/store-in-memory", Tag: "inbox", Roles: agents, Strict: true, Body: StoreInMemoryBody{},
			Summary:   "Queue a succeeded task's result for the external ledger as a memory item; sets promoted_to_memory",
			Responses: map[int]any{200: engine.PromoteResult{}}},
		openapi.Op{Method: "POST", Path: "/v1/admin/retention/sweep", Tag: "delivery", Roles: admins,
			Summary: "Run one retention sweep now, over every tenant (admins of the default tenant only)", Responses: map[int]any{200: engine.RetentionReport{}}},
		openapi.Op{Method: "GET", Path: "/v1/admin/outbox", Tag: "delivery", Roles: admins, Query: []openapi.Param{{Name: "limit", Type: "integer", Max: engine.MaxLongPage, Description: "dead entries to list, 1..1000 (default 100)"}},
			Summary: "Outbox to the external ledger, every tenant's: pending, dead, lag and the dead list (admins of the default tenant only)", Responses: map[int]any{200: engine.OutboxStatus{}}},
		openapi.Op{Method: "POST", Path: "/v1/admin/outbox/retry", Tag: "delivery", Roles: admins, Strict: true, Body: OutboxRetryBody{},
			Summary: "Send dead outbox entries again, all when ids is empty (admins of the default tenant only)",
			Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"requeued"},
				"properties": map[string]any{"requeued": openapi.Schema{"type": "integer"}}}}},
	)
}
