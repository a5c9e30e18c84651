// Package sqlite is AsyncGate's embedded store: one SQLite file in WAL mode with
// synchronous=FULL, so an acknowledged write is on disk. Throughput comes from
// group commit: every Update goes to a single writer goroutine that runs all the
// updates waiting at that moment in one transaction, each in its own savepoint,
// and acknowledges them together after one fsync'd commit.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/groupcommit"
	"github.com/asyncgate/asyncgate/host/tracing"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options tune a Store. The zero value is the durable default.
type Options struct {
	// MaxBatch caps how many updates share one commit (default 512).
	MaxBatch int
	// Synchronous overrides PRAGMA synchronous (default FULL). Only benchmarks
	// that measure what durability costs should change it.
	Synchronous string
	// ReadConns is the size of the read pool (default 4).
	ReadConns int
	// MustExist refuses to create the database: a missing file is an error
	// wrapping fs.ErrNotExist. Commands that work on an existing gate set it.
	MustExist bool
	// NoMigrate refuses a database with migrations not yet applied
	// (store.OlderSchemaError) instead of applying them. The commands that
	// only look at or tend an existing gate set it.
	NoMigrate bool
	// CheckpointEvery is how often, at most, the writer records a ledger
	// checkpoint while it appends receipts (default 10 s). Close records
	// one too.
	CheckpointEvery time.Duration
}

// Store is the SQLite driver. It implements store.Store.
type Store struct {
	path string
	// file is the database file as opened: Ping finds it removed or
	// replaced under the gate (nil when it could not be read at open).
	file os.FileInfo
	wdb  *sql.DB // exactly one connection: the writer
	rdb  *sql.DB // readers
	opts Options
	// stateRanges bounds the index ranges a list by state merges
	// (maxStateRanges; tests lower it to reach the walk past the bound).
	stateRanges int
	// onStatement, when set, is called with each statement a reader or
	// writer runs (tests count them); set it before the store is used.
	onStatement func(query string)

	queue *groupcommit.Queue[*request]
	done  chan struct{}

	stmtMu      sync.Mutex
	stmts       map[*sql.DB]map[string]*sql.Stmt
	pending     []string
	stmtsClosed bool
	prepWG      sync.WaitGroup

	// readyHooks are called once a batch commits with the waiters its
	// settling moved to queued (store.ReadyHooker).
	readyMu    sync.Mutex
	readyHooks []*func(tenant, taskType string)

	batches, ops atomic.Int64
	busy         atomic.Int64 // nanoseconds the writer spent running batches
	commits      store.CommitWatch

	// chain is the writer's view of its own receipt chain; only the writer
	// goroutine touches it.
	chain chainState
	// lastCheckpoint is when the writer last wrote a checkpoint, and
	// checkpointed the length of its chain that checkpoint recorded.
	lastCheckpoint time.Time
	checkpointed   int64
}

// chainState is what the writer knows of its own receipt chain and of the
// ledger's global order within the current transaction.
type chainState struct {
	id     int64  // this store's chain, 0 until its first receipt registers it
	seq    int64  // chain_seq of the chain's last receipt
	hash   string // hash of the chain's last receipt
	rowSeq int64  // the seq the chain's ledger_chains row holds in this transaction
	global int64  // the ledger's last receipts.seq
	loaded bool   // global and the chain's head were read in this transaction
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.WriterStatser = (*Store)(nil)
	_ store.CommitHealth  = (*Store)(nil)
	_ store.ReadyHooker   = (*Store)(nil)
)

type request struct {
	// ctx is the caller's, bounded by its store timeout (store.Bound).
	ctx  context.Context
	fn   func(store.Tx) error
	err  error
	done chan struct{}
	// claim settles whether the writer runs it or its caller gave up on it.
	claim groupcommit.Claim
}

