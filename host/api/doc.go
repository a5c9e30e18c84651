// Package api holds the answers the gate's doors give in the same JSON
// shape: a task's progress and result, a receipt, the open obligations, an
// inbox page, the worker's lease envelope and the answers to its heartbeat,
// completion and failure. The HTTP door (host/httpapi) encodes them as
// response bodies and documents them in /openapi.json; the MCP door
// (host/mcpapi) returns them as tools' structured content and output
// schemas. Keeping them here lets both doors speak one shape without
// importing each other.
//
// Answers only one door gives stay with that door.
package api
