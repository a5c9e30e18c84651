// Package postgres is AsyncGate's store for several gate hosts on one
// PostgreSQL database (pgx v5). Its semantics are host/sqlite's, checked by the
// same conformance suite (host/store/storetest):
//
//   - Group commit: every Update goes to a writer goroutine that runs all the
//     updates waiting at that moment in one transaction, each in its own
//     SAVEPOINT, and acknowledges them together after one durable commit. The
//     savepoints and other statements whose answer nobody waits for are
//     pipelined in front of the next statement, so they cost no round trip.
//   - One receipt chain per writer: each writer registers a chain of its own
//     (a ledger_chains row only it updates) and links its receipts into it;
//     receipts.seq, the ledger's global order, comes from a sequence. No
//     lock is shared between writers, so hosts append in parallel. Now and
//     then a writer records a checkpoint of every chain's head, taking the
//     checkpoint head row with SKIP LOCKED: if another host is writing one,
//     it skips its turn.
//   - Leasing and the expiry sweep use FOR UPDATE SKIP LOCKED, so hosts never
//     contend for the same queued task or the same expired lease; every state
//     change is also fenced in its UPDATE.
//   - LISTEN/NOTIFY: a commit that makes a task ready notifies the tenant;
//     Subscribe forwards other hosts' notifications to the engine.
//
// A deadlock or serialization failure, or a connection lost before COMMIT was
// sent, reruns the whole batch (store.Store allows it); a connection lost
// during COMMIT is reported as database_unavailable, as the outcome is unknown.
// A database that stops answering holds nobody past a timeout: a caller's
// store timeout (store.WithTimeout) ends its wait, and Options.Timeout ends a
// writer's batch (docs/postgres.md, "When PostgreSQL stops answering").
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/groupcommit"
	"github.com/asyncgate/asyncgate/host/tracing"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options tune a Store. The zero value is the default.
type Options struct {
	// Schema, when set, is created if missing and used as the search_path of
	// every connection; it isolates one gate deployment (or one test) from
	// another in the same database.
	Schema string
	// NoMigrate refuses a database with migrations not yet applied
	// (store.OlderSchemaError) instead of applying them. The commands that
	// only look at or tend an existing gate set it.
	NoMigrate bool
	// MaxBatch caps how many updates share one commit (default 256).
	MaxBatch int
	// Writers is the number of writer goroutines, each with its own
	// connection (default DefaultWriters). More writers overlap one batch's
	// commit with the next batch's work, and let the server run batches on
	// more than one core.
	Writers int
	// MaxConns is the size of the connection pool for reads and writers
	// (default 8 + Writers). The listener has a connection of its own.
	MaxConns int
	// Channel is the LISTEN/NOTIFY channel (default "asyncgate_ready", with
	// "_" + Schema appended when Schema is set).
	Channel string
	// CheckpointEvery is how often, at most, a writer records a ledger
	// checkpoint while it appends receipts (default 10 s). Close records
	// one too.
	CheckpointEvery time.Duration
	// Timeout bounds each run of a writer's batch transaction (default
	// store.DefaultTimeout): a batch still waiting for the database then
	// is abandoned, its connection dropped, and its requests told
	// database_unavailable (after COMMIT was sent: the outcome is unknown,
	// never a success), so a database that stops answering without
	// refusing (a partition, a stopped server) holds a writer no longer
	// than that, and the writer serves later updates once it answers
	// again. gate serve sets it to its --db-timeout, the bound its
	// requests' store calls wait (store.WithTimeout).
	Timeout time.Duration

	// firstRunLockWait, when set, replaces the default bound on a batch's
	// first run's lock wait (the constant of that name), for tests that
	// must tell a deadlock, which the server finds after its
	// deadlock_timeout, from a lock merely held long on a loaded machine.
	firstRunLockWait time.Duration
}

// DefaultWriters is how many writers a store runs when Options.Writers is
// unset: two, so one gate host keeps two of the server's cores busy
// (RATIONALE.md, "Two writers per host by default").
const DefaultWriters = 2