// Open opens (creating if needed, unless opts.MustExist) the database file at
// path and applies the embedded migrations in order. An existing file that is
// empty or holds no gate database is refused with ErrNotGateDatabase and left
// as it is.
func Open(path string, opts Options) (*Store, error) {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 512
	}
	if opts.Synchronous == "" {
		opts.Synchronous = "FULL"
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	if opts.CheckpointEvery <= 0 {
		opts.CheckpointEvery = 10 * time.Second
	}
	exists, err := checkFile(path, opts.MustExist)
	if err != nil {
		return nil, err
	}
	created := false
	if exists {
		if err := checkGateSchema(path); err != nil {
			return nil, err
		}
		privateFiles(path)
	} else {
		if dir := filepath.Dir(path); dir != "" {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("sqlite: create data folder: %w", err)
			}
		}
		// Create the file 0600 before SQLite does (it would create it 0644
		// under the usual umask): its -wal and -shm files take its mode.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("sqlite: create %s: %w", path, err)
		}
		f.Close()
		created = true
	}
	ok := false
	defer func() {
		if created && !ok {
			// Leave no empty file behind: the next start would refuse it.
			if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
				os.Remove(path)
			}
		}
	}()
	dsn := func(extra string) string {
		return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(off)" + extra
	}
	wdb, err := openPool(dsn("&_pragma=synchronous(" + opts.Synchronous + ")&_txlock=immediate"))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	if err := wdb.Ping(); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s := &Store{path: path, wdb: wdb, opts: opts, stateRanges: maxStateRanges, queue: groupcommit.New[*request](4096),
		done: make(chan struct{}), stmts: map[*sql.DB]map[string]*sql.Stmt{}}
	if err := s.migrate(); err != nil {
		wdb.Close()
		return nil, err
	}
	rdb, err := openPool(dsn("&_pragma=query_only(1)"))
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("sqlite: open readers: %w", err)
	}
	rdb.SetMaxOpenConns(opts.ReadConns)
	rdb.SetMaxIdleConns(opts.ReadConns)
	s.rdb = rdb
	s.file, _ = os.Stat(path)
	go s.writer()
	ok = true
	return s, nil
}

// privateFiles narrows the database file and its -wal and -shm files to
// their owner (0600) when an older gate left them readable by others. It is
// best effort: a file the gate's user does not own keeps its mode.
func privateFiles(path string) {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o077 != 0 {
			_ = os.Chmod(p, fi.Mode().Perm()&0o600)
		}
	}
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Driver implements store.Store.
func (s *Store) Driver() string { return "sqlite" }

func (s *Store) migrate() error {
	ctx := context.Background()
	if _, err := s.wdb.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("sqlite: migrations table: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	known := 0
	if len(names) > 0 {
		fmt.Sscanf(filepath.Base(names[len(names)-1]), "%04d_", &known)
	}
	var applied int
	if err := s.wdb.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&applied); err != nil {
		return fmt.Errorf("sqlite: read migrations: %w", err)
	}
	if applied > known {
		return store.NewerSchemaError("sqlite", applied, known)
	}
	for _, name := range names {
		var v int
		if _, err := fmt.Sscanf(filepath.Base(name), "%04d_", &v); err != nil {
			return fmt.Errorf("sqlite: migration %s has no version prefix", name)
		}
		var n int
		if err := s.wdb.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, v).Scan(&n); err != nil {
			return fmt.Errorf("sqlite: read migrations: %w", err)
		}
		if n > 0 {
			continue
		}
		if s.opts.NoMigrate {
			return store.OlderSchemaError("sqlite", applied, known)
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		tx, err := s.wdb.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("sqlite: migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("sqlite: migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, v, time.Now().UnixMicro()); err != nil {
			tx.Rollback()
			return fmt.Errorf("sqlite: migration %d: %w", v, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("sqlite: migration %d: %w", v, err)
		}
	}
	return nil
}

// LedgerHead returns the ledger's last receipt seq and the last checkpoint's
// hash (the value to keep outside the database to detect a rewrite).
func (s *Store) LedgerHead(ctx context.Context) (int64, string, error) {
	var seq int64
	var hash string
	err := s.rdb.QueryRowContext(ctx, `SELECT (SELECT coalesce(max(seq), 0) FROM receipts), hash FROM ledger_checkpoint_head WHERE id = 1`).Scan(&seq, &hash)
	return seq, hash, err
}

// Checkpoint records a ledger checkpoint now, through the writer.
func (s *Store) Checkpoint(ctx context.Context) error {
	return s.Update(ctx, func(tx store.Tx) error {
		w := tx.(*writeTx)
		return w.checkpoint(ctx)
	})
}

// stmt returns the statement for query prepared on db, or nil if it is not
// prepared yet, in which case it is queued for preparation: the writer's
// queries between batches, readers' in the background.
func (s *Store) stmt(db *sql.DB, query string) *sql.Stmt {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	m := s.stmts[db]
	if m == nil {
		m = map[string]*sql.Stmt{}
		s.stmts[db] = m
	}
	if st, ok := m[query]; ok {
		return st // nil while its preparation is pending
	}
	m[query] = nil
	if db == s.wdb {
		s.pending = append(s.pending, query)
	} else if !s.stmtsClosed {
		s.prepWG.Add(1)
		go func() {
			defer s.prepWG.Done()
			s.prepare(db, query)
		}()
	}
	return nil
}

func (s *Store) prepare(db *sql.DB, query string) {
	st, err := db.PrepareContext(context.Background(), query)
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if err != nil {
		delete(s.stmts[db], query) // try again next time
		return
	}
	if s.stmts[db] == nil || s.stmtsClosed {
		st.Close()
		return
	}
	s.stmts[db][query] = st
}

// preparePending prepares the writer's queued statements; the writer calls it
// between batches, when its connection is free.
func (s *Store) preparePending() {
	s.stmtMu.Lock()
	qs := s.pending
	s.pending = nil
	s.stmtMu.Unlock()
	for _, q := range qs {
		s.prepare(s.wdb, q)
	}
}

var errClosed = groupcommit.ErrClosed

// Update implements store.Store with group commit.
//
// The caller waits for the outcome at most the store timeout its context
// carries (store.WithTimeout), as on PostgreSQL (store.AwaitUpdate).
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
		return store.QueueTimeout(ctx, "sqlite", err)
	}
	return store.AwaitUpdate(ctx, "sqlite", r.done, &r.claim, &r.err)
}

