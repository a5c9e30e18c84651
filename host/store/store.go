// Package store is the storage seam of AsyncGate: the interfaces every driver
// (host/sqlite, host/postgres) implements, and nothing else. The engine in
// host/engine holds the lease and ledger logic and talks to storage only through
// these interfaces; the conformance suite in host/store/storetest runs the same
// cases against every driver.
package store

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// Store is a durable home for tasks, receipts and their bookkeeping.
type Store interface {
	// Update runs fn in a write transaction. Concurrent Update calls are batched
	// into one transaction by a single writer (group commit); each fn runs in its
	// own savepoint, so an error from fn undoes only fn's own writes and is
	// returned to its caller alone. Update returns once the batch's commit is
	// durable on disk. fn may run again only if the whole batch had to be retried,
	// so it must not have side effects outside tx. The batch is shared: a
	// driver must not let one caller's context (cancellation, deadline) abort
	// the transaction the other updates ride in; once queued, an update runs
	// to its outcome.
	Update(ctx context.Context, fn func(Tx) error) error
	// View runs fn against a consistent read-only view.
	View(ctx context.Context, fn func(Reader) error) error
	// Ping reports whether the store can serve reads and writes.
	Ping(ctx context.Context) error
	// Close waits for pending writes and releases the store.
	Close() error
	// Driver names the driver ("sqlite", "postgres").
	Driver() string
}

// Notifier is implemented by stores that can wake waiters on other hosts when
// tasks become available (PostgreSQL's LISTEN/NOTIFY). Stores without it only
// see their own host's writes.
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
	// (a lost lease, a conflict) is no refused commit.
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
}

// WriterStatser is implemented by stores that report their writers' work.
type WriterStatser interface {
	WriterStats() WriterStats
}

