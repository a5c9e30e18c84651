// Package mcpapi is AsyncGate's MCP door: the agent tools of the spec
// ("MCP Tools (AI Agent Interface - Port B)") and the optional worker shim
// ("MCP Worker Shim"), served with mark3labs/mcp-go over streamable HTTP (at
// /mcp on the gate's echo server, behind the same bearer keys as the HTTP API)
// and over stdio (gate mcp).
//
// Every tool is a thin adapter over one host/engine call, the same call the
// HTTP door makes; no business rule lives here. A tool's result is structured
// content plus a readable text written for a language model; a failed call is
// an MCP tool error (isError) whose structured content and text are
// {"error": code, "detail": text} with the codes of the HTTP API.
//
// Who may use which tool follows the HTTP routes: queue_task, cancel_task and
// archive_task_result need an agent or admin key; the read tools take any
// key; the worker_* tools exist only for worker keys, which act as their own
// worker id. Tools a key may not use are hidden from tools/list and refused
// by tools/call ("tool not found").
//
// mcp-go cancels a request's context once the response is written (upstream
// issue #897), so nothing outlives a tool call here: writes run on a context
// detached from the request's cancellation (a client that hangs up mid-call
// cannot half-apply a completion; the engine's writes are idempotent per lease
// anyway), and a worker's lease long-poll is capped well below client
// timeouts and ends when the server shuts down.
package mcpapi
