package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// TaskReader reads tasks, their queue counts and their progress history.
type TaskReader interface {
	// GetTask returns a task or a host.CodeNotFound error. Inside Update it
	// returns the task as the transaction will write over it: a driver whose
	// writers run batches at once (PostgreSQL) locks the row until commit, so
	// a change another writer has in flight is waited for and seen, and an
	// update fenced only on state and lease cannot erase it (storetest:
	// CompleteAfterConcurrentWrite, run with three writers by PostgreSQL's
	// TestConformanceSeveralWriters).
	GetTask(ctx context.Context, tenant, id string) (*host.Task, error)
	// FindTaskByIdempotency returns the task queued under k, or nil and no
	// error. The key is unique in the scope IdempotencyKey names, never
	// across producers (storetest: EnqueueIdempotencyPerProducer).
	FindTaskByIdempotency(ctx context.Context, k IdempotencyKey) (*host.Task, error)
	// ListTasks lists tasks in queue order (oldest first) from the cursor on,
	// with the cursor of the next page ("" on the last). A cursor this
	// store did not issue is host.CodeBadRequest (ParseCursor) (storetest:
	// ListTasksPaging, ListTasksFilters).
	ListTasks(ctx context.Context, f TaskFilter) ([]*host.Task, string, error)
	// QueueStats counts tasks by state and reports the oldest ready queued
	// task, leaving out the tasks of paused types, which it counts in
	// Paused (NotePaused, AddCountIn). Its cost must not grow with the
	// number of tasks: drivers keep the
	// counts as the writer changes tasks (CountDelta) instead of scanning.
	// The counts are exact, never eventual: every committed state change of
	// every host is in them once (PostgreSQL sums one shard per writer)
	// (storetest: QueueCountsStayExact, QueueCountsByTypeAndState,
	// OldestReady, PausedStats; PostgreSQL's TestQueueCountsAcrossHosts).
	QueueStats(ctx context.Context, tenant string) (QueueStats, error)
	// ScheduledCounts counts, by tenant and type, the queued tasks of
	// tenant ("" for all) not available before now: the tasks every view
	// shows as host.StateScheduled. Unlike QueueStats it reads the tasks
	// themselves (one walk of the tenant's queued tasks), as the move from
	// scheduled to ready is the clock's, not a write's (storetest:
	// ScheduledState).
	ScheduledCounts(ctx context.Context, tenant string, now time.Time) ([]CountDelta, error)
	// ListProgress returns a task's progress history, newest first, at most
	// limit reports.
	ListProgress(ctx context.Context, tenant, taskID string, limit int) ([]Progress, error)
}

// TaskWriter inserts and changes tasks.
type TaskWriter interface {
	// InsertTask inserts a new task and sets t.Version to 1. A clash on its
	// id or on its IdempotencyKeyOf is a host.CodeConflict error, either at
	// once or from Update (a driver may send the insert with the rest of the
	// batch; a late clash fails this update alone) (storetest:
	// ClashWithCommittedRow, EnqueueIdempotencyPerProducerConcurrent).
	InsertTask(ctx context.Context, t *host.Task) error
	// UpdateTask writes every mutable field of t, but only if the stored row
	// still matches fence, checked in the UPDATE itself. A mismatch is
	// ErrFenced and writes nothing. A successful write increments the row's
	// version and t.Version, and moves the queue counts (QueueStats) from
	// the stored state to t.State in the same transaction (storetest:
	// FencingStopsLateWorker, VersionFence, UpdateWritesEachField,
	// UpdateWritesTheTaskGiven, QueueCountsStayExact).
	UpdateTask(ctx context.Context, t *host.Task, fence Fence) error
	// InsertProgress records one progress report. Its error (PostgreSQL
	// refuses a NUL byte in a message) belongs to this update alone.
	InsertProgress(ctx context.Context, p Progress) error
}

// LeaseReader finds tasks by their lease: the worker's side of a task.
type LeaseReader interface {
	// GetTaskByLease returns the task whose current or last lease is leaseID
	// (a finished task keeps its last lease id, so a repeated complete finds
	// it), or host.CodeNotFound. An empty leaseID matches nothing. Inside
	// Update it locks the row as GetTask does (storetest:
	// CompleteIdempotentPerLease, RememberedLeaseGoneElsewhere).
	GetTaskByLease(ctx context.Context, leaseID string) (*host.Task, error)
	// ExpiredLeases returns leased tasks whose lease ended at or before now,
	// oldest expiry first, at most limit. Inside Update a driver whose
	// writers run at once (PostgreSQL) locks the rows it returns and skips
	// rows another transaction holds, so sweepers on several hosts split the
	// expired leases instead of waiting for each other; the sweeper still
	// fences each requeue on the expiry (Fence.ExpiredAt) (storetest:
	// SweepRequeuesWithoutAttempt, SweepCapsExpiries).
	ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*host.Task, error)
}

