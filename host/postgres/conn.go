package postgres

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/asyncgate/asyncgate/host"
)

// stmt is one queued statement.
type stmt struct {
	sql  string
	args []any
	// check, when set, reads the statement's result instead of a plain
	// Exec: a deferred write whose answer (rows written, a returned seq) is
	// learnt only when the pipeline is next sent. An error from check, or
	// the statement's own failure, is errDeferred: the batch is rerun with
	// every write answered at once, so the failure is pinned on its request.
	check func(pgx.BatchResults) error
	// asserted: the statement fails on the server whenever check would
	// find it wrong (a plain insert writes every row or fails; a fenced
	// update checks its rows itself, fence_check), so its check may be read
	// after a COMMIT sent behind it: a failure aborts the transaction and
	// the server skips the COMMIT.
	asserted bool
}

// errDeferred reports that a deferred write did not do what its request
// assumed (a conflict, a lost fence, a refused value). Nothing of the batch
// is committed; it runs again in strict mode.
var errDeferred = errors.New("postgres: a deferred write failed; the batch runs again with immediate writes")

// mismatch is a deferred write's check finding an answer other than the one
// its request assumed. reqs, when set, are the requests whose own write or
// guess it was (a fenced task update, depspec.go): the batch can then run
// again without them, as it was, and they after it (writer.runIn).
type mismatch struct {
	what string
	reqs []*request
	// aborted: the mismatch is the statement's own failure on the server
	// (fence_check), so the transaction is aborted and the statements after
	// it in the pipeline did not run.
	aborted bool
}

func (m *mismatch) Error() string { return m.what }

// deferredFailure wraps what went wrong with a deferred write. culprits,
// when set, are the requests whose own writes or guesses failed (each
// mismatch names its requests), and nothing else failed in the statements
// read.
type deferredFailure struct {
	err      error
	culprits []*request
}

func (d *deferredFailure) Error() string { return errDeferred.Error() + ": " + d.err.Error() }
func (d *deferredFailure) Unwrap() error { return errDeferred }

// sess wraps one connection and pipelines statements whose results nobody waits
// for (BEGIN, SAVEPOINT, RELEASE, write-behind inserts) in front of the next
// statement that needs an answer, so they cost no round trip of their own.
// Order is kept: a queued statement always runs before any later one.
type sess struct {
	conn *pgx.Conn
	pre  []stmt
	// flushes counts the round trips that carried queued statements.
	flushes int
	// fatal is the first error that makes the whole transaction unusable: a
	// lost connection, a deadlock/serialization failure (class 40) or a
	// bounded lock wait that ran out (55P03).
	fatal error
	// failed is the first statement error since the current savepoint.
	failed error
	// deferred is the first failure of a deferred write; unasserted counts
	// the queued deferred writes whose checks must be read before COMMIT is
	// sent (stmt.asserted).
	deferred   error
	unasserted int
	// trips and stmts, when set, count the round trips this session makes
	// and the statements they carry.
	trips, stmts *atomic.Int64
	// before, when set, runs before anything is sent: a write transaction
	// queues its rows written behind (writeTx.materialize).
	before func()
	// beforeWrite, when set, runs before a statement is queued by queue or
	// queueChecked (writeTx.beforeWrite).
	beforeWrite func()
}

// ready runs the before hook.
func (s *sess) ready() {
	if s.before != nil {
		s.before()
	}
}

// trip counts a round trip carrying n statements.
func (s *sess) trip(n int) {
	if s.trips != nil {
		s.trips.Add(1)
	}
	if s.stmts != nil {
		s.stmts.Add(int64(n))
	}
}

// queue queues a statement whose answer nobody reads (an error still
// fails the request).
func (s *sess) queue(sql string, args ...any) {
	s.wrote()
	s.pre = append(s.pre, stmt{sql: sql, args: args})
}

// queueCtl queues a statement that controls the transaction (BEGIN, a
// savepoint, a notification): it writes no table, so the beforeWrite hook
// does not run.
func (s *sess) queueCtl(sql string, args ...any) { s.pre = append(s.pre, stmt{sql: sql, args: args}) }

// queueAsIs queues a statement without the beforeWrite hook: one that
// writes no table (a row lock) and must not send the waiting rows.
func (s *sess) queueAsIs(sql string, args ...any) { s.pre = append(s.pre, stmt{sql: sql, args: args}) }

// wrote runs the beforeWrite hook.
func (s *sess) wrote() {
	if s.beforeWrite != nil {
		s.beforeWrite()
	}
}

// queueChecked queues a deferred write whose result check reads when the
// pipeline is next sent.
func (s *sess) queueChecked(check func(pgx.BatchResults) error, sql string, args ...any) {
	s.wrote()
	s.queueCheckedAsIs(check, sql, args...)
}

