// Package auth is how the gate knows who is calling: API keys (created,
// listed, revoked, stored only as their sha256), the resolution of a bearer
// credential to the engine.Actor it stands for, and the context that
// carries that Actor from a door's middleware to its handlers.
//
// Every door uses it: the HTTP door's bearer middleware and key routes, the
// MCP door (streamable HTTP and stdio sessions), the dashboard's sign-in,
// and the gate's CLI. It sits beside the engine, below the doors, so no door
// needs another to find its caller.
//
// Authenticate is the one entry point that turns a bearer credential into an
// Actor; Authenticator adds a short-lived cache in front of it. A new kind
// of credential is resolved there, and every door accepts it at once.
package auth
