package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// InboxReader reads recipients' inboxes (issue 13).
type InboxReader interface {
	// ListInbox lists a recipient's inbox items, oldest first, from the
	// cursor on, with the cursor of the next page; a bad cursor is
	// host.CodeBadRequest (storetest: Delivery/InboxLifecycleTimestamps).
	ListInbox(ctx context.Context, f InboxFilter) ([]host.InboxItem, string, error)
}

// InboxWriter adds inbox items and marks them delivered, fetched, read or
// promoted.
type InboxWriter interface {
	// InsertInbox adds an inbox item. Its id must be new; a driver may send
	// the insert with the rest of the batch.
	InsertInbox(ctx context.Context, it host.InboxItem) error
	// MarkInbox sets m.Field to m.At on the items m selects where it is not
	// set yet (a mark is set once and keeps its first time), and returns how
	// many it set. An unknown field is host.CodeBadRequest (storetest:
	// InboxMarksOnlyTheActor, Delivery/InboxMarkReadRefusesOthersItems).
	MarkInbox(ctx context.Context, m InboxMark) (int64, error)
}

// OutboxReader reads the outbox: receipts and memory items waiting for the
// external ledger.
type OutboxReader interface {
	// ListOutbox lists outbox entries in a state, oldest (lowest id) first,
	// after afterID, at most limit.
	ListOutbox(ctx context.Context, state OutboxState, afterID int64, limit int) ([]OutboxEntry, error)
	// OutboxStats counts outbox entries by state and reports the oldest pending one.
	OutboxStats(ctx context.Context) (OutboxStats, error)
}

// OutboxWriter queues, claims and settles outbox entries. Claims are leases
// with a deadline: a dispatcher that stalls past its claim loses the entry
// to the next claim, and its outcome is then not written (fenced on the
// claim). Delivery is at least once; the sink dedupes on OutboxEntry.Key.
type OutboxWriter interface {
	// InsertOutbox queues receipts for the external ledger, in the
	// transaction that appends them (storetest:
	// Delivery/OutboxQueuesEveryReceipt,
	// Delivery/OutboxQueuesEveryReceiptOfAnUpdate).
	InsertOutbox(ctx context.Context, es []OutboxEntry) error
	// ClaimOutbox claims up to limit pending entries that are due at now and
	// are the oldest pending entry of their task (ledger order per task),
	// unclaimed or with an ended claim, until claimUntil; oldest first. Only
	// entries of the given kinds are claimed (a host claims what it can
	// deliver); no kinds claims nothing. On PostgreSQL entries another host
	// is claiming are skipped, not waited for (storetest:
	// Delivery/OutboxClaimOrderPerTask, Delivery/OutboxClaimsOnlyItsKinds,
	// Delivery/OutboxStartsNoDeliveryPastItsClaim; PostgreSQL's TestOutboxSharedByHosts).
	ClaimOutbox(ctx context.Context, now, claimUntil time.Time, limit int, kinds []string) ([]OutboxEntry, error)
	// FinishOutbox records deliveries: delivered entries are removed, the
	// others written back with their state, attempts, next attempt and error
	// while their claim (ClaimedTill, as ClaimOutbox returned it) is still
	// the stored one; an entry claimed again since is left alone and its
	// State set to OutboxReclaimed (storetest: Delivery/OutboxOutcomeOfALostClaim,
	// Delivery/OutboxRecordsAnyErrorText).
	FinishOutbox(ctx context.Context, es []OutboxEntry) error
	// RetryOutbox moves dead entries (all when ids is empty) back to pending,
	// due at now, and returns how many it moved.
	RetryOutbox(ctx context.Context, ids []int64, now time.Time) (int64, error)
}

// RetentionReader finds finished tasks whose payloads and rows may go.
type RetentionReader interface {
	// RetentionDue returns up to q.Limit finished tasks (q.States) whose
	// completed_at is at or before q.Before, oldest first (see
	// RetentionQuery). A succeeded task still owed to an unfinished waiter
	// (OwedWaiters would count one) is left out: retention keeps its result
	// for a later sweep, and the tasks behind it are not held up by it. No
	// states or no limit returns nothing (storetest:
	// Delivery/RetentionLeavesAWorkersURL, RetentionArchivesAndPurges,
	// RetentionBoundedBatchesAndOrphans, RetentionOrphansOldestFirst,
	// RetentionKeepsAnOwedResult).
	RetentionDue(ctx context.Context, q RetentionQuery) ([]*host.Task, error)
}

// InboxFilter selects inbox items.
type InboxFilter struct {
	Tenant    string
	Recipient string
	// Unread keeps only items not marked read.
	Unread bool
	TaskID string
	// IDs, when set, keeps only these items.
	IDs    []string
	Cursor string
	Limit  int
}

// InboxMark selects the inbox items whose Field to set: those of IDs, or
// when IDs is empty those of TaskID. Recipient, when set, must own them.
type InboxMark struct {
	Tenant    string
	Recipient string
	IDs       []string
	TaskID    string
	Field     host.InboxField
	At        time.Time
}

// RetentionQuery selects finished tasks whose retention ran out. Type names
// one task type of Tenant; with Orphans set instead, it selects tasks of every
// tenant whose task type is no longer registered.
type RetentionQuery struct {
	Tenant  string
	Type    string
	Orphans bool
	States  []host.TaskState
	Before  time.Time
	Limit   int
}

// OutboxState is where an outbox entry is.
type OutboxState string

// Outbox states. Delivered entries are removed.
const (
	OutboxPending OutboxState = "pending"
	OutboxDead    OutboxState = "dead" // the sink refused it; `gate outbox retry` sends it again
	OutboxDone    OutboxState = "delivered"
	// OutboxReclaimed is set by FinishOutbox on an entry whose claim had
	// ended and passed to another dispatcher before its outcome was
	// recorded: the outcome is that dispatcher's to record, and nothing was
	// written.
	OutboxReclaimed OutboxState = "reclaimed"
)

// OutboxEntry is one receipt (or memory item) waiting for the external
// ledger. Key is the dedupe key the sink sees: the same for every attempt.
type OutboxEntry struct {
	ID          int64           `json:"id"`
	Tenant      string          `json:"tenant"`
	TaskID      string          `json:"task_id,omitempty"`
	Kind        string          `json:"kind"` // "receipt" or "memory"
	Key         string          `json:"dedupe_key"`
	Body        json.RawMessage `json:"body"`
	State       OutboxState     `json:"state"`
	Attempts    int             `json:"attempts"`
	NextAt      time.Time       `json:"next_attempt_at"`
	LastError   string          `json:"last_error,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	ClaimedTill *time.Time      `json:"-"`
}

// OutboxStats summarizes the outbox.
type OutboxStats struct {
	Pending         int64      `json:"pending"`
	Dead            int64      `json:"dead"`
	OldestPendingAt *time.Time `json:"oldest_pending_at,omitempty"`
}
