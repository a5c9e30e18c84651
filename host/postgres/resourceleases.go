package postgres

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/sqlrows"
)

// Resource leases (KLIS-3). Several writers (of one host or many) run their
// batches at once under READ COMMITTED, so a writer that changes leases on a
// resource first takes a transaction-scoped advisory lock on it
// (LockResources): decisions on one resource are then made one at a time, each
// reading what the previous one committed.

// resourceLockClass is the first key of the two-key advisory locks on
// resources; the two-key space is separate from the one-key locks the
// migrations take.
const resourceLockClass = 1010

type rleaseRow struct {
	l   *host.ResourceLease
	seq int64
}

func (r *reader) resourceLeases(ctx context.Context, q string, args ...any) ([]rleaseRow, error) {
	var out []rleaseRow
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		l, seq, err := sqlrows.ScanResourceLease(rows)
		if err != nil {
			return err
		}
		out = append(out, rleaseRow{l, seq})
		return nil
	}, q, args...)
	return out, err
}

func (r *reader) GetResourceLease(ctx context.Context, tenant, id string) (*host.ResourceLease, error) {
	rows, err := r.resourceLeases(ctx, `SELECT `+sqlrows.ResourceLeaseColumns+` FROM resource_leases WHERE id = $1 AND tenant = $2`, id, tenant)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, notFound("resource lease", id)
	}
	return rows[0].l, nil
}

func (r *reader) ListResourceLeases(ctx context.Context, f store.ResourceLeaseFilter) ([]*host.ResourceLease, string, error) {
	q, a, err := resourceLeaseQuery(&f)
	if err != nil {
		return nil, "", err
	}
	rows, err := r.resourceLeases(ctx, q, a...)
	if err != nil {
		return nil, "", err
	}
	return pageLeases(rows, f.Limit)
}

// resourceLeaseQuery is ListResourceLeases' statement for f (its Limit
// defaulted in place).
func resourceLeaseQuery(f *store.ResourceLeaseFilter) (string, args, error) {
	after, err := store.ParseCursor(f.Cursor)
	if err != nil {
		return "", nil, err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var a args
	q := `SELECT ` + sqlrows.ResourceLeaseColumns + ` FROM resource_leases WHERE seq > ` + a.add(after)
	if f.Tenant != "" {
		q += ` AND tenant = ` + a.add(f.Tenant)
	}
	if len(f.IDs) > 0 {
		q += ` AND id = ANY(` + a.add(f.IDs) + `::text[])`
	}
	if f.Holder != "" {
		q += ` AND holder = ` + a.add(f.Holder)
	}
	if len(f.Resources) > 0 {
		q += ` AND resource = ANY(` + a.add(f.Resources) + `::text[])`
	}
	if len(f.States) == 1 && f.States[0] == host.ResourceLeaseActive {
		q += ` AND state = 'active'` // a literal, so the partial indexes apply
	} else if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, s := range f.States {
			states[i] = string(s)
		}
		q += ` AND state = ANY(` + a.add(states) + `::text[])`
	}
	if f.LiveAt != nil {
		q += ` AND state = 'active' AND expires_at > ` + a.add(us(*f.LiveAt))
	}
	if f.ExpiredAt != nil {
		q += ` AND state = 'active' AND expires_at <= ` + a.add(us(*f.ExpiredAt))
	}
	if f.EndsAfter != nil {
		q += ` AND coalesce(ended_at, expires_at) > ` + a.add(us(*f.EndsAfter))
	}
	q += ` ORDER BY seq LIMIT ` + a.add(f.Limit+1)
	return q, a, nil
}

// pageLeases cuts rows read with a limit of limit+1 to a page and its cursor.
func pageLeases(rows []rleaseRow, limit int) ([]*host.ResourceLease, string, error) {
	rows, cur := store.Page(rows, limit, func(i int) int64 { return rows[i].seq })
	out := make([]*host.ResourceLease, len(rows))
	for i, lr := range rows {
		out[i] = lr.l
	}
	return out, cur, nil
}

func (r *reader) ListResourceLeaseEvents(ctx context.Context, f store.ResourceLeaseEventFilter) ([]host.ResourceLeaseEvent, string, error) {
	after, err := store.ParseCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var a args
	q := `SELECT seq, lease_id, resource, predicate, holder, kind, at, prev_expires_at, expires_at
FROM resource_lease_events WHERE tenant = ` + a.add(f.Tenant) + ` AND seq > ` + a.add(after)
	if f.LeaseID != "" {
		q += ` AND lease_id = ` + a.add(f.LeaseID)
	}
	if f.Resource != "" {
		q += ` AND resource = ` + a.add(f.Resource)
	}
	q += ` ORDER BY seq LIMIT ` + a.add(f.Limit+1)
	out := []host.ResourceLeaseEvent{}
	err = r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		ev := host.ResourceLeaseEvent{Tenant: f.Tenant}
		var pred, kind string
		var at, exp int64
		var prev *int64
		if err := rows.Scan(&ev.Seq, &ev.LeaseID, &ev.Resource, &pred, &ev.Holder, &kind, &at, &prev, &exp); err != nil {
			return err
		}
		ev.Predicate, ev.Kind = host.LeasePredicate(pred), host.ResourceLeaseEventKind(kind)
		ev.At, ev.PrevExpiresAt, ev.ExpiresAt = fromUS(at), fromNUS(prev), fromUS(exp)
		out = append(out, ev)
		return nil
	}, q, a...)
	if err != nil {
		return nil, "", err
	}
	out, cur := store.Page(out, f.Limit, func(i int) int64 { return out[i].Seq })
	return out, cur, nil
}

