package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// inboxItemFor returns the inbox item a receipt makes for its addressee, if
// it is actionable: a completion, a final failure or an escalation. Progress,
// retries, releases, acceptances and cancellations (the caller's own act)
// make none. t, when known, is the task as the same update wrote it.
func inboxItemFor(r *host.Receipt, t *host.Task) (host.InboxItem, bool) {
	// Most receipts make no item: decide before any work (this runs inside
	// the store's writer).
	switch {
	case r.TaskID == "":
		return host.InboxItem{}, false
	case r.Type == host.ReceiptWorkflowCompleted || r.Type == host.ReceiptWorkflowFailed:
		return workflowInboxItem(r)
	case r.Type != host.ReceiptCompleted && r.Type != host.ReceiptFailed && r.Type != host.ReceiptEscalated:
		return host.InboxItem{}, false
	case host.IsWorkflowRecipient(r.To):
		// A workflow's step: its submitter is owed the workflow's
		// outcome, one item, not one per step.
		return host.InboxItem{}, false
	}
	it := host.InboxItem{ID: host.NewID(host.PrefixInbox), Tenant: r.Tenant, Recipient: r.To, TaskID: r.TaskID,
		ReceiptID: r.ID, CreatedAt: r.CreatedAt}
	name := "Task " + r.TaskID
	if t != nil {
		it.TaskType = t.Type
		name += " (" + t.Type + ")"
	}
	var b struct {
		Summary    string `json:"summary"`
		Error      string `json:"error_message"`
		DeadReason string `json:"dead_reason"`
		Reason     string `json:"escalation_reason"`
	}
	if r.Type == host.ReceiptCompleted && t != nil && t.Result != nil {
		b.Summary = t.Result.Summary // the task written with it says it: no need to decode the body
	} else {
		_ = json.Unmarshal(r.Body, &b)
	}
	switch r.Type {
	case host.ReceiptCompleted:
		it.Kind = host.InboxCompleted
		it.Summary = name + " completed"
		if b.Summary != "" {
			it.Summary += "; " + words(r.From, b.Summary, maxQuoted)
		}
		it.Summary += ". Fetch the result (fetch_task_result), then archive it."
	case host.ReceiptFailed:
		it.Kind = host.InboxFailed
		it.Summary = fmt.Sprintf("%s failed for good (%s)", name, b.DeadReason)
		if b.Error != "" {
			it.Summary += "; " + words(r.From, b.Error, maxQuoted)
		}
		it.Summary += ". Decide whether to queue it again."
	case host.ReceiptEscalated:
		it.Kind = host.InboxEscalated
		if r.From == GatePrincipal {
			it.Summary = fmt.Sprintf("%s escalated (%s). Look at its receipts and decide what to do.", name, b.Reason)
		} else {
			// A principal's own escalation: its reason is its words, not the gate's.
			it.Summary = fmt.Sprintf("%s escalated by %s", name, r.From)
			if b.Reason != "" {
				it.Summary += "; " + words(r.From, b.Reason, maxQuoted)
			}
			it.Summary += ". Look at its receipts and decide what to do."
		}
	default:
		return it, false
	}
	return it, true
}

// workflowInboxItem is the one item a workflow's end makes for its
// submitter: completed or failed (a cancel is the submitter's own act and
// makes none, as a task's does). The final step's summary, or its error,
// is quoted as the words of the worker that wrote it (the end receipt's
// worker_id, error_by), as a task's item quotes them; an error the gate
// wrote (error_by asyncgate) is the gate's own words.
func workflowInboxItem(r *host.Receipt) (host.InboxItem, bool) {
	var b struct {
		Name      string `json:"name"`
		Summary   string `json:"summary"`
		Error     string `json:"error_message"`
		FinalStep string `json:"final_step"`
		WorkerID  string `json:"worker_id"`
		ErrorBy   string `json:"error_by"`
	}
	_ = json.Unmarshal(r.Body, &b)
	it := host.InboxItem{ID: host.NewID(host.PrefixInbox), Tenant: r.Tenant, Recipient: r.To, TaskID: r.TaskID,
		ReceiptID: r.ID, CreatedAt: r.CreatedAt}
	name := "Workflow " + r.TaskID + " (" + clip(b.Name, 200) + ")"
	if r.Type == host.ReceiptWorkflowCompleted {
		it.Kind = host.InboxCompleted
		it.Summary = name + " completed"
		if b.Summary != "" {
			it.Summary += "; its final step " + b.FinalStep + " returned, " + words(workerOr(b.WorkerID), b.Summary, maxQuoted)
		}
		it.Summary += ". Read it with get_workflow, and the final step's result with fetch_task_result."
		return it, true
	}
	it.Kind = host.InboxFailed
	it.Summary = name + " failed"
	switch {
	case b.Error == "":
	case b.ErrorBy == GatePrincipal && r.From == GatePrincipal:
		it.Summary += ": " + clip(b.Error, maxQuoted)
	default:
		it.Summary += "; " + words(workerOr(b.ErrorBy), b.Error, maxQuoted)
	}
	it.Summary += ". Read its steps with get_workflow and decide whether to submit it again."
	return it, true
}

