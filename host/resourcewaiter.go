package host

import "time"

// PrefixResourceWaiter starts the id of a waiting acquire.
const PrefixResourceWaiter = "rwait-"

// ResourceWaiter is a request waiting for a resource (issue 43 item 3): an
// acquire parked under wait-die, or a queued task whose intents could not be
// granted. Waiters are served in wait-die order: a waiter blocks every
// younger request whose predicate conflicts with its own (a MUTATES waiter
// blocks new READS, any waiter blocks new MUTATES), so steady readers cannot
// starve a writer and an agent that re-acquires in a loop cannot starve a
// queued task.
type ResourceWaiter struct {
	Tenant   string `json:"-"`
	Resource string `json:"resource"`
	// WaiterID names the waiting request (an acquire's own id) or the task.
	WaiterID  string         `json:"waiter_id"`
	Holder    string         `json:"holder,omitempty"`
	Predicate LeasePredicate `json:"predicate"`
	// PriorityAt is the waiter's wait-die timestamp: its seniority.
	PriorityAt time.Time `json:"priority_at"`
	// TaskID names the task that waits (a task's intents).
	TaskID string `json:"task_id,omitempty"`
	// ExpiresAt is when the registration lapses unless renewed (the
	// acquire's wait ends; the task is no longer being offered).
	ExpiresAt time.Time `json:"expires_at"`
}

// SeenBy returns the waiter as principal sees it: the task that waits is
// named to the waiter's holder and to an admin only (ResourceLease.SeenBy).
func (w *ResourceWaiter) SeenBy(principal string, admin bool) *ResourceWaiter {
	if w == nil || w.TaskID == "" || admin || w.Holder == principal {
		return w
	}
	c := *w
	if c.WaiterID == c.TaskID {
		c.WaiterID = "" // a task's registration is named by the task's id
	}
	c.TaskID = ""
	return &c
}