// Store is the PostgreSQL driver. It implements store.Store and store.Notifier.
type Store struct {
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig
	opts    Options

	queue *groupcommit.Queue[*request]
	wg    sync.WaitGroup

	// schema is the schema the store's tables live in (current_schema() of
	// its connections), read once at open; resource lock keys cover it.
	schema string

	// writerPIDs are the backend PIDs of this store's writer connections, so
	// Subscribe can skip this host's own notifications (the engine already
	// woke its local waiters).
	pidMu      sync.Mutex
	writerPIDs map[uint32]bool

	retries atomic.Int64 // batches rerun after a deadlock or a lost connection
	// strictReruns counts batches rerun in strict mode after a deferred
	// write failed.
	strictReruns atomic.Int64
	// setAside counts requests run after their batch, in strict mode,
	// because a deferred write or a guess of theirs failed (writer.runIn).
	setAside atomic.Int64
	// lockReorders counts requests that ran after their batch, in a
	// transaction of their own, because they asked for a resource lock below
	// one their batch held and found it taken (resourceleases.go).
	lockReorders atomic.Int64
	// writerTrips counts the writers' round trips to the server, and
	// writerStmts the statements they carried.
	writerTrips atomic.Int64
	writerStmts atomic.Int64
	// batches, updates and busy (nanoseconds) are the writers' work
	// (WriterStats).
	batches, updates, busy atomic.Int64
	// commits is the writers' latest commit outcome (store.CommitHealth).
	commits store.CommitWatch
	// recent are the task rows the writers last committed, from which an
	// enqueue's dependencies are guessed (depspec.go).
	recent recentTasks
	// edges are the open edges the writers last committed, from which a
	// settlement is guessed (depspec.go).
	edges recentEdges
	// stateRanges bounds the index ranges a list by state merges
	// (maxStateRanges; tests lower it).
	stateRanges int
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Notifier      = (*Store)(nil)
	_ store.WriterStatser = (*Store)(nil)
	_ store.CommitHealth  = (*Store)(nil)
)

type request struct {
	// ctx is the caller's, bounded by its store timeout (store.Bound).
	ctx  context.Context
	fn   func(store.Tx) error
	err  error
	done chan struct{}
	// claim settles whether the writer runs it or its caller gave up on it.
	claim groupcommit.Claim
	// later is set when the request gave way for lock order (errLockOrder)
	// in the transaction that just ran: it runs again after it, alone.
	later bool
}

// Open connects to the database at url (a postgres:// URL or a libpq
// connection string), applies the embedded migrations in order and starts the
// writers.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Writers <= 0 {
		opts.Writers = DefaultWriters
	}
	if opts.CheckpointEvery <= 0 {
		opts.CheckpointEvery = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = store.DefaultTimeout
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 8 + opts.Writers
	}
	if opts.MaxConns < opts.Writers+1 {
		opts.MaxConns = opts.Writers + 1
	}
	if opts.Channel == "" {
		opts.Channel = "asyncgate_ready"
		if opts.Schema != "" {
			opts.Channel += "_" + opts.Schema
		}
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	cfg.MaxConns = int32(opts.MaxConns)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	dialBounded(cfg.ConnConfig)
	serverKeepalives(cfg)
	if opts.Schema != "" {
		if err := createSchema(ctx, cfg.ConnConfig, opts.Schema); err != nil {
			return nil, err
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{opts.Schema}.Sanitize()
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Store{pool: pool, connCfg: cfg.ConnConfig, opts: opts, stateRanges: maxStateRanges,
		queue: groupcommit.New[*request](4096), writerPIDs: map[uint32]bool{}}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&s.schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: read the current schema: %w", err)
	}
	for i := 0; i < opts.Writers; i++ {
		s.wg.Add(1)
		go s.writer()
	}
	return s, nil
}

func createSchema(ctx context.Context, cc *pgx.ConnConfig, schema string) error {
	conn, err := pgx.ConnectConfig(ctx, cc.Copy())
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
		// Two hosts creating it at once may race on the catalog; it exists then.
		var exists bool
		if err2 := conn.QueryRow(ctx, `SELECT true FROM pg_namespace WHERE nspname = $1`, schema).Scan(&exists); err2 != nil || !exists {
			return fmt.Errorf("postgres: create schema %s: %w", schema, err)
		}
	}
	return nil
}

// Driver implements store.Store.
func (s *Store) Driver() string { return "postgres" }

// Pool returns the connection pool (for operators' tools and tests).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// BatchRetries reports how many batches were rerun after a deadlock,
// serialization failure or lost connection.
func (s *Store) BatchRetries() int64 { return s.retries.Load() }

// StrictReruns reports how many batches ran again in strict mode because a
// deferred write failed (a conflict or a lost fence found at the batch's end).
func (s *Store) StrictReruns() int64 { return s.strictReruns.Load() }

// SetAside reports how many requests ran after their batch, together in
// strict mode, because a deferred write of theirs failed (a lost fence) or
// a dependency or settlement they guessed was not as guessed.
func (s *Store) SetAside() int64 { return s.setAside.Load() }

// LockReorders reports how many requests ran after their batch, on their
// own, because they needed a resource lock out of key order (LockResources).
func (s *Store) LockReorders() int64 { return s.lockReorders.Load() }

// WriterStats implements store.WriterStatser.
func (s *Store) WriterStats() store.WriterStats {
	st := store.WriterStats{Writers: s.opts.Writers, Batches: s.batches.Load(), Updates: s.updates.Load(),
		Busy: time.Duration(s.busy.Load())}
	h := s.queue.HoldStats()
	st.EnqueuesHeld, st.EnqueueHold, st.EnqueueHoldsExpired, st.EnqueuesWaiting = h.Held, h.Waited, h.Expired, h.Waiting
	return st
}

