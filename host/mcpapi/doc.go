// Package mcpapi is AsyncGate's MCP door: the agent tools of the spec
// ("MCP Tools (AI Agent Interface - Port B)") and the optional worker shim
// ("MCP Worker Shim"), served with mark3labs/mcp-go over streamable HTTP (at
// /mcp on the gate's echo server, behind the same bearer keys as the HTTP API)
// and over stdio (gate mcp).
//
// Every tool is a thin adapter over one host/engine call, the same call the
// HTTP door makes; no business rule lives here. A tool's result is structured
// content plus a short text written for a language model; a failed call is
// an MCP tool error (isError) whose text is {"error": code, "detail": text}
// with the codes of the HTTP API.
//
// Who may use which tool follows the HTTP routes: queue_task, cancel_task and
// archive_task_result need an agent or admin key; the read tools take any
// key; the worker_* tools exist only for worker keys, which act as their own
// worker id. Tools a key may not use are hidden from tools/list and refused
// by tools/call ("tool not found").
//
// Every enabled task type of the caller's tenant is also a task-capable tool
// (tasktypes.go), and MCP Tasks are served durably (tasks.go): an MCP task is
// a gate task of the key's principal, answered ahead of mcp-go, which keeps
// tasks in memory per session. Connected sessions are notified of task and
// task-type changes (session.go); every tool declares an output schema
// derived from its result type (schema.go).
//
// mcp-go cancels a request's context once the response is written (upstream
// issue #897), so nothing outlives a tool call here: writes run on a context
// detached from the request's cancellation (a client that hangs up mid-call
// cannot half-apply a completion; the engine's writes are idempotent per lease
// anyway), and a worker's lease long-poll is capped well below client
// timeouts and ends when the server shuts down.
package mcpapi
