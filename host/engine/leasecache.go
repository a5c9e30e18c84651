package engine

import (
	"sync"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// leaseCache remembers the tasks this engine leased, by lease id, as the
// lease wrote them, so a completion can build its change without reading the
// task first. It is only a hint: the change is written fenced on the row
// version remembered, so an entry made stale by a write elsewhere (another
// host, a cancel, an expiry) makes the writer read the task again, as a miss
// does. Entries leave when their lease ends here, or, when the cache is full,
// once their lease has expired.
type leaseCache struct {
	mu sync.Mutex
	m  map[string]*host.Task
}

const (
	// leaseCacheCap bounds how many leases are remembered.
	leaseCacheCap = 16384
	// leaseCacheMaxParams keeps tasks with large parameters out of it.
	leaseCacheMaxParams = 4096
)

func newLeaseCache() *leaseCache { return &leaseCache{m: map[string]*host.Task{}} }

// put remembers t (a shallow copy: callers replace fields, never mutate what
// they point to).
func (c *leaseCache) put(t *host.Task, now time.Time) {
	if t == nil || t.LeaseID == "" || t.LeaseExpiresAt == nil || len(t.Params) > leaseCacheMaxParams {
		return
	}
	cp := *t
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[t.LeaseID]; !ok && len(c.m) >= leaseCacheCap {
		for id, old := range c.m {
			if !now.Before(*old.LeaseExpiresAt) {
				delete(c.m, id)
			}
		}
		if len(c.m) >= leaseCacheCap {
			return
		}
	}
	c.m[t.LeaseID] = &cp
}

// get returns a shallow copy of the task leased under leaseID, if remembered.
func (c *leaseCache) get(leaseID string) (*host.Task, bool) {
	c.mu.Lock()
	t, ok := c.m[leaseID]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	cp := *t
	return &cp, true
}

// drop forgets a lease.
func (c *leaseCache) drop(leaseID string) {
	c.mu.Lock()
	delete(c.m, leaseID)
	c.mu.Unlock()
}
