// Package httpapi is AsyncGate's HTTP door, built on echo: the worker API
// (canonical /v1/leases and the seeds' /lease, /worker/* and /workers/*
// spellings), the agent API (/v1/tasks, /v1/obligations, /v1/receipts), the
// operator API (/v1/admin/*, /healthz, /readyz, /metrics), the bearer-key
// middleware (over host/auth) and the one place where domain error codes
// become HTTP statuses.
//
// Handlers are thin adapters: they decode a body, check who is calling, call
// one engine method and encode its answer. All business rules live in
// host/engine.
//
// It imports no other door. cmd/gate mounts the others (the MCP server, the
// dashboard, the plugins list) on the same echo instance with WithRoutes;
// they find their callers through host/auth, as this package does.
package httpapi