// workerOr is who, or "the worker" when the gate does not know which
// worker wrote a text (it is a worker's, not the gate's).
func workerOr(who string) string {
	if who == "" {
		return "the worker"
	}
	return who
}

// errorText is err's text as the store may keep it: valid UTF-8 with no NUL
// (a sink's or a mail server's answer may hold any bytes, and PostgreSQL
// refuses those in text), at most about n bytes.
func errorText(err error, n int) string {
	return clip(strings.ToValidUTF8(strings.ReplaceAll(err.Error(), "\x00", ""), "\uFFFD"), n)
}

// maxQuoted bounds the bytes of one principal's text that an inbox item
// quotes (before quoting).
const maxQuoted = 300

// words is text a principal wrote as it may reach another principal (issue
// 37): at most n bytes of it, marked as who's words, on one line inside
// double quotes it cannot close (strconv.Quote escapes quotes, backslashes,
// newlines and other control characters). Whatever it says, the reader can
// tell where the gate's words end and the principal's begin.
func words(who, text string, n int) string {
	if who == "" {
		who = "an unnamed principal"
	}
	return who + " wrote: " + strconv.Quote(clip(strings.ToValidUTF8(text, "\uFFFD"), n))
}

// Words is text another principal wrote as the gate shows it to a model:
// at most 300 bytes of it, marked as who's words and quoted on one line
// (`echo.w1 wrote: "…"`), as inbox items quote it.
func Words(who, text string) string { return words(who, text, maxQuoted) }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 { // do not cut a UTF-8 sequence
		n--
	}
	return s[:n] + "…"
}

// milestone writes an inbox item for a progress report the worker marked as
// a milestone, in the heartbeat's transaction.
func milestone(ctx context.Context, tx store.Tx, t *host.Task, message string, now time.Time) error {
	if host.IsWorkflowRecipient(t.Recipient) {
		return nil // a workflow's step: no one reads the workflow's inbox
	}
	s := "Task " + t.ID + " (" + t.Type + ") reached a milestone"
	if message != "" {
		s += "; " + words(t.WorkerID, message, maxQuoted)
	}
	return tx.InsertInbox(ctx, host.InboxItem{ID: host.NewID(host.PrefixInbox), Tenant: t.Tenant, Recipient: t.Recipient,
		Kind: host.InboxMilestone, TaskID: t.ID, TaskType: t.Type, Summary: s, CreatedAt: now})
}

// InboxQuery selects a principal's inbox items.
type InboxQuery struct {
	// Recipient is whose inbox: the caller's own unless an admin names another.
	Recipient string
	Unread    bool
	TaskID    string
	Cursor    string
	Limit     int
}

func (e *Engine) inboxRecipient(actor Actor, who string) (string, error) {
	if who == "" || who == actor.Principal {
		return actor.Principal, nil
	}
	if actor.Role != RoleAdmin {
		return "", host.Errorf(host.CodeForbidden, "only an admin may read another principal's inbox")
	}
	if !host.ValidPrincipal(who) {
		return "", host.Errorf(host.CodeBadRequest, "recipient %.80q is not a valid principal", who)
	}
	return who, nil
}

