package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// An enqueue with an after list must know its dependencies' states before
// it goes on (waiting, ready, refused), and the locking read that tells it
// cost a round trip inside the writer's batch, which every request of the
// batch waited on. Outside strict mode the writer answers it instead from
// the rows this store's writers last committed (recentTasks), when every
// dependency named is there and unfinished, and queues the read with the
// marker: the same statements, locking the same rows, only later in the
// same transaction, so their answer is checked (depGuess) before COMMIT
// like any deferred write's. The check holds the answer to what the
// enqueue decided from: each task is there, unfinished and not waiting,
// with the same worker (when the copy had one: a worker sees only the
// tasks it holds), and with fewer open edges than CrowdedDependency was
// asked to bound. A different answer makes the batch run again in strict
// mode, where the read is answered at once. So the lock is held from the
// read to COMMIT as before, and a dependency finishing at the same time is
// ordered against the enqueue exactly as before: whichever commits second
// sees the other's rows (RATIONALE.md, "What a dependency adds to a task
// cycle").
//
// A request that fails after such an answer runs again at once with the
// read answered by the database (writeTx.guessed): a refusal is never
// built from a copy.

// maxRecentTasks bounds recentTasks; past it the set starts again empty.
const maxRecentTasks = 1 << 13

// recentTasks are the task rows this store's writers last committed, by
// tenant and id: only a guess at a row (another host may have changed it
// since), kept so a guess's check finds the row as it was guessed.
type recentTasks struct {
	mu sync.Mutex
	m  map[taskKey]*host.Task
}

type taskKey struct{ tenant, id string }

// put records rows a transaction committed; a row already held at a later
// version (another writer's commit) is kept.
func (c *recentTasks) put(ts []*host.Task) {
	if len(ts) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m)+len(ts) > maxRecentTasks {
		c.m = make(map[taskKey]*host.Task, len(ts))
	}
	for _, t := range ts {
		k := taskKey{t.Tenant, t.ID}
		if old := c.m[k]; old == nil || old.Version <= t.Version {
			c.m[k] = t
		}
	}
}

// unfinished returns copies of the rows of ids in tenant when every one is
// held, unfinished and not waiting; nil otherwise.
func (c *recentTasks) unfinished(tenant string, ids []string) []*host.Task {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*host.Task, 0, len(ids))
	for _, id := range ids {
		t := c.m[taskKey{tenant, id}]
		if t == nil || host.FinishedAs(t) != "" || t.State == host.StateWaiting {
			return nil
		}
		cp := *t
		out = append(out, &cp)
	}
	return out
}

// depGuess is an enqueue's dependencies answered from recentTasks: what its
// check (read with the queued locking read) must find.
type depGuess struct {
	tenant string
	// worker is each task's worker in the copy answered, by id.
	worker map[string]string
	// limit is the smallest bound CrowdedDependency answered "" under
	// before the check ran (0: not asked); asked the ids it was asked of.
	limit int
	asked []string
	// counts are the open edges the check read (nil until it ran), which
	// CrowdedDependency answers from afterwards.
	counts *store.DependencyCounts
}

// covers reports whether the guess holds every one of ids in tenant.
func (g *depGuess) covers(tenant string, ids []string) bool {
	if g == nil || g.tenant != tenant {
		return false
	}
	for _, id := range ids {
		if _, ok := g.worker[id]; !ok {
			return false
		}
	}
	return true
}

// crowded is CrowdedDependency under the guess: from the counts once the
// check read them, else "" with the bound left for the check to hold.
func (g *depGuess) crowded(ids []string, limit int) string {
	if g.counts != nil {
		return g.counts.Crowded(ids, limit)
	}
	if g.limit == 0 || limit < g.limit {
		g.limit = limit
	}
	g.asked = append(g.asked, ids...)
	return ""
}

