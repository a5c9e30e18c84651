// Package host is the dependency-free domain core of AsyncGate: tasks and task
// types, offers and leases, receipts and the obligation rules, error codes, the
// task state machine, and the small one-method contracts (RetryPolicy, Channel,
// Validator) that built-in Go code and WebAssembly plugins both implement.
//
// Nothing in this package imports a third-party module. Storage drivers live in
// host/sqlite and host/postgres, the engine that runs the lease protocol on top of a
// driver lives in host/engine, and the doors (HTTP, MCP) live in their own packages.
package host
