package postgres

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// Rows written behind (outside strict mode): a batch's new tasks, fenced
// task updates, attempts, receipts, obligations, obligation terminations and
// inbox rows wait in the writeTx. Tasks (with their listing rows) go to the
// server as one statement, task updates as another (setupdates.go), attempts,
// receipts and obligations, terminations and inbox rows each as one more
// (arrays through unnest), not one statement per row. A statement's fixed cost in the server
// (executor start-up, opening the table's indexes, a portal) is then paid once
// per batch and table (RATIONALE.md, "PostgreSQL, rows written behind").
//
// The rows reach the pipeline whenever it is next sent (before any read, so
// every statement sees them) and before the batch's answers are read ahead of
// COMMIT. Each request's savepoint still undoes exactly its own writes:
//   - the rows of requests that have ended go in front of the running
//     request's SAVEPOINT, so undoing that request cannot undo them;
//   - the running request's own rows go after everything it queued, inside its
//     savepoint;
//   - a request that fails drops the rows it buffered and did not send.
//
// Within a flush the rows are written in the order tasks, attempts, receipts
// and obligations, task updates and terminations, inbox: an update may be of
// a task inserted in the same batch, an obligation takes its receipt's seq,
// and a termination may end an obligation opened in the same batch. Nothing
// else the writer queues without reading touches the inserted tables (reads
// send the pipeline first), so their rows' later arrival is seen by nobody;
// a statement queued directly may change a task, so it sends the waiting
// task updates first (writeTx.beforeWrite). A second insert of a key the
// batch holds is refused at once (writeTx.keys). In strict mode every write
// is answered at once and nothing waits here.
type behind struct {
	tasks       [][]any // sqlrows.TaskInsertValues of each new task
	updates     []taskUpdate
	updated     map[string]struct{} // the ids of updates
	attempts    [][]any             // an attempt row: tenant, task id, lease id, ended at, body
	receipts    []*host.Receipt
	parents     []string // receipts' parents as JSON, in step with receipts
	obligations []host.Obligation
	terms       []termination
	inbox       []host.InboxItem
	// ended is how many of each belong to requests that have ended; the
	// rest are the running request's.
	ended behindMark
	// blockAt is where in the session's queue the ended requests' rows go:
	// the index of the running request's SAVEPOINT, or the queue's end
	// between requests. Rows queued there move the SAVEPOINT back, and
	// blockAt with it, so it stays the index to truncate at when the running
	// request fails before anything is sent.
	blockAt int
}

type termination struct{ tenant, parent, by string }

type behindMark struct{ tasks, updates, attempts, receipts, obligations, terms, inbox int }

func (b *behind) mark() behindMark {
	return behindMark{len(b.tasks), len(b.updates), len(b.attempts), len(b.receipts), len(b.obligations), len(b.terms), len(b.inbox)}
}

// taskUpdate is a fenced task update written behind: the task's
// sqlrows.TaskSetValues, its id and its fence.
type taskUpdate struct {
	id   string
	vals []any
	f    store.Fence
	req  *request // the request that wrote it (nil outside a batch's run)
}

// updating reports whether an update of task id waits.
func (b *behind) updating(id string) bool {
	_, ok := b.updated[id]
	return ok
}

// ownUpdates reports whether the running request has task updates waiting.
func (b *behind) ownUpdates() bool { return len(b.updates) > b.ended.updates }

// updateBehind writes u behind. A second update of a task whose update
// waits sends the waiting rows first: one statement changes a row once.
func (w *writeTx) updateBehind(u taskUpdate) {
	if w.bh.updating(u.id) {
		w.materialize()
	}
	if w.bh.updated == nil {
		w.bh.updated = map[string]struct{}{}
	}
	u.req = w.req
	w.bh.updates = append(w.bh.updates, u)
	w.bh.updated[u.id] = struct{}{}
}

