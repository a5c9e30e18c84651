package engine

import (
	"context"
	"sync"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Pausing a task type's leasing. A paused type's tasks are still enqueued
// (and canceled, and listed), but lease calls skip them until an operator
// resumes it. Pauses are rows of their own (task_type_pauses), so a restart
// keeps them and every host sharing a store sees them: the host that paused
// a type at once, the others within Config.TaskTypeTTL (each caches a
// tenant's pauses as it caches task types).

// pauseCache remembers each tenant's paused task types and, while any is
// paused, its registered types (the lease call that names no type is
// offered every registered type but the paused ones).
type pauseCache struct {
	mu sync.Mutex
	m  map[string]*tenantPauses
}

type tenantPauses struct {
	paused  map[string]bool
	types   []string // registered types, read only while some are paused
	fetched time.Time
}

func newPauseCache() *pauseCache { return &pauseCache{m: map[string]*tenantPauses{}} }

// getIn returns tenant's pauses, reading them through r (a claim's own
// transaction) when the cached ones are older than ttl.
func (c *pauseCache) getIn(ctx context.Context, r store.Reader, tenant string, ttl time.Duration) (*tenantPauses, error) {
	c.mu.Lock()
	p := c.m[tenant]
	c.mu.Unlock()
	if p != nil && time.Since(p.fetched) < ttl {
		return p, nil
	}
	ps, err := r.ListTaskTypePauses(ctx, tenant)
	if err != nil {
		return nil, err
	}
	p = &tenantPauses{fetched: time.Now()}
	if len(ps) > 0 {
		p.paused = make(map[string]bool, len(ps))
		for _, x := range ps {
			p.paused[x.TaskType] = true
		}
		tts, err := r.ListTaskTypes(ctx, tenant)
		if err != nil {
			return nil, err
		}
		for _, tt := range tts {
			p.types = append(p.types, tt.Name)
		}
	}
	c.mu.Lock()
	c.m[tenant] = p
	c.mu.Unlock()
	return p, nil
}

func (c *pauseCache) invalidate(tenant string) {
	c.mu.Lock()
	delete(c.m, tenant)
	c.mu.Unlock()
}

// leasable narrows the types a lease call asks for (none: every type) to
// those not paused. ok is false when nothing is left to offer.
func (p *tenantPauses) leasable(asked []string) (types []string, ok bool) {
	if len(p.paused) == 0 {
		return asked, true
	}
	if len(asked) == 0 {
		asked = p.types
	}
	for _, t := range asked {
		if !p.paused[t] {
			types = append(types, t)
		}
	}
	return types, len(types) > 0
}

// PauseTaskType pauses the leasing of a tenant's registered task type:
// enqueue still accepts its tasks, lease calls skip them until
// ResumeTaskType. Pausing a paused type is a no-op that returns the pause in
// force. Only operators (admin keys) may call it; the doors check the role.
func (e *Engine) PauseTaskType(ctx context.Context, tenant, name, by, reason string) (*store.TaskTypePause, error) {
	if host.LongerThan(reason, 1000) {
		return nil, host.Errorf(host.CodeBadRequest, "reason is longer than 1000 characters")
	}
	p := store.TaskTypePause{Tenant: tenant, TaskType: name, PausedBy: by, PausedAt: e.now(), Reason: reason}
	var out *store.TaskTypePause
	err := e.update(ctx, func(tx store.Tx) error {
		out = nil
		if _, err := tx.GetTaskType(ctx, tenant, name); err != nil {
			if host.IsCode(err, host.CodeNotFound) {
				return host.Errorf(host.CodeNotFound, "no task type %q", name)
			}
			return err
		}
		if err := tx.PauseTaskType(ctx, p); err != nil {
			return err
		}
		ps, err := tx.ListTaskTypePauses(ctx, tenant)
		if err != nil {
			return err
		}
		for i := range ps {
			if ps[i].TaskType == name {
				out = &ps[i]
			}
		}
		return nil
	})
	e.pauses.invalidate(tenant)
	if err != nil {
		return nil, err
	}
	if out == nil { // a store that reads its own writes late: the pause as asked
		out = &p
	}
	return out, nil
}

// ResumeTaskType resumes the leasing of a paused task type and wakes the
// lease calls waiting for its tasks. It reports whether the type was
// paused; resuming a registered type that is not is a no-op, and one that
// is not registered is 404.
func (e *Engine) ResumeTaskType(ctx context.Context, tenant, name string) (bool, error) {
	var was bool
	err := e.update(ctx, func(tx store.Tx) error {
		var err error
		if was, err = tx.ResumeTaskType(ctx, tenant, name); err != nil || was {
			return err
		}
		// Nothing was paused: a type that does not exist is 404, as its
		// pause is.
		if _, err := tx.GetTaskType(ctx, tenant, name); host.IsCode(err, host.CodeNotFound) {
			return host.Errorf(host.CodeNotFound, "no task type %q", name)
		} else {
			return err
		}
	})
	e.pauses.invalidate(tenant)
	if err != nil {
		return false, err
	}
	if was {
		// Its backlog may be any size: every parked call of the tenant
		// looks (a wake-up of MaxBatch tasks would go to the first call
		// with that much room).
		e.waiters.wakeAll(tenant)
	}
	return was, nil
}

// TaskTypePauses lists a tenant's paused task types by name, as stored
// (not cached).
func (e *Engine) TaskTypePauses(ctx context.Context, tenant string) ([]store.TaskTypePause, error) {
	var out []store.TaskTypePause
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		out, err = r.ListTaskTypePauses(ctx, tenant)
		return err
	})
	return out, err
}
