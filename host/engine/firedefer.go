package engine

import (
	"sync"
	"time"
)

// A schedule whose template cannot be judged now (its validator timed out,
// or is still in its first load) is set aside by this host for a while,
// and the pass goes on with the others. Were the pass abandoned instead,
// that schedule — the oldest due, at the head of every DueSchedules read —
// would stop every schedule of the gate, every tenant's, for as long as its
// validator stays slow.
const (
	fireDeferFirst = 5 * time.Second // the first wait: a few ticks
	fireDeferMax   = 5 * time.Minute // doubled each time again, up to this
)

// fireDeferrals holds the schedules set aside, by id.
type fireDeferrals struct {
	mu sync.Mutex
	m  map[string]fireDeferral
}

type fireDeferral struct {
	until time.Time     // not fired before
	wait  time.Duration // the last wait, doubled on the next deferral
}

// deferFire sets schedule id aside from now: fireDeferFirst the first
// time, twice the last wait when the schedule was set aside before and
// has not fired since. It returns the wait.
func (d *fireDeferrals) deferFire(id string, now time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]fireDeferral{}
	}
	w := fireDeferFirst
	if prev, ok := d.m[id]; ok {
		w = min(2*prev.wait, fireDeferMax)
	}
	d.m[id] = fireDeferral{until: now.Add(w), wait: w}
	return w
}

// held reports whether schedule id is set aside at now.
func (d *fireDeferrals) held(id string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	f, ok := d.m[id]
	return ok && now.Before(f.until)
}

// active returns how many schedules are set aside at now, and forgets
// those whose wait ended long ago (a schedule deleted meanwhile, or one
// whose later passes were judged and cleared it on another host).
func (d *fireDeferrals) active(now time.Time) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for id, f := range d.m {
		switch {
		case now.Before(f.until):
			n++
		case now.Sub(f.until) > 2*fireDeferMax:
			delete(d.m, id)
		}
	}
	return n
}

// clear forgets schedule id: its template was judged.
func (d *fireDeferrals) clear(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, id)
}
