package postgres

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// Set-oriented updates: a batch's fenced task updates, its obligation
// terminations and the tasks a claim leases each go to the server as one
// statement that joins arrays (one a column) to the table by its key, not
// one statement per row. A row's own cost (its new version, its index
// entries) stays; the statement's (executor start-up, opening the table and
// its indexes, a portal, a result) is paid once (RATIONALE.md, "PostgreSQL,
// rows written behind").
//
// Each runs on a generic plan made with hash and merge joins and
// sequential scans off (keyedJoin, SET LOCAL around it): a nested loop
// that probes the key's index for each element of the arrays, whatever the
// table's size or statistics when the plan was made. Left to the planner, a
// join of arrays to a table planned once while the table was small may
// keep a sequential scan as it grows; planned afresh for each statement
// (force_custom_plan, as before), it cost 120–200 µs of planning a
// statement, a fifth of the server's statement time under the HTTP load. A
// single row keeps the one-row statement, which needs no plan of its own.

// tasksUpdateSet updates tasks to the values of sqlrows.TaskSetColumns, each
// fenced as updateTask fences one: $1 the ids, then one array a column, then
// the fences' state, lease id, live-at, expired-at, version and no-waiters.
var tasksUpdateSet = func() string {
	sample, err := sqlrows.TaskSetValues(&host.Task{})
	if err != nil {
		panic(err)
	}
	cols := sqlrows.TaskSetColumns
	var b strings.Builder
	b.WriteString(`UPDATE tasks AS t SET `)
	for _, c := range cols {
		b.WriteString(c + ` = v.` + c + `, `)
	}
	b.WriteString(`version = t.version + 1 FROM (SELECT unnest($1::text[]) AS id`)
	for i, c := range cols {
		fmt.Fprintf(&b, `, unnest($%d::%s) AS %s`, i+2, arrayType(sample[i]), c)
	}
	n := len(cols) + 2
	fmt.Fprintf(&b, `, unnest($%d::text[]) AS f_state, unnest($%d::text[]) AS f_lease, unnest($%d::int8[]) AS f_live,
unnest($%d::int8[]) AS f_expired, unnest($%d::int8[]) AS f_version, unnest($%d::bool[]) AS f_nowait) AS v
WHERE t.id = v.id AND t.state = v.f_state AND (v.f_lease = '' OR t.lease_id = v.f_lease)
AND (v.f_live IS NULL OR t.lease_expires_at > v.f_live) AND (v.f_expired IS NULL OR t.lease_expires_at <= v.f_expired)
AND (v.f_version = 0 OR t.version = v.f_version) AND (NOT v.f_nowait OR NOT t.has_waiters)
RETURNING t.id`, n, n+1, n+2, n+3, n+4, n+5)
	return `WITH u AS (` + b.String() + `) SELECT fence_check(ARRAY(SELECT id FROM u), $1::text[])`
}()

// termsSet ends open obligations: $1 the terminators, $2 the obligations'
// receipt ids, $3 their tenants (terminateQ, a row each).
const termsSet = `UPDATE obligations AS o SET terminated_by = v.by
FROM (SELECT unnest($1::text[]) AS by, unnest($2::text[]) AS parent, unnest($3::text[]) AS tenant) AS v
WHERE o.receipt_id = v.parent AND o.tenant = v.tenant AND coalesce(o.terminated_by, '') = ''`

// attemptInsert and attemptsBehind write ended attempts, one or many.
const (
	attemptInsert  = `INSERT INTO task_attempts (tenant, task_id, lease_id, ended_at, body) VALUES ($1,$2,$3,$4,$5)`
	attemptsBehind = `INSERT INTO task_attempts (tenant, task_id, lease_id, ended_at, body)
SELECT unnest($1::text[]), unnest($2::text[]), unnest($3::text[]), unnest($4::int8[]), unnest($5::text[])`
)

// newTaskUpdate is t's update fenced by f, to be written behind or as a set.
func newTaskUpdate(t *host.Task, f store.Fence) (taskUpdate, error) {
	v, err := sqlrows.TaskSetValues(t)
	if err != nil {
		return taskUpdate{}, err
	}
	return taskUpdate{id: t.ID, vals: v, f: f}, nil
}

// setUpdates returns the statements of task updates and terminations: a
// single row as its own statement, several as one set-oriented statement
// between keyedJoin and plannerDefaults (a one-row statement of the other
// kind in the same block gets its generic plan made there too: a key
// lookup either way). Every task update must change its row (else its
// statement fails, fence_check, and its request is set aside to run after
// the batch in strict mode, where it meets its fence); a termination may
// find its obligation already ended.
func setUpdates(updates []taskUpdate, terms []termination) []stmt {
	// An obligation is ended once: the first terminator wins, as when
	// each ran in turn.
	if len(terms) > 1 {
		seen := make(map[termination]bool, len(terms))
		kept := make([]termination, 0, len(terms))
		for _, t := range terms {
			k := termination{tenant: t.tenant, parent: t.parent}
			if !seen[k] {
				seen[k] = true
				kept = append(kept, t)
			}
		}
		terms = kept
	}
	var out []stmt
	joins := len(updates) > 1 || len(terms) > 1
	if joins {
		out = append(out, keyedJoin...)
	}
	switch len(updates) {
	case 0:
	case 1:
		out = append(out, updateOneBehind(updates[0]))
	default:
		out = append(out, updatesStmt(updates))
	}
	switch len(terms) {
	case 0:
	case 1:
		out = append(out, stmt{sql: terminateQ, args: []any{terms[0].by, terms[0].parent, terms[0].tenant}})
	default:
		by, parent, tenant := col(len(terms)), col(len(terms)), col(len(terms))
		for i, t := range terms {
			by[i], parent[i], tenant[i] = t.by, t.parent, t.tenant
		}
		out = append(out, stmt{sql: termsSet, args: []any{by, parent, tenant}})
	}
	if joins {
		out = append(out, plannerDefaults...)
	}
	return out
}

