package mcpapi_test

import (
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestInboxTools drives session_bootstrap, list_inbox and mark_read with the
// official MCP client: a task completed through the worker shim appears in
// the agent's bootstrap (delivered, unread) until mark_read.
func TestInboxTools(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	worker := b.connect(t, b.worker)
	var ack struct {
		TaskID   string `json:"task_id"`
		Inbox    string `json:"inbox"`
		NextStep string `json:"next_step"`
	}
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}}, &ack)
	if !strings.Contains(ack.Inbox, "inbox") || !strings.Contains(ack.NextStep, "session_bootstrap") {
		t.Fatalf("queue_task ack does not point at the inbox: %+v", ack)
	}
	var lease struct {
		RunID string `json:"run_id"`
	}
	ok(t, worker, "worker_lease_task", map[string]any{"worker_id": "echo.w1"}, &lease)
	ok(t, worker, "worker_heartbeat_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID, "progress_message": "half way"}, nil)
	ok(t, worker, "worker_heartbeat_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID, "progress_message": "draft ready", "milestone": true}, nil)
	ok(t, worker, "worker_complete_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID, "result_pointer": "s3://b/k", "summary": "all good"}, nil)

	type item struct {
		InboxID     string  `json:"inbox_id"`
		Kind        string  `json:"kind"`
		TaskID      string  `json:"task_id"`
		DeliveredAt *string `json:"delivered_at"`
		ReadAt      *string `json:"read_at"`
	}
	var bs struct {
		Inbox     []item `json:"inbox"`
		OwedToYou []any  `json:"owed_to_you"`
		YouOwe    []any  `json:"you_owe"`
		NextStep  string `json:"next_step"`
	}
	ok(t, agent, "session_bootstrap", map[string]any{}, &bs)
	if len(bs.Inbox) != 2 || bs.Inbox[0].Kind != "milestone" || bs.Inbox[1].Kind != "completed" || bs.Inbox[1].TaskID != ack.TaskID ||
		bs.Inbox[1].DeliveredAt == nil || bs.Inbox[1].ReadAt != nil || bs.OwedToYou == nil || bs.YouOwe == nil || len(bs.OwedToYou) != 0 {
		t.Fatalf("bootstrap %+v", bs)
	}
	ok(t, agent, "mark_read", map[string]any{"inbox_ids": []string{bs.Inbox[0].InboxID}}, nil)
	bs.Inbox = bs.Inbox[1:]
	fails(t, agent, "mark_read", map[string]any{"inbox_ids": []string{}}, "bad_request")
	fails(t, agent, "mark_read", map[string]any{"inbox_ids": []string{"I-NOPE"}}, "not_found")
	fails(t, agent, "session_bootstrap", map[string]any{"limit": 9999}, "bad_request")
	var mr struct {
		Marked int `json:"marked"`
	}
	ok(t, agent, "mark_read", map[string]any{"inbox_ids": []string{bs.Inbox[0].InboxID}}, &mr)
	if mr.Marked != 1 {
		t.Fatalf("mark_read %+v", mr)
	}
	var list struct {
		Items []item `json:"items"`
	}
	ok(t, agent, "list_inbox", map[string]any{"unread": true}, &list)
	if len(list.Items) != 0 {
		t.Fatalf("unread after mark_read: %+v", list)
	}
	ok(t, agent, "list_inbox", map[string]any{}, &list)
	if len(list.Items) != 2 || list.Items[0].ReadAt == nil || list.Items[1].ReadAt == nil {
		t.Fatalf("inbox %+v", list)
	}
}

// TestStoreInMemoryWithoutLedger: without an external ledger configured the
// tool answers a conflict naming the missing configuration.
func TestStoreInMemoryWithoutLedger(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	agent := b.connect(t, b.agent)
	var ack struct {
		TaskID string `json:"task_id"`
	}
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}}, &ack)
	fails(t, agent, "store_task_result_in_memory", map[string]any{"task_id": ack.TaskID}, "conflict")
	fails(t, agent, "store_task_result_in_memory", map[string]any{}, "bad_request")
}
