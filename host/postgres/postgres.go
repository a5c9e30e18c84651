// Package postgres is AsyncGate's store for several gate hosts on one
// PostgreSQL database (pgx v5). Its semantics are host/sqlite's, checked by the
// same conformance suite (host/store/storetest):
//
//   - Group commit: every Update goes to a writer goroutine that runs all the
//     updates waiting at that moment in one transaction, each in its own
//     SAVEPOINT, and acknowledges them together after one durable commit. The
//     savepoints and other statements whose answer nobody waits for are
//     pipelined in front of the next statement, so they cost no round trip.
//   - One receipt chain across hosts: the first receipt a batch appends locks
//     the single ledger_head row (NOWAIT); seq, prev_hash and hash follow from
//     it, and the row is updated before commit. A writer never waits for that
//     lock while it holds other row locks: when the head is busy, the requests
//     that need it are deferred to a second transaction that takes the head
//     lock first. This rules out deadlocks through the head row.
//   - Leasing and the expiry sweep use FOR UPDATE SKIP LOCKED, so hosts never
//     contend for the same queued task or the same expired lease; every state
//     change is also fenced in its UPDATE.
//   - LISTEN/NOTIFY: a commit that makes a task ready notifies the tenant;
//     Subscribe forwards other hosts' notifications to the engine.
//
// A deadlock or serialization failure, or a connection lost before COMMIT was
// sent, reruns the whole batch (store.Store allows it); a connection lost
// during COMMIT is reported as database_unavailable, as the outcome is unknown.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options tune a Store. The zero value is the default.
type Options struct {
	// Schema, when set, is created if missing and used as the search_path of
	// every connection; it isolates one gate deployment (or one test) from
	// another in the same database.
	Schema string
	// MaxBatch caps how many updates share one commit (default 256).
	MaxBatch int
	// Writers is the number of writer goroutines, each with its own
	// connection (default 1). More writers overlap one batch's commit with the
	// next batch's work.
	Writers int
	// MaxConns is the size of the connection pool for reads and writers
	// (default 8 + Writers). The listener has a connection of its own.
	MaxConns int
	// Channel is the LISTEN/NOTIFY channel (default "asyncgate_ready", with
	// "_" + Schema appended when Schema is set).
	Channel string
}

// Store is the PostgreSQL driver. It implements store.Store and store.Notifier.
type Store struct {
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig
	opts    Options

	reqs     chan *request
	closed   chan struct{}
	wg       sync.WaitGroup
	closeMu  sync.RWMutex
	isClosed bool

	// writerPIDs are the backend PIDs of this store's writer connections, so
	// Subscribe can skip this host's own notifications (the engine already
	// woke its local waiters).
	pidMu      sync.Mutex
	writerPIDs map[uint32]bool

	retries atomic.Int64 // batches rerun after a deadlock or a lost connection
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Notifier = (*Store)(nil)
)

type request struct {
	ctx  context.Context
	fn   func(store.Tx) error
	err  error
	done chan struct{}
}

// Open connects to the database at url (a postgres:// URL or a libpq
// connection string), applies the embedded migrations in order and starts the
// writers.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Writers <= 0 {
		opts.Writers = 1
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
	s := &Store{pool: pool, connCfg: cfg.ConnConfig, opts: opts,
		reqs: make(chan *request, 4096), closed: make(chan struct{}), writerPIDs: map[uint32]bool{}}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
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

// LedgerHead returns the recorded last link of the receipt chain
// (engine.VerifyLedger checks that the chain ends there).
func (s *Store) LedgerHead(ctx context.Context) (int64, string, error) {
	var seq int64
	var hash string
	err := s.pool.QueryRow(ctx, `SELECT seq, hash FROM ledger_head WHERE id = 1`).Scan(&seq, &hash)
	if err != nil {
		return 0, "", unavailable("read ledger head", err)
	}
	return seq, hash, nil
}

var errClosed = host.Errorf(host.CodeDatabaseUnavailable, "the store is closed")

func unavailable(what string, err error) error {
	return host.WrapError(host.CodeDatabaseUnavailable, err, "postgres "+what+" failed: "+err.Error())
}

// Update implements store.Store with group commit.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	r := &request{ctx: ctx, fn: fn, done: make(chan struct{})}
	s.closeMu.RLock()
	if s.isClosed {
		s.closeMu.RUnlock()
		return errClosed
	}
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		s.closeMu.RUnlock()
		return ctx.Err()
	}
	s.closeMu.RUnlock()
	<-r.done // once queued, the outcome is waited for: it may have been committed
	return r.err
}