// Reader is the read side of a transaction or view.
type Reader interface {
	// GetTask returns a task or a host.CodeNotFound error.
	GetTask(ctx context.Context, tenant, id string) (*host.Task, error)
	// GetTaskByLease returns the task whose current or last lease is leaseID, or
	// host.CodeNotFound.
	GetTaskByLease(ctx context.Context, leaseID string) (*host.Task, error)
	// FindTaskByIdempotency returns the task queued under k, or nil.
	FindTaskByIdempotency(ctx context.Context, k IdempotencyKey) (*host.Task, error)
	// ListTasks lists tasks in queue order (oldest first) from the cursor on.
	ListTasks(ctx context.Context, f TaskFilter) ([]*host.Task, string, error)
	// ExpiredLeases returns leased tasks whose lease ended at or before now, oldest expiry first.
	ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*host.Task, error)
	// QueueStats counts tasks by state and reports the oldest ready queued
	// task. Its cost must not grow with the number of tasks: drivers keep the
	// counts as the writer changes tasks (CountDelta) instead of scanning.
	QueueStats(ctx context.Context, tenant string) (QueueStats, error)
	// ListProgress returns a task's progress history, newest first.
	ListProgress(ctx context.Context, tenant, taskID string, limit int) ([]Progress, error)

	// GetTaskType returns a task type or host.CodeNotFound.
	GetTaskType(ctx context.Context, tenant, name string) (*host.TaskType, error)
	// ListTaskTypes returns a tenant's task types by name.
	ListTaskTypes(ctx context.Context, tenant string) ([]*host.TaskType, error)

	// GetReceipt returns a receipt or host.CodeNotFound.
	GetReceipt(ctx context.Context, tenant, id string) (*host.Receipt, error)
	// GetReceiptByDedupe returns the receipt appended with the dedupe key,
	// or nil. A dedupe key is unique per (tenant, issuer): with from set it
	// looks among the receipts that principal issued; with from empty among
	// all of the tenant's, for the engine's own keys, which embed an id and
	// so can have one issuer only.
	GetReceiptByDedupe(ctx context.Context, tenant, from, key string) (*host.Receipt, error)
	// ListReceipts lists receipts in ledger order from the cursor on.
	ListReceipts(ctx context.Context, f ReceiptFilter) ([]*host.Receipt, string, error)
	// ScanReceipts returns up to limit receipts of every tenant with Seq > afterSeq, in Seq order.
	ScanReceipts(ctx context.Context, afterSeq int64, limit int) ([]*host.Receipt, error)
	// LedgerHeads returns the recorded head of every receipt chain and of the
	// checkpoint chain.
	LedgerHeads(ctx context.Context) (LedgerHeads, error)
	// ScanCheckpoints returns up to limit checkpoints with ID > afterID, in ID order.
	ScanCheckpoints(ctx context.Context, afterID int64, limit int) ([]host.Checkpoint, error)
	// Terminator returns the id of the receipt that terminated the obligation
	// receiptID, or "" when it is open or is no obligation. It never scans the ledger.
	Terminator(ctx context.Context, tenant, receiptID string) (string, error)
	// ListOpenObligations lists open obligations in ledger order from the cursor on.
	// It never scans the ledger.
	ListOpenObligations(ctx context.Context, f ObligationFilter) ([]host.Obligation, string, error)
	// GetObligations returns the obligation index's rows of the receipts ids
	// (of any tenant), each with the receipt that terminated it; a receipt
	// without a row is left out. The ledger verifier checks the index
	// against the receipts with it.
	GetObligations(ctx context.Context, ids []string) ([]ObligationRow, error)
	// CountObligations counts the obligation index's rows.
	CountObligations(ctx context.Context) (int64, error)

	// ListWorkers returns the workers a tenant has seen.
	ListWorkers(ctx context.Context, tenant string) ([]Worker, error)
	// GetKeyByHash returns the API key with the hash, or host.CodeNotFound.
	GetKeyByHash(ctx context.Context, hash string) (*Key, error)
	// ListKeys returns all API keys (hashes only).
	ListKeys(ctx context.Context) ([]Key, error)

	// --- Resource leases (KLIS-3, issue 10).

	// GetResourceLease returns a resource lease or host.CodeNotFound.
	GetResourceLease(ctx context.Context, tenant, id string) (*host.ResourceLease, error)
	// ListResourceLeases lists resource leases in grant order from the cursor on.
	ListResourceLeases(ctx context.Context, f ResourceLeaseFilter) ([]*host.ResourceLease, string, error)
	// ListResourceLeaseEvents lists the resource lease audit trail in the
	// order it was written, from the cursor on.
	ListResourceLeaseEvents(ctx context.Context, f ResourceLeaseEventFilter) ([]host.ResourceLeaseEvent, string, error)
	// CountLiveResourceLeases counts the active leases not expired at now, by
	// predicate, of a tenant ("" for all tenants).
	CountLiveResourceLeases(ctx context.Context, tenant string, now time.Time) (map[host.LeasePredicate]int64, error)

	// --- Delivery (issue 13): inbox, retention, outbox.

	// ListInbox lists a recipient's inbox items, oldest first, from the cursor on.
	ListInbox(ctx context.Context, f InboxFilter) ([]host.InboxItem, string, error)
	// RetentionDue returns up to q.Limit finished tasks (q.States) whose
	// completed_at is at or before q.Before, oldest first (see RetentionQuery).
	RetentionDue(ctx context.Context, q RetentionQuery) ([]*host.Task, error)
	// ListTaskTypeKeys returns every tenant's task type names.
	ListTaskTypeKeys(ctx context.Context) ([]TaskTypeKey, error)
	// ListOutbox lists outbox entries in a state, oldest first, after afterID.
	ListOutbox(ctx context.Context, state OutboxState, afterID int64, limit int) ([]OutboxEntry, error)
	// OutboxStats counts outbox entries by state and reports the oldest pending one.
	OutboxStats(ctx context.Context) (OutboxStats, error)
}