// keyedJoin makes the statements after it in the transaction run on a
// generic plan of nested loops over indexes (setupdates.go);
// plannerDefaults puts the settings back.
var (
	keyedJoin = []stmt{
		{sql: `SET LOCAL plan_cache_mode = force_generic_plan`},
		{sql: `SET LOCAL enable_hashjoin = off`},
		{sql: `SET LOCAL enable_mergejoin = off`},
		{sql: `SET LOCAL enable_seqscan = off`},
	}
	plannerDefaults = []stmt{
		{sql: `SET LOCAL plan_cache_mode TO DEFAULT`},
		{sql: `SET LOCAL enable_hashjoin TO DEFAULT`},
		{sql: `SET LOCAL enable_mergejoin TO DEFAULT`},
		{sql: `SET LOCAL enable_seqscan TO DEFAULT`},
	}
)

// updateOne is u as the one-row fenced update (updateTask), answered at
// once in strict mode: it changes one row, or none when the fence is lost.
func updateOne(u taskUpdate) stmt {
	a := args(u.vals)
	q := updateTaskSQL + a.add(u.id) + ` AND state = ` + a.add(string(u.f.State))
	if u.f.LeaseID != "" {
		q += ` AND lease_id = ` + a.add(u.f.LeaseID)
	}
	if u.f.LiveAt != nil {
		q += ` AND lease_expires_at > ` + a.add(us(*u.f.LiveAt))
	}
	if u.f.ExpiredAt != nil {
		q += ` AND lease_expires_at <= ` + a.add(us(*u.f.ExpiredAt))
	}
	if u.f.Version != 0 {
		q += ` AND version = ` + a.add(u.f.Version)
	}
	if u.f.NoWaiters {
		q += ` AND NOT has_waiters`
	}
	return stmt{sql: q, args: a}
}

// updateOneBehind is u's one-row fenced update written behind: it fails on
// the server when the fence is lost (fence_check).
func updateOneBehind(u taskUpdate) stmt {
	one := updateOne(u)
	a := args(one.args)
	q := `WITH u AS (` + one.sql + ` RETURNING id) SELECT fence_check(ARRAY(SELECT id FROM u), ARRAY[` + a.add(u.id) + `]::text[])`
	return stmt{sql: q, args: a, check: fenced([]taskUpdate{u}), asserted: true}
}

// blame is r as the requests a mismatch names: none when r is nil.
func blame(r *request) []*request {
	if r == nil {
		return nil
	}
	return []*request{r}
}

// fenced is the check of a fenced update of ups (updateOneBehind, updatesStmt),
// whose statement fails on the server when a fence is lost (fence_check,
// migration 0052): the transaction is then aborted, nothing after the
// statement ran, and the mismatch names the requests of the rows it did
// not change (every update must change its row) when each is known. The
// statement cannot succeed with a row unchanged, so the check may be read
// after a COMMIT pipelined behind it (asserted).
func fenced(ups []taskUpdate) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		var n int64
		err := br.QueryRow().Scan(&n)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != fenceLost {
			return err
		}
		mm := &mismatch{what: pe.Message, aborted: true}
		lost := strings.Split(pe.Detail, ",")
		for _, u := range ups {
			if !slices.Contains(lost, u.id) {
				continue
			}
			if u.req == nil {
				mm.reqs = nil // one cannot be blamed: none is
				break
			}
			if !slices.Contains(mm.reqs, u.req) {
				mm.reqs = append(mm.reqs, u.req)
			}
		}
		return mm
	}
}

// fenceLost is the SQLSTATE fence_check raises.
const fenceLost = "AGF01"

// updatesStmt is the set-oriented update of several tasks (tasksUpdateSet).
// No two of them are of one task: the writer sends the waiting updates
// before a second of the same task joins them.
func updatesStmt(ups []taskUpdate) stmt {
	n := len(ups)
	rows := make([][]any, n)
	ids, state, lease := col(n), col(n), col(n)
	live, expired := make([]*int64, n), make([]*int64, n)
	version, nowait := make([]int64, n), make([]bool, n)
	for i, u := range ups {
		rows[i] = u.vals
		ids[i], state[i], lease[i] = u.id, string(u.f.State), u.f.LeaseID
		if u.f.LiveAt != nil {
			v := us(*u.f.LiveAt)
			live[i] = &v
		}
		if u.f.ExpiredAt != nil {
			v := us(*u.f.ExpiredAt)
			expired[i] = &v
		}
		version[i], nowait[i] = u.f.Version, u.f.NoWaiters
	}
	a := append([]any{ids}, columnsOf(rows)...)
	a = append(a, state, lease, live, expired, version, nowait)
	return stmt{sql: tasksUpdateSet, args: a, check: fenced(ups), asserted: true}
}