// Inbox lists a principal's inbox items, oldest first, and records that they
// were delivered (delivered_at) to a recipient reading their own inbox. It
// never marks anything read.
func (e *Engine) Inbox(ctx context.Context, actor Actor, q InboxQuery) ([]host.InboxItem, string, error) {
	who, err := e.inboxRecipient(actor, q.Recipient)
	if err != nil {
		return nil, "", err
	}
	if q.Limit, err = pageSize(q.Limit, MaxPage); err != nil {
		return nil, "", err
	}
	f := store.InboxFilter{Tenant: actor.Tenant, Recipient: who, Unread: q.Unread, TaskID: q.TaskID, Cursor: q.Cursor, Limit: q.Limit}
	var items []host.InboxItem
	var cur string
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		items, cur, err = r.ListInbox(ctx, f)
		return err
	}); err != nil {
		return nil, "", err
	}
	if who == actor.Principal {
		if err := e.markDelivered(ctx, actor.Tenant, who, items); err != nil {
			return nil, "", err
		}
	}
	return items, cur, nil
}

// markDelivered sets delivered_at on the items that have none, in place too.
func (e *Engine) markDelivered(ctx context.Context, tenant, who string, items []host.InboxItem) error {
	var ids []string
	for _, it := range items {
		if it.DeliveredAt == nil {
			ids = append(ids, it.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	now := e.now()
	if err := e.update(ctx, func(tx store.Tx) error {
		_, err := tx.MarkInbox(ctx, store.InboxMark{Tenant: tenant, Recipient: who, IDs: ids, Field: host.InboxDelivered, At: now})
		return err
	}); err != nil {
		return err
	}
	for i := range items {
		if items[i].DeliveredAt == nil {
			items[i].DeliveredAt = ptr(now)
		}
	}
	return nil
}

// MarkReadResult says what mark_read did.
type MarkReadResult struct {
	Marked      int64    `json:"marked"`
	AlreadyRead []string `json:"already_read"`
}

// MaxMarkRead bounds the ids of one mark_read.
const MaxMarkRead = 500

// MarkRead marks the caller's inbox items read: the explicit act seed 002
// asks for (read is never inferred). Ids that are not the caller's items are
// a not_found error and nothing is marked; items already read are named.
func (e *Engine) MarkRead(ctx context.Context, actor Actor, ids []string) (*MarkReadResult, error) {
	if len(ids) == 0 {
		return nil, host.Errorf(host.CodeBadRequest, "give the inbox_ids to mark read")
	}
	if len(ids) > MaxMarkRead {
		return nil, host.Errorf(host.CodeTooLarge, "%d inbox_ids, the limit is %d", len(ids), MaxMarkRead)
	}
	seen := map[string]bool{}
	uniq := ids[:0:0]
	for _, id := range ids {
		if len(id) > 64 {
			return nil, host.Errorf(host.CodeBadRequest, "inbox_id %.64q… is too long", id)
		}
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	now := e.now()
	out := &MarkReadResult{AlreadyRead: []string{}}
	err := e.update(ctx, func(tx store.Tx) error {
		out.Marked, out.AlreadyRead = 0, []string{}
		items, _, err := tx.ListInbox(ctx, store.InboxFilter{Tenant: actor.Tenant, Recipient: actor.Principal, IDs: uniq, Limit: len(uniq)})
		if err != nil {
			return err
		}
		if len(items) != len(uniq) {
			have := map[string]bool{}
			for _, it := range items {
				have[it.ID] = true
			}
			for _, id := range uniq {
				if !have[id] {
					return host.Errorf(host.CodeNotFound, "no inbox item %.64q in %s's inbox", id, actor.Principal)
				}
			}
		}
		for _, it := range items {
			if it.ReadAt != nil {
				out.AlreadyRead = append(out.AlreadyRead, it.ID)
			}
		}
		n, err := tx.MarkInbox(ctx, store.InboxMark{Tenant: actor.Tenant, Recipient: actor.Principal, IDs: uniq, Field: host.InboxRead, At: now})
		out.Marked = n
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// markTask sets field on who's own inbox items of a task that lack it: an
// inbox mark records what that principal did (seed 002: fetched_at tracks
// that that AI accessed the work), so another principal's act, the task's
// creator's or an admin's, never marks the recipient's item. It first looks,
// so a fetch that finds nothing to set writes nothing.
func (e *Engine) markTask(ctx context.Context, tenant, who, taskID string, field host.InboxField) error {
	need := false
	if err := e.view(ctx, func(r store.Reader) error {
		items, _, err := r.ListInbox(ctx, store.InboxFilter{Tenant: tenant, Recipient: who, TaskID: taskID, Limit: 100})
		for _, it := range items {
			switch field {
			case host.InboxFetched:
				need = need || it.FetchedAt == nil
			case host.InboxPromoted:
				need = need || it.PromotedAt == nil
			}
		}
		return err
	}); err != nil || !need {
		return err
	}
	now := e.now()
	return e.update(ctx, func(tx store.Tx) error {
		_, err := tx.MarkInbox(ctx, store.InboxMark{Tenant: tenant, Recipient: who, TaskID: taskID, Field: field, At: now})
		return err
	})
}

// Bootstrap is what an agent calls first in a new session: everything it
// owes or is owed that is still open, and its unread inbox, in one stable
// shape. Reading it marks the items delivered, never read.
type Bootstrap struct {
	Principal string `json:"principal"`
	Tenant    string `json:"tenant"`
	// ServerTime is the gate's clock.
	ServerTime time.Time `json:"server_time"`
	// OwedToYou are open obligations whose obligee is the caller (tasks it
	// queued that are not finished); YouOwe those it is the obligor of.
	OwedToYou []host.Obligation `json:"owed_to_you"`
	YouOwe    []host.Obligation `json:"you_owe"`
	// Inbox holds unread items, oldest first.
	Inbox []host.InboxItem `json:"inbox"`
	// More says that there were more than fit (follow the cursors with the
	// obligations and inbox calls).
	MoreObligations bool   `json:"more_obligations"`
	MoreInbox       bool   `json:"more_inbox"`
	InboxCursor     string `json:"inbox_cursor"`
	NextStep        string `json:"next_step"`
}

// SessionBootstrap returns the caller's open obligations and unread inbox.
func (e *Engine) SessionBootstrap(ctx context.Context, actor Actor, limit int) (*Bootstrap, error) {
	limit, err := pageSize(limit, MaxPage)
	if err != nil {
		return nil, err
	}
	out := &Bootstrap{Principal: actor.Principal, Tenant: actor.Tenant, OwedToYou: []host.Obligation{}, YouOwe: []host.Obligation{}}
	var items []host.InboxItem
	var icur string
	err = e.view(ctx, func(r store.Reader) error {
		obs, ocur, err := r.ListOpenObligations(ctx, store.ObligationFilter{Tenant: actor.Tenant, Principal: actor.Principal, Limit: limit})
		if err != nil {
			return err
		}
		out.MoreObligations = ocur != ""
		for _, o := range obs {
			if o.Obligee == actor.Principal {
				out.OwedToYou = append(out.OwedToYou, o)
			}
			if o.Obligor == actor.Principal {
				out.YouOwe = append(out.YouOwe, o)
			}
		}
		items, icur, err = r.ListInbox(ctx, store.InboxFilter{Tenant: actor.Tenant, Recipient: actor.Principal, Unread: true, Limit: limit})
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := e.markDelivered(ctx, actor.Tenant, actor.Principal, items); err != nil {
		return nil, err
	}
	out.Inbox, out.InboxCursor, out.MoreInbox = items, icur, icur != ""
	out.ServerTime = e.now()
	switch {
	case len(items) > 0:
		out.NextStep = fmt.Sprintf("You have %d unread inbox item(s): act on each (fetch results, decide on failures), then mark_read them.", len(items))
	case len(out.OwedToYou) > 0:
		out.NextStep = fmt.Sprintf("Nothing new; %d task(s) you queued are still open. Their outcomes will appear in your inbox.", len(out.OwedToYou))
	default:
		out.NextStep = "Nothing open and nothing unread."
	}
	return out, nil
}

// fetched records, after a result was opened for actor, that actor's own
// inbox items of the task were fetched. A failure to record it is logged,
// not returned: the reader has the result.
func (e *Engine) fetched(ctx context.Context, actor Actor, rs *ResultStream, err error) {
	if err != nil || rs == nil || rs.Task == nil {
		return
	}
	if err := e.markTask(context.WithoutCancel(ctx), rs.Task.Tenant, actor.Principal, rs.Task.ID, host.InboxFetched); err != nil {
		e.log.Warn("could not record the inbox item fetched", "task_id", rs.Task.ID, "err", err)
	}
}

// inboxNote is what queue_task's acknowledgement says about the outcome.
func inboxNote(recipient string) string {
	return "The outcome (completed, failed or escalated) will appear in " + recipient +
		"'s inbox: call session_bootstrap (MCP) or GET /v1/session/bootstrap at the start of a later session."
}