// Tx is a write transaction.
type Tx interface {
	Reader
	// InsertTask inserts a new task. A clash on its id or on its
	// IdempotencyKeyOf is a host.CodeConflict error.
	InsertTask(ctx context.Context, t *host.Task) error
	// UpdateTask writes every mutable field of t, but only if the stored row
	// still matches fence. A mismatch is ErrFenced and writes nothing. A
	// successful write increments the row's version and t.Version.
	UpdateTask(ctx context.Context, t *host.Task, fence Fence) error
	// ClaimTasks picks up to q.Limit ready queued tasks in lease order (priority
	// 10→1, then oldest), lets q.Grant set each one's lease, and writes it fenced
	// on state queued. On PostgreSQL rows locked by others are skipped.
	ClaimTasks(ctx context.Context, q ClaimQuery) ([]*host.Task, error)
	// InsertProgress records one progress report.
	InsertProgress(ctx context.Context, p Progress) error

	// AppendReceipt appends r to the ledger: it links it into this writer's
	// own chain (r.ChainID, r.ChainSeq, r.PrevHash, r.Hash) at once and sets
	// r.Seq (its place in the whole ledger) by the time Update returns, or
	// sooner after Flush: a driver may send the write with the rest of the
	// batch. Writers never share a chain, so no append waits for another
	// writer's. A clash on (tenant, dedupe key, issuer) is a host.CodeConflict error
	// from Update (a driver that finds it late runs the batch again with
	// every write answered at once).
	AppendReceipt(ctx context.Context, r *host.Receipt) error
	// OpenObligation records an obligation created by an appended receipt.
	OpenObligation(ctx context.Context, o host.Obligation) error
	// Terminate records that terminatorID discharged the obligation parentID
	// if it is open. A closed one keeps its first terminator.
	Terminate(ctx context.Context, tenant, parentID, terminatorID string) error
	// Flush sends the writes the driver is holding back and reads their
	// answers, so every receipt appended so far has its Seq.
	Flush(ctx context.Context) error

	// PutTaskType creates or replaces a task type.
	PutTaskType(ctx context.Context, tt *host.TaskType) error
	// DeleteTaskType removes a task type; host.CodeNotFound if there is none.
	DeleteTaskType(ctx context.Context, tenant, name string) error
	// UpsertWorker records that a worker was seen.
	UpsertWorker(ctx context.Context, w Worker) error
	// PutKey creates an API key.
	PutKey(ctx context.Context, k Key) error
	// RevokeKey marks a key revoked; host.CodeNotFound if there is none.
	RevokeKey(ctx context.Context, id string, at time.Time) error

	// --- Resource leases (KLIS-3, issue 10).

	// LockResources serializes, until the transaction ends, every writer
	// (of any host) that changes leases on these resources of a tenant. A
	// writer takes the locks before it reads the clock and the leases it
	// decides on, so decisions on one resource are made one at a time and in
	// server-time order. Drivers with a single writer need do nothing and
	// report false: reads made before the call need not be made again.
	LockResources(ctx context.Context, tenant string, resources []string) (locked bool, err error)
	// InsertResourceLease inserts a new resource lease and sets
	// l.FencingToken to the resource's next fencing token: one more than
	// the last token of (tenant, resource), counted in a row of its own that
	// outlives the leases, in the same transaction. Tokens of one resource
	// are therefore strictly increasing in commit order, on every host of a
	// store and across restarts, whatever happens to the lease rows.
	InsertResourceLease(ctx context.Context, l *host.ResourceLease) error
	// UpdateResourceLease writes l's state, expiry, end, restarting and
	// grace fields, but only if the stored lease is still active and matches
	// fence; a mismatch is ErrFenced and writes nothing.
	UpdateResourceLease(ctx context.Context, l *host.ResourceLease, fence ResourceLeaseFence) error
	// GetResourceHold returns the lease time granted to a holder on a
	// resource in its current quota window; a zero ResourceHold when none.
	// Callers hold the resource's lock (LockResources).
	GetResourceHold(ctx context.Context, tenant, holder, resource string) (ResourceHold, error)
	// PutResourceHold creates or replaces a holder's quota window on a resource.
	PutResourceHold(ctx context.Context, h ResourceHold) error
	// AppendResourceLeaseEvent appends ev to the audit trail, in the
	// transaction's order (ev.Seq is not set).
	AppendResourceLeaseEvent(ctx context.Context, ev *host.ResourceLeaseEvent) error

	// --- Delivery (issue 13): inbox, retention, outbox.

	// InsertInbox adds an inbox item. Its id must be new.
	InsertInbox(ctx context.Context, it host.InboxItem) error
	// MarkInbox sets m.Field to m.At on the items m selects where it is not
	// set yet, and returns how many it set.
	MarkInbox(ctx context.Context, m InboxMark) (int64, error)
	// InsertOutbox queues receipts for the external ledger.
	InsertOutbox(ctx context.Context, es []OutboxEntry) error
	// ClaimOutbox claims up to limit pending entries that are due at now and
	// are the oldest pending entry of their task (ledger order per task),
	// unclaimed or with an ended claim, until claimUntil; oldest first. Only
	// entries of the given kinds are claimed (a host claims what it can
	// deliver); no kinds claims nothing.
	ClaimOutbox(ctx context.Context, now, claimUntil time.Time, limit int, kinds []string) ([]OutboxEntry, error)
	// FinishOutbox records deliveries: delivered entries are removed, the
	// others written back with their state, attempts, next attempt and error
	// while their claim (ClaimedTill, as ClaimOutbox returned it) is still
	// the stored one; an entry claimed again since is left alone and its
	// State set to OutboxReclaimed.
	FinishOutbox(ctx context.Context, es []OutboxEntry) error
	// RetryOutbox moves dead entries (all when ids is empty) back to pending,
	// due at now, and returns how many it moved.
	RetryOutbox(ctx context.Context, ids []int64, now time.Time) (int64, error)
}

