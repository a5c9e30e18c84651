// Package store is the storage seam of AsyncGate: the interfaces every driver
// (host/sqlite, host/postgres) implements, and nothing else. The engine in
// host/engine holds the lease and ledger logic and talks to storage only through
// these interfaces; the conformance suite in host/store/storetest runs the same
// cases against every driver and is the referee of the contract below.
//
// # Where each concern lives
//
// A Store runs transactions: Update hands fn a Tx, View hands fn a Reader.
// Both are assembled from one pair of interfaces per concern, so a reader
// looking for "how are receipts stored" opens one file:
//
//	concern          read side              write side             file
//	tasks            TaskReader             TaskWriter             tasks.go
//	task leases      LeaseReader            LeaseWriter            tasks.go
//	task attempts    AttemptReader          AttemptWriter          attempts.go
//	task types       TaskTypeReader         TaskTypeWriter         tasks.go
//	workers          WorkerReader           WorkerWriter           tasks.go
//	receipts         LedgerReader           LedgerWriter           ledger.go
//	obligations      ObligationReader       ObligationWriter       ledger.go
//	API keys         KeyReader              KeyWriter              keys.go
//	resource leases  ResourceLeaseReader    ResourceLeaseWriter    resourceleases.go
//	inbox            InboxReader            InboxWriter            delivery.go
//	outbox           OutboxReader           OutboxWriter           delivery.go
//	retention        RetentionReader        -                      delivery.go
//	dependencies     DependencyReader       DependencyWriter       dependencies.go
//	workflows        WorkflowReader         WorkflowWriter         workflows.go
//	schedules        ScheduleReader         ScheduleWriter         schedules.go
//
// Store itself (this file) holds transactions, health and the optional
// interfaces a driver may add (Notifier, CommitHealth, WriterStatser).
//
// # The contract every driver keeps
//
// Atomic: everything one Update's fn writes commits together or not at all,
// and reads inside fn see fn's own writes, including writes a driver holds
// back to send with the rest of its batch (storetest: RowsWithinOneUpdate,
// ObligationsWithinOneUpdate, GroupCommitIsolatesFailures).
//
// Fenced: every change of a task or a resource lease that another writer
// could race is conditioned in the write itself (a Fence, a
// ResourceLeaseFence), not on an earlier read; a write whose condition no
// longer holds writes nothing and returns ErrFenced (storetest:
// FencingStopsLateWorker, VersionFence, ResourceLeaseUpdateIsFenced).
// Resource fencing tokens are strictly increasing per resource in commit
// order, across hosts and restarts (storetest: ResourceLeaseFencingTokens; PostgreSQL's
// TestMultiHostFencingTokens across hosts).
//
// Across hosts (PostgreSQL, several gates on one database): a committed write
// is visible to every later transaction on every host; what is only
// eventually visible is named on the method (a receipt's place in Seq order,
// a Notifier's wake-ups). Claims and sweeps skip rows another host holds
// instead of waiting for them; a read of a task inside Update locks it, so an
// update built from it cannot overwrite another host's change still in
// flight.
//
// Errors: a missing row asked for by id is a host.CodeNotFound error; a
// clash with an existing row's id or unique key is host.CodeConflict; a
// lost fence is ErrFenced (also host.CodeConflict, so it reaches a client
// as a conflict); a database that cannot be reached, or refuses a commit,
// is host.CodeDatabaseUnavailable. Methods list the ones they return.
package store

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store/groupcommit"
)

// Store is a durable home for tasks, receipts and their bookkeeping. All of
// its methods are safe for concurrent use.
type Store interface {
	// Update runs fn in a write transaction. Concurrent Update calls are batched
	// into one transaction by a single writer (group commit); each fn runs in its
	// own savepoint, so an error from fn undoes only fn's own writes and is
	// returned to its caller alone. Update returns once the batch's commit is
	// durable on disk. fn may run again only if the whole batch had to be retried,
	// so it must not have side effects outside tx. The batch is shared: a
	// driver must not let one caller's context (cancellation, deadline) abort
	// the transaction the other updates ride in; once the writer has taken
	// an update, it runs to its outcome.
	//
	// A panic in fn is recovered and returned as a host.CodeInternal error,
	// with fn's writes undone (storetest: GroupCommitIsolatesFailures). A
	// commit the database refuses, or a closed store, is
	// host.CodeDatabaseUnavailable; a commit whose outcome is unknown (the
	// connection was lost while COMMIT was under way) is reported as
	// host.CodeDatabaseUnavailable too, never as a success. A context done
	// before the update was queued returns ctx.Err() and writes nothing.
	// Once queued, the caller waits for the outcome at most the store
	// timeout ctx carries (WithTimeout; timeout.go): an update the writer
	// has not taken by then never runs, and Update says it was not made;
	// one it took may still commit, and Update says its outcome is unknown
	// (AwaitUpdate), both host.CodeDatabaseUnavailable. A caller canceled
	// before the writer took its update gets ctx.Err() at once, and the
	// update never runs. The conformance suite does not cancel a queued
	// update; host/sqlite's TestUpdateCanceledWhileQueued and
	// TestUpdateQueuedPastItsStoreTimeout, and host/postgres's
	// TestFrozenDatabase… do.
	Update(ctx context.Context, fn func(Tx) error) error
	// View runs fn against a consistent read-only view: every read fn makes
	// sees the same committed state (PostgreSQL: one REPEATABLE READ
	// snapshot), and no read locks anything. Not checked by the conformance
	// suite, which never reads while it writes the rows it reads. Its
	// reads end at the store timeout ctx carries (WithTimeout), with
	// host.CodeDatabaseUnavailable (ReadTimeout).
	View(ctx context.Context, fn func(Reader) error) error
	// Ping reports whether the store can serve reads and writes: it reads the
	// queue counts of ProbeTenant and commits a write transaction through the
	// writer, so a full disk or a read-only database fails it (storetest:
	// ProbeReadsAndCommits).
	Ping(ctx context.Context) error
	// Close waits for pending writes and releases the store. Update and View
	// on a closed store return host.CodeDatabaseUnavailable; Close may be
	// called more than once.
	Close() error
	// Driver names the driver ("sqlite", "postgres").
	Driver() string
}

