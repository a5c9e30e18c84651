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
// the batch's own writes of those tasks or else the rows this store's
// writers last committed (recentTasks), when every dependency named is
// found and none is waiting, and queues the marker and the locking read:
// the same statements, locking the same rows, only later in the same
// transaction, so their answer is checked (depGuess) before COMMIT like
// any deferred write's. The check holds the answer to what the enqueue
// decided from: each task is there, finished as guessed (or unfinished)
// and waiting or not as guessed, with the same worker (when the copy had
// one: a worker sees only the tasks it holds), and with fewer open edges
// than CrowdedDependency was asked to bound. A different answer makes the
// batch run again in strict mode, where the read is answered at once. So
// the lock is held from the read to COMMIT as before, and a dependency
// finishing at the same time is ordered against the enqueue exactly as
// before: whichever commits second sees the other's rows (RATIONALE.md,
// "What a dependency adds to a task cycle"; storetest
// DependencyRaceWithCompletion).
//
// A request that fails after such an answer runs again at once with the
// read answered by the database (writeTx.guessed): a refusal is never
// built from a copy.

// maxRecentTasks bounds recentTasks; past it the set starts again empty.
const maxRecentTasks = 1 << 13

// maxRecentRowBytes bounds the variable-sized fields of a row recentTasks
// holds (rowBytes): a larger row (params up to 256 KiB, a long error or
// result) is not held, so the set costs at most maxRecentTasks times this
// (32 MiB), not maxRecentTasks of the largest rows an agent may enqueue.
// An enqueue after such a task, or its waiter's settlement, is read.
const maxRecentRowBytes = 4096

// rowBytes are the bytes of t's variable-sized fields.
func rowBytes(t *host.Task) int {
	n := len(t.Params) + len(t.Summary) + len(t.LastError) + len(t.ProgressMessage) + len(t.IdempotencyKey) +
		len(t.Traceparent) + len(t.Tracestate) + 32*len(t.ResourceIntents)
	if r := t.Result; r != nil {
		n += len(r.Channel) + len(r.Pointer) + len(r.Checksum) + len(r.Summary) + len(r.Metadata) + len(r.DeliveryProof)
		for _, a := range r.Artifacts {
			n += len(a.Type) + len(a.URL) + len(a.Ref)
		}
	}
	return n
}

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
			if rowBytes(t) > maxRecentRowBytes {
				delete(c.m, k) // too large to hold; the copy held is older
				continue
			}
			c.m[k] = t
		}
	}
}

// guessable returns copies of the rows of ids in tenant, each the batch's
// own last write of it (mine) or else the row held, when every one is
// found and none is waiting; nil otherwise.
func (c *recentTasks) guessable(tenant string, ids []string, mine map[string]*host.Task) []*host.Task {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*host.Task, 0, len(ids))
	for _, id := range ids {
		t := mine[id]
		if t == nil {
			t = c.m[taskKey{tenant, id}]
		}
		if t == nil || t.State == host.StateWaiting || heldPayload(t.Result) {
			return nil
		}
		cp := *t
		out = append(out, &cp)
	}
	return out
}

// heldPayload reports whether r's payload is held by a channel other than
// inline, which an archive may release: an enqueue after such a task reads
// it (LockDependencies), as the check of a guess compares only states and
// would miss an archive of the result another host committed meanwhile
// (engine.archiveResult refuses the enqueue then).
func heldPayload(r *host.Result) bool {
	return r != nil && r.Pointer != "" && r.Channel != "" && r.Channel != "inline"
}

// depGuess is an enqueue's dependencies answered from recentTasks: what its
// check (read with the queued locking read) must find.
type depGuess struct {
	tenant string
	// tasks are the copies answered, by id.
	tasks map[string]*host.Task
	// limits are, by id, the smallest bound CrowdedDependency answered ""
	// under before the check ran (nil: not asked). Bounds differ by id:
	// a dependency the caller did not create is held to less than one it
	// did (host.CreatorWaiterReserve).
	limits map[string]int
	// counts are the open edges the check read (nil until it ran), which
	// CrowdedDependency answers from afterwards.
	counts *store.DependencyCounts
	// req is the request that made the guess.
	req *request
}

