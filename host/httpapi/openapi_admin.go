package httpapi

import (
	"encoding/json"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
	"github.com/asyncgate/asyncgate/host/store"
)

// putTaskTypeBody is the body PUT /v1/admin/task-types/{name} decodes: a
// task type, with the read-only fields of its answer (created_at,
// updated_at, retry_policy, paused) allowed only as GET shows them
// (read_only_field otherwise).
type putTaskTypeBody struct {
	host.TaskType
	RetryPolicy json.RawMessage `json:"retry_policy"`
	Paused      json.RawMessage `json:"paused"`
}

// The operator API's operations and the gate's own routes in the OpenAPI
// document.
func init() {
	admins := []string{"admin"}
	tenant := []openapi.Param{{Name: "tenant", Description: "the tenant the call acts on, else the key's own; only admins of the default tenant may name another. A tenant in a body never chooses it: one that differs is 400 tenant_mismatch"}}
	str := openapi.Schema{"type": "string"}
	typeView := openapi.Ref(TaskTypeView{})
	openapi.Add(
		openapi.Op{Method: "GET", Path: "/healthz", Tag: "gate", Public: true, Summary: "Liveness and version",
			Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"status", "version"},
				"properties": map[string]any{"status": openapi.Schema{"const": "ok"}, "version": str}}}},
		openapi.Op{Method: "GET", Path: "/readyz", Tag: "gate", Public: true, Summary: "Readiness: the store reads and commits a write",
			Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"status", "database"},
				"properties": map[string]any{"status": openapi.Schema{"const": "ready"}, "database": str}}}},
		openapi.Op{Method: "GET", Path: "/metrics", Tag: "gate", Roles: admins, Summary: "Prometheus metrics (public with metrics_public)",
			Responses: map[int]any{200: openapi.Text("text/plain")}},
		openapi.Op{Method: "GET", Path: "/openapi.json", Tag: "gate", Public: true, Summary: "This document",
			Responses: map[int]any{200: openapi.Schema{"type": "object"}}},

		openapi.Op{Method: "PUT", Path: "/v1/admin/task-types/:name", Tag: "task types", Roles: admins, Strict: true, Query: tenant,
			Body: putTaskTypeBody{}, Summary: "Create or replace a task type (omitted fields take the defaults)",
			Responses: map[int]any{200: typeView}},
		openapi.Op{Method: "PATCH", Path: "/v1/admin/task-types/:name", Tag: "task types", Roles: admins, Query: tenant, BodyRequired: true,
			Body:    openapi.Schema{"type": "object", "description": "A JSON merge patch (RFC 7386) of the task type's fields"},
			Summary: "Change some fields of a task type", Responses: map[int]any{200: typeView}},
		openapi.Op{Method: "DELETE", Path: "/v1/admin/task-types/:name", Tag: "task types", Roles: admins, Query: tenant,
			Summary: "Delete a task type without queued or leased tasks",
			Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"task_type", "tenant", "status"},
				"properties": map[string]any{"task_type": str, "tenant": str, "status": openapi.Schema{"const": "deleted"}}}}},
		openapi.Op{Method: "GET", Path: "/v1/admin/task-types", Tag: "task types", Roles: admins, Query: tenant, Summary: "List task types",
			Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"task_types"},
				"properties": map[string]any{"task_types": openapi.Schema{"type": "array", "items": typeView}}}}},
		openapi.Op{Method: "GET", Path: "/v1/admin/task-types/:name", Tag: "task types", Roles: admins, Query: tenant, Summary: "A task type",
			Responses: map[int]any{200: typeView}},
		openapi.Op{Method: "POST", Path: "/v1/admin/task-types/:name/pause", Tag: "task types", Roles: admins, Strict: true, Query: tenant, Body: PauseBody{},
			Summary: "Pause a task type's leasing (enqueue still accepted)", Responses: map[int]any{200: PauseResponse{}}},
		openapi.Op{Method: "POST", Path: "/v1/admin/task-types/:name/resume", Tag: "task types", Roles: admins, Strict: true, Query: tenant,
			Summary: "Resume a task type's leasing", Responses: map[int]any{200: PauseResponse{}}},

		openapi.Op{Method: "POST", Path: "/v1/admin/keys", Tag: "keys", Roles: admins, Strict: true, Query: tenant, Body: auth.NewKeyRequest{}, BodyRequired: true,
			Summary: "Create an API key (the secret is shown once)", Responses: map[int]any{201: auth.CreatedKey{}}},
		openapi.Op{Method: "GET", Path: "/v1/admin/keys", Tag: "keys", Roles: admins, Query: tenant, Summary: "List API keys (never their secrets)",
			Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"keys"},
				"properties": map[string]any{"keys": openapi.Schema{"type": "array", "items": openapi.Ref(store.Key{})}}}}},
		openapi.Op{Method: "DELETE", Path: "/v1/admin/keys/:id", Tag: "keys", Roles: admins, Query: tenant, Summary: "Revoke an API key",
			Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"key_id", "status"},
				"properties": map[string]any{"key_id": str, "status": openapi.Schema{"const": "revoked"}}}}},
		openapi.Op{Method: "POST", Path: "/admin/workers/create_key", Tag: "keys", Roles: admins,
			Body: struct {
				WorkerID string `json:"worker_id"`
			}{},
			Summary: "The spec's worker key endpoint", Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"api_key", "worker_id"},
				"properties": map[string]any{"api_key": str, "worker_id": str, "key_id": str}}}},

		openapi.Op{Method: "GET", Path: "/v1/admin/dead-letters", Tag: "dead letters", Roles: admins,
			Query:   append(tenant, openapi.Param{Name: "cursor"}, openapi.Param{Name: "limit", Type: "integer", Max: engine.MaxPage, Description: "page size, 1..500 (default 100)"}),
			Summary: "Dead-lettered tasks", Responses: map[int]any{200: TaskList{}}},
		openapi.Op{Method: "POST", Path: "/v1/admin/dead-letters/:task_id/redrive", Tag: "dead letters", Roles: admins, Query: tenant,
			Summary: "Queue a dead letter again", Responses: map[int]any{200: &host.Task{}}},
		openapi.Op{Method: "GET", Path: "/v1/admin/workers", Tag: "workers", Roles: admins, Query: tenant, Summary: "Workers seen and the leases they hold",
			Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"workers"},
				"properties": map[string]any{"workers": openapi.Schema{"type": "array", "items": openapi.Ref(engine.WorkerInfo{})}}}}},
		openapi.Op{Method: "GET", Path: "/v1/admin/stats", Tag: "workers", Roles: admins, Query: tenant, Summary: "Task counts by state and type, oldest ready age",
			Responses: map[int]any{200: StatsResponse{}}},
	)
}