func (s *Store) writer() {
	defer close(s.done)
	batch := make([]*request, 0, s.opts.MaxBatch)
	for {
		var ok bool
		if batch, ok = s.queue.Next(batch, s.opts.MaxBatch); !ok {
			return
		}
		s.runBatch(batch)
		s.preparePending()
	}
}

// WriterStats implements store.WriterStatser.
func (s *Store) WriterStats() store.WriterStats {
	st := store.WriterStats{Writers: 1, Batches: s.batches.Load(), Updates: s.ops.Load(), Busy: time.Duration(s.busy.Load())}
	h := s.queue.HoldStats()
	st.EnqueuesHeld, st.EnqueueHold, st.EnqueueHoldsExpired, st.EnqueuesWaiting = h.Held, h.Waited, h.Expired, h.Waiting
	return st
}

// runBatch runs a batch in one transaction. It first runs it optimistically,
// without savepoints: an update that fails before writing anything needs no
// undo, which is nearly every failure (a lost lease, a bad id). Only when an
// update fails after it wrote does the batch roll back and run again with a
// savepoint around each update, so that failure undoes itself alone.
func (s *Store) runBatch(batch []*request) {
	// The batch is counted, and its time (in finish), before any of its
	// callers is answered, so that a caller reading WriterStats afterwards
	// finds its update.
	start := time.Now()
	s.batches.Add(1)
	s.ops.Add(int64(len(batch)))
	span := tracing.StartBatch("sqlite", len(batch), func(i int) context.Context { return batch[i].ctx })
	defer span.End()
	if s.tryBatch(batch, false, start) {
		return
	}
	span.AddEvent("rerun with a savepoint per update")
	s.tryBatch(batch, true, start)
}