// Reader is the read side of a transaction or view: every concern's reads.
// Inside Update it is the Tx itself and sees the transaction's own writes.
type Reader interface {
	TaskReader
	LeaseReader
	AttemptReader
	TaskTypeReader
	WorkerReader
	LedgerReader
	ObligationReader
	KeyReader
	ResourceLeaseReader
	InboxReader
	OutboxReader
	RetentionReader
	DependencyReader
	WorkflowReader
	ScheduleReader
}

// Tx is a write transaction: every concern's reads and writes, run inside
// one Update's savepoint.
type Tx interface {
	Reader
	TaskWriter
	LeaseWriter
	AttemptWriter
	TaskTypeWriter
	WorkerWriter
	LedgerWriter
	ObligationWriter
	KeyWriter
	ResourceLeaseWriter
	InboxWriter
	OutboxWriter
	DependencyWriter
	WorkflowWriter
	ScheduleWriter

	// Flush sends the writes the driver is holding back and reads their
	// answers, so every receipt appended so far has its Seq and every
	// clash held back so far has been reported. A driver that holds nothing
	// back does nothing.
	Flush(ctx context.Context) error
}

// Notifier is implemented by stores that can wake waiters on other hosts when
// tasks become available (PostgreSQL's LISTEN/NOTIFY). Stores without it only
// see their own host's writes. Wake-ups are a hint, not part of the data:
// they arrive after the commit that caused them, may be lost, and a waiter
// must read the store to learn what changed (PostgreSQL's TestNotifyAcrossHosts
// and TestNotifierReportsWhatItMayHaveMissed; not in the conformance suite).
type Notifier interface {
	// Subscribe returns a channel that receives tenant names whose queues changed
	// on any host, until ctx is done, and NotifyEveryone when changes may have
	// gone unheard (the subscription was re-established after a loss).
	Subscribe(ctx context.Context) (<-chan string, error)
}

// NotifyEveryone is what a Notifier sends when it may have missed
// notifications (no tenant is ever named ""): every tenant's queues may have
// changed.
const NotifyEveryone = ""

// ProbeTenant is the tenant a health probe reads the queue counts of. It is
// valid UTF-8 (PostgreSQL refuses a NUL byte in text, so a probe reading
// "\x00…" failed on every call) and outside the pattern every tenant name
// must match, so the probe reads no real tenant's rows.
const ProbeTenant = "(probe)"

// CommitHealth is implemented by stores that remember the latest commit the
// database refused, so a readiness probe learns of it (a full disk, a lost
// database) at once, not at its own next write, which may still fit where
// an enqueue's does not.
type CommitHealth interface {
	// RefusedCommit returns when the database last refused to begin or
	// commit a batch of updates (host.CodeDatabaseUnavailable), and its
	// error; a nil error when it never did. An update that failed on its own
	// (a lost lease, a conflict) is no refused commit (storetest:
	// UpdatesFailingAloneAreNoRefusedCommit).
	RefusedCommit() (time.Time, error)
}

// CommitWatch records a store's latest refused commit for CommitHealth.
// Its zero value has seen none; it is safe for concurrent use.
type CommitWatch struct {
	last atomic.Pointer[refusedCommit]
}

type refusedCommit struct {
	at  time.Time
	err error
}

// Refused records a commit the database refused.
func (w *CommitWatch) Refused(err error) { w.last.Store(&refusedCommit{at: time.Now(), err: err}) }

// RefusedCommit implements CommitHealth.
func (w *CommitWatch) RefusedCommit() (time.Time, error) {
	if r := w.last.Load(); r != nil {
		return r.at, r.err
	}
	return time.Time{}, nil
}

