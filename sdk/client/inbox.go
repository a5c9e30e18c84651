package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The delivery side of the gate (docs/delivery.md): what a principal is owed
// and what happened to it, readable in a later session without the task ids
// of the one that queued the work. SessionBootstrap answers both at once;
// Inbox and OpenObligations page through them; the receipts ledger
// (Receipts, GetReceipt, ReceiptChain, CheckTerminator) is the record behind
// them.

// Kinds of inbox item (InboxItem.Kind). Only actionable outcomes become
// items: never progress, never a retry's bookkeeping.
const (
	InboxCompleted  = "completed"  // a task (or workflow) succeeded: its result can be fetched
	InboxFailed     = "failed"     // a task (or workflow) failed for good
	InboxEscalation = "escalation" // someone must decide (lease expired, retries exhausted, policy fault)
	InboxMilestone  = "milestone"  // a worker marked a progress report as worth the recipient's attention
)

// InboxItem is one actionable item in a principal's inbox, with its
// lifecycle: created, delivered (a session bootstrap or an inbox listing
// handed it over), read (only MarkRead sets it), fetched (the task's result
// was fetched or archived), promoted to memory.
type InboxItem struct {
	InboxID   string `json:"inbox_id"`
	Recipient string `json:"recipient"`
	Kind      string `json:"kind"`
	// TaskID is the task the item is about, or the workflow (WF-…) for a
	// workflow's end.
	TaskID    string `json:"task_id"`
	TaskType  string `json:"task_type,omitempty"`
	ReceiptID string `json:"receipt_id,omitempty"`
	// Summary is one line saying what happened and what to do.
	Summary     string     `json:"summary"`
	CreatedAt   time.Time  `json:"created_at"`
	DeliveredAt *time.Time `json:"delivered_at"`
	ReadAt      *time.Time `json:"read_at"`
	FetchedAt   *time.Time `json:"fetched_at"`
	PromotedAt  *time.Time `json:"promoted_to_memory_at"`
}

// InboxOptions filter Inbox.
type InboxOptions struct {
	Unread bool   // only the items not marked read
	TaskID string // only the items about this task (or workflow)
	// Recipient reads another principal's inbox (admin keys only); "":
	// the key's own.
	Recipient string
	Cursor    string // the cursor of the previous page
	Limit     int    // 1..500; 0: the gate's default (100)
}

// Inbox returns a page of inbox items, oldest first, and the cursor of the
// next page ("" after the last). Listing marks the caller's own items
// delivered, never read: MarkRead is the only way an item is read.
func (c *Client) Inbox(ctx context.Context, o InboxOptions) ([]InboxItem, string, error) {
	q := url.Values{}
	if o.Unread {
		q.Set("unread", "true")
	}
	if o.TaskID != "" {
		q.Set("task_id", o.TaskID)
	}
	if o.Recipient != "" {
		q.Set("recipient", o.Recipient)
	}
	setPage(q, o.Cursor, o.Limit)
	var out struct {
		Items  []InboxItem `json:"items"`
		Cursor string      `json:"cursor"`
	}
	if _, err := c.Do(ctx, http.MethodGet, withQuery("/v1/inbox", q), nil, &out); err != nil {
		return nil, "", err
	}
	return out.Items, out.Cursor, nil
}

// MarkReadResult is the answer of MarkRead.
type MarkReadResult struct {
	Marked      int64    `json:"marked"`       // items marked read by this call
	AlreadyRead []string `json:"already_read"` // the ids given that were read before
}

// MaxMarkRead is the most ids one MarkRead may carry (more: a 413 too_large
// APIError).
const MaxMarkRead = 500