// beforeWrite runs before a statement is queued directly (sess.queue): the
// task updates waiting here go into the queue first, so a statement that
// changes a task they change runs after them, in the order it was asked.
// (Other rows written behind need not: nothing queued directly writes
// their tables.)
func (w *writeTx) beforeWrite() {
	if len(w.bh.updates) > 0 {
		w.materialize()
	}
}

// queueCheckedOn queues a checked statement that changes or reads no task
// row but those of ids (in tenant) and no table rows are written behind
// to but tasks: the waiting task updates go into the queue first only
// when one is of those ids, so the others stay one set. (beforeWrite
// sends them all.)
func (w *writeTx) queueCheckedOn(ids []string, st stmt) {
	for _, id := range ids {
		if w.bh.updating(id) {
			w.materialize()
			break
		}
	}
	w.ss.push(st)
}

// empty reports whether no row waits.
func (b *behind) empty() bool { return b.mark() == behindMark{} }

// startRequest notes that a request begins with its SAVEPOINT at index at of
// the queue.
func (b *behind) startRequest(at int) {
	b.blockAt = at
	b.ended = b.mark()
}

// endRequest keeps the running request's rows (ok) or drops those it did not
// send.
func (b *behind) endRequest(ok bool) {
	if ok {
		b.ended = b.mark()
		return
	}
	e := b.ended
	for _, u := range b.updates[e.updates:] {
		delete(b.updated, u.id)
	}
	b.tasks, b.updates, b.attempts = b.tasks[:e.tasks], b.updates[:e.updates], b.attempts[:e.attempts]
	b.receipts, b.parents = b.receipts[:e.receipts], b.parents[:e.receipts]
	b.obligations, b.terms, b.inbox = b.obligations[:e.obligations], b.terms[:e.terms], b.inbox[:e.inbox]
}

// materialize moves the waiting rows into the session's queue as statements:
// the ended requests' at blockAt, the running request's at the end. The
// session calls it before it sends anything.
func (w *writeTx) materialize() {
	b := &w.bh
	if b.empty() {
		return
	}
	block := b.stmts(behindMark{}, b.ended)
	own := b.stmts(b.ended, b.mark())
	ss := w.ss
	at := min(b.blockAt, len(ss.pre))
	ss.pre = slices.Insert(ss.pre, at, block...)
	ss.pre = append(ss.pre, own...)
	for _, st := range append(block, own...) {
		ss.count(st, 1)
	}
	// The running request's SAVEPOINT now follows the block.
	*b = behind{blockAt: at + len(block)}
}

// savepointAt is the index in the session's queue of the running request's
// SAVEPOINT, as long as nothing has been sent since it was queued.
func (b *behind) savepointAt() int { return b.blockAt }

// materializeAtEnd queues every waiting row at the end of the queue: the
// batch's requests have all ended.
func (w *writeTx) materializeAtEnd() {
	w.bh.blockAt = len(w.ss.pre)
	w.materialize()
}

