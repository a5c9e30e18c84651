package store

import (
	"sort"

	"github.com/asyncgate/asyncgate/host"
)

// CountDelta is a change in the number of a tenant's tasks of one type in
// one state. Drivers journal one per task state change and add them to their
// stored counts once per batch (see Reader.QueueStats).
type CountDelta struct {
	Tenant string
	Type   string
	State  host.TaskState
	N      int64
}

// Moved returns the deltas of a task of t's tenant and type going from one
// state to another (none when they are the same).
func Moved(ds []CountDelta, t *host.Task, from, to host.TaskState) []CountDelta {
	if from == to {
		return ds
	}
	if from != "" {
		ds = append(ds, CountDelta{t.Tenant, t.Type, from, -1})
	}
	return append(ds, CountDelta{t.Tenant, t.Type, to, 1})
}

// SumDeltas adds up deltas per tenant, type and state, drops the ones that
// cancel out, and orders the rest.
func SumDeltas(ds []CountDelta) []CountDelta {
	type key struct {
		tenant, typ string
		state       host.TaskState
	}
	sum := map[key]int64{}
	for _, d := range ds {
		sum[key{d.Tenant, d.Type, d.State}] += d.N
	}
	out := make([]CountDelta, 0, len(sum))
	for k, n := range sum {
		if n != 0 {
			out = append(out, CountDelta{k.tenant, k.typ, k.state, n})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		return a.State < b.State
	})
	return out
}

// AddCount adds n tasks of a type in a state to qs.
func (qs *QueueStats) AddCount(typ string, state host.TaskState, n int64) {
	if n == 0 {
		return
	}
	qs.ByState[state] += n
	if state == host.StateQueued || state == host.StateLeased {
		qs.ByType[typ] += n
	}
	qs.addTypeState(typ, state, n)
}

// NotePaused records that the leasing of tenant's task type typ is paused
// (a task_type_pauses row): the queued tasks AddCountIn then counts of it
// are also counted in Paused, which lists typ (0 while it holds none).
// Drivers call it before they add the counts.
func (qs *QueueStats) NotePaused(tenant, typ string) {
	if qs.pausedIn == nil {
		qs.pausedIn = map[[2]string]bool{}
	}
	if qs.Paused == nil {
		qs.Paused = map[string]int64{}
	}
	qs.pausedIn[[2]string{tenant, typ}] = true
	qs.Paused[typ] += 0
}

// IsPaused reports whether NotePaused noted tenant's type typ.
func (qs *QueueStats) IsPaused(tenant, typ string) bool { return qs.pausedIn[[2]string{tenant, typ}] }

// AddCountIn is AddCount for tasks of tenant: queued ones of a type paused
// there (NotePaused) are counted in Paused too.
func (qs *QueueStats) AddCountIn(tenant, typ string, state host.TaskState, n int64) {
	qs.AddCount(typ, state, n)
	if state == host.StateQueued && qs.IsPaused(tenant, typ) {
		qs.Paused[typ] += n
	}
}

// ReadyQueued is how many queued tasks are ready to lease: those
// ByState counts queued (scheduled ones already apart) but not the paused
// ones.
func (qs *QueueStats) ReadyQueued() int64 {
	n := qs.ByState[host.StateQueued]
	for _, p := range qs.Paused {
		n -= p
	}
	return max(n, 0)
}

// SplitScheduled moves the queued tasks that ScheduledCounts counted from
// StateQueued to StateScheduled (ByState and ByTypeState; ByType still
// counts them, as every open task), and out of Paused: a scheduled task of
// a paused type is counted scheduled. Only the deltas of qs's tenant
// belong in ds.
func (qs *QueueStats) SplitScheduled(ds []CountDelta) {
	for _, d := range ds {
		if d.N <= 0 {
			continue
		}
		if qs.IsPaused(d.Tenant, d.Type) {
			qs.Paused[d.Type] -= d.N
		}
		qs.ByState[host.StateQueued] -= d.N
		qs.ByState[host.StateScheduled] += d.N
		if qs.ByState[host.StateQueued] == 0 {
			delete(qs.ByState, host.StateQueued)
		}
		qs.addTypeState(d.Type, host.StateQueued, -d.N)
		qs.addTypeState(d.Type, host.StateScheduled, d.N)
	}
}

// addTypeState counts n tasks of a type in a state in ByTypeState.
func (qs *QueueStats) addTypeState(typ string, state host.TaskState, n int64) {
	if qs.ByTypeState == nil {
		qs.ByTypeState = map[string]map[host.TaskState]int64{}
	}
	m := qs.ByTypeState[typ]
	if m == nil {
		m = map[host.TaskState]int64{}
		qs.ByTypeState[typ] = m
	}
	m[state] += n
	if m[state] == 0 {
		delete(m, state)
	}
}