// WriterStats is what a store's group-commit writers have done since the
// store opened. Busy divided by the wall clock and by Writers is how
// saturated they are: near 1, the writers are the gate's ceiling, and more
// producers or workers only lengthen the queue in front of them.
type WriterStats struct {
	// Writers is how many writers run batches (each a connection).
	Writers int
	// Batches counts the batches they ran (one per group commit, however
	// often it had to be retried), Updates the updates those batches
	// carried (their ratio is the batch size).
	Batches, Updates int64
	// Busy is the time the writers spent running batches, summed over
	// writers.
	Busy time.Duration
	// EnqueuesHeld counts enqueues the enqueue budget held back under
	// overload (RATIONALE.md, "Completions first under overload"),
	// EnqueueHold their summed wait, EnqueueHoldsExpired those that
	// waited the whole bound, EnqueuesWaiting those waiting now.
	EnqueuesHeld, EnqueueHoldsExpired int64
	EnqueueHold                       time.Duration
	EnqueuesWaiting                   int
}

// WriterStatser is implemented by stores that report their writers' work.
type WriterStatser interface {
	// WriterStats returns the writers' work since the store opened; it is
	// safe to call while they write.
	WriterStats() WriterStats
}

// NewerSchemaError is a driver's refusal to open a database that a newer
// gate has migrated past the last migration this one knows: its code would
// read and write tables whose meaning it does not know.
func NewerSchemaError(driver string, applied, known int) error {
	return host.Errorf(host.CodeConflict, "%s: the database's schema is at version %d, written by a newer gate; this gate knows versions up to %d: run a gate at least as new as the one that migrated it",
		driver, applied, known)
}

// OlderSchemaError is a driver's refusal, when asked not to migrate, to
// open a database whose schema lacks migrations this gate knows: the
// commands that only look at or tend a gate (keys, ledger verify, outbox)
// leave its schema as they found it, so a check with a newer binary never
// moves a database past the gate that serves it. applied 0: no gate's
// schema at all.
func OlderSchemaError(driver string, applied, known int) error {
	if applied == 0 {
		return host.Errorf(host.CodeConflict, "%s: the database holds no gate (no schema): a gate is created by its first `gate serve`", driver)
	}
	return host.Errorf(host.CodeConflict, "%s: the database's schema is at version %d, older than this gate's %d, and this command does not migrate it: a `gate serve` of this version migrates it when it starts (back the database up first), or use the gate that made it",
		driver, applied, known)
}

// bulkKey marks a context whose Update adds new work; its value is the
// bulkWork the work is.
type bulkKey struct{}

// bulkWork is what a bulk update adds: new tasks of types (none: not
// known) for tenant.
type bulkWork struct {
	tenant string
	types  []string
}

// BulkUpdate returns ctx marked so that an Update under it counts as bulk
// work (new tasks of types, for tenant) rather than work on tasks already
// queued or leased. A driver's writer serves unmarked updates first when
// more wait than one batch holds, and limits each batch's share of bulk
// ones, so that under overload completions and lease calls are not starved
// by enqueues (host/store/groupcommit). While the store's claims of one of
// those types (or of any type of tenant) find a backlog and prompt updates
// arrive, a bulk update may also wait for the queue's enqueue budget, at
// most groupcommit.MaxHold, before it is queued; another tenant's backlog,
// or one of a type it does not add, never holds it. With no types named
// (not known), a backlog of any of tenant's types holds it; with no tenant
// (work for several), none does. A bulk update still runs within a bounded
// time; it means nothing else.
func BulkUpdate(ctx context.Context, tenant string, types ...string) context.Context {
	return context.WithValue(ctx, bulkKey{}, bulkWork{tenant: tenant, types: types})
}

// BulkKeys reports whether ctx was marked by BulkUpdate and the enqueue
// budget's keys of its work (groupcommit.Key): its tenant's and each
// type's, its tenant's own when it named no type, none without a tenant.
func BulkKeys(ctx context.Context) (keys []string, bulk bool) {
	w, bulk := ctx.Value(bulkKey{}).(bulkWork)
	if !bulk || w.tenant == "" {
		return nil, bulk
	}
	keys = make([]string, 0, len(w.types))
	for _, t := range w.types {
		if t != "" {
			keys = append(keys, groupcommit.Key(w.tenant, t))
		}
	}
	if len(keys) == 0 {
		keys = append(keys, groupcommit.Key(w.tenant, ""))
	}
	return keys, true
}

// ClaimKeys are the enqueue budget's keys a claim of tenant's ready tasks
// of types reports its backlog for (groupcommit.Queue.Claimed): each named
// type's, or the tenant's own when it named none (every type). An empty
// name is no type's: it adds no key (a claim naming only empty names
// reports nothing), never the tenant's own.
func ClaimKeys(tenant string, types []string) []string {
	if tenant == "" {
		return nil
	}
	if len(types) == 0 {
		return []string{groupcommit.Key(tenant, "")}
	}
	keys := make([]string, 0, len(types))
	for _, t := range types {
		if t != "" {
			keys = append(keys, groupcommit.Key(tenant, t))
		}
	}
	return keys
}