// tryBatch runs and commits batch and reports true, or, in optimistic mode,
// rolls back and reports false when an update failed after writing.
func (s *Store) tryBatch(batch []*request, savepoints bool, began time.Time) bool {
	ctx := context.Background()
	finish := func(err error) bool {
		s.busy.Add(int64(time.Since(began)))
		if err != nil {
			s.commits.Refused(err) // before any caller hears of it: a probe after it sees it
		}
		for _, r := range batch {
			if err != nil && r.err == nil {
				r.err = err
			}
			close(r.done)
		}
		return true
	}
	for _, r := range batch {
		r.err = nil
	}
	start := s.chain
	start.loaded = false
	s.chain = start
	ckAt, ckSeq := s.lastCheckpoint, s.checkpointed
	restore := func() {
		s.chain = start
		s.lastCheckpoint, s.checkpointed = ckAt, ckSeq
	}
	abort := func(tx *sql.Tx, what string, err error) bool {
		tx.Rollback()
		restore()
		return finish(unavailable(what, err))
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return finish(unavailable("begin", err))
	}
	wtx := &writeTx{reader: reader{s: s, db: s.wdb, tx: tx}}
	wtx.wb = wtx
	anyOK := false
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		if !r.claim.Take() {
			r.err = context.Cause(r.ctx) // its caller gave up before it ran: it never runs
			continue
		}
		if savepoints {
			if _, err := tx.ExecContext(ctx, "SAVEPOINT op"); err != nil {
				return abort(tx, "savepoint", err)
			}
		}
		mark := s.chain
		markCk, markCkSeq := s.lastCheckpoint, s.checkpointed
		nCounts, nObligations := len(wtx.counts), len(wtx.obligations)
		wtx.ended, wtx.endedTerms = nObligations, wtx.endedTerms[:0]
		behindAt := wtx.mark()
		wtx.wrote, wtx.deps = false, nil
		r.err = runFn(r.fn, wtx)
		if wtx.failed != nil && !savepoints {
			// Rows written behind were refused: find whose with a
			// savepoint per update.
			tx.Rollback()
			restore()
			return false
		}
		if savepoints {
			// The update's rows are written inside its own savepoint: a
			// clash with a committed row is its error alone.
			if r.err == nil {
				r.err = wtx.flushRows(ctx)
			}
			wtx.failed = nil
		}
		switch {
		case r.err != nil && !savepoints && wtx.wrote:
			// Undo needs a savepoint: start over with one per update.
			tx.Rollback()
			restore()
			return false
		case r.err != nil && savepoints:
			_, err1 := tx.ExecContext(ctx, "ROLLBACK TO op")
			_, err2 := tx.ExecContext(ctx, "RELEASE op")
			if err1 != nil || err2 != nil {
				return abort(tx, "rollback to savepoint", errors.Join(err1, err2))
			}
			fallthrough
		case r.err != nil:
			s.chain = mark
			s.lastCheckpoint, s.checkpointed = markCk, markCkSeq
			wtx.counts = wtx.counts[:nCounts]
			wtx.undo(behindAt)
			if nObligations <= len(wtx.obligations) {
				wtx.obligations = wtx.obligations[:nObligations]
			}
			for _, i := range wtx.endedTerms {
				if i < len(wtx.obligations) {
					wtx.obligations[i].terminatedBy = "" // an ended update's obligation it terminated in memory
				}
			}
		default:
			if savepoints {
				// The update's obligations belong inside its savepoint.
				if err := wtx.flushObligations(ctx); err != nil {
					return abort(tx, "obligations", err)
				}
				if _, err := tx.ExecContext(ctx, "RELEASE op"); err != nil {
					return abort(tx, "release savepoint", err)
				}
			}
			anyOK = true
		}
	}
	if !anyOK {
		tx.Rollback()
		restore()
		return finish(nil)
	}
	if err := wtx.flushRows(ctx); err != nil {
		if !savepoints {
			tx.Rollback()
			restore()
			return false
		}
		return abort(tx, "tasks and receipts", err)
	}
	if err := wtx.flushObligations(ctx); err != nil {
		return abort(tx, "obligations", err)
	}
	if err := wtx.writeHead(ctx); err != nil {
		return abort(tx, "ledger chain head", err)
	}
	if s.chain.id != 0 && s.chain.seq != s.checkpointed && time.Since(s.lastCheckpoint) >= s.opts.CheckpointEvery {
		if err := wtx.checkpoint(ctx); err != nil {
			return abort(tx, "ledger checkpoint", err)
		}
	}
	if err := wtx.flushCounts(ctx); err != nil {
		return abort(tx, "queue counts", err)
	}
	if err := tx.Commit(); err != nil {
		return abort(tx, "commit", err)
	}
	s.wakeReady(wtx.readied)
	return finish(nil)
}

// AddReadyHook implements store.ReadyHooker.
func (s *Store) AddReadyHook(hook func(tenant, taskType string)) (remove func()) {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	h := &hook
	s.readyHooks = append(s.readyHooks, h)
	return func() {
		s.readyMu.Lock()
		defer s.readyMu.Unlock()
		s.readyHooks = slices.DeleteFunc(slices.Clone(s.readyHooks), func(x *func(string, string)) bool { return x == h })
	}
}

