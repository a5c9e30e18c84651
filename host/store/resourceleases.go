package store

import (
	"context"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// ResourceLeaseReader reads resource leases (KLIS-3, issue 10) and their
// audit trail.
type ResourceLeaseReader interface {
	// GetResourceLease returns a resource lease or host.CodeNotFound.
	GetResourceLease(ctx context.Context, tenant, id string) (*host.ResourceLease, error)
	// ListResourceLeases lists resource leases in grant order from the
	// cursor on, with the cursor of the next page; a bad cursor is
	// host.CodeBadRequest.
	ListResourceLeases(ctx context.Context, f ResourceLeaseFilter) ([]*host.ResourceLease, string, error)
	// ListResourceLeaseEvents lists the resource lease audit trail in the
	// order it was written, from the cursor on (storetest: ResourceLeaseSweepAndAudit,
	// ResourceLeaseCheckerCatchesViolations).
	ListResourceLeaseEvents(ctx context.Context, f ResourceLeaseEventFilter) ([]host.ResourceLeaseEvent, string, error)
	// CountLiveResourceLeases counts the active leases not expired at now, by
	// predicate, of a tenant ("" for all tenants). Unlike QueueStats it
	// counts rows; the metrics endpoint calls it.
	CountLiveResourceLeases(ctx context.Context, tenant string, now time.Time) (map[host.LeasePredicate]int64, error)
}

// ResourceLeaseWriter grants, changes and audits resource leases. A writer
// deciding on a resource calls LockResources first, then reads the clock
// and the leases; every change it then writes is fenced as well
// (UpdateResourceLease), so a decision made on a stale read writes nothing.
type ResourceLeaseWriter interface {
	// LockResources serializes, until the transaction ends, every writer
	// (of any host) that changes leases on these resources of a tenant. A
	// writer takes the locks before it reads the clock and the leases it
	// decides on, so decisions on one resource are made one at a time and in
	// server-time order. Drivers with a single writer need do nothing and
	// report false: reads made before the call need not be made again. The
	// locks of one deployment must not block another's (PostgreSQL scopes
	// them to its schema) (PostgreSQL's
	// TestResourceLeaseSweepWaitsForDecisionsOnItsResources and
	// TestResourceLocksAreSchemaScoped; the conformance suite's ResourceLeaseWaitDieNeverDeadlocks
	// and ResourceLeaseHammer run it with one host).
	LockResources(ctx context.Context, tenant string, resources []string) (locked bool, err error)
	// InsertResourceLease inserts a new resource lease and sets
	// l.FencingToken to the resource's next fencing token: one more than
	// the last token of (tenant, resource), counted in a row of its own that
	// outlives the leases, in the same transaction. Tokens of one resource
	// are therefore strictly increasing in commit order, on every host of a
	// store and across restarts, whatever happens to the lease rows. A lease
	// whose id exists is a host.CodeConflict error (storetest:
	// ResourceLeaseFencingTokens, TaskResourceFencingTokens; PostgreSQL's
	// TestMultiHostFencingTokens; both drivers' TestMigrationFencingTokens).
	InsertResourceLease(ctx context.Context, l *host.ResourceLease) error
	// UpdateResourceLease writes l's state, expiry, end, restarting and
	// grace fields, but only if the stored lease is still active and matches
	// fence, checked in the UPDATE itself; a mismatch is ErrFenced and
	// writes nothing (storetest: ResourceLeaseUpdateIsFenced,
	// ResourceLeaseStalledHolderFenced).
	UpdateResourceLease(ctx context.Context, l *host.ResourceLease, fence ResourceLeaseFence) error
	// GetResourceHold returns the lease time granted to a holder on a
	// resource in its current quota window; a zero ResourceHold (with the
	// names set) when none. Callers hold the resource's lock
	// (LockResources) (storetest: ResourceLeaseQuotas, ResourceLeaseRefundStaysInItsWindow).
	GetResourceHold(ctx context.Context, tenant, holder, resource string) (ResourceHold, error)
	// PutResourceHold creates or replaces a holder's quota window on a resource.
	PutResourceHold(ctx context.Context, h ResourceHold) error
	// AppendResourceLeaseEvent appends ev to the audit trail, in the
	// transaction's order (ev.Seq is not set).
	AppendResourceLeaseEvent(ctx context.Context, ev *host.ResourceLeaseEvent) error

	// --- Waiters (issue 43 item 3: fairness). Callers hold the resources'
	// locks (LockResources) when they decide on waiters.

	// ListResourceWaiters returns the waiters on the resources of tenant
	// whose registration has not lapsed at liveAt (expires_at > liveAt), in
	// priority order (storetest: ResourceLeaseWaiterRows).
	ListResourceWaiters(ctx context.Context, tenant string, resources []string, liveAt time.Time) ([]host.ResourceWaiter, error)
	// PutResourceWaiter registers a waiter on one resource, or renews it:
	// an existing registration of the same waiter on the resource keeps
	// the earlier of the two priorities (a waiter never loses seniority by
	// renewing) and takes the new predicate and expiry.
	PutResourceWaiter(ctx context.Context, w host.ResourceWaiter) error
	// DeleteResourceWaiter removes every registration of a waiter in tenant.
	DeleteResourceWaiter(ctx context.Context, tenant, waiterID string) error
	// DeleteLapsedResourceWaiters removes registrations lapsed at now (at
	// most limit) and reports how many it removed.
	DeleteLapsedResourceWaiters(ctx context.Context, now time.Time, limit int) (int, error)
	// ReofferWaitingTasks makes available at now the queued tasks of tenant
	// that are registered as waiters on resources (a task stepped aside
	// because its intents could not be granted, registration live at now)
	// with no older waiter ahead of them there (one whose predicate
	// conflicts: either is MUTATES; older: an earlier priority_at), and
	// that would be available only after now, and returns their task types,
	// one per task. The tasks behind are left to the release of what the
	// ones ahead take. It writes available_at and updated_at and moves the
	// version as UpdateTask does; the queue counts do not move. Callers hold
	// the resources' locks (LockResources) and call it in the transaction
	// that ends a lease on them or a waiter ahead of such tasks: a claim
	// that stepped a task aside for them has committed before, and a claim
	// that has not decided yet decides after it. So a task row another
	// transaction holds is skipped, not waited for (on PostgreSQL such a
	// holder is a claim waiting for the same locks) (storetest:
	// TaskResourceReofferedOnRelease, TaskResourceReofferedInOrder).
	ReofferWaitingTasks(ctx context.Context, tenant string, resources []string, now time.Time) ([]string, error)

	// --- Sessions (issue 43 item 4). Callers lock the session's name
	// (LockResources) before they change it.

	// InsertResourceSession inserts a new session.
	InsertResourceSession(ctx context.Context, s *host.ResourceSession) error
	// GetResourceSession returns a session of tenant or host.CodeNotFound.
	GetResourceSession(ctx context.Context, tenant, id string) (*host.ResourceSession, error)
	// UpdateResourceSession writes s's state, TTL, expiry and end.
	UpdateResourceSession(ctx context.Context, s *host.ResourceSession) error
	// AddResourceSessionLease records that a lease was granted in a session.
	AddResourceSessionLease(ctx context.Context, tenant, sessionID, leaseID string) error
	// ListResourceSessionLeases returns the ids of the leases granted in a
	// session, in grant order (storetest: ResourceSessionRows).
	ListResourceSessionLeases(ctx context.Context, tenant, sessionID string) ([]string, error)
	// ResourceSessionsOfLeases maps each of the leases that was granted in
	// a session to its session's id.
	ResourceSessionsOfLeases(ctx context.Context, tenant string, leaseIDs []string) (map[string]string, error)
	// CountLiveResourceSessions counts the sessions of holder in tenant
	// that are active and unexpired at now (the per-holder cap; callers
	// hold the holder's lock).
	CountLiveResourceSessions(ctx context.Context, tenant, holder string, now time.Time) (int, error)
	// RemoveResourceSessionLeases forgets that the leases were granted in
	// a session (a lease released on its own leaves its session's list).
	// Ids granted in no session are ignored.
	RemoveResourceSessionLeases(ctx context.Context, tenant string, leaseIDs []string) error
	// DeleteEndedResourceSessions deletes at most limit sessions, of any
	// tenant, that ended or expired at or before endedBy (their end:
	// ended_at, or expires_at when it has none), with their lease lists,
	// and reports how many it deleted (storetest: ResourceSessionBounds).
	DeleteEndedResourceSessions(ctx context.Context, endedBy time.Time, limit int) (int, error)
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

// ResourceAcquireView is what an acquire reads under its locks: the
// holder's live leases, the live leases on the resources it wants, and the
// live waiter registrations on them (ListResourceWaiters' order).
type ResourceAcquireView struct {
	Mine, Live []*host.ResourceLease
	Waiters    []host.ResourceWaiter
	// Holds, when HoldsRead, are the holder's quota rows on the resources
	// (GetResourceHold's answers; a resource with none is absent).
	Holds     []ResourceHold
	HoldsRead bool
}

// ResourceHoldRefundTx is implemented by write transactions that refund a
// released lease's unused time without reading the quota row first
// (PostgreSQL: one statement queued in front of the next). The refund is
// the engine's: the row of (tenant, holder, resource) loses min(unused, its
// held time) when its window, which lasts window from its start, is still
// open at now and began no later than acquiredAt; otherwise nothing.
type ResourceHoldRefundTx interface {
	RefundResourceHold(ctx context.Context, tenant, holder, resource string, unused time.Duration, acquiredAt, now time.Time, window time.Duration) error
}

// ResourceAcquireViewTx is implemented by write transactions that read an
// acquire's view in one round trip (PostgreSQL); others are read with
// ListResourceLeases (twice) and ListResourceWaiters, which it must equal.
type ResourceAcquireViewTx interface {
	ResourceAcquireView(ctx context.Context, tenant, holder string, resources []string, now time.Time) (*ResourceAcquireView, error)
}