// covers reports whether the guess holds every one of ids in tenant.
func (g *depGuess) covers(tenant string, ids []string) bool {
	if g == nil || g.tenant != tenant {
		return false
	}
	for _, id := range ids {
		if _, ok := g.tasks[id]; !ok {
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
	if g.limits == nil {
		g.limits = make(map[string]int, len(ids))
	}
	for _, id := range ids {
		if l, ok := g.limits[id]; !ok || limit < l {
			g.limits[id] = limit
		}
	}
	return ""
}

// guessLockSQL is the locking read of a guessed enqueue: each dependency's
// state and worker, and its open edges when it is unfinished.
const guessLockSQL = `SELECT t.id, t.state, t.result IS NOT NULL, t.dead_reason, t.worker_id,
CASE WHEN t.state IN ('succeeded', 'canceled', 'dead_letter', 'archived') THEN 0 ELSE
  (SELECT count(*)::int FROM task_dependencies d WHERE d.tenant = t.tenant AND d.dep_id = t.id AND d.dep_state = '') END
FROM tasks t WHERE t.tenant || '' = $1 AND t.id = ANY($2::text[]) ORDER BY t.id FOR SHARE`

// guessMarkSQL is guessLockSQL for dependencies all guessed unfinished and
// unmarked: the marker's own statement (markWaitedOn), which locks them
// FOR NO KEY UPDATE in id order, answers them. A row it does not write (a
// task finished or marked meanwhile) is missing from the answer, so the
// check fails and the batch runs again with the two statements.
const guessMarkSQL = `UPDATE tasks SET has_waiters = true FROM (
SELECT id FROM tasks WHERE tenant || '' = $1 AND id = ANY($2::text[]) AND NOT has_waiters
AND state NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived') ORDER BY id FOR NO KEY UPDATE) m
WHERE tasks.tenant = $1 AND tasks.id = m.id
RETURNING tasks.id, tasks.state, tasks.result IS NOT NULL, tasks.dead_reason, tasks.worker_id,
(SELECT count(*)::int FROM task_dependencies d WHERE d.tenant = tasks.tenant AND d.dep_id = tasks.id AND d.dep_state = '')`

// guessLockOneSQL is guessLockSQL for one id (byIDs).
var guessLockOneSQL = oneID(guessLockSQL)

// guessMarkNoWaitSQL is the marker and the locking read of a guessed
// enqueue in a batch of several requests (markNoWaitSQL): the rows it
// could lock without waiting, as guessLockSQL answers them, each as of its
// lock. A row another transaction holds is missing from the answer, so the
// check fails on this request: the batch runs again without it, and it
// runs after in strict mode (writer.runIn), where it reads its dependencies
// and, still in a batch of several, gives way if one is held
// (markOrGiveWay).
const guessMarkNoWaitSQL = `WITH a AS (SELECT id, state, result IS NOT NULL AS r, dead_reason, worker_id FROM tasks
WHERE tenant || '' = $1 AND id = ANY($2::text[]) AND NOT has_waiters
AND state NOT IN ('succeeded', 'canceled', 'dead_letter', 'archived') FOR NO KEY UPDATE SKIP LOCKED),
b AS (SELECT id, state, result IS NOT NULL AS r, dead_reason, worker_id FROM tasks
WHERE tenant || '' = $1 AND id = ANY($2::text[])
AND (has_waiters OR state IN ('succeeded', 'canceled', 'dead_letter', 'archived')) FOR SHARE SKIP LOCKED),
u AS (UPDATE tasks SET has_waiters = true WHERE tenant || '' = $1 AND id = ANY($2::text[]) AND id IN (SELECT id FROM a))
SELECT x.id, x.state, x.r, x.dead_reason, x.worker_id,
CASE WHEN x.state IN ('succeeded', 'canceled', 'dead_letter', 'archived') THEN 0 ELSE
  (SELECT count(*)::int FROM task_dependencies d WHERE d.tenant = $1 AND d.dep_id = x.id AND d.dep_state = '') END
FROM (SELECT * FROM a UNION ALL SELECT * FROM b) x ORDER BY x.id`

// guessMarkNoWaitOneSQL is guessMarkNoWaitSQL for one id (byIDs).
var guessMarkNoWaitOneSQL = allOneID(guessMarkNoWaitSQL)

// guessMarkOneSQL is guessMarkSQL for one id: markOneWaitedOn answering
// as guessLockSQL does (byIDs).
const guessMarkOneSQL = markOneWaitedOn + `
RETURNING id, state, result IS NOT NULL, dead_reason, worker_id,
(SELECT count(*)::int FROM task_dependencies d WHERE d.tenant = tasks.tenant AND d.dep_id = tasks.id AND d.dep_state = '')`

// check reads guessLockSQL's (or guessMarkSQL's) answer and holds it to the guess.
func (g *depGuess) check(br pgx.BatchResults) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	counts := store.NewDependencyCounts(g.tenant)
	var bad string
	for rows.Next() {
		var id, state, dead, worker string
		var result bool
		var open int
		if err := rows.Scan(&id, &state, &result, &dead, &worker, &open); err != nil {
			rows.Close()
			return err
		}
		counts.Open[id] = open
		want := g.tasks[id]
		got := &host.Task{State: host.TaskState(state), DeadReason: dead}
		if result {
			got.Result = &host.Result{}
		}
		switch {
		case bad != "":
		case want == nil:
			bad = "answered a task not asked for: " + id
		case host.FinishedAs(got) != host.FinishedAs(want) || (got.State == host.StateWaiting) != (want.State == host.StateWaiting):
			bad = fmt.Sprintf("dependency %s is %s, guessed %s", id, got.State, want.State)
		case want.WorkerID != "" && worker != want.WorkerID:
			bad = fmt.Sprintf("dependency %s is held by %q, guessed %q", id, worker, want.WorkerID)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if bad == "" && len(counts.Open) != len(g.tasks) {
		bad = fmt.Sprintf("found %d of %d dependencies", len(counts.Open), len(g.tasks))
	}
	if bad == "" {
		for id, limit := range g.limits {
			if counts.Open[id] >= limit {
				bad = "dependency " + id + " has too many waiters"
				break
			}
		}
	}
	if bad != "" {
		return &mismatch{what: "guessed dependencies: " + bad, reqs: blame(g.req)}
	}
	g.counts = counts
	return nil
}

// guessDependencies is MarkAndLockDependencies answered from the batch's
// own writes and recentTasks, or nil when it cannot be (strict mode, a
// request running again after a failure, a task not found or waiting).
func (w *writeTx) guessDependencies(tenant string, ids []string) []*host.Task {
	if !w.deferWrites || w.noGuess || len(ids) == 0 {
		return nil
	}
	var mine map[string]*host.Task
	for _, t := range w.written {
		// The batch wrote it (inserted, leased, finished): the read
		// would find the batch's write.
		if t.Tenant == tenant && slices.Contains(ids, t.ID) {
			if mine == nil {
				mine = map[string]*host.Task{}
			}
			mine[t.ID] = t
		}
	}
	ts := w.s.recent.guessable(tenant, ids, mine)
	if ts == nil {
		return nil
	}
	g := &depGuess{tenant: tenant, tasks: make(map[string]*host.Task, len(ts)), req: w.req}
	unmarked := true
	for _, t := range ts {
		g.tasks[t.ID] = t
		unmarked = unmarked && host.FinishedAs(t) == "" && !t.HasWaiters && !slices.Contains(w.marked, taskKey{tenant, t.ID})
	}
	for _, id := range ids {
		if w.keys.HasTask(id) {
			// Inserted in this batch: its insert goes into the queue
			// ahead of the marker.
			w.materialize()
			break
		}
	}
	for _, t := range ts {
		if host.FinishedAs(t) == "" {
			t.HasWaiters = true // the marker queued below sets it
		}
	}
	w.noteMarked(tenant, ids)
	if !w.locks.alone {
		// Rows locked by another transaction are skipped, not waited
		// for: the check then misses them and the request is set aside
		// (guessMarkNoWaitSQL).
		q, args := byIDs(guessMarkNoWaitSQL, guessMarkNoWaitOneSQL, tenant, ids)
		w.queueCheckedOn(ids, stmt{sql: q, args: args, check: g.check})
	} else if unmarked {
		// The marker alone locks every one of them: one statement.
		q, args := byIDs(guessMarkSQL, guessMarkOneSQL, tenant, ids)
		w.ss.queueChecked(g.check, q, args...)
	} else {
		q, args := byIDs(markWaitedOn, markOneWaitedOn, tenant, ids)
		w.ss.queue(q, args...)
		q, args = byIDs(guessLockSQL, guessLockOneSQL, tenant, ids)
		w.ss.queueChecked(g.check, q, args...)
	}
	w.deps, w.guess, w.guessed = nil, g, true
	return ts
}

// noteMarked keeps the ids the transaction marked as waited on, for
// recentTasks once it commits: the marker changes no version, so the rows
// held would otherwise go on showing the task unmarked.
func (w *writeTx) noteMarked(tenant string, ids []string) {
	for _, id := range ids {
		w.marked = append(w.marked, taskKey{tenant, id})
	}
}

// mark sets the marker on the unfinished rows held among keys, as the
// marker statement did in the transaction that committed.
func (c *recentTasks) mark(keys []taskKey) {
	if len(keys) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if t := c.m[k]; t != nil && host.FinishedAs(t) == "" {
			t.HasWaiters = true
		}
	}
}

// wrote keeps a copy of a task row the transaction wrote, for recentTasks
// once it commits.
func (w *writeTx) wrote(t *host.Task) {
	cp := *t
	w.written = append(w.written, &cp)
}

// guessedMarkAndLock is MarkAndLockDependencies: the guess when it can be
// made, else the marker and the locking read in one round trip (two when
// the request may have to give way).
func (w *writeTx) guessedMarkAndLock(ctx context.Context, tenant string, ids []string) ([]*host.Task, error) {
	if ts := w.guessDependencies(tenant, ids); ts != nil {
		return ts, nil
	}
	if !w.locks.alone {
		if err := w.markOrGiveWay(ctx, tenant, ids); err != nil {
			return nil, err
		}
		return w.LockDependencies(ctx, tenant, ids)
	}
	if err := w.MarkWaitedOn(ctx, tenant, ids); err != nil {
		return nil, err
	}
	return w.LockDependencies(ctx, tenant, ids)
}

// The settling of a finished dependency is guessed the same way when its
// every waiter is known: the edges this store's writers committed
// (recentEdges) name them, each waits on that dependency alone, and its
// row is in recentTasks, waiting. Its tally then is the finished state
// once, whatever else happens, and its row is the one committed at that
// version. In place of settle_waiters one statement is queued
// (settleGuessSQL), its answer checked before COMMIT (settleGuess): the
// same waiters in the same order, each at the version and with the marker
// guessed, waiting, with one edge. So the edges are recorded and the
// waiters locked where they were, only later in the same transaction, and
// the fenced updates the engine builds from the guess follow them in the
// queue.

// recentEdges are the open edges this store's writers committed, by the
// dependency they name; a guess's check catches any they miss (another
// host's waiter, or one forgotten when the set started again).
type recentEdges struct {
	mu sync.Mutex
	m  map[taskKey][]openEdge
	n  int
}

// openEdge is a waiter's open edge to a dependency, with the waiter's rule
// and number of edges.
type openEdge struct {
	waiter string
	rule   host.DependencyRule
	edges  int
}

// put records edges a transaction committed (each waiter's, all of them),
// then forgets the dependencies it settled.
func (c *recentEdges) put(deps []host.Dependency, settled []taskKey) {
	if len(deps) == 0 && len(settled) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || c.n+len(deps) > maxRecentTasks {
		c.m, c.n = map[taskKey][]openEdge{}, 0
	}
	count := map[taskKey]int{}
	for _, d := range deps {
		count[taskKey{d.Tenant, d.Waiter}]++
	}
	for _, d := range deps {
		if d.DepState != "" {
			continue
		}
		k := taskKey{d.Tenant, d.DependsOn}
		c.m[k] = append(c.m[k], openEdge{d.Waiter, d.Rule, count[taskKey{d.Tenant, d.Waiter}]})
		c.n++
	}
	for _, k := range settled {
		c.n -= len(c.m[k])
		delete(c.m, k)
	}
}

// waiters returns the open edges to dep held, when every one is its
// waiter's only edge; nil otherwise.
func (c *recentEdges) waiters(tenant, dep string) []openEdge {
	c.mu.Lock()
	defer c.mu.Unlock()
	es := c.m[taskKey{tenant, dep}]
	for _, e := range es {
		if e.edges != 1 {
			return nil
		}
	}
	return slices.Clone(es)
}

// guessSettle is SettleWaiters answered from recentEdges and recentTasks,
// with settle_waiters queued and checked; nil when it cannot be.
func (w *writeTx) guessSettle(tenant, dep string, state host.TaskState) []store.SettledWaiter {
	if !w.deferWrites || w.noGuess {
		return nil
	}
	for _, d := range w.edges {
		if d.Tenant == tenant && d.DependsOn == dep {
			return nil // an edge of this batch, not yet committed
		}
	}
	es := w.s.edges.waiters(tenant, dep)
	if len(es) == 0 {
		return nil
	}
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.waiter
	}
	slices.Sort(ids) // settle_waiters answers in id order
	for _, t := range w.written {
		if t.Tenant == tenant && slices.Contains(ids, t.ID) {
			return nil // the batch wrote a waiter: its row is not the one committed
		}
	}
	ts := w.s.recent.waiting(tenant, ids)
	if ts == nil {
		return nil
	}
	rule := map[string]host.DependencyRule{}
	for _, e := range es {
		rule[e.waiter] = e.rule
	}
	for _, t := range ts {
		if slices.Contains(w.marked, taskKey{tenant, t.ID}) {
			t.HasWaiters = true // marked earlier in this batch
		}
	}
	out := make([]store.SettledWaiter, len(ts))
	for i, t := range ts {
		out[i] = store.SettledWaiter{Task: t, Tally: host.DependencyTally{Rule: rule[t.ID]}}
		out[i].Tally.Add(state, 1)
	}
	g := &settleGuess{want: make([]store.SettledWaiter, len(out)), req: w.req}
	for i, sw := range out {
		cp := *sw.Task
		g.want[i] = store.SettledWaiter{Task: &cp, Tally: sw.Tally}
	}
	// The dependency's own finishing update waits behind with the batch's
	// other task updates, to go out as one set after this. But the edges
	// must be read only once the dependency's row is this transaction's:
	// an enqueue on another writer or host that holds it FOR SHARE while
	// it adds an edge has then committed, and a statement begun after the
	// wait sees that edge (the check then fails on it). So the row is
	// locked first, by a statement of its own: a lock taken inside the
	// settlement's statement would not do, its snapshot being older than
	// the wait. The settlement reads and locks the waiters' rows and the
	// edges, never written behind.
	w.ss.queueAsIs(lockDependencyRowSQL, tenant, dep)
	w.queueCheckedOn(ids, stmt{sql: settleGuessSQL, args: []any{tenant, dep, string(state)}, check: g.check})
	return out
}

// lockDependencyRowSQL locks a finishing dependency's row ahead of its
// guessed settlement (guessSettle).
const lockDependencyRowSQL = `SELECT 1 FROM tasks WHERE tenant || '' = $1 AND id = $2 FOR NO KEY UPDATE`

// waiting returns copies of the rows of ids in tenant (in their order) when
// every one is held and waiting; nil otherwise.
func (c *recentTasks) waiting(tenant string, ids []string) []*host.Task {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*host.Task, 0, len(ids))
	for _, id := range ids {
		t := c.m[taskKey{tenant, id}]
		if t == nil || t.State != host.StateWaiting {
			return nil
		}
		cp := *t
		out = append(out, &cp)
	}
	return out
}

