package storetest

import (
	"time"

	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// deliveryCases are the conformance cases of the delivery features (issue 13).
var deliveryCases = []struct {
	name string
	fn   func(t *testing.T, b *Bundle)
}{
	{"InboxActionableOnly", testInboxActionableOnly},
	{"InboxLifecycleTimestamps", testInboxLifecycle},
	{"InboxMarkReadRefusesOthersItems", testInboxMarkReadOthers},
	{"SessionBootstrapShape", testSessionBootstrap},
	{"RetentionArchivesAndPurges", testRetention},
	{"RetentionBoundedBatchesAndOrphans", testRetentionBatches},
}

func runDelivery(t *testing.T, open Opener) {
	for _, c := range deliveryCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, Setup(t, open))
		})
	}
}

func (b *Bundle) inbox(t testing.TB, actor engine.Actor, q engine.InboxQuery) []host.InboxItem {
	t.Helper()
	items, _, err := b.Engine.Inbox(b.Ctx, actor, q)
	if err != nil {
		t.Fatalf("Inbox: %v", err)
	}
	return items
}

func kinds(items []host.InboxItem) map[host.InboxKind]int {
	m := map[host.InboxKind]int{}
	for _, it := range items {
		m[it.Kind]++
	}
	return m
}

// testInboxActionableOnly: completions, final failures, escalations and
// marked milestones make inbox items; progress, retries and cancels do not.
func testInboxActionableOnly(t *testing.T, b *Bundle) {
	ok := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	pct := 50.0
	if _, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o), ProgressPercent: &pct, ProgressMessage: "half"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o), ProgressMessage: "draft ready", Milestone: true}); err != nil {
		t.Fatal(err)
	}
	b.Complete(t, "w.1", o)

	bad := b.Enqueue(t, "work")
	o = b.LeaseOne(t, "w.1")
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "transient", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	if n := len(b.inbox(t, b.Agent, engine.InboxQuery{TaskID: bad.TaskID})); n != 0 {
		t.Fatalf("a retried failure made %d inbox items, want 0", n)
	}
	b.Clock.Advance(2 * time.Hour)
	o = b.LeaseOne(t, "w.1")
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "bad input file", Retryable: false}); err != nil {
		t.Fatal(err)
	}
	gone := b.Enqueue(t, "work")
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, gone.TaskID, "not needed"); err != nil {
		t.Fatal(err)
	}

	items := b.inbox(t, b.Agent, engine.InboxQuery{})
	got := kinds(items)
	if got[host.InboxCompleted] != 1 || got[host.InboxMilestone] != 1 || got[host.InboxFailed] != 1 || len(items) != 3 {
		t.Fatalf("inbox kinds = %v (%d items), want one completed, one milestone, one failed", got, len(items))
	}
	for _, it := range items {
		if it.TaskID == gone.TaskID {
			t.Fatalf("a cancel made an inbox item: %+v", it)
		}
		if it.Kind == host.InboxCompleted && (it.TaskID != ok.TaskID || it.ReceiptID == "" || it.TaskType != "work") {
			t.Fatalf("completed item %+v", it)
		}
		if it.Recipient != b.Agent.Principal || it.CreatedAt.IsZero() {
			t.Fatalf("item %+v", it)
		}
	}
	// The item is written with the receipt: its receipt is the completion.
	for _, it := range items {
		if it.Kind == host.InboxCompleted {
			r, _, err := b.Engine.GetReceipt(b.Ctx, b.Admin, it.ReceiptID)
			if err != nil || r.Type != host.ReceiptCompleted {
				t.Fatalf("completed item's receipt: %+v %v", r, err)
			}
		}
	}
}

