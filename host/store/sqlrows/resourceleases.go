package sqlrows

import (
	"github.com/asyncgate/asyncgate/host"
)

// ResourceLeaseColumns are the columns ScanResourceLease reads: every
// column of resource_leases.
const ResourceLeaseColumns = `seq, ` + ResourceLeaseInsertColumns + `, fencing_token`

// ResourceLeaseInsertColumns are the columns an insert of a resource lease
// writes from the lease, in the order of ResourceLeaseInsertValues: every
// column but seq and fencing_token, which the insert takes from the
// resource's counter row.
const ResourceLeaseInsertColumns = `id, tenant, resource, predicate, holder, state, manifest_id, priority_at, acquired_at,
expires_at, ttl_ms, ended_at, restarting, grace_used, task_id`

// ScanResourceLease reads one row of ResourceLeaseColumns: the lease and
// its seq (the order of listing).
func ScanResourceLease(sc Scanner) (*host.ResourceLease, int64, error) {
	var l host.ResourceLease
	var seq, prio, acq, exp int64
	var ended *int64
	var pred, state string
	if err := sc.Scan(&seq, &l.ID, &l.Tenant, &l.Resource, &pred, &l.Holder, &state, &l.ManifestID, &prio, &acq,
		&exp, &l.TTLMs, &ended, &l.Restarting, &l.GraceUsed, &l.TaskID, &l.FencingToken); err != nil {
		return nil, 0, err
	}
	l.Predicate, l.State = host.LeasePredicate(pred), host.ResourceLeaseState(state)
	l.PriorityAt, l.AcquiredAt, l.ExpiresAt = FromUS(prio), FromUS(acq), FromUS(exp)
	l.EndedAt = FromNUS(ended)
	return &l, seq, nil
}

// ResourceLeaseInsertValues are l's values in the order of
// ResourceLeaseInsertColumns.
func ResourceLeaseInsertValues(l *host.ResourceLease) []any {
	return []any{l.ID, l.Tenant, l.Resource, string(l.Predicate), l.Holder, string(l.State), l.ManifestID,
		US(l.PriorityAt), US(l.AcquiredAt), US(l.ExpiresAt), l.TTLMs, NUS(l.EndedAt), l.Restarting, l.GraceUsed, l.TaskID}
}
