package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// AttemptWriter records the history of a task's leases (storetest:
// AttemptsHistory).
type AttemptWriter interface {
	// InsertAttempt records a lease of a task that ended (a.EndedAt set),
	// in the transaction that ended it. A task's attempts are listed in the
	// order they were inserted.
	InsertAttempt(ctx context.Context, a *host.Attempt) error
}

// AttemptReader reads the history of a task's leases.
type AttemptReader interface {
	// ListAttempts returns up to limit ended attempts of a task, oldest
	// first (the order they were inserted); none for an unknown task.
	ListAttempts(ctx context.Context, tenant, taskID string, limit int) ([]host.Attempt, error)
	// GetAttemptByLease returns the ended attempt of the task's lease
	// leaseID — who held it and how it ended — or host.CodeNotFound when
	// there is none: a lease that is live, never existed, or is another
	// task's or tenant's. It reads the task's attempts from the newest: a
	// lease that ended last (the common case, a worker's retry of its own
	// release) is one row; one that did not is found, or missed, after
	// reading the task's later attempts. Only a release or snooze of a
	// lease that is not live asks.
	GetAttemptByLease(ctx context.Context, tenant, taskID, leaseID string) (*host.Attempt, error)
}

// MaxAttemptsListed bounds one ListAttempts call.
const MaxAttemptsListed = 1000

// AttemptRow checks an ended attempt and returns the JSON body and end time
// a driver stores it with.
func AttemptRow(a *host.Attempt) (body string, ended time.Time, err error) {
	if a == nil || a.EndedAt == nil || a.Tenant == "" || a.TaskID == "" || a.LeaseID == "" {
		return "", time.Time{}, host.Errorf(host.CodeInternal, "an attempt is recorded when it ends, with its tenant, task and lease")
	}
	b, err := json.Marshal(a)
	if err != nil {
		return "", time.Time{}, err
	}
	return string(b), *a.EndedAt, nil
}