// View implements store.Store: fn reads one REPEATABLE READ snapshot.
func (s *Store) View(ctx context.Context, fn func(store.Reader) error) error {
	s.closeMu.RLock()
	closed := s.isClosed
	s.closeMu.RUnlock()
	if closed {
		return errClosed
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return unavailable("connect", err)
	}
	defer c.Release()
	ss := &sess{conn: c.Conn()}
	ss.queue(`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`)
	err = fn(&reader{s: s, ss: ss})
	if ss.flushes > 0 {
		if _, rerr := c.Exec(context.Background(), `ROLLBACK`); rerr != nil {
			c.Conn().Close(context.Background()) // the pool drops it
		}
	}
	return err
}

// Ping implements store.Store: it reads and writes the database.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return unavailable("ping", err)
	}
	return s.Update(ctx, func(tx store.Tx) error {
		_, err := tx.(*writeTx).ss.exec(ctx, `SELECT 1`)
		return err
	})
}

// Close waits for queued writes, then closes the pool.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.isClosed {
		s.closeMu.Unlock()
		return nil
	}
	s.isClosed = true
	s.closeMu.Unlock()
	close(s.closed)
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
		var first *request
		select {
		case first = <-s.reqs:
		case <-s.closed:
			// Drain what was queued before Close.
			for {
				select {
				case r := <-s.reqs:
					w.run([]*request{r})
				default:
					return
				}
			}
		}
		batch = append(batch[:0], first)
	drain:
		for len(batch) < s.opts.MaxBatch {
			select {
			case r := <-s.reqs:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		w.run(batch)
	}
}

// writer owns one connection and runs batches on it.
type writer struct {
	s    *Store
	conn *pgxpool.Conn
	pid  uint32
	// eager makes the next batch lock the ledger head before anything else.
	eager bool
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
		w.conn.Conn().Close(context.Background())
		w.release()
	}
}

func (w *writer) connect() error {
	if w.conn != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
const maxAttempts = 8

// run runs a batch: first in one transaction; requests that found the ledger
// head locked by another host are then run in a second transaction that takes
// the head lock before anything else.
func (w *writer) run(batch []*request) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	// While other hosts keep the head busy, a batch that appends receipts
	// takes the head lock first (it holds nothing else yet, so waiting is
	// safe) instead of running twice: once to find the head busy, once more
	// deferred. A batch that appends nothing returns to asking lazily.
	deferred, appended := w.runWithRetry(live, w.eager)
	contended := len(deferred) > 0
	if contended {
		_, appended = w.runWithRetry(deferred, true)
	}
	w.eager = contended || (w.eager && appended)
}

func (w *writer) runWithRetry(reqs []*request, headFirst bool) (deferred []*request, appended bool) {
	for attempt := 1; ; attempt++ {
		out := w.runTx(reqs, headFirst)
		if out.err == nil {
			return out.deferred, out.appended
		}
		err := out.err
		if !out.retry || attempt >= maxAttempts {
			for _, r := range reqs {
				r.err = err
				close(r.done)
			}
			return nil, false
		}
		w.s.retries.Add(1)
		if attempt > 1 {
			time.Sleep(time.Duration(attempt*attempt) * time.Millisecond)
		}
	}
}

// txState is what a batch transaction knows about the ledger head.
type txState struct {
	headLocked bool // this transaction holds the ledger_head row lock
	headBusy   bool // another transaction held it when this one asked
	headFirst  bool // the lock was taken before any request ran
	seq        int64
	hash       string
	dirty      bool
	notify     []string // tenants with newly ready tasks
}

// txResult is the outcome of one batch transaction.
type txResult struct {
	deferred []*request // requests that must wait for the ledger head
	appended bool       // the transaction appended receipts
	err      error      // the transaction failed; no request was finished
	retry    bool       // the failed transaction may simply run again
}

