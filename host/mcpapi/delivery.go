package mcpapi

import (
	"context"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
)

// deliveryTools registers the delivery tools (issue 13): the session
// bootstrap, the inbox and mark_read.
func (s *Server) deliveryTools() {
	s.add(tool("session_bootstrap", "Start a session: open obligations and unread inbox",
		`Call this first in every new session. In one answer: owed_to_you (open obligations owed to you, e.g. each task you queued that is not finished), you_owe (what you owe), and inbox (your unread inbox items, oldest first: completed tasks, tasks that failed for good, escalations, milestones workers marked).
Each inbox item has inbox_id, kind (completed, failed, escalation, milestone), task_id, summary and its lifecycle times (created_at, delivered_at, read_at, fetched_at, promoted_to_memory_at). Returning an item marks it delivered, never read: when you have acted on an item, call mark_read with its inbox_id.`,
		returns[engine.Bootstrap](), readOnly(), props(
			mcp.WithInteger("limit", mcp.Min(1), mcp.Max(500), mcp.Description("At most this many obligations and inbox items. Default 100.")),
		)),
		agentRoles, s.sessionBootstrap)

	s.add(tool("list_inbox", "List your inbox",
		`List your inbox items, oldest first: only actionable outcomes (completed, failed, escalation, milestone), never progress. unread=true keeps those not marked read. Returning items marks them delivered, never read.`,
		returns[api.InboxList](), readOnly(), props(
			mcp.WithBoolean("unread", mcp.Description("Only items not marked read.")),
			mcp.WithString("task_id", mcp.Description("Only items of this task.")),
			mcp.WithInteger("limit", mcp.Min(1), mcp.Max(500), mcp.Description("Page size. Default 100.")),
			mcp.WithString("cursor", mcp.Description("The cursor of the previous page, to read the next one.")),
		)),
		agentRoles, s.listInbox)

	s.add(tool("mark_read", "Mark inbox items read",
		`Mark inbox items read once you have acted on them. Read is only ever set by this call. Ids that are not in your inbox are an error and nothing is marked; items already read are listed in already_read. Marking twice is harmless.`,
		returns[engine.MarkReadResult](), writes(true, false), props(
			mcp.WithArray("inbox_ids", mcp.Required(), mcp.WithStringItems(), mcp.MinItems(1), mcp.MaxItems(engine.MaxMarkRead), mcp.Description("The inbox_id values to mark read (at most 500).")),
		)),
		agentRoles, s.markRead)

	s.add(tool("store_task_result_in_memory", "Store a task's result in long-term memory",
		`Promote a succeeded task's result to the external ledger (MemoryGate) as a memory item, closing the loop task → result → permanent knowledge. The item carries the result (its content when at most 64 KiB, else its pointer and checksum), task_type, domain and as_observation; it is queued durably and delivered at least once, with memory_key as its dedupe key. Sets promoted_to_memory on your own inbox items of the task (never on another agent's). Promoting twice is harmless (already_promoted). A conflict error means the task has no result yet or this gate has no external ledger configured.`,
		returns[engine.PromoteResult](), writes(true, false), props(taskIDArg,
			mcp.WithBoolean("as_observation", mcp.Description("Store as an observation (default true) rather than a pattern.")),
			mcp.WithString("domain", mcp.Description("Memory domain; defaults to the task type.")),
		)),
		agentRoles, s.storeInMemory)
}

func (s *Server) storeInMemory(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in engine.PromoteRequest
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := required("task_id", in.TaskID); err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.PromoteToMemory(wctx, a, in)
	if err != nil {
		return nil, "", err
	}
	if res.AlreadyPromoted {
		return res, "The result of " + res.TaskID + " was already stored in memory.", nil
	}
	return res, "The result of " + res.TaskID + " is queued for memory as " + res.MemoryKey + "; it will be delivered even if the memory service is down now.", nil
}

func (s *Server) sessionBootstrap(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		Limit int `json:"limit,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	if err := nonNegative("limit", in.Limit); err != nil {
		return nil, "", err
	}
	b, err := s.eng.SessionBootstrap(wctx, a, in.Limit)
	if err != nil {
		return nil, "", err
	}
	return b, fmt.Sprintf("%d unread inbox item(s), %d open obligation(s) owed to you, %d you owe. %s", len(b.Inbox), len(b.OwedToYou), len(b.YouOwe), b.NextStep), nil
}

func (s *Server) listInbox(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		Unread bool   `json:"unread,omitempty"`
		TaskID string `json:"task_id,omitempty"`
		Limit  int    `json:"limit,omitempty"`
		Cursor string `json:"cursor,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	if err := nonNegative("limit", in.Limit); err != nil {
		return nil, "", err
	}
	items, cur, err := s.eng.Inbox(wctx, a, engine.InboxQuery{Unread: in.Unread, TaskID: in.TaskID, Limit: in.Limit, Cursor: in.Cursor})
	if err != nil {
		return nil, "", err
	}
	return api.InboxList{Recipient: a.Principal, Items: items, Cursor: cur}, fmt.Sprintf("%d inbox item(s).", len(items)), nil
}

func (s *Server) markRead(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		InboxIDs []string `json:"inbox_ids"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.MarkRead(wctx, a, in.InboxIDs)
	if err != nil {
		return nil, "", err
	}
	return res, fmt.Sprintf("Marked %d item(s) read.", res.Marked), nil
}