// The statements of rows written behind take their rows as arrays, so a
// statement's text (and its prepared statement) is the same whatever their
// number. Neither looks a row up in a table: a prepared statement's generic
// plan is made while the tables are small, and a join to one of them would
// keep a sequential scan as they grow (measured: the cycle rate halved within
// 8,000 cycles). So an obligation takes its receipt's seq from the receipts
// the same statement inserted. (The updates join their arrays to the table
// by key, on a generic plan made with only nested loops over indexes
// allowed: setupdates.go.)
//
// The arrays are unnested in the select list, not in FROM: `FROM unnest(a,
// b, …)` materializes each array into a tuplestore of its own, whose first
// allocation is 16 KB, so a 33-column insert allocated and freed half a
// megabyte per statement, and the server's malloc returned it to the kernel
// each time: page faults and TLB flushes on every execution (without them
// BenchmarkCycle on PostgreSQL ran 12-20% faster). Set-returning functions
// in the select list run in step, a value per call, with nothing
// materialized; for arrays of one length the rows are the same.
const (
	// receiptsBehind inserts receipts and the obligations they open, and
	// answers how many obligations it wrote and the receipts' ids and seqs.
	// A clash (an id or dedupe key taken) fails the statement, and the
	// batch runs again in strict mode, where the receipt's own insert
	// (AppendReceipt, ON CONFLICT DO NOTHING) meets it. There is no ON
	// CONFLICT here: its speculative insertion costs every row a probe of
	// each unique index before the insert and a WAL record after it, a
	// fifth of the insert's time (RATIONALE.md, "Rows written behind are
	// plain inserts").
	receiptsBehind = `WITH r AS (
INSERT INTO receipts (id, tenant, type, from_p, to_p, task_id, lease_id, parents, body, dedupe_key,
created_at, prev_hash, hash, chain_id, chain_seq)
SELECT unnest($1::text[]), unnest($2::text[]), unnest($3::text[]), unnest($4::text[]), unnest($5::text[]),
unnest($6::text[]), unnest($7::text[]), unnest($8::text[]), unnest($9::text[]), unnest($10::text[]),
unnest($11::int8[]), unnest($12::text[]), unnest($13::text[]), unnest($14::int8[]), unnest($15::int8[])
RETURNING id, seq
), o AS (
INSERT INTO obligations (receipt_id, tenant, type, obligor, obligee, task_id, created_at, seq)
SELECT v.receipt_id, v.tenant, v.type, v.obligor, v.obligee, v.task_id, v.created_at, coalesce(r.seq, nullif(v.seq, 0))
FROM (SELECT unnest($16::text[]) AS receipt_id, unnest($17::text[]) AS tenant, unnest($18::text[]) AS type,
  unnest($19::text[]) AS obligor, unnest($20::text[]) AS obligee, unnest($21::text[]) AS task_id,
  unnest($22::int8[]) AS created_at, unnest($23::int8[]) AS seq,
  generate_series(1, cardinality($16::text[])) AS n) AS v
LEFT JOIN r ON r.id = v.receipt_id ORDER BY v.n
RETURNING 1
)
SELECT (SELECT count(*) FROM o), (SELECT coalesce(array_agg(id ORDER BY seq), '{}') FROM r), (SELECT coalesce(array_agg(seq ORDER BY seq), '{}') FROM r)`
)

// The statements of new tasks and inbox rows name their columns as sqlrows
// does and take each column's values as an array of its type (unnestOf).
var (
	// tasksBehind inserts tasks and their listing rows (migration 0015). A
	// clash (an id or idempotency key taken) fails the statement and the
	// batch runs again in strict mode, where each task's own insert
	// (taskInsert) meets it; a plain insert, as receiptsBehind.
	tasksBehind = `WITH t AS (
INSERT INTO tasks (` + sqlrows.TaskInsertColumns + `)
` + unnestOf(taskSample) + `
RETURNING seq, tenant, task_type, created_by, recipient
) INSERT INTO task_list (seq, tenant, task_type, created_by, recipient) SELECT * FROM t`
	// taskInsert inserts one task and its listing row; it changes one row,
	// or none on a clash. Strict mode writes each task with it.
	taskInsert = oneTaskInsert(`ON CONFLICT DO NOTHING `)
	// taskInsertBehind is taskInsert for a flush of rows written behind
	// that holds a single task (for one row the VALUES list costs the
	// server less than the arrays): a plain insert, as tasksBehind, so a clash
	// fails the statement.
	taskInsertBehind = oneTaskInsert(``)
	inboxBehind      = `INSERT INTO inbox (` + sqlrows.InboxInsertColumns + `)
` + unnestOf(sqlrows.InboxInsertValues(host.InboxItem{}))

	// taskSample is a task's values, for their types.
	taskSample = func() []any {
		v, err := sqlrows.TaskInsertValues(&host.Task{})
		if err != nil {
			panic(err)
		}
		return v
	}()
)