func (r *reader) CountLiveResourceLeases(ctx context.Context, tenant string, now time.Time) (map[host.LeasePredicate]int64, error) {
	var a args
	q := `SELECT predicate, count(*) FROM resource_leases WHERE state = 'active' AND expires_at > ` + a.add(us(now))
	if tenant != "" {
		q += ` AND tenant = ` + a.add(tenant)
	}
	out := map[host.LeasePredicate]int64{}
	err := r.ss.query(r.c(ctx), func(rows pgx.Rows) error {
		var p string
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			return err
		}
		out[host.LeasePredicate(p)] = n
		return nil
	}, q+` GROUP BY predicate`, a...)
	return out, err
}

// resourceLockKeys returns the sorted, distinct advisory lock keys of a
// tenant's resources in the schema space. Advisory locks belong to the
// database, not to a schema, so the key covers the schema too: gates that
// share a server in separate schemas never wait on each other's resources.
// Taking the keys in one order on every writer means two writers never wait
// on each other in a cycle for one request's locks; a cycle across the
// requests of two batches is a deadlock PostgreSQL breaks, and the batch it
// aborts runs again.
func resourceLockKeys(space, tenant string, resources []string) []int32 {
	keys := make([]int32, 0, len(resources))
	for _, res := range resources {
		h := fnv.New32a()
		h.Write([]byte(space))
		h.Write([]byte{0})
		h.Write([]byte(tenant))
		h.Write([]byte{0})
		h.Write([]byte(res))
		keys = append(keys, int32(h.Sum32()))
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// errLockOrder is LockResources' answer to a request that would wait for a
// lock below one its batch holds: the writer undoes the request and runs it
// after the batch, in a transaction of its own.
var errLockOrder = errors.New("resource lock out of key order")

// LockResources implements store.Tx with transaction-scoped advisory locks,
// taken in key order (unnest keeps the array's order).
//
// A batch takes its requests' locks one request after another, so a later
// request may need a key below one an earlier request took. Waiting for it
// could close a cycle with another writer's batch that holds it and waits for
// ours (a deadlock PostgreSQL breaks only after deadlock_timeout, by aborting
// a whole batch). So a transaction waits only for keys above every key it
// holds; one below is only tried, and if another transaction holds it the
// request gives way (errLockOrder): the writer undoes it and runs it alone
// after the batch commits, where it waits in key order from the start. No
// transaction then waits for a key while holding a higher one, so waits
// between writers cannot form a cycle (a request that locks twice, as a claim
// stepping past held tasks does, may still, alone; the batch is then rerun).
func (w *writeTx) LockResources(ctx context.Context, tenant string, resources []string) (bool, error) {
	if len(resources) == 0 {
		return false, nil
	}
	keys := resourceLockKeys(w.s.schema, tenant, resources)
	wait := keys
	if w.locks.any && !w.locks.alone {
		// keys is sorted: the ones at or below the highest held come first.
		i := sort.Search(len(keys), func(j int) bool { return keys[j] > w.locks.max })
		var ok bool
		if i > 0 {
			if err := w.ss.queryRow(w.c(ctx), []any{&ok}, `SELECT bool_and(pg_try_advisory_xact_lock($1::int4, k)) FROM unnest($2::int4[]) AS k`,
				int32(resourceLockClass), keys[:i]); err != nil {
				return false, err
			}
			if !ok {
				return false, errLockOrder
			}
		}
		wait = keys[i:]
	}
	if len(wait) > 0 {
		if _, err := w.ss.exec(w.c(ctx), `SELECT pg_advisory_xact_lock($1::int4, k) FROM unnest($2::int4[]) AS k`,
			int32(resourceLockClass), wait); err != nil {
			return false, err
		}
	}
	if last := keys[len(keys)-1]; !w.locks.any || last > w.locks.max {
		w.locks.max = last
	}
	w.locks.any = true
	return true, nil
}

// InsertResourceLease implements store.Tx in one statement: the resource's
// counter row is bumped (or created at 1) and its new value is the lease's
// fencing token. The upsert locks the counter row until the transaction
// ends, so even without the resource's advisory lock two grants of one
// resource would get their tokens in commit order.
// insertResourceLease bumps the resource's counter row and inserts the
// lease with its new value as the fencing token.
var insertResourceLease = `WITH f AS (
  INSERT INTO resource_fences (tenant, resource, token) VALUES ($2, $3, 1)
  ON CONFLICT (tenant, resource) DO UPDATE SET token = resource_fences.token + 1 RETURNING token)
INSERT INTO resource_leases (` + sqlrows.ResourceLeaseInsertColumns + `, fencing_token)
SELECT ` + placeholders(1, len(sqlrows.Names(sqlrows.ResourceLeaseInsertColumns))) + `, f.token FROM f ON CONFLICT DO NOTHING RETURNING fencing_token`

func (w *writeTx) InsertResourceLease(ctx context.Context, l *host.ResourceLease) error {
	var token int64
	err := w.ss.queryRow(w.c(ctx), []any{&token}, insertResourceLease,
		sqlrows.ResourceLeaseInsertValues(l)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return host.Errorf(host.CodeConflict, "a resource lease with id %s exists", l.ID)
	}
	if err != nil {
		return err
	}
	l.FencingToken = token
	return nil
}

func (w *writeTx) UpdateResourceLease(ctx context.Context, l *host.ResourceLease, f store.ResourceLeaseFence) error {
	var a args
	q := `UPDATE resource_leases SET state = ` + a.add(string(l.State)) + `, expires_at = ` + a.add(us(l.ExpiresAt)) +
		`, ended_at = ` + a.add(nus(l.EndedAt)) + `, restarting = ` + a.add(l.Restarting) + `, grace_used = ` + a.add(l.GraceUsed) +
		` WHERE id = ` + a.add(l.ID) + ` AND tenant = ` + a.add(l.Tenant) + ` AND state = 'active'`
	switch {
	case f.LiveAt != nil:
		q += ` AND expires_at > ` + a.add(us(*f.LiveAt))
	case f.ExpiredAt != nil:
		q += ` AND expires_at <= ` + a.add(us(*f.ExpiredAt))
	}
	n, err := w.ss.exec(w.c(ctx), q, a...)
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrFenced
	}
	return nil
}

// AppendResourceLeaseEvent implements store.Tx. The insert is queued in front
// of the transaction's next statement (it cannot fail on a constraint), so it
// costs no round trip of its own.
func (w *writeTx) AppendResourceLeaseEvent(ctx context.Context, ev *host.ResourceLeaseEvent) error {
	w.ss.queue(`INSERT INTO resource_lease_events (tenant, lease_id, resource, predicate,
holder, kind, at, prev_expires_at, expires_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)`,
		ev.Tenant, ev.LeaseID, ev.Resource, string(ev.Predicate), ev.Holder, string(ev.Kind), us(ev.At),
		nus(ev.PrevExpiresAt), us(ev.ExpiresAt))
	return nil
}

func (w *writeTx) GetResourceHold(ctx context.Context, tenant, holder, resource string) (store.ResourceHold, error) {
	h := store.ResourceHold{Tenant: tenant, Holder: holder, Resource: resource}
	var start, held int64
	err := w.ss.queryRow(w.c(ctx), []any{&start, &held}, `SELECT window_start, held_us FROM resource_holds WHERE tenant = $1 AND holder = $2 AND resource = $3`,
		tenant, holder, resource)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, nil
	}
	if err != nil {
		return h, err
	}
	h.WindowStart, h.Held = fromUS(start), time.Duration(held)*time.Microsecond
	return h, nil
}

