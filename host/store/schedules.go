package store

import (
	"context"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// ScheduleReader reads schedules (issue 39).
type ScheduleReader interface {
	// GetSchedule returns a tenant's schedule by id, or host.CodeNotFound.
	// Inside Update it locks the row (PostgreSQL: FOR UPDATE), so a change
	// built from it cannot overwrite a fire another host has under way.
	GetSchedule(ctx context.Context, tenant, id string) (*host.Schedule, error)
	// ListSchedules returns a tenant's schedules by id, after the id
	// afterID ("" from the start), at most limit; owner "" lists every
	// owner's (storetest: ScheduleCRUD).
	ListSchedules(ctx context.Context, tenant, owner, afterID string, limit int) ([]*host.Schedule, error)
	// CountSchedules returns how many schedules an owner has (storetest:
	// ScheduleQuotaPerOwner). The engine counts inside the create's
	// transaction after LockResources on the owner's name, so concurrent
	// creates count one after another (storetest:
	// ScheduleQuotaHoldsUnderConcurrentCreates).
	CountSchedules(ctx context.Context, tenant, owner string) (int, error)
	// DueSchedules returns, across tenants, unpaused schedules whose
	// next_fire_at is not after now, soonest first, at most limit. It locks
	// nothing: the firer claims what it read with ClaimSchedules.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]*host.Schedule, error)
}

// ScheduleWriter writes schedules.
type ScheduleWriter interface {
	// InsertSchedule stores a new schedule; host.CodeConflict when its
	// owner already has one of that name.
	InsertSchedule(ctx context.Context, s *host.Schedule) error
	// UpdateSchedule writes every field of a schedule but its id, tenant,
	// owner and created_at; host.CodeConflict when its owner has another
	// schedule of its name, host.CodeNotFound if it is gone.
	UpdateSchedule(ctx context.Context, s *host.Schedule) error
	// DeleteSchedule removes a schedule; host.CodeNotFound if there is none.
	DeleteSchedule(ctx context.Context, tenant, id string) error
	// ClaimSchedules locks and returns those of the schedules ids that are
	// still unpaused and due at now, skipping rows another host's
	// transaction holds (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite's one
	// writer holds them all). The fire and the advance of next_fire_at
	// then commit in the claim's transaction, so each fire is taken by one
	// writer (storetest: ScheduleFiresOnceAcrossEngines).
	ClaimSchedules(ctx context.Context, ids []string, now time.Time) ([]*host.Schedule, error)
}