// oneTaskInsert is the statement that inserts one task (its
// sqlrows.TaskInsertValues) and its listing row, with onConflict before
// its RETURNING.
func oneTaskInsert(onConflict string) string {
	return `WITH t AS (INSERT INTO tasks (` + sqlrows.TaskInsertColumns + `)
VALUES (` + placeholders(1, len(taskSample)) + `)
` + onConflict + `RETURNING seq, tenant, task_type, created_by, recipient) INSERT INTO task_list (seq, tenant, task_type, created_by, recipient) SELECT * FROM t`
}

// placeholders is "$from, $from+1, …", n of them.
func placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(from+i))
	}
	return b.String()
}

// arrayType is the PostgreSQL type of the array that carries a column whose
// values have v's Go type.
func arrayType(v any) string {
	switch v.(type) {
	case string, *string:
		return "text[]"
	case int:
		return "int4[]"
	case int64, *int64:
		return "int8[]"
	case bool:
		return "bool[]"
	case *float64:
		return "float8[]"
	}
	panic(fmt.Sprintf("postgres: no array type for a column of %T", v))
}

// unnestOf is the SELECT that makes rows of the arrays columnsOf returns for
// rows shaped like sample, one array parameter a column.
func unnestOf(sample []any) string {
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, v := range sample {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "unnest($%d::%s)", i+1, arrayType(v))
	}
	return b.String()
}

// columnsOf turns rows (each the values of one row, in one column order)
// into one array a column, of the type arrayType names.
func columnsOf(rows [][]any) []any {
	n := len(rows)
	out := make([]any, len(rows[0]))
	for c, v := range rows[0] {
		switch v.(type) {
		case string:
			out[c] = column[string](rows, c)
		case *string:
			out[c] = column[*string](rows, c)
		case int:
			a := make([]int32, n)
			for i, r := range rows {
				a[i] = int32(r[c].(int))
			}
			out[c] = a
		case int64:
			out[c] = column[int64](rows, c)
		case *int64:
			out[c] = column[*int64](rows, c)
		case bool:
			out[c] = column[bool](rows, c)
		case *float64:
			out[c] = column[*float64](rows, c)
		default:
			panic(fmt.Sprintf("postgres: no array for a column of %T", v))
		}
	}
	return out
}

// column is column c of rows as a slice of T.
func column[T any](rows [][]any, c int) []T {
	a := make([]T, len(rows))
	for i, r := range rows {
		a[i] = r[c].(T)
	}
	return a
}

// stmts returns the statements that write the rows from mark a up to mark
// z: tasks (with their listing rows), task updates, attempts, receipts and
// obligations, terminations, then inbox rows.
func (b *behind) stmts(a, z behindMark) []stmt {
	return behindStmts(b.tasks[a.tasks:z.tasks], b.updates[a.updates:z.updates], b.attempts[a.attempts:z.attempts],
		b.receipts[a.receipts:z.receipts], b.parents[a.receipts:z.receipts], b.obligations[a.obligations:z.obligations],
		b.terms[a.terms:z.terms], b.inbox[a.inbox:z.inbox])
}