// Writers reports how many writers (each a connection and a ledger chain)
// the store runs.
func (s *Store) Writers() int { return s.opts.Writers }

// WriterTrips reports how many round trips to the server the writers made
// (pipelines sent and statements run at once, COMMIT's included). Trips per
// task cycle, beside cycles per second, tell a batch bound by latency from
// one bound by the server's work.
func (s *Store) WriterTrips() int64 { return s.writerTrips.Load() }

// WriterStatements returns how many statements the writers have sent the
// server, BEGIN and COMMIT included.
func (s *Store) WriterStatements() int64 { return s.writerStmts.Load() }

// migrate applies the embedded migrations that are not applied yet, in version
// order, under an advisory lock so hosts starting together apply each once.
func (s *Store) migrate(ctx context.Context) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer c.Release()
	conn := c.Conn()
	// The lock key is per schema, so tests in separate schemas do not wait on each other.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('asyncgate.migrate.' || current_schema()))`); err != nil {
		return fmt.Errorf("postgres: migration lock: %w", err)
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext('asyncgate.migrate.' || current_schema()))`)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at bigint NOT NULL)`); err != nil {
		return fmt.Errorf("postgres: migrations table: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	known := 0
	if len(names) > 0 {
		fmt.Sscanf(path.Base(names[len(names)-1]), "%04d_", &known)
	}
	var applied int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&applied); err != nil {
		return fmt.Errorf("postgres: read migrations: %w", err)
	}
	if applied > known {
		return store.NewerSchemaError("postgres", applied, known)
	}
	for _, name := range names {
		var v int
		if _, err := fmt.Sscanf(path.Base(name), "%04d_", &v); err != nil {
			return fmt.Errorf("postgres: migration %s has no version prefix", name)
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE version = $1`, v).Scan(&n); err != nil {
			return fmt.Errorf("postgres: read migrations: %w", err)
		}
		if n > 0 {
			continue
		}
		if s.opts.NoMigrate {
			return store.OlderSchemaError("postgres", applied, known)
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// The simple protocol runs a multi-statement script.
			if _, err := tx.Conn().PgConn().Exec(ctx, string(body)).ReadAll(); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, v, time.Now().UnixMicro())
			return err
		})
		if err != nil {
			return fmt.Errorf("postgres: migration %d: %w", v, err)
		}
	}
	return nil
}

// LedgerHead returns the ledger's last receipt seq and the last checkpoint's
// hash (the value to keep outside the database to detect a rewrite).
func (s *Store) LedgerHead(ctx context.Context) (int64, string, error) {
	var seq int64
	var hash string
	err := s.pool.QueryRow(ctx, `SELECT (SELECT coalesce(max(seq), 0) FROM receipts), hash FROM ledger_checkpoint_head WHERE id = 1`).Scan(&seq, &hash)
	if err != nil {
		return 0, "", unavailable("read ledger head", err)
	}
	return seq, hash, nil
}

// Checkpoint records a ledger checkpoint now, through a writer. It waits for
// a checkpoint another host is writing at the same moment.
func (s *Store) Checkpoint(ctx context.Context) error {
	return s.Update(ctx, func(tx store.Tx) error {
		return tx.(*writeTx).checkpoint(ctx, true)
	})
}

var errClosed = groupcommit.ErrClosed

func unavailable(what string, err error) error {
	return host.WrapError(host.CodeDatabaseUnavailable, err, "postgres "+what+" failed: "+err.Error())
}

// Update implements store.Store with group commit.
//
// The caller waits for the outcome at most the store timeout its context
// carries (store.WithTimeout): an update the writer has not taken by then
// is given up and never runs; one it took may still commit, so its caller
// is told database_unavailable, the outcome unknown (store.AwaitUpdate).
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	ctx, cancel := store.Bound(ctx)
	defer cancel()
	r := &request{ctx: ctx, fn: fn, done: make(chan struct{})}
	class := groupcommit.Prompt
	keys, bulk := store.BulkKeys(ctx)
	if bulk {
		class = groupcommit.Bulk
	}
	if err := s.queue.Put(ctx, r, class, keys...); err != nil {
		return store.QueueTimeout(ctx, "postgres", err)
	}
	return store.AwaitUpdate(ctx, "postgres", r.done, &r.claim, &r.err)
}

// View implements store.Store: fn reads one REPEATABLE READ snapshot.
// Its statements wait for the database at most the store timeout ctx
// carries (store.WithTimeout), fn's reads included, whatever context fn
// hands them: past it the read fails with database_unavailable.
func (s *Store) View(ctx context.Context, fn func(store.Reader) error) error {
	if s.queue.IsClosed() {
		return errClosed
	}
	bctx, cancel := store.Bound(ctx)
	defer cancel()
	c, err := s.pool.Acquire(bctx)
	if err != nil {
		if bctx.Err() != nil {
			return store.ReadTimeout(bctx, "postgres", bctx.Err())
		}
		return unavailable("connect", err)
	}
	defer c.Release()
	ss := &sess{conn: c.Conn()}
	ss.queue(`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`)
	r := &reader{s: s, ss: ss}
	if bctx != ctx {
		r.ctx = bctx
	}
	err = fn(r)
	if ss.flushes > 0 {
		rctx, cancel := context.WithTimeout(context.Background(), endTimeout)
		if _, rerr := c.Exec(rctx, `ROLLBACK`); rerr != nil {
			closeConn(c.Conn()) // the pool drops it
		}
		cancel()
	}
	return store.ReadTimeout(bctx, "postgres", err)
}

// endTimeout bounds what ends a transaction or a connection outside any
// caller's bound (a read's ROLLBACK, a dropped connection's goodbye): on a
// healthy server it takes a round trip, and on one that stopped answering
// it must not hold the connection, or the writer, for good.
const endTimeout = 5 * time.Second

// closeConn closes a connection that may be broken, waiting at most
// endTimeout for its goodbye to be sent.
func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	c.Close(ctx)
}

// Ping implements store.Store: it reads the gate's tables and commits a
// transaction that holds a transaction id, so PostgreSQL writes its commit
// to the WAL as it does an enqueue's (a read-only server or a WAL it cannot
// write fails it).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.View(ctx, func(r store.Reader) error {
		_, err := r.QueueStats(ctx, store.ProbeTenant)
		return err
	}); err != nil {
		return err
	}
	return s.Update(ctx, func(tx store.Tx) error {
		w := tx.(*writeTx)
		_, err := w.ss.exec(w.c(ctx), `SELECT txid_current()`)
		return err
	})
}

// RefusedCommit implements store.CommitHealth: the latest batch a writer
// gave up on because PostgreSQL was unavailable or refused it (a full disk
// is SQLSTATE 53100).
func (s *Store) RefusedCommit() (time.Time, error) { return s.commits.RefusedCommit() }

// Close waits for queued writes, then closes the pool.
func (s *Store) Close() error {
	if !s.queue.Close() {
		return nil
	}
	s.wg.Wait()
	s.pool.Close()
	return nil
}

// --- the writers

func (s *Store) writer() {
	defer s.wg.Done()
	w := &writer{s: s}
	defer w.release()
	batch := make([]*request, 0, s.opts.MaxBatch)
	for {
		var ok bool
		if batch, ok = s.queue.Next(batch, s.opts.MaxBatch); !ok {
			w.closeChain()
			return
		}
		// The batch is counted before any of its callers is answered, so
		// that a caller reading WriterStats afterwards finds its update.
		s.batches.Add(1)
		s.updates.Add(int64(len(batch)))
		w.mark = time.Now()
		span := tracing.StartBatch("postgresql", len(batch), func(i int) context.Context { return batch[i].ctx })
		w.run(batch)
		span.End()
		w.account()
		w.mark = time.Time{}
	}
}

// writer owns one connection and runs batches on it.
type writer struct {
	s    *Store
	conn *pgxpool.Conn
	pid  uint32
	// chain is the writer's receipt chain as of its last commit. known is
	// false until it is read (or registered), and again after a commit whose
	// outcome was unknown.
	chain chainHead
	// lastCheckpoint is when this writer last recorded a checkpoint, and
	// checkpointed the length of its chain that checkpoint recorded.
	lastCheckpoint time.Time
	checkpointed   int64
	// mark is when the busy time of the batch running was last counted
	// (account); zero when the writer loop runs no batch.
	mark time.Time
}

// account adds the batch's time since mark to the store's busy time. Every
// place that answers callers calls it first, so their batch's time so far
// is counted before they can read WriterStats.
func (w *writer) account() {
	if w.mark.IsZero() {
		return
	}
	now := time.Now()
	w.s.busy.Add(int64(now.Sub(w.mark)))
	w.mark = now
}

// chainHead is a writer's view of its own chain.
type chainHead struct {
	id     int64 // 0 until the writer's first receipt registers it
	seq    int64
	hash   string
	rowSeq int64 // the seq the chain's ledger_chains row holds
	known  bool
}

func (w *writer) release() {
	if w.conn != nil {
		w.s.pidMu.Lock()
		delete(w.s.writerPIDs, w.pid)
		w.s.pidMu.Unlock()
		w.conn.Release()
		w.conn = nil
	}
}

// discard drops a connection that may be broken.
func (w *writer) discard() {
	if w.conn != nil {
		closeConn(w.conn.Conn())
		w.release()
	}
}

func (w *writer) connect() error {
	if w.conn != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.s.opts.Timeout)
	defer cancel()
	c, err := w.s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	w.conn, w.pid = c, c.Conn().PgConn().PID()
	w.s.pidMu.Lock()
	w.s.writerPIDs[w.pid] = true
	w.s.pidMu.Unlock()
	return nil
}

// maxAttempts bounds how often one batch is rerun.
const maxAttempts = 12

// maxMissed bounds the requests a batch sets aside for failed deferred
// writes and guesses (writer.run) before it runs again in strict mode
// instead.
const maxMissed = 64

// firstRunLockWait bounds a batch's first run's wait for a lock (runTx) to
// a few batches' time, well under the server's default deadlock_timeout.
const firstRunLockWait = 50 * time.Millisecond

// firstRunLockWaitSQL sets the bound of a batch's first run.
func (s *Store) firstRunLockWaitSQL() string {
	d := firstRunLockWait
	if s.opts.firstRunLockWait > 0 {
		d = s.opts.firstRunLockWait
	}
	return fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, d.Milliseconds())
}

// retryPause is the pause before attempt n+1 of a batch that failed n times
// with a deadlock or a serialization failure: random, up to 2^n ms capped at
// 250 ms. A request rerun in a transaction of its own after a deadlock is
// the side PostgreSQL tends to abort again (it waits first, so its deadlock
// check runs first); the random pause lets the other side's batch finish.
func retryPause(n int) time.Duration {
	ceiling := min(time.Duration(1)<<min(n, 8)*time.Millisecond, 250*time.Millisecond)
	return time.Duration(rand.Int64N(int64(ceiling))) + time.Millisecond
}

// closeChain records a last checkpoint when the writer's chain grew since
// its last one, so the chain's tail is bound too.
func (w *writer) closeChain() {
	if w.chain.id == 0 || (w.chain.known && w.chain.seq == w.checkpointed) {
		return
	}
	ctx := context.Background()
	r := &request{ctx: ctx, done: make(chan struct{}), fn: func(tx store.Tx) error { return tx.(*writeTx).checkpoint(ctx, true) }}
	w.run([]*request{r})
}

// run runs a batch in one transaction, rerunning it when that may help.
func (w *writer) run(batch []*request) { w.runIn(batch, false) }

// runIn is run, in strict mode from the first run when strict is set.
func (w *writer) runIn(batch []*request, strict bool) {
	live := w.waited(batch)
	if len(live) == 0 {
		return
	}
	bounded := !strict
	// missed are requests whose deferred write or guess failed: they run
	// after the batch, together in strict mode (where a write fails its
	// request at once, and nothing is guessed), however the batch ends.
	var missed []*request
	defer func() {
		if len(missed) > 0 {
			w.runIn(missed, true)
		}
	}()
	began := time.Now()
	for attempt := 1; ; attempt++ {
		out := w.runTx(live, strict, bounded)
		if out.err == nil {
			for _, r := range out.later {
				// Its batch has committed and released its locks: now it
				// waits for its own in key order (counted in finish).
				w.run([]*request{r})
			}
			return
		}
		if out.strict && !strict && len(out.culprits) > 0 && len(missed) < maxMissed {
			// What failed were some requests' own deferred writes (a lost
			// fence) or guesses (a dependency or a settlement answered
			// from a copy), and nothing else: the batch runs again as it
			// was without them, and they run after it in strict mode,
			// where each meets its failure as its own. The requests of one
			// batch are concurrent calls, none answered yet, so this order
			// is as good as the first; a strict rerun of the whole batch
			// would cost every request a round trip for each write.
			rest := make([]*request, 0, len(live))
			var aside []*request
			for _, r := range live {
				if slices.Contains(out.culprits, r) {
					aside = append(aside, r)
				} else {
					rest = append(rest, r)
				}
			}
			if len(rest) > 0 && len(aside) > 0 {
				live = rest
				missed = append(missed, aside...)
				w.s.setAside.Add(int64(len(aside)))
				// Not a retry: the rest runs as if for the first time
				// (its reruns after a deadlock or a lock wait that ran
				// out are counted from here).
				attempt--
				continue
			}
		}
		if out.strict && !strict {
			// A deferred write failed: run the batch again with every write
			// answered at once, so the failure belongs to its request alone.
			strict, bounded = true, false
			w.s.strictReruns.Add(1)
			continue
		}
		// A batch that has spent Options.Timeout failing is not run
		// again: its callers' own timeouts have passed by then (a
		// caller without one, a background job, is answered and tries
		// again later), and a database that stopped answering would
		// otherwise hold the writer for maxAttempts timeouts.
		if !out.retry || attempt >= maxAttempts || time.Since(began) >= w.s.opts.Timeout {
			if host.IsCode(out.err, host.CodeDatabaseUnavailable) {
				w.s.commits.Refused(out.err) // before any caller hears of it
			}
			w.account()
			for _, r := range live {
				r.err = out.err
				close(r.done)
			}
			return
		}
		w.s.retries.Add(1)
		bounded = false
		// Requests whose callers stopped waiting meanwhile (their store
		// timeout passed while the batch was stuck) are not run again:
		// nothing of them was committed, and nobody waits for them.
		if live = w.waited(live); len(live) == 0 {
			return
		}
		if attempt > 1 && len(live) > 1 {
			// A batch takes its requests' locks in request order, not in one
			// order for all writers, so the same mix can deadlock again with
			// another writer's batch: run each request in a transaction of
			// its own (each takes its locks in sorted order).
			for _, r := range live {
				w.run([]*request{r})
			}
			return
		}
		time.Sleep(retryPause(attempt))
	}
}

// waited returns the requests of rs whose callers still wait, finishing the
// others (their context ended: the caller went away or gave up at its
// store timeout) unrun, with their context's error.
func (w *writer) waited(rs []*request) []*request {
	live := rs[:0:0]
	for _, r := range rs {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			w.account()
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	return live
}

// errBatchTimeout is the cause of a batch transaction's context ending at
// Options.Timeout.
var errBatchTimeout = errors.New("the batch reached its timeout")

// txState is what a batch transaction knows about the writer's chain.
type txState struct {
	chain          chainHead
	lastCheckpoint time.Time
	checkpointed   int64
	notify         []string // tenants with newly ready tasks
	// counts journals the transaction's task state changes, added to the
	// writer's shard of queue_counts before commit.
	counts []store.CountDelta
}

// txResult is the outcome of one batch transaction.
type txResult struct {
	err    error // the transaction failed; no request was finished
	retry  bool  // the failed transaction may simply run again
	strict bool  // a deferred write failed: run again with immediate writes
	// culprits, when set with strict, are the requests whose guesses the
	// failed deferred writes checked (depspec.go), and nothing else failed.
	culprits []*request
	// later are the requests that gave way for lock order, undone and not
	// finished: they run after the committed transaction, each alone.
	later []*request
}

// runTx runs reqs in one transaction and commits. On success it finishes every
// request. On failure it finishes nothing and reports whether the batch may be
// rerun.
//
// Unless strict, the writes whose answer a request does not need before it
// goes on (new tasks and receipts, fenced task updates, inbox rows, obligation
// terminations) are deferred: queued into the pipeline with a check read when
// it is next sent, so a batch costs a few round trips, not several per
// request. Those that fail on the server whenever they are wrong (plain
// inserts; fenced updates, through fence_check) go in one round trip with
// the COMMIT, which the server skips after a failure; the others (guesses)
// are read before COMMIT is sent. Should one fail (a conflict, a lost
// fence, a wrong guess), nothing is committed. When the failures are
// requests' own writes or guesses, which name their requests, the batch runs
// again without those, and they run after it (txResult.culprits,
// writer.runIn); otherwise the batch runs again in strict mode. In strict
// mode every write is answered at once and fails its request alone,
// exactly as the engine expects.
func (w *writer) runTx(reqs []*request, strict, bounded bool) txResult {
	if err := w.connect(); err != nil {
		return txResult{err: unavailable("connect", err), retry: true}
	}
	// Every statement of the transaction runs on bg, never on a caller's
	// context (one caller must not break the batch it shares with
	// others), and bg ends after Options.Timeout: a database that stops
	// answering holds the writer no longer (the connection is dropped
	// then; before COMMIT the batch may run again, after it the outcome
	// is unknown).
	bg, cancel := context.WithTimeoutCause(context.Background(), w.s.opts.Timeout, errBatchTimeout)
	defer cancel()
	ss := &sess{conn: w.conn.Conn(), trips: &w.s.writerTrips, stmts: &w.s.writerStmts}
	st := &txState{chain: w.chain, lastCheckpoint: w.lastCheckpoint, checkpointed: w.checkpointed}
	ss.queueCtl(`BEGIN`)
	if bounded {
		// A batch's first run waits for another transaction's lock no
		// longer than firstRunLockWait says: two writers' batches lock rows in
		// their requests' order, not one order, and a deadlock between
		// them would otherwise stand until the server's deadlock_timeout
		// (1 s by default) found it. The batch runs again without the
		// bound (lock_not_available is retried as a deadlock is).
		ss.queueCtl(w.s.firstRunLockWaitSQL())
	}
	opening := len(ss.pre) // BEGIN and its settings
	// late names the batch timeout in err when bg ended at it, and what it
	// means to the batch's callers: before COMMIT was sent nothing was
	// written (a batch that spent its timeout is not run again), after it
	// the outcome is unknown.
	late := func(err error, commitSent bool) error {
		if bg.Err() != nil && errors.Is(context.Cause(bg), errBatchTimeout) {
			if commitSent {
				return store.OutcomeUnknown(fmt.Errorf("no answer within %v: its outcome is unknown (it may still commit); read it back, or retry the same call (%v)", w.s.opts.Timeout, err))
			}
			return fmt.Errorf("no answer within %v, so the update was not made; try again (%v)", w.s.opts.Timeout, err)
		}
		return err
	}
	// fail abandons the transaction before COMMIT was sent. A broken
	// connection is dropped; either way nothing was written, so the batch may
	// run again after a lost connection, a deadlock or a serialization failure.
	fail := func(what string, err error) txResult {
		if ss.deferred != nil {
			if _, rerr := w.conn.Exec(bg, `ROLLBACK`); rerr != nil {
				w.discard()
			}
			var culprits []*request
			if df, ok := ss.deferred.(*deferredFailure); ok {
				culprits = df.culprits
			}
			return txResult{err: unavailable(what, ss.deferred), strict: true, culprits: culprits}
		}
		broken := isBroken(err)
		if broken {
			w.discard()
		} else if ss.flushes > 0 {
			if _, rerr := w.conn.Exec(bg, `ROLLBACK`); rerr != nil {
				w.discard()
			}
		}
		return txResult{err: unavailable(what, late(err, false)), retry: broken || isRetryable(err)}
	}
	wtx := &writeTx{reader: reader{s: w.s, ss: ss, write: true, ctx: bg}, st: st, deferWrites: !strict}
	wtx.locks.alone = len(reqs) == 1
	ss.before = wtx.materialize
	ss.beforeWrite = wtx.beforeWrite
	var later []*request
	for _, r := range reqs {
		r.err = nil
		r.later = false
		wtx.req = r
		if err := r.ctx.Err(); err != nil {
			r.err = err // finished with its own error, wrote nothing
			continue
		}
		if !r.claim.Take() {
			// Its caller gave up before it ran (store.AwaitUpdate): it
			// never runs.
			r.err = context.Cause(r.ctx)
			continue
		}
		mark := *st
		nNotify := len(st.notify)
		wtx.noGuess = false
	again:
		spIdx := len(ss.pre)
		wtx.bh.startRequest(spIdx)
		keysMark := wtx.keys.Mark()
		writtenMark, edgesMark, settledMark, markedMark := len(wtx.written), len(wtx.edges), len(wtx.settled), len(wtx.marked)
		ss.queueCtl(`SAVEPOINT op`)
		flushes := ss.flushes
		ss.failed = nil
		wtx.guessed, wtx.guess = false, nil
		ferr := runFn(r.fn, wtx)
		if ss.deferred != nil {
			return fail("deferred write", ss.deferred)
		}
		if ss.fatal != nil {
			return fail("update", ss.fatal)
		}
		if ferr == nil && ss.failed != nil {
			ferr = ss.failed // fn went on after a failed statement
		}
		sent := ss.flushes != flushes
		if !sent {
			// Rows of ended requests queued in front of its SAVEPOINT
			// since it began (a fenced update of a task they inserted)
			// moved it.
			spIdx = wtx.bh.savepointAt()
		}
		if ferr != nil && sent && ss.failed == nil && wtx.bh.ownUpdates() {
			// Its task updates still wait here. Had each been its own
			// checked statement, the ones after its last send would run
			// before its savepoint is rolled back, and a lost fence among
			// them would rerun the batch strictly, where the request meets
			// it: they are queued so, and do.
			wtx.materialize()
		}
		wtx.bh.endRequest(ferr == nil)
		if ferr != nil {
			wtx.keys.Undo(keysMark) // its rows are dropped or undone
			wtx.written = wtx.written[:writtenMark]
			wtx.edges, wtx.settled, wtx.marked = wtx.edges[:edgesMark], wtx.settled[:settledMark], wtx.marked[:markedMark]
		}
		if ferr == nil {
			if !sent && len(ss.pre) == spIdx+1 {
				ss.truncate(spIdx) // fn queued nothing (its rows written behind wait): no savepoint needed
			} else {
				ss.queueCtl(`RELEASE SAVEPOINT op`)
			}
			continue
		}
		// Undo fn's writes and what it taught us about the chain.
		switch {
		case !sent:
			ss.truncate(spIdx) // nothing reached the database yet: forget it
		case ss.failed != nil:
			// A statement failed, so the transaction is in the aborted state
			// and would refuse even the prepare of the next new statement:
			// roll back now. What fn queued after its last flush is its own.
			ss.truncate(0)
			if _, err := ss.conn.Exec(bg, `ROLLBACK TO SAVEPOINT op; RELEASE SAVEPOINT op`); err != nil {
				ss.note(err)
				return fail("rollback to savepoint", err)
			}
		default:
			ss.queueCtl(`ROLLBACK TO SAVEPOINT op`)
			ss.queueCtl(`RELEASE SAVEPOINT op`)
		}
		notify := st.notify[:nNotify]
		*st = mark
		st.notify = notify
		if wtx.guessed && !errors.Is(ferr, errLockOrder) {
			// Its dependencies were guessed (depspec.go): whatever failed,
			// it runs again with them read, so no refusal rests on a guess.
			wtx.noGuess = true
			goto again
		}
		if errors.Is(ferr, errLockOrder) {
			r.later = true
			later = append(later, r)
			continue
		}
		r.err = ferr
	}
	// The requests' rows written behind join the queue at its end.
	wtx.materializeAtEnd()
	if ss.flushes == 0 && len(ss.pre) == opening {
		// Nothing but BEGIN: no transaction to commit.
		ss.truncate(0)
		w.finish(reqs)
		return txResult{later: later}
	}
	if err := wtx.flushCounts(bg); err != nil {
		if ss.fatal != nil {
			err = ss.fatal
		}
		return fail("queue counts", err)
	}
	wtx.writeHead()
	if st.chain.id != 0 && st.chain.seq != st.checkpointed && time.Since(st.lastCheckpoint) >= w.s.opts.CheckpointEvery {
		if err := wtx.checkpoint(bg, false); err != nil {
			if ss.fatal != nil {
				err = ss.fatal
			}
			return fail("ledger checkpoint", err)
		}
	}
	if ss.unasserted > 0 {
		// Read the answers of deferred writes that can go wrong without
		// failing on the server before COMMIT is sent: a wrong one must
		// stop the commit, not follow it. The others (stmt.asserted) go
		// in one round trip with the COMMIT: a failed one aborts the
		// transaction, and the server skips the COMMIT behind it.
		if err := ss.flush(bg); err != nil {
			if ss.fatal != nil && ss.deferred == nil {
				err = ss.fatal
			}
			return fail("deferred writes", err)
		}
	}
	if bounded {
		// COMMIT waits on a lock of its own when the transaction notifies
		// (the server serializes notifying commits): unbounded, so a commit
		// never fails for a wait.
		ss.queueCtl(`SET LOCAL lock_timeout TO DEFAULT`)
	}
	seen := map[string]bool{}
	for _, t := range st.notify {
		if !seen[t] {
			seen[t] = true
			ss.queueCtl(`SELECT pg_notify($1, $2)`, w.s.opts.Channel, t)
		}
	}
	br, err := ss.send(bg, stmt{sql: `COMMIT`})
	if err != nil {
		if refusedBeforeCommit(err, ss.deferred) {
			// A statement before COMMIT failed, so the server skipped COMMIT.
			return fail("commit", err)
		}
		w.discard()
		w.forgetChain(st)
		return txResult{err: unavailable("commit", late(err, true))} // COMMIT may have run: never rerun
	}
	tag, cerr := br.Exec()
	if err2 := br.Close(); cerr == nil {
		cerr = err2
	}
	if cerr != nil {
		// The outcome is unknown: never rerun, report unavailable.
		w.discard()
		w.forgetChain(st)
		return txResult{err: unavailable("commit", late(cerr, true))}
	}
	if tag.String() != "COMMIT" {
		// The transaction was aborted (COMMIT answered ROLLBACK): nothing was written.
		return txResult{err: host.Errorf(host.CodeDatabaseUnavailable, "postgres commit failed: the transaction was rolled back"), retry: true}
	}
	w.chain, w.lastCheckpoint, w.checkpointed = st.chain, st.lastCheckpoint, st.checkpointed
	w.s.recent.put(wtx.written)
	w.s.recent.mark(wtx.marked)
	w.s.edges.put(wtx.edges, wtx.settled)
	w.finish(reqs)
	return txResult{later: later}
}

// refusedBeforeCommit reports whether err, from the round trip that
// carried COMMIT, is a statement's failure on the server before it (so the
// server skipped the COMMIT and nothing was written). deferred is the
// session's deferred failure, if any: a check's own finding, not the
// server's, leaves the COMMIT's outcome unknown (asserted checks never make
// one; this keeps a mistake from rerunning a batch that committed).
func refusedBeforeCommit(err, deferred error) bool {
	if df, ok := deferred.(*deferredFailure); ok {
		var mm *mismatch
		if errors.As(df.err, &mm) {
			return mm.aborted
		}
		return pgCode(df.err) != ""
	}
	return !isBroken(err)
}

// forgetChain follows a commit whose outcome is unknown: the chain's head is
// read again before the next append, and a chain this transaction registered
// (which may not exist) is given up for a new one.
func (w *writer) forgetChain(st *txState) {
	if st.chain.id != w.chain.id {
		w.chain = chainHead{}
		return
	}
	w.chain.known = false
}

// finish finishes every request of a committed transaction but those that
// run again after it (later), counting those before any caller hears of its
// batch's commit.
func (w *writer) finish(rs []*request) {
	w.account()
	for _, r := range rs {
		if r.later {
			w.s.lockReorders.Add(1)
		}
	}
	for _, r := range rs {
		if !r.later {
			close(r.done)
		}
	}
}

// runFn runs fn and turns a panic into an internal error, so one bad call
// cannot take the writer down.
func runFn(fn func(store.Tx) error, tx store.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = host.Errorf(host.CodeInternal, "panic in store update: %v", p)
		}
	}()
	return fn(tx)
}
