// Package engine runs AsyncGate's lease protocol and receipt ledger on top of a
// store.Store: enqueue with idempotency and params validation, batch leasing with
// long-poll, accept, heartbeat, complete, fail with a retry policy, release,
// cancel, the lease-expiry sweeper, dead letters and redrive, and the ledger's
// obligation bookkeeping and verification.
//
// Every state change is one store.Update: the task row is written fenced on its
// state and lease id (and, for worker calls, on lease_expires_at > now, so strict
// expiry holds in the UPDATE itself), and the receipts the change causes are
// appended in the same transaction. The doors (HTTP, MCP) call only this package.
package engine