// PutResourceHold implements store.Tx; the upsert is queued in front of the
// transaction's next statement.
func (w *writeTx) PutResourceHold(ctx context.Context, h store.ResourceHold) error {
	w.ss.queue(`INSERT INTO resource_holds (tenant, holder, resource, window_start, held_us) VALUES ($1,$2,$3,$4,$5)
ON CONFLICT (tenant, holder, resource) DO UPDATE SET window_start = excluded.window_start, held_us = excluded.held_us`,
		h.Tenant, h.Holder, h.Resource, us(h.WindowStart), h.Held.Microseconds())
	return nil
}

var _ store.ResourceHoldRefundTx = (*writeTx)(nil)

// RefundResourceHold implements store.ResourceHoldRefundTx; queued in front
// of the transaction's next statement, so a release reads no quota row.
func (w *writeTx) RefundResourceHold(ctx context.Context, tenant, holder, resource string, unused time.Duration, acquiredAt, now time.Time, window time.Duration) error {
	w.ss.queue(`UPDATE resource_holds SET held_us = held_us - least($4, held_us)
WHERE tenant = $1 AND holder = $2 AND resource = $3 AND $5 < window_start + $6 AND window_start <= $7`,
		tenant, holder, resource, unused.Microseconds(), us(now), window.Microseconds(), us(acquiredAt))
	return nil
}