// settleGuessSQL is a guessed settlement's statement: it records the state
// on the open edges that name the dependency, locks their waiters in id
// order, and answers each one's version, marker, state and number of edges.
// It stands for settle_waiters when every waiter waits on that dependency
// alone: such a waiter's tally is then the state recorded, once, which no
// other settlement can change, so it need not be counted after the lock.
// One plain statement costs the server a fraction of the function (0.54
// ms a call in BenchmarkDependencyCost, where the whole of a plain cycle's
// statements cost about 0.25 ms).
const settleGuessSQL = `WITH s AS (
UPDATE task_dependencies SET dep_state = $3 WHERE tenant = $1 AND dep_id = $2 AND dep_state = '' RETURNING waiter_id)
SELECT l.id, l.version, l.has_waiters, l.state, l.edges FROM (SELECT waiter_id FROM s ORDER BY waiter_id) w
CROSS JOIN LATERAL (SELECT t.id, t.version, t.has_waiters, t.state,
  (SELECT count(*)::int FROM task_dependencies d WHERE d.tenant = t.tenant AND d.waiter_id = t.id) AS edges
  FROM tasks t WHERE t.tenant || '' = $1 AND t.id = w.waiter_id FOR UPDATE) l
ORDER BY l.id`

// settleGuess is a guessed settlement: what settleGuessSQL must answer.
type settleGuess struct {
	want []store.SettledWaiter
	req  *request // the request that made the guess
}

// check reads settleGuessSQL's answer and holds it to the guess: the same
// waiters in id order, each at the version and with the marker guessed,
// waiting, with one edge.
func (g *settleGuess) check(br pgx.BatchResults) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	n := 0
	var bad string
	for rows.Next() {
		var id, state string
		var version int64
		var marked bool
		var edges int
		if err := rows.Scan(&id, &version, &marked, &state, &edges); err != nil {
			rows.Close()
			return err
		}
		if bad == "" {
			if n >= len(g.want) {
				bad = "answered waiter " + id + ", not guessed"
			} else if w := g.want[n].Task; id != w.ID || version != w.Version || marked != w.HasWaiters || host.TaskState(state) != host.StateWaiting || edges != 1 {
				bad = fmt.Sprintf("waiter %s at version %d (%s, %d edges), guessed %s at %d", id, version, state, edges, w.ID, w.Version)
			}
		}
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if bad == "" && n != len(g.want) {
		bad = fmt.Sprintf("%d waiters, guessed %d", n, len(g.want))
	}
	if bad != "" {
		return &mismatch{what: "guessed settlement: " + bad, reqs: blame(g.req)}
	}
	return nil
}
