package host

import "time"

// InboxKind says what an inbox item tells its recipient. Only actionable
// outcomes become items (seed 002, "Inbox as Signal, Not Telemetry"): never
// progress, never the bookkeeping of a retry.
type InboxKind string

// Inbox item kinds.
const (
	InboxCompleted InboxKind = "completed"  // a task succeeded: its result can be fetched
	InboxFailed    InboxKind = "failed"     // a task failed for good (dead letter)
	InboxEscalated InboxKind = "escalation" // someone must decide (lease expired, retries exhausted, policy fault)
	InboxMilestone InboxKind = "milestone"  // a worker marked a progress report as worth the recipient's attention
)

// PrefixInbox prefixes inbox item ids.
const PrefixInbox = "I-"

// InboxItem is one actionable item in a principal's inbox, with the five
// lifecycle timestamps of seed 002 ("Complete Lifecycle Tracking"):
// created → delivered → read → fetched → promoted_to_memory. Delivered is set
// when a transport hands the item to its recipient (a session bootstrap, an
// inbox listing); read only by the recipient's explicit mark_read, never
// inferred; fetched when the task's result is fetched or archived; promoted
// when the result is stored in long-term memory.
type InboxItem struct {
	ID        string    `json:"inbox_id"`
	Tenant    string    `json:"-"`
	Recipient string    `json:"recipient"`
	Kind      InboxKind `json:"kind"`
	TaskID    string    `json:"task_id"`
	TaskType  string    `json:"task_type,omitempty"`
	ReceiptID string    `json:"receipt_id,omitempty"`
	// Summary is one line saying what happened and what to do.
	Summary string `json:"summary"`

	CreatedAt   time.Time  `json:"created_at"`
	DeliveredAt *time.Time `json:"delivered_at"`
	ReadAt      *time.Time `json:"read_at"`
	FetchedAt   *time.Time `json:"fetched_at"`
	PromotedAt  *time.Time `json:"promoted_to_memory_at"`

	// Seq orders a recipient's items (oldest first).
	Seq int64 `json:"-"`
}

// InboxField names one of the timestamps a later act sets.
type InboxField string

// Inbox timestamps set after creation.
const (
	InboxDelivered InboxField = "delivered_at"
	InboxRead      InboxField = "read_at"
	InboxFetched   InboxField = "fetched_at"
	InboxPromoted  InboxField = "promoted_at"
)

// Valid reports whether f is a settable inbox timestamp.
func (f InboxField) Valid() bool {
	switch f {
	case InboxDelivered, InboxRead, InboxFetched, InboxPromoted:
		return true
	}
	return false
}