// hearsReady reports whether a ready hook was added: only then may a
// batch settle its successes' waiters at its end (writeSettles).
func (s *Store) hearsReady() bool {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	return len(s.readyHooks) > 0
}

// wakeReady calls the ready hooks with the waiters a committed batch moved
// to queued (a waiter whose update's savepoint was rolled back may be among
// them: a wake-up is a hint, and a long-poll reads the queue).
func (s *Store) wakeReady(ready []*host.Task) {
	if len(ready) == 0 {
		return
	}
	s.readyMu.Lock()
	hooks := s.readyHooks
	s.readyMu.Unlock()
	for _, t := range ready {
		for _, h := range hooks {
			(*h)(t.Tenant, t.Type)
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

func unavailable(what string, err error) error {
	return host.WrapError(host.CodeDatabaseUnavailable, err, "sqlite "+what+" failed: "+err.Error())
}

// RefusedCommit implements store.CommitHealth: the latest batch SQLite
// refused to begin or commit (a full disk, a damaged file).
func (s *Store) RefusedCommit() (time.Time, error) { return s.commits.RefusedCommit() }

// View implements store.Store.
func (s *Store) View(ctx context.Context, fn func(store.Reader) error) error {
	if s.queue.IsClosed() {
		return errClosed
	}
	// The read transaction ends at the store timeout ctx carries
	// (store.WithTimeout): its reads fail then.
	bctx, cancel := store.Bound(ctx)
	defer cancel()
	tx, err := s.rdb.BeginTx(bctx, nil)
	if err != nil {
		return store.ReadTimeout(bctx, "sqlite", unavailable("begin read", err))
	}
	defer tx.Rollback()
	return store.ReadTimeout(bctx, "sqlite", fn(&reader{s: s, db: s.rdb, tx: tx}))
}

// Ping implements store.Store: it reads the database and commits a real
// write through the writer, so a full disk or a damaged file shows here as
// it would on the next enqueue. The write sets the database header's
// application id (the same value every time; SQLite rewrites the header page
// regardless), which also marks the file as the gate's.
func (s *Store) Ping(ctx context.Context) error {
	if s.file != nil {
		// A file removed (or replaced) while the gate runs still takes
		// writes through the open descriptor, but they are lost at the
		// next start: that is a lost database, not a ready one.
		fi, err := os.Stat(s.path)
		if err != nil {
			return unavailable("finding the database file", err)
		}
		if !os.SameFile(s.file, fi) {
			return unavailable("finding the database file", fmt.Errorf("%s was replaced by another file while the gate runs", s.path))
		}
	}
	if err := s.View(ctx, func(r store.Reader) error {
		_, err := r.QueueStats(ctx, store.ProbeTenant)
		return err
	}); err != nil {
		return err
	}
	return s.Update(ctx, func(tx store.Tx) error {
		w := tx.(*writeTx)
		// On the writer's context, as every statement of a batch: the
		// caller's cancellation must not interrupt the batch's transaction.
		_, err := w.tx.ExecContext(w.c(ctx), `PRAGMA application_id = 1095197044`) // "AGat"
		return err
	})
}

// Close waits for queued writes, then closes the database.
func (s *Store) Close() error {
	if !s.queue.Close() {
		return nil
	}
	<-s.done
	var errCk error
	if s.chain.id != 0 && s.chain.seq != s.checkpointed {
		// The chain grew since the last checkpoint: bind its tail too. The
		// writer has stopped, so this goroutine may run a batch itself.
		ctx := context.Background()
		r := &request{ctx: ctx, done: make(chan struct{}), fn: func(tx store.Tx) error { return tx.(*writeTx).checkpoint(ctx) }}
		s.runBatch([]*request{r})
		errCk = r.err
	}
	s.stmtMu.Lock()
	s.stmtsClosed = true
	s.stmtMu.Unlock()
	s.prepWG.Wait()
	s.stmtMu.Lock()
	for _, m := range s.stmts {
		for _, st := range m {
			if st != nil {
				st.Close()
			}
		}
	}
	s.stmtMu.Unlock()
	err1 := errors.Join(errCk, s.rdb.Close())
	if _, err := s.wdb.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil && !strings.Contains(err.Error(), "closed") {
		err1 = errors.Join(err1, err)
	}
	return errors.Join(err1, s.wdb.Close())
}
