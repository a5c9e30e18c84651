package httpapi

import (
	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// The resource lease operations (KLIS-3) in the OpenAPI document.
func init() {
	anyKey := []string{"agent", "worker", "admin"}
	admins := []string{"admin"}
	str := openapi.Schema{"type": "string"}
	when := openapi.Schema{"type": "string", "format": "date-time"}
	result := openapi.Ref(engine.ResourceLeasesResult{})
	session := openapi.Ref(engine.ResourceSessionResult{})
	lease := openapi.Ref(host.ResourceLease{})
	tenant := openapi.Param{Name: "tenant", Description: "another tenant (operators: admins of the default tenant)"}
	page := []openapi.Param{{Name: "cursor"}, openapi.Param{Name: "limit", Type: "integer", Max: engine.MaxLongPage, Description: "page size, 1..1000 (default 100)"}}
	openapi.Add(
		openapi.Op{Method: "POST", Path: "/v1/resource-leases", Tag: "resource leases", Roles: anyKey, Strict: true, Body: AcquireBody{}, BodyRequired: true,
			Summary:   "Acquire an intent manifest: every (resource, predicate) lease, or none (409 names the conflicting lease)",
			Responses: map[int]any{201: engine.AcquireResult{}, 409: ResourceConflictBody{}}},
		openapi.Op{Method: "GET", Path: "/v1/resource-leases", Tag: "resource leases", Roles: anyKey,
			Query: []openapi.Param{{Name: "resource", Required: true, Description: "the resource name (normalized as an acquire normalizes it)"},
				{Name: "wait_seconds", Type: "number", Description: "long-poll (at most 30 s) until nothing that conflicts with predicate holds it; takes nothing"},
				{Name: "predicate", Description: "READS or MUTATES (default): what you mean to take; with it, only the leases in its way are answered"}},
			Summary:   "Who holds a resource: the leases honoured now on it in your tenant, without taking it; or wait until it is free to take",
			Responses: map[int]any{200: result}},
		openapi.Op{Method: "POST", Path: "/v1/resource-leases/heartbeat", Tag: "resource leases", Roles: anyKey, Strict: true, Body: LeaseIDsBody{}, BodyRequired: true,
			Summary: "Extend leases by their TTL from the server's now (all or none)", Responses: map[int]any{200: result}},
		openapi.Op{Method: "POST", Path: "/v1/resource-leases/:lease_id/heartbeat", Tag: "resource leases", Roles: anyKey, Strict: true, Body: LeaseIDsBody{},
			Summary: "Extend one lease", Responses: map[int]any{200: result}},
		openapi.Op{Method: "POST", Path: "/v1/resource-leases/release", Tag: "resource leases", Roles: anyKey, Strict: true, Body: LeaseIDsBody{}, BodyRequired: true,
			Summary: "Release leases (idempotent: released or expired leases answer 200 with their state)", Responses: map[int]any{200: result}},
		openapi.Op{Method: "POST", Path: "/v1/resource-leases/:lease_id/release", Tag: "resource leases", Roles: anyKey, Strict: true, Body: LeaseIDsBody{},
			Summary: "Release one lease (idempotent)", Responses: map[int]any{200: result}},
		openapi.Op{Method: "POST", Path: "/v1/resource-leases/verify", Tag: "resource leases", Roles: anyKey, Strict: true, Body: LeaseIDsBody{},
			Summary: "VERIFY_ALL: the leases' state by the server clock; resumes heartbeats after DIE_RESTART", Responses: map[int]any{200: result}},
		openapi.Op{Method: "POST", Path: "/v1/resource-leases/die-restart", Tag: "resource leases", Roles: anyKey, Strict: true,
			Body:    openapi.Schema{"type": "object", "additionalProperties": false},
			Summary: "Declare DIE_RESTART: each live lease gets its one grace period; heartbeats wait for VERIFY_ALL", Responses: map[int]any{200: result}},
		openapi.Op{Method: "GET", Path: "/v1/admin/resource-leases", Tag: "resource leases", Roles: admins,
			Query: append([]openapi.Param{tenant, {Name: "holder"}, {Name: "resource"},
				{Name: "state", Enum: []string{"held", "active", "released", "expired", "all"}}}, page...),
			Summary: "Resource leases (state=held: honoured now)",
			Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"leases", "next_cursor", "server_time"},
				"properties": map[string]any{"leases": openapi.Schema{"type": "array", "items": lease}, "next_cursor": str, "server_time": when}}}},
		openapi.Op{Method: "GET", Path: "/v1/admin/resource-leases/events", Tag: "resource leases", Roles: admins,
			Query:   append([]openapi.Param{tenant, {Name: "lease_id"}, {Name: "resource"}}, page...),
			Summary: "The resource lease audit trail (granted, heartbeat, released, expired, grace, verified, revoked)",
			Responses: map[int]any{200: openapi.Schema{"type": "object", "required": []string{"events", "next_cursor"},
				"properties": map[string]any{"events": openapi.Schema{"type": "array", "items": openapi.Ref(host.ResourceLeaseEvent{})}, "next_cursor": str}}}},
		openapi.Op{Method: "POST", Path: "/v1/admin/resource-leases/:lease_id/revoke", Tag: "resource leases", Roles: admins,
			Query:   []openapi.Param{tenant},
			Summary: "Revoke a lease at once; the holder's next heartbeat is refused with 409 lease_revoked", Responses: map[int]any{200: result}},
		openapi.Op{Method: "POST", Path: "/v1/resource-sessions", Tag: "resource leases", Roles: anyKey, Strict: true, Body: SessionBody{},
			Summary:   "Open a session: leases acquired in it (session_id) follow its heartbeats and end with it",
			Responses: map[int]any{201: session}},
		openapi.Op{Method: "GET", Path: "/v1/resource-sessions/:session_id", Tag: "resource leases", Roles: anyKey,
			Summary: "A session and the leases granted in it", Responses: map[int]any{200: session}},
		openapi.Op{Method: "POST", Path: "/v1/resource-sessions/:session_id/heartbeat", Tag: "resource leases", Roles: anyKey, Strict: true, Body: SessionBody{},
			Summary: "Extend the session and every live lease in it to now + TTL (409 session_ended when it was lost)", Responses: map[int]any{200: session}},
		openapi.Op{Method: "POST", Path: "/v1/resource-sessions/:session_id/end", Tag: "resource leases", Roles: anyKey, Strict: true,
			Body:    openapi.Schema{"type": "object", "additionalProperties": false},
			Summary: "End the session and release every lease in it (idempotent)", Responses: map[int]any{200: session}},
	)
}