// queueCheckedAsIs is queueChecked without the beforeWrite hook: for a
// statement whose caller has seen to what must run before it
// (writeTx.queueCheckedOn).
func (s *sess) queueCheckedAsIs(check func(pgx.BatchResults) error, sql string, args ...any) {
	s.push(stmt{sql: sql, args: args, check: check})
}

// push queues st as it is, counting its check.
func (s *sess) push(st stmt) {
	s.pre = append(s.pre, st)
	s.count(st, 1)
}

// count adds d to the count of checks that must be read before COMMIT is
// sent when st is one.
func (s *sess) count(st stmt, d int) {
	if st.check != nil && !st.asserted {
		s.unasserted += d
	}
}

// truncate drops queued statements from index i on (a request that wrote
// nothing the database has seen is forgotten).
func (s *sess) truncate(i int) {
	for _, p := range s.pre[i:] {
		s.count(p, -1)
	}
	s.pre = s.pre[:i]
}

// note records err's consequences for the transaction.
func (s *sess) note(err error) error {
	if err == nil {
		return nil
	}
	if s.failed == nil {
		s.failed = err
	}
	if s.fatal == nil && isFatal(err) {
		s.fatal = err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22") {
		// Data exceptions (a NUL byte in text, a number out of range) are
		// the caller's bad input, not an unavailable database.
		return host.WrapError(host.CodeBadRequest, err, "the database refused a value: "+pe.Message)
	}
	return err
}

// isFatal reports whether err leaves the transaction (not just the current
// savepoint) unusable.
func isFatal(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true // I/O, protocol or context errors: the connection is suspect
	}
	if pe.Code == "55P03" {
		return true // lock_not_available: a bounded lock wait ran out (runTx)
	}
	switch pe.Code[:2] {
	case "40", // transaction rollback: deadlock, serialization failure
		"08", // connection exception
		"57", // operator intervention (shutdown, query canceled)
		"58", // system error
		"53", // insufficient resources
		"XX": // internal error
		return true
	}
	return false
}

// isBroken reports whether err means the connection itself may be unusable.
func isBroken(err error) bool {
	c := pgCode(err)
	return c == "" || strings.HasPrefix(c, "08") || strings.HasPrefix(c, "57P") || strings.HasPrefix(c, "58") || strings.HasPrefix(c, "XX")
}

// isRetryable reports whether err is a deadlock, a serialization failure or
// a bounded lock wait that ran out, after which the whole transaction may
// simply run again.
func isRetryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001" || pe.Code == "55P03")
}

// pgCode returns err's SQLSTATE or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// send sends the queued statements followed by extra in one pipeline and
// returns the open results positioned at the first statement of extra.
func (s *sess) send(ctx context.Context, extra ...stmt) (pgx.BatchResults, error) {
	s.ready()
	b := &pgx.Batch{}
	for _, p := range s.pre {
		b.Queue(p.sql, p.args...)
	}
	for _, p := range extra {
		b.Queue(p.sql, p.args...)
	}
	pre := s.pre
	s.pre = nil
	s.unasserted = 0
	s.flushes++
	s.trip(len(pre) + len(extra))
	br := s.conn.SendBatch(ctx, b)
	var blamed []*request // requests whose own write or guess a check found wrong
	var blame error
	for _, p := range pre {
		var err error
		if p.check != nil {
			if err = p.check(br); err != nil {
				var pe *pgconn.PgError
				var mm *mismatch
				if errors.As(err, &mm) && mm.aborted {
					// The statement failed on the server: nothing after it
					// ran, so no later check can name more requests. Its
					// own, with any named before it, are set aside; none
					// when one of its rows cannot be blamed.
					br.Close()
					if s.deferred == nil {
						var culprits []*request
						if len(mm.reqs) > 0 {
							culprits = append(blamed, mm.reqs...)
						}
						s.deferred = &deferredFailure{err: err, culprits: culprits}
					}
					return nil, s.deferred
				}
				if errors.As(err, &mm) && len(mm.reqs) > 0 {
					// Requests' own writes or guesses: the statements after
					// it ran, so their checks are read too, for every
					// request to blame.
					blamed = append(blamed, mm.reqs...)
					blame = cmp.Or(blame, err)
					continue
				}
				if blamed != nil || errors.As(err, &mm) || errors.Is(err, pgx.ErrNoRows) || (errors.As(err, &pe) && !isFatal(err)) {
					// A conflict, a lost fence or a refused value: the
					// batch runs again in strict mode, where the same write
					// is answered at once and fails its request alone.
					// (After a request to blame, any failure does: had
					// the blamed one stopped the reading, as every failure
					// did before, this one would not have been seen.)
					br.Close()
					if s.deferred == nil {
						s.deferred = &deferredFailure{err: cmp.Or(blame, err)}
					}
					return nil, s.deferred
				}
			}
		} else {
			_, err = br.Exec()
		}
		if err != nil && blamed != nil {
			// As above: the batch runs again in strict mode.
			br.Close()
			if s.deferred == nil {
				s.deferred = &deferredFailure{err: blame}
			}
			return nil, s.deferred
		}
		if err != nil {
			br.Close()
			// A queued statement belongs to an earlier point of the batch
			// (perhaps an earlier request): its failure cannot be pinned on
			// the current request, so the whole transaction is abandoned.
			err = s.note(err)
			if s.fatal == nil {
				s.fatal = err
			}
			return nil, err
		}
	}
	if blamed != nil {
		br.Close()
		if s.deferred == nil {
			s.deferred = &deferredFailure{err: blame, culprits: blamed}
		}
		return nil, s.deferred
	}
	return br, nil
}