// MarkRead marks inbox items read, the explicit act that acknowledges them.
// An id that is not in the caller's inbox is a 404 not_found APIError
// (errors.Is ErrNotFound) and marks nothing; no ids is a 400 bad_request.
func (c *Client) MarkRead(ctx context.Context, inboxIDs ...string) (*MarkReadResult, error) {
	if inboxIDs == nil {
		inboxIDs = []string{}
	}
	var out MarkReadResult
	if _, err := c.Do(ctx, http.MethodPost, "/v1/inbox/mark-read", map[string][]string{"inbox_ids": inboxIDs}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Bootstrap is what a principal is owed and owes and its unread inbox, in
// one answer: the call that starts a session.
type Bootstrap struct {
	Principal string `json:"principal"`
	Tenant    string `json:"tenant"`
	// ServerTime is the gate's clock.
	ServerTime time.Time `json:"server_time"`
	// OwedToYou are open obligations whose obligee is the caller (tasks
	// and workflows it queued that have not finished); YouOwe those it is
	// the obligor of.
	OwedToYou []Obligation `json:"owed_to_you"`
	YouOwe    []Obligation `json:"you_owe"`
	// Inbox holds unread items, oldest first.
	Inbox []InboxItem `json:"inbox"`
	// MoreObligations and MoreInbox say that there were more than fit:
	// page on with OpenObligations, and with Inbox from InboxCursor.
	MoreObligations bool   `json:"more_obligations"`
	MoreInbox       bool   `json:"more_inbox"`
	InboxCursor     string `json:"inbox_cursor"`
	// NextStep says in a sentence what to do next.
	NextStep string `json:"next_step"`
}

// SessionBootstrap returns the caller's open obligations and unread inbox
// items (limit of each; 0: the gate's default), and marks the items
// delivered (never read).
func (c *Client) SessionBootstrap(ctx context.Context, limit int) (*Bootstrap, error) {
	q := url.Values{}
	setPage(q, "", limit)
	var out Bootstrap
	if _, err := c.Do(ctx, http.MethodGet, withQuery("/v1/session/bootstrap", q), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// The sides of an obligation (ObligationOptions.Role).
const (
	RoleObligee = "obligee" // owed to the principal: the outcomes of what it queued
	RoleObligor = "obligor" // owed by the principal
)

// Obligation is an open obligation: a receipt that no other receipt has
// terminated yet (a task.assigned until the task finishes, a
// workflow.submitted until the workflow ends).
type Obligation struct {
	ReceiptID   string          `json:"receipt_id"`
	Tenant      string          `json:"tenant"`
	ReceiptType string          `json:"receipt_type"`
	Obligor     string          `json:"obligor"`
	Obligee     string          `json:"obligee"`
	TaskID      string          `json:"task_id,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	Seq         int64           `json:"seq"`
	Body        json.RawMessage `json:"body,omitempty"`
}

// ObligationOptions filter OpenObligations.
type ObligationOptions struct {
	// Principal whose obligations to list; "": the key's own. Another
	// principal's need an admin key (otherwise: a 403 forbidden APIError).
	Principal string
	Role      string // RoleObligee, RoleObligor, or "": both
	Cursor    string // the cursor of the previous page
	Limit     int    // 0: the gate's default
}

// OpenObligations returns a page of a principal's open obligations, oldest
// first, and the cursor of the next page ("" after the last).
func (c *Client) OpenObligations(ctx context.Context, o ObligationOptions) ([]Obligation, string, error) {
	q := url.Values{}
	if o.Principal != "" {
		q.Set("principal", o.Principal)
	}
	if o.Role != "" {
		q.Set("role", o.Role)
	}
	setPage(q, o.Cursor, o.Limit)
	var out struct {
		OpenObligations []Obligation `json:"open_obligations"`
		Cursor          string       `json:"cursor"`
	}
	if _, err := c.Do(ctx, http.MethodGet, withQuery("/v1/obligations/open", q), nil, &out); err != nil {
		return nil, "", err
	}
	return out.OpenObligations, out.Cursor, nil
}

// Receipt is one entry of the receipts ledger.
type Receipt struct {
	ReceiptID   string `json:"receipt_id"`
	Tenant      string `json:"tenant"`
	ReceiptType string `json:"receipt_type"` // task.assigned, task.completed, workflow.submitted, …
	From        string `json:"from"`
	To          string `json:"to"`
	// TaskID is the task (or workflow) the receipt is about.
	TaskID    string          `json:"task_id,omitempty"`
	LeaseID   string          `json:"lease_id,omitempty"`
	Parents   []string        `json:"parents"`
	Body      json.RawMessage `json:"body"`
	DedupeKey string          `json:"dedupe_key,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	Seq       int64           `json:"seq"`
	ChainID   int64           `json:"chain_id,omitempty"`
	ChainSeq  int64           `json:"chain_seq,omitempty"`
	PrevHash  string          `json:"prev_hash"`
	Hash      string          `json:"hash"`
	// TerminatedBy is the receipt that terminated this one (GetReceipt and
	// ReceiptChain say; a page of Receipts leaves it empty): "" while it
	// is open.
	TerminatedBy string `json:"terminated_by,omitempty"`
}

// Receipts returns a page of a task's (or workflow's) receipts in ledger
// order and the cursor of the next page ("" after the last). A task the
// key may not see is a 404 not_found APIError; no taskID a 400 bad_request.
func (c *Client) Receipts(ctx context.Context, taskID, cursor string, limit int) ([]Receipt, string, error) {
	q := url.Values{}
	if taskID != "" {
		q.Set("task_id", taskID)
	}
	setPage(q, cursor, limit)
	var out struct {
		Receipts []Receipt `json:"receipts"`
		Cursor   string    `json:"cursor"`
	}
	if _, err := c.Do(ctx, http.MethodGet, withQuery("/v1/receipts", q), nil, &out); err != nil {
		return nil, "", err
	}
	return out.Receipts, out.Cursor, nil
}

// GetReceipt returns a receipt and (TerminatedBy) the receipt that
// terminated it, if one has.
func (c *Client) GetReceipt(ctx context.Context, receiptID string) (*Receipt, error) {
	var out Receipt
	if _, err := c.Do(ctx, http.MethodGet, "/v1/receipts/"+url.PathEscape(receiptID), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ChainLink is one receipt of a chain and how many parent steps it is from
// the receipt the chain started at (0: that receipt).
type ChainLink struct {
	Receipt
	Depth int `json:"depth"`
}

// ReceiptChain returns a receipt and its ancestors through their parents,
// nearest first.
func (c *Client) ReceiptChain(ctx context.Context, receiptID string) ([]ChainLink, error) {
	var out struct {
		Chain []ChainLink `json:"chain"`
	}
	if _, err := c.Do(ctx, http.MethodGet, "/v1/receipts/"+url.PathEscape(receiptID)+"/chain", nil, &out); err != nil {
		return nil, err
	}
	return out.Chain, nil
}

// TerminatorCheck says whether a receipt has been terminated.
type TerminatorCheck struct {
	ParentReceiptID string `json:"parent_receipt_id"`
	HasTerminator   bool   `json:"has_terminator"`
	TerminatorID    string `json:"terminator_receipt_id,omitempty"`
	// IsObligation says whether the receipt is one that creates an
	// obligation (and so is owed a terminator).
	IsObligation bool `json:"is_obligation"`
}

// CheckTerminator reports whether a receipt (an obligation: a task's
// assign receipt, a workflow's submit receipt) has been terminated, and by
// which receipt.
func (c *Client) CheckTerminator(ctx context.Context, receiptID string) (*TerminatorCheck, error) {
	var out TerminatorCheck
	if _, err := c.Do(ctx, http.MethodPost, "/v1/receipts/check-terminator", map[string]string{"parent_receipt_id": receiptID}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// setPage sets a page's cursor and limit on q, when given.
func setPage(q url.Values, cursor string, limit int) {
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
}

// withQuery is path with q's query, if any.
func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}