// LeaseWriter hands out task leases.
type LeaseWriter interface {
	// ClaimTasks picks up to q.Limit ready queued tasks (available at or
	// before q.Now) of q.Tenant in lease order (priority 10→1, then oldest),
	// lets q.Grant set each one's lease, and writes it fenced on state
	// queued, moving the queue counts as UpdateTask does. A task is never
	// claimed twice: on PostgreSQL rows locked by other writers are skipped,
	// not waited for, and stay locked until commit (storetest:
	// LeaseOrderAndBatch, LeaseTypeFilter, Hammer).
	ClaimTasks(ctx context.Context, q ClaimQuery) ([]*host.Task, error)
}

// TaskTypeReader reads task types.
type TaskTypeReader interface {
	// GetTaskType returns a task type or host.CodeNotFound.
	GetTaskType(ctx context.Context, tenant, name string) (*host.TaskType, error)
	// ListTaskTypes returns a tenant's task types by name.
	ListTaskTypes(ctx context.Context, tenant string) ([]*host.TaskType, error)
	// ListTaskTypeKeys returns every tenant's task type names (retention
	// walks them).
	ListTaskTypeKeys(ctx context.Context) ([]TaskTypeKey, error)
	// ListTaskTypePauses returns the task types of tenant whose leasing is
	// paused, by name (storetest: PauseLeasing).
	ListTaskTypePauses(ctx context.Context, tenant string) ([]TaskTypePause, error)
}

// TaskTypePause is a task type whose leasing an operator paused: its tasks
// are still enqueued, but no lease call is offered them until it is
// resumed.
type TaskTypePause struct {
	Tenant   string    `json:"-"`
	TaskType string    `json:"task_type"`
	PausedBy string    `json:"paused_by"`
	PausedAt time.Time `json:"paused_at"`
	Reason   string    `json:"reason,omitempty"`
}

// TaskTypeWriter creates, replaces and removes task types.
type TaskTypeWriter interface {
	// PutTaskType creates or replaces a task type (storetest:
	// KeysTypesWorkers, GroupCommitIsolatesFailures).
	PutTaskType(ctx context.Context, tt *host.TaskType) error
	// DeleteTaskType removes a task type; host.CodeNotFound if there is
	// none. Its tasks stay (retention finds them as orphans).
	DeleteTaskType(ctx context.Context, tenant, name string) error
	// PauseTaskType records p; a type already paused keeps its first pause
	// (storetest: PauseLeasing).
	PauseTaskType(ctx context.Context, p TaskTypePause) error
	// ResumeTaskType removes a pause and reports whether there was one.
	ResumeTaskType(ctx context.Context, tenant, name string) (bool, error)
}

// WorkerReader reads the workers a gate has seen.
type WorkerReader interface {
	// ListWorkers returns the workers a tenant has seen.
	ListWorkers(ctx context.Context, tenant string) ([]Worker, error)
}

// WorkerWriter records workers.
type WorkerWriter interface {
	// UpsertWorker records that a worker was seen: it creates the worker,
	// or moves its LastSeen forward (never back) and replaces its
	// capabilities when w has some, keeping FirstSeen (storetest:
	// KeysTypesWorkers).
	UpsertWorker(ctx context.Context, w Worker) error
}

// ErrFenced is returned by UpdateTask and UpdateResourceLease when the row
// no longer matches its fence: someone else (a newer attempt, the sweeper,
// a cancel) got there first. Nothing was written. It is a
// host.CodeConflict error; callers test for it with errors.Is.
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
	// NoWaiters, when set, requires the row not to carry the has_waiters
	// marker: a terminal write skips settling waiters only when the task
	// it writes has none (host.Task.HasWaiters), and this makes that
	// write fail should an enqueue have marked the row since the copy it
	// was built from was read.
	NoWaiters bool
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

// QueueStats is a snapshot of a tenant's queue ("" for all tenants).
type QueueStats struct {
	ByState map[host.TaskState]int64
	ByType  map[string]int64 // queued and leased tasks by type
	// OldestReadyAge is the longest a queued task ready to lease has waited
	// since it became ready (its available_at), 0 if none: a task of a
	// paused type is not ready, however old. Drivers look, for each type and
	// priority, at the 100 queued tasks in queue order from the first ready
	// one, so a task released or retried a moment ago at the head of its
	// queue does not hide older ones behind it (storetest: OldestReady,
	// OldestReadyPerType).
	OldestReadyAge time.Duration
	// Paused counts, by type, the queued tasks of a type whose leasing is
	// paused in their tenant, not those scheduled for later: ByState
	// counts them queued (their status), but no lease is offered them.
	// Every paused type is listed, 0 when it holds no task; nil when no
	// type is paused.
	Paused map[string]int64
	// pausedIn are the (tenant, type) pairs paused (NotePaused).
	pausedIn map[[2]string]bool

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

// TaskTypeKey names one task type.
type TaskTypeKey struct {
	Tenant string
	Name   string
}