// testInboxLifecycle: created at the outcome, delivered when listed by the
// recipient (not by an admin), read only by mark_read, fetched by archive.
func testInboxLifecycle(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	b.Complete(t, "w.1", o)

	admin := b.inbox(t, b.Admin, engine.InboxQuery{Recipient: b.Agent.Principal})
	if len(admin) != 1 || admin[0].DeliveredAt != nil {
		t.Fatalf("an admin's look delivered the item: %+v", admin)
	}
	b.Clock.Advance(1e9)
	items := b.inbox(t, b.Agent, engine.InboxQuery{Unread: true})
	if len(items) != 1 || items[0].DeliveredAt == nil || !items[0].DeliveredAt.Equal(b.Clock.Now()) || items[0].ReadAt != nil {
		t.Fatalf("after listing: %+v", items)
	}
	first := *items[0].DeliveredAt
	b.Clock.Advance(1e9)
	items = b.inbox(t, b.Agent, engine.InboxQuery{Unread: true})
	if len(items) != 1 || !items[0].DeliveredAt.Equal(first) || items[0].ReadAt != nil {
		t.Fatalf("a second listing moved delivered_at or set read_at: %+v", items)
	}
	if _, err := b.Engine.ArchiveResult(b.Ctx, b.Agent, res.TaskID); err != nil {
		t.Fatal(err)
	}
	mr, err := b.Engine.MarkRead(b.Ctx, b.Agent, []string{items[0].ID, items[0].ID})
	if err != nil || mr.Marked != 1 || len(mr.AlreadyRead) != 0 {
		t.Fatalf("mark read: %+v %v", mr, err)
	}
	mr, err = b.Engine.MarkRead(b.Ctx, b.Agent, []string{items[0].ID})
	if err != nil || mr.Marked != 0 || len(mr.AlreadyRead) != 1 {
		t.Fatalf("mark read again: %+v %v", mr, err)
	}
	if left := b.inbox(t, b.Agent, engine.InboxQuery{Unread: true}); len(left) != 0 {
		t.Fatalf("unread after mark_read: %+v", left)
	}
	all := b.inbox(t, b.Agent, engine.InboxQuery{})
	it := all[0]
	if it.ReadAt == nil || it.FetchedAt == nil || it.PromotedAt != nil || !it.ReadAt.Equal(b.Clock.Now()) {
		t.Fatalf("final item %+v", it)
	}
}

func testInboxMarkReadOthers(t *testing.T, b *Bundle) {
	b.Enqueue(t, "work")
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1"))
	mine := b.inbox(t, b.Agent, engine.InboxQuery{})
	other := engine.Actor{Tenant: "acme", Principal: "agent.other", Role: engine.RoleAgent}
	if _, err := b.Engine.MarkRead(b.Ctx, other, []string{mine[0].ID}); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("marking another's item: %v, want not_found", err)
	}
	if _, err := b.Engine.MarkRead(b.Ctx, b.Agent, []string{mine[0].ID, "I-NOPE"}); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("an unknown id: %v, want not_found", err)
	}
	if _, err := b.Engine.MarkRead(b.Ctx, b.Agent, nil); !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("no ids: %v, want bad_request", err)
	}
	if _, _, err := b.Engine.Inbox(b.Ctx, other, engine.InboxQuery{Recipient: b.Agent.Principal}); !host.IsCode(err, host.CodeForbidden) {
		t.Fatalf("reading another's inbox: %v, want forbidden", err)
	}
	if got := b.inbox(t, b.Agent, engine.InboxQuery{Unread: true}); len(got) != 1 {
		t.Fatalf("a refused mark_read marked something: %+v", got)
	}
	var n int
	_ = b.Store.View(b.Ctx, func(r store.Reader) error {
		items, _, err := r.ListInbox(b.Ctx, store.InboxFilter{Tenant: "other-tenant", Recipient: b.Agent.Principal})
		n = len(items)
		return err
	})
	if n != 0 {
		t.Fatalf("another tenant sees %d items", n)
	}
}

func testSessionBootstrap(t *testing.T, b *Bundle) {
	empty, err := b.Engine.SessionBootstrap(b.Ctx, b.Agent, 0)
	if err != nil || empty.Inbox == nil || empty.OwedToYou == nil || empty.YouOwe == nil || len(empty.Inbox) != 0 {
		t.Fatalf("empty bootstrap: %+v %v", empty, err)
	}
	open := b.Enqueue(t, "work")
	done := b.Enqueue(t, "other")
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1", "other"))
	bs, err := b.Engine.SessionBootstrap(b.Ctx, b.Agent, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs.OwedToYou) != 1 || bs.OwedToYou[0].TaskID != open.TaskID || len(bs.Inbox) != 1 || bs.Inbox[0].TaskID != done.TaskID ||
		bs.Inbox[0].DeliveredAt == nil || bs.Inbox[0].ReadAt != nil || bs.NextStep == "" {
		t.Fatalf("bootstrap %+v", bs)
	}
	if _, err := b.Engine.SessionBootstrap(b.Ctx, b.Agent, 501); !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("limit 501: %v", err)
	}
}
