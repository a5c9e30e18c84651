package store

import (
	"context"
	"slices"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// DependencyReader reads task dependencies: which tasks a task waits on
// (its after list) and which tasks wait on it.
type DependencyReader interface {
	// ListDependencies returns a waiter's edges in after-list order, each
	// with the state its dependency finished in ("" while it has not); none
	// for a task without dependencies (storetest: DependencyEdges).
	ListDependencies(ctx context.Context, tenant, waiter string) ([]host.Dependency, error)
	// GetDependency returns waiter's edge to dep, as ListDependencies
	// returns it, or nil when waiter does not wait on dep: one lookup of
	// the edges' primary key, whatever the number of waiter's edges
	// (storetest: DependencyEdgeByKey).
	GetDependency(ctx context.Context, tenant, waiter, dep string) (*host.Dependency, error)
	// TallyDependencies counts a waiter's edges by their state, with the
	// waiter's rule; a zero tally (no Rule) for a task without
	// dependencies. Its cost must not grow with anything but the waiter's
	// own edges: a fan-in settles with one tally per finishing dependency
	// (storetest: DependencyHammer, and every Dependencies case).
	TallyDependencies(ctx context.Context, tenant, waiter string) (host.DependencyTally, error)
	// DependencyTasks returns, for each of waiters that has dependencies,
	// its dependencies' tasks in after-list order, as a View reads them
	// (the outcomes its worker is offered with). Each task holds only the
	// fields of sqlrows.OutcomeColumns (id, type, state, completed_at,
	// result, last_error, dead_reason): never the params, so an offer reads
	// little however many dependencies it has. Waiters without
	// dependencies are absent from the map (storetest: DependencyEdges,
	// DependencyOutcomesNarrow).
	DependencyTasks(ctx context.Context, tenant string, waiters []string) (map[string][]*host.Task, error)
	// LockDependencies returns the tasks of tenant among ids, and locks
	// them against a concurrent terminal write until commit (PostgreSQL:
	// FOR SHARE, in id order), so an enqueue that reads a dependency
	// unfinished and a completion of that dependency on another writer are
	// ordered: the later one sees the earlier one's rows. Unknown ids (or
	// another tenant's) are absent from the answer. Outside Update it only
	// reads (storetest: DependencyRaceWithCompletion, on PostgreSQL with
	// several writers).
	LockDependencies(ctx context.Context, tenant string, ids []string) ([]*host.Task, error)
	// CrowdedDependency returns the first of ids (in id order) that has at
	// least limit open edges (waiters whose edge to it is not settled),
	// "" when none has: the bound on one task's waiters, counted on the
	// open-edges index (storetest: DependencyWaitersBounded).
	CrowdedDependency(ctx context.Context, tenant string, ids []string, limit int) (string, error)
	// WaiterDepth returns the largest depth recorded on the edges of the
	// waiters among ids, 0 when none has edges: one range of the edges'
	// primary key per id (storetest: DependencyChainDepthBounded).
	WaiterDepth(ctx context.Context, tenant string, ids []string) (int, error)
	// OwedWaiters counts the tasks of tenant that wait on dep (an edge
	// to it, open or settled as succeeded) and have not finished (waiting,
	// queued or leased), and returns the first of them by id ("" when none):
	// the tasks whose workers may still read dep's result through their
	// leases, so an archive that removes its payload waits for them. Read
	// on the open edges' index and on the succeeded edges' (migration
	// 0056), so its cost grows with dep's own waiters only (storetest:
	// DependencyOwedWaiters).
	OwedWaiters(ctx context.Context, tenant, dep string) (n int, first string, err error)
	// HasPendingSettlements reports whether any settlement is pending
	// (AddPendingSettlements), in any tenant: one probe of a table that
	// is empty unless a cascade outgrew its transaction (storetest:
	// DependencyCascadeBounded).
	HasPendingSettlements(ctx context.Context) (bool, error)
	// CountPendingSettlements counts the pending settlements of every
	// tenant, for the gate-wide gauge an operator watches (a backlog the
	// drainers have not caught up with).
	CountPendingSettlements(ctx context.Context) (int64, error)
}

// DependencyWriter writes task dependencies.
type DependencyWriter interface {
	// InsertDependencies records a new waiter's edges, in the transaction
	// that inserts the waiter.
	InsertDependencies(ctx context.Context, deps []host.Dependency) error
	// SettleDependency records that dependency dep of tenant finished in
	// state on every edge that names it and has no state yet, and returns
	// the waiters of those edges. The transaction that writes a task's
	// terminal state calls it, so each edge is settled exactly once, with
	// that write (storetest: DependencyEdges).
	SettleDependency(ctx context.Context, tenant, dep string, state host.TaskState) ([]string, error)
	// ReopenDependency undoes SettleDependency for the waiters of dep that
	// are still waiting: their edges naming dep have no state again, and
	// it returns those waiters. A redrive of dep, a dead letter, calls it
	// in its transaction, so the tasks still waiting count dep as
	// unfinished until its next end settles them again (it keeps its
	// has_waiters marker); a waiter its dead letter already settled is
	// left as it is (storetest: DependencyRedriven).
	ReopenDependency(ctx context.Context, tenant, dep string) ([]string, error)
	// SettleWaiters is SettleDependency followed, for each waiter it
	// returns (in id order), by locking the waiter's row (GetTask inside
	// Update) and, when the waiter is waiting, counting its edges by state
	// (TallyDependencies) once the lock is held: what the engine reads to
	// settle a dependency, in one call (PostgreSQL: one round trip). Waiters
	// no longer waiting come with a zero tally (storetest: every
	// Dependencies case, DependencyHammer).
	SettleWaiters(ctx context.Context, tenant, dep string, state host.TaskState) ([]SettledWaiter, error)
	// MarkWaitedOn sets the has_waiters marker (host.Task.HasWaiters) on
	// the tasks of tenant among ids that are not finished, in the
	// transaction of an enqueue that names them in its after list, before
	// it reads them with LockDependencies. Only a task so marked has its
	// waiters settled when it finishes; a terminal write of a copy without
	// the marker is fenced on its absence (Fence.NoWaiters), so a marker
	// written after the copy was read makes that write fenced out
	// (storetest: DependencyMarker).
	MarkWaitedOn(ctx context.Context, tenant string, ids []string) error
	// MarkAndLockDependencies is MarkWaitedOn followed by LockDependencies
	// (of the same ids), in one call: what an enqueue with an after list
	// runs (SQLite: a read, then the marker on the unmarked unfinished ones
	// only; PostgreSQL: the marker queued ahead of the locking read, one
	// round trip). The tasks come as LockDependencies
	// returns them, the marker included, or hold only the fields of
	// sqlrows.DependencyCheckColumns, all an enqueue checks (SQLite)
	// (storetest: DependencyMarkAndLock).
	MarkAndLockDependencies(ctx context.Context, tenant string, ids []string) ([]*host.Task, error)
	// AddPendingSettlements records finished tasks whose waiters the
	// transaction leaves unsettled, for a later transaction to settle
	// (the engine's settlement drainer). A task already pending is
	// recorded again with the newer entry's state and cause (storetest:
	// DependencyCascadeBounded).
	AddPendingSettlements(ctx context.Context, ps []PendingSettlement) error
	// ClaimPendingSettlements returns up to limit pending settlements,
	// oldest first, each held by this transaction until it ends: on
	// PostgreSQL locked FOR UPDATE, and ones another transaction holds
	// are skipped (SKIP LOCKED), so several hosts drain apart; on SQLite
	// the single writer holds them all.
	ClaimPendingSettlements(ctx context.Context, limit int) ([]PendingSettlement, error)
	// DeletePendingSettlement removes a pending settlement, in the
	// transaction that settles it.
	DeletePendingSettlement(ctx context.Context, tenant, taskID string) error
}

// PendingSettlement is a finished task whose waiters are still to be
// settled: the rest of a dependency cascade that one transaction's budget
// did not cover. Cause is the engine's, opaque to the store (what
// started the cascade, so a workflow it reaches ends by it).
type PendingSettlement struct {
	Tenant, TaskID string
	State          host.TaskState
	Cause          string
	CreatedAt      time.Time
}

// ReadyHooker is implemented by stores whose WaiterReadier may leave the
// waiters a dependency's success makes ready to the end of the batch
// (SQLite settles a batch's successes together): SettleReadyWaiters then
// returns none of them, and the store calls every hook added with each
// waiter it moved to queued (its tenant and task type) once the batch has
// committed, for the long-polls a returned one would have woken. A store
// with no hook added settles at once. remove takes the hook off.
type ReadyHooker interface {
	AddReadyHook(hook func(tenant, taskType string)) (remove func())
}

// WaiterReadier is what a Tx may implement (SQLite does) to settle the
// waiters a dependency's end makes ready without handing them to the
// engine: SettleWaiters, with the ready verdict applied in SQL.
type WaiterReadier interface {
	// SettleReadyWaiters is SettleWaiters, except that each waiting waiter
	// whose rule the edges now meet (host.DependencyTally.Decide says
	// VerdictReady) is moved to queued by the store, as the engine's
	// update would (state queued, updated_at now, available_at no earlier
	// than now, version+1, counted in the queue counts), and returned in
	// ready with only its id, tenant, type and state. rest are the waiters
	// whose verdict the engine must still decide, as SettleWaiters returns
	// them: those under a rule the end of dep may break (all_succeeded or
	// any_succeeded when dep did not succeed). A waiter under another rule
	// that is not made ready is left as it is: the end of dep can only make
	// it ready or leave it waiting (all_finished never cancels; a success
	// breaks no rule, and a waiting all_succeeded waiter has no failed
	// edge, as the failure that recorded one canceled it then) (storetest:
	// DependencyReadyWaiterRows, every Dependencies case, DependencyHammer).
	SettleReadyWaiters(ctx context.Context, tenant, dep string, state host.TaskState, now time.Time) (ready []*host.Task, rest []SettledWaiter, err error)
}

// SettledWaiter is a waiter SettleWaiters settled an edge of: its task as
// read under its lock, and its edges' tally then (zero when the task is
// no longer waiting).
type SettledWaiter struct {
	Task  *host.Task
	Tally host.DependencyTally
}

// SettleWaitersStepwise implements SettleWaiters with one statement per
// step, for a store whose statements cost no round trip.
func SettleWaitersStepwise(ctx context.Context, tx Tx, tenant, dep string, state host.TaskState) ([]SettledWaiter, error) {
	ids, err := tx.SettleDependency(ctx, tenant, dep, state)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	slices.Sort(ids) // one lock order for every writer
	out := make([]SettledWaiter, 0, len(ids))
	for _, id := range ids {
		w, err := tx.GetTask(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		sw := SettledWaiter{Task: w}
		if w.State == host.StateWaiting {
			if sw.Tally, err = tx.TallyDependencies(ctx, tenant, id); err != nil {
				return nil, err
			}
		}
		out = append(out, sw)
	}
	return out, nil
}