// ErrFenced is returned by UpdateTask when the row no longer matches its fence:
// someone else (a newer attempt, the sweeper, a cancel) got there first.
var ErrFenced = host.Errorf(host.CodeConflict, "the task changed under this update")

// Fence is the condition an update is conditioned on, checked in the UPDATE itself.
type Fence struct {
	State   host.TaskState
	LeaseID string // "" means: do not check
	// LiveAt, when set, requires lease_expires_at > LiveAt (strict expiry).
	LiveAt *time.Time
	// ExpiredAt, when set, requires lease_expires_at <= ExpiredAt (the sweeper).
	ExpiredAt *time.Time
	// Version, when non-zero, requires the row's version to equal it: nothing
	// wrote the task since it was read (optimistic concurrency).
	Version int64
}

// ClaimQuery says which tasks a lease call may take.
type ClaimQuery struct {
	Tenant string
	Types  []string // empty: any type
	Now    time.Time
	Limit  int
	// Grant sets the lease fields of a task about to be leased.
	Grant func(t *host.Task)
}

// TaskFilter selects tasks for ListTasks. Empty fields do not filter.
type TaskFilter struct {
	Tenant    string
	Recipient string
	CreatedBy string
	// Principal matches tasks created by or addressed to this principal.
	Principal string
	Types     []string
	States    []host.TaskState
	Cursor    string
	Limit     int
}

// ReceiptFilter selects receipts for ListReceipts.
type ReceiptFilter struct {
	Tenant string
	TaskID string
	Cursor string
	Limit  int
}

// ObligationRow is a row of the obligation index: the obligation, whether
// the index lists it as open (terminated_by is NULL), and the receipt that
// terminated it otherwise.
type ObligationRow struct {
	host.Obligation
	Open         bool
	TerminatedBy string
}

// ObligationFilter selects open obligations.
type ObligationFilter struct {
	Tenant string
	// Principal matches obligations it owes or is owed; Role narrows it to
	// "obligor" or "obligee".
	Principal string
	Role      string
	Cursor    string
	Limit     int
}

// LedgerHeads are the recorded last links of the ledger's chains.
type LedgerHeads struct {
	Chains []host.ChainHead // every chain, by id
	// Checkpoint is the last checkpoint: Seq is its id, Hash its hash.
	Checkpoint host.ChainHead
}

// QueueStats is a snapshot of a tenant's queue ("" for all tenants).
type QueueStats struct {
	ByState        map[host.TaskState]int64
	ByType         map[string]int64 // queued and leased tasks by type
	OldestReadyAge time.Duration    // age of the oldest ready queued task, 0 if none

	// Dashboard (issue 12): every state of every type, from the same counters.
	ByTypeState map[string]map[host.TaskState]int64
}