// flush sends the queued statements and reads their results.
func (s *sess) flush(ctx context.Context) error {
	s.ready()
	if len(s.pre) == 0 {
		return nil
	}
	br, err := s.send(ctx)
	if err != nil {
		return err
	}
	return s.note(br.Close())
}

// exec runs a statement that changes rows and returns how many it changed.
func (s *sess) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	s.ready()
	if len(s.pre) == 0 {
		s.trip(1)
		tag, err := s.conn.Exec(ctx, sql, args...)
		return tag.RowsAffected(), s.note(err)
	}
	br, err := s.send(ctx, stmt{sql: sql, args: args})
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if err2 := br.Close(); err == nil {
		err = err2
	}
	return tag.RowsAffected(), s.note(err)
}

// execAll runs statements in one pipeline and returns how many rows each changed.
func (s *sess) execAll(ctx context.Context, stmts []stmt) ([]int64, error) {
	br, err := s.send(ctx, stmts...)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(stmts))
	for i := range stmts {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return nil, s.note(err)
		}
		out[i] = tag.RowsAffected()
	}
	return out, s.note(br.Close())
}

// query runs a query and calls each for every row.
func (s *sess) query(ctx context.Context, each func(pgx.Rows) error, sql string, args ...any) error {
	var rows pgx.Rows
	var br pgx.BatchResults
	var err error
	s.ready()
	if len(s.pre) == 0 {
		s.trip(1)
		rows, err = s.conn.Query(ctx, sql, args...)
	} else {
		br, err = s.send(ctx, stmt{sql: sql, args: args})
		if err != nil {
			return err
		}
		rows, err = br.Query()
	}
	var eachErr error
	if err == nil {
		for rows.Next() {
			if eachErr = each(rows); eachErr != nil {
				break
			}
		}
		rows.Close()
		err = rows.Err()
	}
	if br != nil {
		if err2 := br.Close(); err == nil {
			err = err2
		}
	}
	if err != nil {
		return s.note(err)
	}
	// A scan or decode error is the caller's, not the transaction's.
	return eachErr
}

// query is one statement of queryAll: each is called for every row.
type query struct {
	sql  string
	args []any
	each func(pgx.Rows) error
}

// queryAll runs queries in one pipeline (one round trip, after whatever is
// queued) and reads each one's rows in order.
func (s *sess) queryAll(ctx context.Context, qs []query) error {
	s.ready()
	extra := make([]stmt, len(qs))
	for i, q := range qs {
		extra[i] = stmt{sql: q.sql, args: q.args}
	}
	br, err := s.send(ctx, extra...)
	if err != nil {
		return err
	}
	var eachErr error
	for _, q := range qs {
		rows, err := br.Query()
		if err == nil {
			for rows.Next() {
				if eachErr == nil {
					eachErr = q.each(rows)
				}
			}
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			br.Close()
			return s.note(err)
		}
	}
	if err := br.Close(); err != nil {
		return s.note(err)
	}
	// A scan or decode error is the caller's, not the transaction's.
	return eachErr
}

// queryRow runs a query for one row and scans it into dest; no row is
// pgx.ErrNoRows.
func (s *sess) queryRow(ctx context.Context, dest []any, sql string, args ...any) error {
	found := false
	err := s.query(ctx, func(r pgx.Rows) error {
		if found {
			return nil
		}
		found = true
		return r.Scan(dest...)
	}, sql, args...)
	if err == nil && !found {
		return pgx.ErrNoRows
	}
	return err
}

// scanRow is queryRow with a scan function, for row types with their own scanner.
func (s *sess) scanRow(ctx context.Context, scan func(pgx.Rows) error, sql string, args ...any) error {
	found := false
	err := s.query(ctx, func(r pgx.Rows) error {
		if found {
			return nil
		}
		found = true
		return scan(r)
	}, sql, args...)
	if err == nil && !found {
		return pgx.ErrNoRows
	}
	return err
}
