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
//
// # Where things are
//
// A task's life, one file per verb:
//
//   - enqueue.go: Enqueue (idempotency keys, params validation).
//   - offer.go: Lease, which claims ready tasks and grants offers, long-polling
//     through waiters.go.
//   - leasechange.go: WorkerCall, the live-lease checks, and changeLeased, the
//     one way accept, heartbeat, complete, fail and release change the task
//     under a worker's lease (load it, check the lease, change it, write it
//     fenced on the lease, then its receipts and resource leases, all in one
//     transaction); leasecache.go remembers leased tasks so accept and
//     complete can build their change outside the store's writer.
//   - accept.go, heartbeat.go (lease extension, progress, milestones),
//     complete.go (result checks), fail.go (the retry policy's decision),
//     release.go, cancel.go.
//   - expiry.go: Sweep, the lease-expiry sweeper.
//   - attempts.go: endAttempt, which complete, fail, release and the sweeper
//     call to keep each lease that ends as an attempt; timeline.go reads a
//     task's attempts and its timeline (receipts, lease events, progress).
//   - query.go: reading tasks, progress, dead letters and redrive, workers,
//     stats.
//
// Around it:
//
//   - engine.go: Config, New, Start and Close, update and view (every
//     transaction), appendReceipt (obligations opened and terminated).
//   - delivery.go: the transaction every update runs in, which writes each
//     receipt's inbox item and outbox entry with it; inbox.go, outbox.go
//     (the dispatcher and sinks), email.go and retention.go are what is
//     delivered and kept afterwards.
//   - results.go: storing a completion's payload through a result channel
//     and reading results back.
//   - ledger.go: receipts, chains, obligations, ledger verification.
//   - tasktypes.go, retrypolicy.go: task types and their retry policies.
//   - resourceleases.go, taskresources.go: resource leases, for agents and
//     for tasks that name resource intents.
package engine