// Progress is one progress report from a worker.
type Progress struct {
	Tenant  string    `json:"-"`
	TaskID  string    `json:"task_id"`
	LeaseID string    `json:"lease_id"`
	Percent *float64  `json:"percent,omitempty"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
}

// Worker is what the gate knows of a worker.
type Worker struct {
	Tenant       string          `json:"tenant"`
	ID           string          `json:"worker_id"`
	Capabilities json.RawMessage `json:"capabilities,omitempty"`
	FirstSeen    time.Time       `json:"first_seen"`
	LastSeen     time.Time       `json:"last_seen"`
}

// Key is an API key as stored: only the hash of the secret.
type Key struct {
	ID        string     `json:"key_id"`
	Hash      string     `json:"-"`
	Prefix    string     `json:"prefix"` // the first characters of the key, for operators
	Role      string     `json:"role"`
	Tenant    string     `json:"tenant"`
	Principal string     `json:"principal"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// ResourceLeaseFilter selects resource leases. Empty fields do not filter.
type ResourceLeaseFilter struct {
	Tenant    string // "" only for operators' and the sweeper's reads across tenants
	IDs       []string
	Holder    string
	Resources []string
	States    []host.ResourceLeaseState
	// LiveAt keeps active leases with expires_at > LiveAt (honoured then).
	LiveAt *time.Time
	// ExpiredAt keeps active leases with expires_at <= ExpiredAt (the sweeper).
	ExpiredAt *time.Time
	// EndsAfter keeps leases whose end (ended_at, or expires_at while
	// active) is after it: the window of a quota.
	EndsAfter *time.Time
	Cursor    string
	Limit     int // default 100
}

// ResourceHold is the lease time granted to a holder on one resource in a
// fixed quota window (the squatting quota of KLIS-3 §7).
type ResourceHold struct {
	Tenant, Holder, Resource string
	WindowStart              time.Time
	Held                     time.Duration
}

// ResourceLeaseEventFilter selects audit trail entries. Empty fields do not filter.
type ResourceLeaseEventFilter struct {
	Tenant   string // required
	LeaseID  string
	Resource string
	Cursor   string
	Limit    int // default 100
}

// ResourceLeaseFence is the condition an UpdateResourceLease is conditioned
// on, besides the lease being active. Exactly one of the fields is set.
type ResourceLeaseFence struct {
	// LiveAt requires expires_at > LiveAt: the lease is honoured (strict expiry).
	LiveAt *time.Time
	// ExpiredAt requires expires_at <= ExpiredAt: the lease ran out.
	ExpiredAt *time.Time
}

// --- Delivery (issue 13)

// InboxFilter selects inbox items.
type InboxFilter struct {
	Tenant    string
	Recipient string
	// Unread keeps only items not marked read.
	Unread bool
	TaskID string
	// IDs, when set, keeps only these items.
	IDs    []string
	Cursor string
	Limit  int
}

// IdempotencyKey is the scope an idempotency key is unique in: the tenant,
// the producing principal (the task's created_by: the principal of the key,
// or the session, that queued it), the recipient, and the key itself. A key
// belongs to the principal that produced the task, so no other principal of
// the tenant can find, take or probe it (issue 37).
type IdempotencyKey struct {
	Tenant    string
	Producer  string
	Recipient string
	Key       string
}

// IdempotencyKeyOf returns the scope t's idempotency key is unique in.
func IdempotencyKeyOf(t *host.Task) IdempotencyKey {
	return IdempotencyKey{Tenant: t.Tenant, Producer: t.CreatedBy, Recipient: t.Recipient, Key: t.IdempotencyKey}
}

// InboxMark selects the inbox items whose Field to set: those of IDs, or
// when IDs is empty those of TaskID. Recipient, when set, must own them.
type InboxMark struct {
	Tenant    string
	Recipient string
	IDs       []string
	TaskID    string
	Field     host.InboxField
	At        time.Time
}

// RetentionQuery selects finished tasks whose retention ran out. Type names
// one task type of Tenant; with Orphans set instead, it selects tasks of every
// tenant whose task type is no longer registered.
type RetentionQuery struct {
	Tenant  string
	Type    string
	Orphans bool
	States  []host.TaskState
	Before  time.Time
	Limit   int
}

// TaskTypeKey names one task type.
type TaskTypeKey struct {
	Tenant string
	Name   string
}

// OutboxState is where an outbox entry is.
type OutboxState string

// Outbox states. Delivered entries are removed.
const (
	OutboxPending OutboxState = "pending"
	OutboxDead    OutboxState = "dead" // the sink refused it; `gate outbox retry` sends it again
	OutboxDone    OutboxState = "delivered"
	// OutboxReclaimed is set by FinishOutbox on an entry whose claim had
	// ended and passed to another dispatcher before its outcome was
	// recorded: the outcome is that dispatcher's to record, and nothing was
	// written.
	OutboxReclaimed OutboxState = "reclaimed"
)

// OutboxEntry is one receipt (or memory item) waiting for the external
// ledger. Key is the dedupe key the sink sees: the same for every attempt.
type OutboxEntry struct {
	ID          int64           `json:"id"`
	Tenant      string          `json:"tenant"`
	TaskID      string          `json:"task_id,omitempty"`
	Kind        string          `json:"kind"` // "receipt" or "memory"
	Key         string          `json:"dedupe_key"`
	Body        json.RawMessage `json:"body"`
	State       OutboxState     `json:"state"`
	Attempts    int             `json:"attempts"`
	NextAt      time.Time       `json:"next_attempt_at"`
	LastError   string          `json:"last_error,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	ClaimedTill *time.Time      `json:"-"`
}

// OutboxStats summarizes the outbox.
type OutboxStats struct {
	Pending         int64      `json:"pending"`
	Dead            int64      `json:"dead"`
	OldestPendingAt *time.Time `json:"oldest_pending_at,omitempty"`
}

// NewerSchemaError is a driver's refusal to open a database that a newer
// gate has migrated past the last migration this one knows: its code would
// read and write tables whose meaning it does not know.
func NewerSchemaError(driver string, applied, known int) error {
	return host.Errorf(host.CodeConflict, "%s: the database's schema is at version %d, written by a newer gate; this gate knows versions up to %d: run a gate at least as new as the one that migrated it",
		driver, applied, known)
}