// guessLockSQL is the locking read of a guessed enqueue: each dependency's
// state and worker, and its open edges when it is unfinished.
const guessLockSQL = `SELECT t.id, t.state, t.worker_id,
CASE WHEN t.state IN ('succeeded', 'canceled', 'dead_letter', 'archived') THEN 0 ELSE
  (SELECT count(*)::int FROM task_dependencies d WHERE d.tenant = t.tenant AND d.dep_id = t.id AND d.dep_state = '') END
FROM tasks t WHERE t.tenant || '' = $1 AND t.id = ANY($2::text[]) ORDER BY t.id FOR SHARE`

// check reads guessLockSQL's answer and holds it to the guess.
func (g *depGuess) check(br pgx.BatchResults) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	counts := store.NewDependencyCounts(g.tenant)
	var bad string
	for rows.Next() {
		var id, state, worker string
		var open int
		if err := rows.Scan(&id, &state, &worker, &open); err != nil {
			rows.Close()
			return err
		}
		counts.Open[id] = open
		want, ok := g.worker[id]
		st := host.TaskState(state)
		switch {
		case bad != "":
		case !ok:
			bad = "answered a task not asked for: " + id
		case st.Terminal() || st == host.StateArchived || st == host.StateWaiting:
			bad = fmt.Sprintf("dependency %s is %s, guessed unfinished", id, st)
		case want != "" && worker != want:
			bad = fmt.Sprintf("dependency %s is held by %q, guessed %q", id, worker, want)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if bad == "" && len(counts.Open) != len(g.worker) {
		bad = fmt.Sprintf("found %d of %d dependencies", len(counts.Open), len(g.worker))
	}
	if bad == "" && g.limit > 0 {
		if id := counts.Crowded(g.asked, g.limit); id != "" {
			bad = "dependency " + id + " has too many waiters"
		}
	}
	if bad != "" {
		return &mismatch{"guessed dependencies: " + bad}
	}
	g.counts = counts
	return nil
}

// guessDependencies is MarkAndLockDependencies answered from recentTasks,
// or nil when it cannot be (strict mode, a request running again after a
// failure, a task not held or not unfinished, a task inserted in this
// batch).
func (w *writeTx) guessDependencies(tenant string, ids []string) []*host.Task {
	if !w.deferWrites || w.noGuess || len(ids) == 0 {
		return nil
	}
	for _, id := range ids {
		if w.keys.HasTask(id) {
			return nil
		}
	}
	for _, t := range w.written {
		// The batch wrote it (a lease, a completion): its row is not the
		// one committed, and the read must see the batch's write.
		if t.Tenant == tenant && slices.Contains(ids, t.ID) {
			return nil
		}
	}
	ts := w.s.recent.unfinished(tenant, ids)
	if ts == nil {
		return nil
	}
	g := &depGuess{tenant: tenant, worker: make(map[string]string, len(ts))}
	for _, t := range ts {
		g.worker[t.ID] = t.WorkerID
		t.HasWaiters = true // the marker queued below sets it
	}
	w.ss.queue(markWaitedOn, tenant, ids)
	w.ss.queueChecked(g.check, guessLockSQL, tenant, ids)
	w.deps, w.guess, w.guessed = nil, g, true
	return ts
}

// wrote keeps a copy of a task row the transaction wrote, for recentTasks
// once it commits.
func (w *writeTx) wrote(t *host.Task) {
	cp := *t
	w.written = append(w.written, &cp)
}

// guessedMarkAndLock is MarkAndLockDependencies: the guess when it can be
// made, else the marker and the locking read in one round trip.
func (w *writeTx) guessedMarkAndLock(ctx context.Context, tenant string, ids []string) ([]*host.Task, error) {
	if ts := w.guessDependencies(tenant, ids); ts != nil {
		return ts, nil
	}
	if err := w.MarkWaitedOn(ctx, tenant, ids); err != nil {
		return nil, err
	}
	return w.LockDependencies(ctx, tenant, ids)
}
