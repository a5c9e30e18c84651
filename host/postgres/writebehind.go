package postgres

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
)

// Rows written behind (outside strict mode): a batch's new tasks, receipts,
// obligations, obligation terminations and inbox rows wait in the writeTx.
// Tasks (with their listing rows) go to the server as one statement,
// receipts and obligations as another, inbox rows as a third (arrays through
// unnest), not one statement per row. A statement's fixed cost in the server
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
// Within a flush the rows are written in the order tasks, receipts and
// obligations, terminations, inbox: an obligation takes its receipt's seq,
// and a termination may end an obligation opened in the same batch. Nothing
// else the writer queues without reading touches these tables (reads send
// the pipeline first) except a fenced update of a task, which sends the
// waiting rows into the queue ahead of it when the batch inserted its task;
// so the rows' later arrival is seen by nobody. A second insert of a key the
// batch holds is refused at once (writeTx.keys). In strict mode every write
// is answered at once and nothing waits here.
type behind struct {
	tasks       []newTask
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

// newTask is a new task as InsertTask was given it: a copy of its values,
// with the ones behind pointers and slices encoded at once, so the caller may
// change the task before the row is sent.
type newTask struct {
	t                                                  host.Task
	params, intents                                    string
	result                                             *string
	leasedAt, expiresAt, acceptedAt, startedAt, doneAt *int64
	pct                                                *float64
}

// newTaskOf copies t for writing behind; res is its result as the column
// keeps it.
func newTaskOf(t *host.Task, res *string) newTask {
	n := newTask{t: *t, params: string(t.Params), intents: host.IntentsJSON(t.ResourceIntents), result: res,
		leasedAt: nus(t.LeasedAt), expiresAt: nus(t.LeaseExpiresAt), acceptedAt: nus(t.AcceptedAt), startedAt: nus(t.StartedAt), doneAt: nus(t.CompletedAt)}
	if t.ProgressPercent != nil {
		n.pct = new(*t.ProgressPercent)
	}
	n.t.Params, n.t.ResourceIntents, n.t.Result = nil, nil, nil
	n.t.LeasedAt, n.t.LeaseExpiresAt, n.t.AcceptedAt, n.t.StartedAt, n.t.CompletedAt, n.t.ProgressPercent = nil, nil, nil, nil, nil, nil
	return n
}

type behindMark struct{ tasks, receipts, obligations, terms, inbox int }

func (b *behind) mark() behindMark {
	return behindMark{len(b.tasks), len(b.receipts), len(b.obligations), len(b.terms), len(b.inbox)}
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
	b.tasks = b.tasks[:e.tasks]
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
	e := b.ended
	block := behindStmts(b.tasks[:e.tasks], b.receipts[:e.receipts], b.parents[:e.receipts], b.obligations[:e.obligations], b.terms[:e.terms], b.inbox[:e.inbox])
	own := behindStmts(b.tasks[e.tasks:], b.receipts[e.receipts:], b.parents[e.receipts:], b.obligations[e.obligations:], b.terms[e.terms:], b.inbox[e.inbox:])
	ss := w.ss
	at := min(b.blockAt, len(ss.pre))
	ss.pre = slices.Insert(ss.pre, at, block...)
	ss.pre = append(ss.pre, own...)
	for _, st := range append(block, own...) {
		if st.check != nil {
			ss.checks++
		}
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
// the same statement inserted, and terminations stay one statement each,
// found by primary key.
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
	receiptsBehind = `WITH r AS (
INSERT INTO receipts (id, tenant, type, from_p, to_p, task_id, lease_id, parents, body, dedupe_key,
created_at, prev_hash, hash, chain_id, chain_seq)
SELECT unnest($1::text[]), unnest($2::text[]), unnest($3::text[]), unnest($4::text[]), unnest($5::text[]),
unnest($6::text[]), unnest($7::text[]), unnest($8::text[]), unnest($9::text[]), unnest($10::text[]),
unnest($11::int8[]), unnest($12::text[]), unnest($13::text[]), unnest($14::int8[]), unnest($15::int8[])
ON CONFLICT DO NOTHING RETURNING id, seq
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
	// tasksBehind inserts tasks and their listing rows (migration 0015). A
	// clash (an id or idempotency key taken) inserts fewer rows than it was
	// given, which its check reports.
	tasksBehind = `WITH t AS (
INSERT INTO tasks (id, tenant, task_type, created_by, recipient, state, priority, params, summary, idempotency_key,
created_at, updated_at, available_at, lease_id, worker_id, leased_at, lease_expires_at, accepted_at, accept_receipt,
cancel_requested, attempts, max_retries, lease_count, lease_expiries, started_at, completed_at, progress_percent,
progress_message, result, last_error, dead_reason, assign_receipt, resource_intents)
SELECT unnest($1::text[]), unnest($2::text[]), unnest($3::text[]), unnest($4::text[]), unnest($5::text[]),
unnest($6::text[]), unnest($7::int4[]), unnest($8::text[]), unnest($9::text[]), unnest($10::text[]),
unnest($11::int8[]), unnest($12::int8[]), unnest($13::int8[]), unnest($14::text[]), unnest($15::text[]),
unnest($16::int8[]), unnest($17::int8[]), unnest($18::int8[]), unnest($19::text[]), unnest($20::bool[]),
unnest($21::int4[]), unnest($22::int4[]), unnest($23::int4[]), unnest($24::int4[]), unnest($25::int8[]),
unnest($26::int8[]), unnest($27::float8[]), unnest($28::text[]), unnest($29::text[]), unnest($30::text[]),
unnest($31::text[]), unnest($32::text[]), unnest($33::text[])
ON CONFLICT DO NOTHING RETURNING seq, tenant, task_type, created_by, recipient
) INSERT INTO task_list (seq, tenant, task_type, created_by, recipient) SELECT * FROM t`
	// taskInsert inserts one task and its listing row; it changes one row,
	// or none on a clash. Strict mode writes each task with it, and a flush
	// of rows written behind that holds a single task too: for one row the
	// VALUES list costs the server less than the arrays.
	taskInsert = `WITH t AS (INSERT INTO tasks (id, tenant, task_type, created_by, recipient, state, priority, params, summary, idempotency_key,
created_at, updated_at, available_at, lease_id, worker_id, leased_at, lease_expires_at, accepted_at, accept_receipt,
cancel_requested, attempts, max_retries, lease_count, lease_expiries, started_at, completed_at, progress_percent,
progress_message, result, last_error, dead_reason, assign_receipt, resource_intents)
VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$25,$26,$27,$28,$29,$30,$31,$32,$33)
ON CONFLICT DO NOTHING RETURNING seq, tenant, task_type, created_by, recipient) INSERT INTO task_list (seq, tenant, task_type, created_by, recipient) SELECT * FROM t`
	inboxBehind = `INSERT INTO inbox (id, tenant, recipient, kind, task_id, task_type, receipt_id, summary, created_at, delivered_at,
read_at, fetched_at, promoted_at)
SELECT unnest($1::text[]), unnest($2::text[]), unnest($3::text[]), unnest($4::text[]), unnest($5::text[]),
unnest($6::text[]), unnest($7::text[]), unnest($8::text[]), unnest($9::int8[]), unnest($10::int8[]),
unnest($11::int8[]), unnest($12::int8[]), unnest($13::int8[])`
)

// behindStmts returns the statements that write the given rows: tasks (with
// their listing rows), receipts and obligations, then terminations in their
// order, then inbox rows.
func behindStmts(tasks []newTask, rcs []*host.Receipt, parents []string, obs []host.Obligation, terms []termination, inbox []host.InboxItem) []stmt {
	var out []stmt
	if len(tasks) > 0 {
		out = append(out, tasksStmt(tasks))
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
		// (its two inserts, the join and the ON CONFLICT each time), which
		// cost more than the rows. The generic plan looks no table up, so
		// one made while the tables are small stays good.
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
					// A clash (an id or dedupe key taken): strict mode pins
					// it on its request.
					return &mismatch{fmt.Sprintf("wrote %d of %d receipts and %d of %d obligations", len(ids), n, wrote, m)}
				}
				for i, rid := range ids {
					rc := byID[rid]
					if rc == nil {
						return &mismatch{"the receipt insert answered an id it was not given: " + rid}
					}
					rc.Seq = seqs[i]
				}
				return nil
			},
		}, stmt{sql: `SET LOCAL plan_cache_mode TO DEFAULT`})
	}
	for _, t := range terms {
		out = append(out, stmt{sql: terminateQ, args: []any{t.by, t.parent, t.tenant}})
	}
	if len(inbox) > 0 {
		n := len(inbox)
		id, tenant, recipient, kind, task, taskType, receipt, summary := col(n), col(n), col(n), col(n), col(n), col(n), col(n), col(n)
		created := make([]int64, n)
		delivered, read, fetched, promoted := make([]*int64, n), make([]*int64, n), make([]*int64, n), make([]*int64, n)
		for i, it := range inbox {
			id[i], tenant[i], recipient[i], kind[i], task[i], taskType[i], receipt[i], summary[i] = it.ID, it.Tenant, it.Recipient, string(it.Kind), it.TaskID, it.TaskType, it.ReceiptID, it.Summary
			created[i], delivered[i], read[i], fetched[i], promoted[i] = us(it.CreatedAt), nus(it.DeliveredAt), nus(it.ReadAt), nus(it.FetchedAt), nus(it.PromotedAt)
		}
		out = append(out, stmt{sql: inboxBehind, args: []any{id, tenant, recipient, kind, task, taskType, receipt, summary, created, delivered, read, fetched, promoted},
			check: expectRows("inbox insert", n)})
	}
	return out
}

// args are the task's values in the order of taskInsert's columns.
func (r *newTask) args() []any {
	t := &r.t
	return []any{t.ID, t.Tenant, t.Type, t.CreatedBy, t.Recipient, string(t.State), t.Priority, r.params, t.Summary, t.IdempotencyKey,
		us(t.CreatedAt), us(t.UpdatedAt), us(t.AvailableAt), t.LeaseID, t.WorkerID, r.leasedAt, r.expiresAt, r.acceptedAt, t.AcceptReceipt,
		t.CancelRequested, t.Attempts, t.MaxRetries, t.LeaseCount, t.LeaseExpiries, r.startedAt, r.doneAt, r.pct,
		t.ProgressMessage, r.result, t.LastError, t.DeadReason, t.AssignReceipt, r.intents}
}

// tasksStmt is the statement that inserts the given tasks.
func tasksStmt(rows []newTask) stmt {
	n := len(rows)
	if n == 1 {
		return stmt{sql: taskInsert, args: rows[0].args(), check: expectRows("task insert", 1)}
	}
	id, tenant, typ, by, to, state, params, summary, idem := col(n), col(n), col(n), col(n), col(n), col(n), col(n), col(n), col(n)
	lease, worker, accRc, progMsg, lastErr, dead, assign, intents := col(n), col(n), col(n), col(n), col(n), col(n), col(n), col(n)
	prio, attempts, maxRetries, leaseCount, expiries := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	created, updated, avail := make([]int64, n), make([]int64, n), make([]int64, n)
	leasedAt, expiresAt, acceptedAt, startedAt, completedAt := make([]*int64, n), make([]*int64, n), make([]*int64, n), make([]*int64, n), make([]*int64, n)
	cancel, pct, result := make([]bool, n), make([]*float64, n), make([]*string, n)
	for i := range rows {
		r := &rows[i]
		t := &r.t
		id[i], tenant[i], typ[i], by[i], to[i], state[i], params[i], summary[i], idem[i] = t.ID, t.Tenant, t.Type, t.CreatedBy, t.Recipient, string(t.State), r.params, t.Summary, t.IdempotencyKey
		lease[i], worker[i], accRc[i], progMsg[i], lastErr[i], dead[i], assign[i], intents[i] = t.LeaseID, t.WorkerID, t.AcceptReceipt, t.ProgressMessage, t.LastError, t.DeadReason, t.AssignReceipt, r.intents
		prio[i], attempts[i], maxRetries[i], leaseCount[i], expiries[i] = int32(t.Priority), int32(t.Attempts), int32(t.MaxRetries), int32(t.LeaseCount), int32(t.LeaseExpiries)
		created[i], updated[i], avail[i] = us(t.CreatedAt), us(t.UpdatedAt), us(t.AvailableAt)
		leasedAt[i], expiresAt[i], acceptedAt[i], startedAt[i], completedAt[i] = r.leasedAt, r.expiresAt, r.acceptedAt, r.startedAt, r.doneAt
		cancel[i], pct[i], result[i] = t.CancelRequested, r.pct, r.result
	}
	return stmt{sql: tasksBehind,
		args: []any{id, tenant, typ, by, to, state, prio, params, summary, idem, created, updated, avail, lease, worker, leasedAt, expiresAt, acceptedAt, accRc,
			cancel, attempts, maxRetries, leaseCount, expiries, startedAt, completedAt, pct, progMsg, result, lastErr, dead, assign, intents},
		check: expectRows("task insert", n)}
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
			return &mismatch{fmt.Sprintf("%s wrote %d of %d rows", what, tag.RowsAffected(), n)}
		}
		return nil
	}
}

// receiptParents is a receipt's parents as the JSON the receipts table keeps.
func receiptParents(rc *host.Receipt) (string, error) {
	if rc.Parents == nil {
		return "[]", nil
	}
	b, err := json.Marshal(rc.Parents)
	return string(b), err
}