// behindStmts returns the statements that write the given rows, in the order
// behind.stmts gives.
func behindStmts(tasks [][]any, updates []taskUpdate, attempts [][]any, rcs []*host.Receipt, parents []string, obs []host.Obligation, terms []termination, inbox []host.InboxItem) []stmt {
	var out []stmt
	if len(tasks) > 0 {
		out = append(out, tasksStmt(tasks))
	}
	switch len(attempts) {
	case 0:
	case 1:
		out = append(out, stmt{sql: attemptInsert, args: attempts[0], check: expectRows("attempt insert", 1), asserted: true})
	default:
		out = append(out, stmt{sql: attemptsBehind, args: columnsOf(attempts), check: expectRows("attempt insert", len(attempts)), asserted: true})
	}
	if len(rcs) > 0 || len(obs) > 0 {
		n := len(rcs)
		var id, tenant, typ, from, to, task, lease, body, dedupe, prev, hash = col(n), col(n), col(n), col(n), col(n), col(n), col(n), col(n), col(n), col(n), col(n)
		created, chain, chainSeq := make([]int64, n), make([]int64, n), make([]int64, n)
		byID := make(map[string]*host.Receipt, n)
		for i, rc := range rcs {
			id[i], tenant[i], typ[i], from[i], to[i], task[i], lease[i] = rc.ID, rc.Tenant, string(rc.Type), rc.From, rc.To, rc.TaskID, rc.LeaseID
			body[i], dedupe[i], prev[i], hash[i] = string(rc.Body), rc.DedupeKey, rc.PrevHash, rc.Hash
			created[i], chain[i], chainSeq[i] = us(rc.CreatedAt), rc.ChainID, rc.ChainSeq
			byID[rc.ID] = rc
		}
		m := len(obs)
		oRID, oTenant, oType, obligor, obligee, oTask := col(m), col(m), col(m), col(m), col(m), col(m)
		oCreated, oSeq := make([]int64, m), make([]int64, m)
		for i, o := range obs {
			oRID[i], oTenant[i], oType[i], obligor[i], obligee[i], oTask[i] = o.ReceiptID, o.Tenant, string(o.Type), o.Obligor, o.Obligee, o.TaskID
			oCreated[i], oSeq[i] = us(o.CreatedAt), o.Seq
		}
		// The statement runs on its generic plan. Left to the default
		// (auto), the server saw arrays of known length cheaper to a plan
		// made for them and planned the statement afresh at every execution
		// (its two inserts and the join each time), which cost more than
		// the rows. The generic plan looks no table up, so one made while
		// the tables are small stays good.
		out = append(out, stmt{sql: `SET LOCAL plan_cache_mode = force_generic_plan`}, stmt{
			sql: receiptsBehind,
			args: []any{id, tenant, typ, from, to, task, lease, parents, body, dedupe, created, prev, hash, chain, chainSeq,
				oRID, oTenant, oType, obligor, obligee, oTask, oCreated, oSeq},
			check: func(br pgx.BatchResults) error {
				var wrote int64
				var ids []string
				var seqs []int64
				if err := br.QueryRow().Scan(&wrote, &ids, &seqs); err != nil {
					return err
				}
				if len(ids) != n || len(seqs) != n || wrote != int64(m) {
					// Not expected (a clash fails the statement): strict
					// mode finds the request it belongs to.
					return &mismatch{what: fmt.Sprintf("wrote %d of %d receipts and %d of %d obligations", len(ids), n, wrote, m)}
				}
				for i, rid := range ids {
					rc := byID[rid]
					if rc == nil {
						return &mismatch{what: "the receipt insert answered an id it was not given: " + rid}
					}
					rc.Seq = seqs[i]
				}
				return nil
			},
			asserted: true,
		}, stmt{sql: `SET LOCAL plan_cache_mode TO DEFAULT`})
	}
	// Updates after receipts and obligations: a termination may end an
	// obligation opened in the same batch.
	out = append(out, setUpdates(updates, terms)...)
	if len(inbox) > 0 {
		rows := make([][]any, len(inbox))
		for i, it := range inbox {
			rows[i] = sqlrows.InboxInsertValues(it)
		}
		out = append(out, stmt{sql: inboxBehind, args: columnsOf(rows), check: expectRows("inbox insert", len(inbox)), asserted: true})
	}
	return out
}

// tasksStmt is the statement that inserts the given tasks (each its
// sqlrows.TaskInsertValues).
func tasksStmt(rows [][]any) stmt {
	if len(rows) == 1 {
		return stmt{sql: taskInsertBehind, args: rows[0], check: expectRows("task insert", 1), asserted: true}
	}
	return stmt{sql: tasksBehind, args: columnsOf(rows), check: expectRows("task insert", len(rows)), asserted: true}
}

func col(n int) []string { return make([]string, n) }

// expectRows is the check of a deferred write that must change n rows.
func expectRows(what string, n int) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(n) {
			return &mismatch{what: fmt.Sprintf("%s wrote %d of %d rows", what, tag.RowsAffected(), n)}
		}
		return nil
	}
}