// runTx runs reqs in one transaction and commits. On success it finishes every
// request it did not defer and returns the deferred ones. On failure it
// finishes nothing and reports whether the batch may be rerun.
func (w *writer) runTx(reqs []*request, headFirst bool) txResult {
	if err := w.connect(); err != nil {
		return txResult{err: unavailable("connect", err), retry: true}
	}
	bg := context.Background()
	ss := &sess{conn: w.conn.Conn()}
	st := &txState{}
	ss.queue(`BEGIN`)
	// fail abandons the transaction before COMMIT was sent. A broken
	// connection is dropped; either way nothing was written, so the batch may
	// run again after a lost connection, a deadlock or a serialization failure.
	fail := func(what string, err error) txResult {
		broken := isBroken(err)
		if broken {
			w.discard()
		} else if ss.flushes > 0 {
			if _, rerr := w.conn.Exec(bg, `ROLLBACK`); rerr != nil {
				w.discard()
			}
		}
		return txResult{err: unavailable(what, err), retry: broken || isRetryable(err)}
	}
	if headFirst {
		if err := ss.queryRow(bg, []any{&st.seq, &st.hash}, `SELECT seq, hash FROM ledger_head WHERE id = 1 FOR UPDATE`); err != nil {
			return fail("lock ledger head", err)
		}
		st.headLocked, st.headFirst = true, true
	}
	wtx := &writeTx{reader: reader{s: w.s, ss: ss, write: true}, st: st}
	var ok, deferred []*request
	for _, r := range reqs {
		r.err = nil
		if err := r.ctx.Err(); err != nil {
			r.err = err
			ok = append(ok, r) // finished with its own error, wrote nothing
			continue
		}
		mark := *st
		nNotify := len(st.notify)
		spIdx := len(ss.pre)
		ss.queue(`SAVEPOINT op`)
		flushes := ss.flushes
		ss.failed = nil
		wtx.deferred = false
		ferr := runFn(r.fn, wtx)
		if ss.fatal != nil {
			return fail("update", ss.fatal)
		}
		if ferr == nil && ss.failed != nil {
			ferr = ss.failed // fn went on after a failed statement
		}
		sent := ss.flushes != flushes
		if ferr == nil && !wtx.deferred {
			if !sent && len(ss.pre) == spIdx+1 {
				ss.pre = ss.pre[:spIdx] // fn wrote nothing: no savepoint needed
			} else {
				ss.queue(`RELEASE SAVEPOINT op`)
			}
			ok = append(ok, r)
			continue
		}
		// Undo fn's writes and what it taught us about the head.
		switch {
		case !sent:
			ss.pre = ss.pre[:spIdx] // nothing reached the database yet: forget it
		case ss.failed != nil:
			// A statement failed, so the transaction is in the aborted state
			// and would refuse even the prepare of the next new statement:
			// roll back now. What fn queued after its last flush is its own.
			ss.pre = ss.pre[:0]
			if _, err := ss.conn.Exec(bg, `ROLLBACK TO SAVEPOINT op; RELEASE SAVEPOINT op`); err != nil {
				ss.note(err)
				return fail("rollback to savepoint", err)
			}
		default:
			ss.queue(`ROLLBACK TO SAVEPOINT op`)
			ss.queue(`RELEASE SAVEPOINT op`)
		}
		busy := st.headBusy
		*st = mark
		st.headBusy = busy
		st.notify = st.notify[:nNotify]
		if wtx.deferred {
			deferred = append(deferred, r)
			continue
		}
		r.err = ferr
		ok = append(ok, r)
	}
	if ss.flushes == 0 && len(ss.pre) == 1 {
		// Nothing but BEGIN: no transaction to commit.
		ss.pre = ss.pre[:0]
		finish(ok)
		return txResult{deferred: deferred}
	}
	if st.dirty {
		ss.queue(`UPDATE ledger_head SET seq = $1, hash = $2 WHERE id = 1`, st.seq, st.hash)
	}
	seen := map[string]bool{}
	for _, t := range st.notify {
		if !seen[t] {
			seen[t] = true
			ss.queue(`SELECT pg_notify($1, $2)`, w.s.opts.Channel, t)
		}
	}
	br, err := ss.send(bg, stmt{sql: `COMMIT`})
	if err != nil {
		if !isBroken(err) {
			// A statement before COMMIT failed, so the server skipped COMMIT.
			return fail("commit", err)
		}
		w.discard()
		return txResult{err: unavailable("commit", err)} // COMMIT may have run: never rerun
	}
	tag, cerr := br.Exec()
	if err2 := br.Close(); cerr == nil {
		cerr = err2
	}
	if cerr != nil {
		// The outcome is unknown: never rerun, report unavailable.
		w.discard()
		return txResult{err: unavailable("commit", cerr)}
	}
	if tag.String() != "COMMIT" {
		// The transaction was aborted (COMMIT answered ROLLBACK): nothing was written.
		return txResult{err: host.Errorf(host.CodeDatabaseUnavailable, "postgres commit failed: the transaction was rolled back"), retry: true}
	}
	finish(ok)
	return txResult{deferred: deferred, appended: st.dirty}
}

func finish(rs []*request) {
	for _, r := range rs {
		close(r.done)
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

// errHeadBusy defers a request whose receipt must wait for another host's
// ledger head lock.
var errHeadBusy = errors.New("postgres: ledger head is locked by another transaction")
