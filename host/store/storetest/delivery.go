package storetest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

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
	{"ArchiveOwedResult", testArchiveOwedResult},                   // archivewaiters.go
	{"ArchiveRacesEnqueue", testArchiveRacesEnqueue},               // archivewaiters.go
	{"RedriveAfterReleasedResult", testRedriveAfterReleasedResult}, // archivewaiters.go
	{"RedriveRacesArchive", testRedriveRacesArchive},               // archivewaiters.go
	{"RetentionKeepsAnOwedResult", testRetentionOwedResult},        // retentionwaiters.go
	{"RetentionRacesEnqueue", testRetentionRacesEnqueue},           // retentionwaiters.go
	{"RetentionBoundedBatchesAndOrphans", testRetentionBatches},
	{"RetentionOrphansOldestFirst", testRetentionOrphansOldestFirst},
	{"RetentionArchivesWorkflows", testWorkflowRetention},      // wfretention.go
	{"RetentionWorkflowIsFenced", testWorkflowRetentionFenced}, // wfretention.go
	{"OutboxClaimOrderPerTask", testOutboxClaimOrder},
	{"OutboxClaimsOnlyItsKinds", testOutboxClaimsOnlyItsKinds},
	{"OutboxQueuesEveryReceipt", testOutboxWithReceipts},
	{"OutboxQueuesEveryReceiptOfAnUpdate", testOutboxEveryReceiptOfAnUpdate}, // outboxupdate.go
	{"OutboxRecordsAnyErrorText", testOutboxErrorText},
	{"OutboxOutcomeOfALostClaim", testOutboxLostClaim},
	{"OutboxStartsNoDeliveryPastItsClaim", testOutboxClaimDeadline},
	{"RetentionLeavesAWorkersURL", testRetentionWorkerURL},
	{"EmailOutboxOutcomes", testEmailOutbox},
}

func runDelivery(t *testing.T, open Opener) {
	for _, c := range deliveryCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := Setup(t, open)
			c.fn(t, b)
			b.VerifyAfter(t)
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

// testOutboxClaimOrder drives the outbox methods directly: only the oldest
// pending entry of a task is claimable, a claim hides entries until it ends,
// failures come back when due, dead entries block nothing and come back on
// retry.
func testOutboxClaimOrder(t *testing.T, b *Bundle) {
	now := b.Clock.Now()
	var es []store.OutboxEntry
	for i, task := range []string{"T-A", "T-A", "T-A", "T-B", "T-B"} {
		es = append(es, store.OutboxEntry{Tenant: "acme", TaskID: task, Kind: "receipt", Key: task + "/" + string(rune('0'+i)),
			Body: []byte(`{"n":1}`), NextAt: now, CreatedAt: now})
	}
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.InsertOutbox(b.Ctx, es) }); err != nil {
		t.Fatal(err)
	}
	claim := func(at time.Time) []store.OutboxEntry { return b.claimReceipts(t, at) }
	finish := func(es ...store.OutboxEntry) {
		t.Helper()
		if err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.FinishOutbox(b.Ctx, es) }); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(es []store.OutboxEntry) map[string]store.OutboxEntry {
		m := map[string]store.OutboxEntry{}
		for _, e := range es {
			m[e.Key] = e
		}
		return m
	}
	got := keys(claim(now))
	if len(got) != 2 || got["T-A/0"].ID == 0 || got["T-B/3"].ID == 0 {
		t.Fatalf("first claim %v, want the head of each task", got)
	}
	if again := claim(now); len(again) != 0 {
		t.Fatalf("claimed entries claimed again: %v", again)
	}
	a0, b3 := got["T-A/0"], got["T-B/3"]
	a0.State = store.OutboxDone
	b3.State, b3.Attempts, b3.NextAt, b3.LastError = store.OutboxPending, 1, now.Add(time.Hour), "503"
	finish(a0, b3)
	got = keys(claim(now))
	if len(got) != 1 || got["T-A/1"].ID == 0 {
		t.Fatalf("second claim %v, want only T-A/1 (T-B waits for its failed head)", got)
	}
	a1 := got["T-A/1"]
	a1.State, a1.Attempts, a1.LastError = store.OutboxDead, 1, "422 refused"
	finish(a1)
	got = keys(claim(now))
	if len(got) != 1 || got["T-A/2"].ID == 0 {
		t.Fatalf("third claim %v, want T-A/2 (a dead entry blocks nothing)", got)
	}
	if later := keys(claim(now.Add(2 * time.Hour))); len(later) != 2 || later["T-B/3"].Attempts != 1 || later["T-A/2"].ID == 0 {
		t.Fatalf("claim after the retry delay and the claim's end: %v, want T-B/3 (due) and T-A/2 (its claim ended)", later)
	}
	var st store.OutboxStats
	var dead []store.OutboxEntry
	_ = b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		if st, err = r.OutboxStats(b.Ctx); err != nil {
			return err
		}
		dead, err = r.ListOutbox(b.Ctx, store.OutboxDead, 0, 10)
		return err
	})
	if st.Pending != 3 || st.Dead != 1 || st.OldestPendingAt == nil || len(dead) != 1 || dead[0].Key != "T-A/1" || dead[0].LastError != "422 refused" {
		t.Fatalf("stats %+v dead %+v", st, dead)
	}
	var n int64
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		var err error
		n, err = tx.RetryOutbox(b.Ctx, nil, now.Add(3*time.Hour))
		return err
	}); err != nil || n != 1 {
		t.Fatalf("retry: %d %v", n, err)
	}
}

// testOutboxWithReceipts: with the outbox on, every receipt is queued in the
// transaction that appends it, with its own dedupe key, in ledger order.
func testOutboxWithReceipts(t *testing.T, b *Bundle) {
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, Delivery: engine.DeliveryConfig{Outbox: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	res, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", MaxTasks: 1})
	if err != nil || len(offers) != 1 {
		t.Fatal(offers, err)
	}
	if _, _, err := eng.Accept(b.Ctx, Call("w.1", offers[0])); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", offers[0]), Result: Pointer}); err != nil {
		t.Fatal(err)
	}
	rs := b.Receipts(t, res.TaskID)
	var es []store.OutboxEntry
	_ = b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		es, err = r.ListOutbox(b.Ctx, store.OutboxPending, 0, 100)
		return err
	})
	if len(es) != len(rs) || len(rs) != 3 {
		t.Fatalf("%d outbox entries for %d receipts", len(es), len(rs))
	}
	for i, e := range es {
		if e.Key != "receipt:"+rs[i].ID || e.TaskID != res.TaskID || e.Kind != "receipt" || !strings.Contains(string(e.Body), rs[i].Hash) {
			t.Fatalf("entry %d = %+v, receipt %+v", i, e, rs[i])
		}
	}
	// The engine without the outbox (b.Engine) queues nothing.
	b.Enqueue(t, "work")
	var st store.OutboxStats
	_ = b.Store.View(b.Ctx, func(r store.Reader) error { st, _ = r.OutboxStats(b.Ctx); return nil })
	if st.Pending != 3 {
		t.Fatalf("pending %d after an enqueue on an engine without outbox", st.Pending)
	}
}

// testOutboxClaimsOnlyItsKinds: a host claims only the kinds it can deliver
// (one without a sink leaves receipts to one with a sink, one without mail
// leaves email), so an entry never waits out claims by a host that cannot
// deliver it.
func testOutboxClaimsOnlyItsKinds(t *testing.T, b *Bundle) {
	now := b.Clock.Now()
	es := []store.OutboxEntry{
		{Tenant: "acme", TaskID: "T-K", Kind: "receipt", Key: "k/receipt", Body: []byte(`{}`), NextAt: now, CreatedAt: now},
		{Tenant: "acme", Kind: "email", Key: "k/email", Body: []byte(`{}`), NextAt: now, CreatedAt: now},
	}
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.InsertOutbox(b.Ctx, es) }); err != nil {
		t.Fatal(err)
	}
	claim := func(kinds ...string) []string {
		t.Helper()
		var keys []string
		if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
			got, err := tx.ClaimOutbox(b.Ctx, now, now.Add(time.Minute), 10, kinds)
			for _, e := range got {
				keys = append(keys, e.Key)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	if got := claim(); len(got) != 0 {
		t.Fatalf("a host that delivers nothing claimed %v", got)
	}
	if got := claim("email"); len(got) != 1 || got[0] != "k/email" {
		t.Fatalf("a mail-only host claimed %v, want the email alone", got)
	}
	if got := claim("receipt", "memory"); len(got) != 1 || got[0] != "k/receipt" {
		t.Fatalf("a sink-only host claimed %v, want the receipt alone", got)
	}
}

// funcSink is a sink that answers with fn.
type funcSink func(store.OutboxEntry) error

func (f funcSink) Deliver(_ context.Context, e store.OutboxEntry) error { return f(e) }

// testOutboxErrorText: a sink's answer may hold any bytes (a Latin-1 error
// page, a multi-byte character cut short, a NUL); the round still records
// every outcome, the failure's text as valid UTF-8.
func testOutboxErrorText(t *testing.T, b *Bundle) {
	var calls atomic.Int64
	sink := funcSink(func(e store.OutboxEntry) error {
		if calls.Add(1) == 1 {
			return errors.New("503: Service indisponible \xe9t\xe9 \x00 \xe2\x82")
		}
		return nil
	})
	_, pending := outboxRound(t, b, engine.OutboxConfig{Sink: sink})
	if len(pending) != 1 || pending[0].Attempts != 1 || !utf8.ValidString(pending[0].LastError) ||
		strings.ContainsRune(pending[0].LastError, 0) || !strings.Contains(pending[0].LastError, "Service indisponible") {
		t.Fatalf("after the round: %+v, want the two delivered gone and the failed one pending with attempts 1 and its error as UTF-8", pending)
	}
}

// testOutboxLostClaim: a dispatcher whose claim ended, and passed to another
// before it recorded its failure, records nothing: the other's claim and
// the entry stay as they are.
func testOutboxLostClaim(t *testing.T, b *Bundle) {
	now := b.Clock.Now()
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		return tx.InsertOutbox(b.Ctx, []store.OutboxEntry{{Tenant: "acme", Kind: "receipt", Key: "k-lost", Body: []byte(`{}`), NextAt: now, CreatedAt: now}})
	}); err != nil {
		t.Fatal(err)
	}
	claim := func(at time.Time) []store.OutboxEntry {
		t.Helper()
		got := b.claimReceipts(t, at)
		if len(got) != 1 {
			t.Fatalf("claim at %s: %v", at, got)
		}
		return got
	}
	first := claim(now)
	second := claim(now.Add(2 * time.Minute)) // the first claim has ended
	first[0].State, first[0].Attempts, first[0].NextAt, first[0].LastError = store.OutboxDead, 1, now, "late refusal"
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.FinishOutbox(b.Ctx, first) }); err != nil {
		t.Fatal(err)
	}
	if first[0].State != store.OutboxReclaimed {
		t.Fatalf("the first dispatcher's outcome: state %s, want %s", first[0].State, store.OutboxReclaimed)
	}
	var dead, pending []store.OutboxEntry
	_ = b.Store.View(b.Ctx, func(r store.Reader) error {
		dead, _ = r.ListOutbox(b.Ctx, store.OutboxDead, 0, 10)
		pending, _ = r.ListOutbox(b.Ctx, store.OutboxPending, 0, 10)
		return nil
	})
	if len(dead) != 0 || len(pending) != 1 || pending[0].Attempts != 0 || pending[0].ClaimedTill == nil || !pending[0].ClaimedTill.Equal(*second[0].ClaimedTill) {
		t.Fatalf("after a lost claim's outcome: dead %+v, pending %+v; want it pending under the second claim", dead, pending)
	}
	// The second dispatcher records its own.
	second[0].State, second[0].Attempts, second[0].NextAt, second[0].LastError = store.OutboxPending, 1, now.Add(time.Hour), "503"
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.FinishOutbox(b.Ctx, second) }); err != nil || second[0].State != store.OutboxPending {
		t.Fatalf("the second dispatcher's outcome: %v, state %s", err, second[0].State)
	}
}

// testRetentionWorkerURL: a worker's own URL whose scheme is the name of a
// channel the gate manages (mem://…, as http://… with the http channel) is
// the worker's, accepted at completion as such: retention archives the task
// without acking or purging it through the channel.
func testRetentionWorkerURL(t *testing.T, b *Bundle) {
	short := host.NewTaskType("short")
	short.Tenant, short.DefaultRetentionDays = "acme", 1
	b.MustPutType(t, short)
	eng, ch := retentionEngine(t, b, engine.RetentionConfig{})
	res, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "short"})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"short"}, MaxTasks: 1})
	if err != nil || len(offers) != 1 {
		t.Fatalf("lease %v %v", offers, err)
	}
	url := "mem://worker.example/results/42"
	if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", offers[0]), Result: host.Result{Pointer: url}}); err != nil {
		t.Fatalf("completion with the worker's URL: %v", err)
	}
	b.Clock.Advance(24*time.Hour + time.Second)
	rep, err := eng.RetentionSweep(b.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	tk := b.Task(t, res.TaskID)
	if len(ch.acked) != 0 || rep.ChannelErrors != 0 || rep.Archived != 1 || tk.State != host.StateArchived || tk.Result.Pointer != url || tk.Result.PurgedAt != nil {
		t.Fatalf("sweep %+v, acked %v, task %s pointer %q purged %v; want it archived with its URL untouched", rep, ch.acked, tk.State, tk.Result.Pointer, tk.Result.PurgedAt)
	}
}

// testOutboxClaimDeadline: a round does not start a delivery that could
// outlast its claim (another dispatcher may take the entry then); such an
// entry is handed back untried, due at once, and counts no attempt.
func testOutboxClaimDeadline(t *testing.T, b *Bundle) {
	var delivered atomic.Int64
	sink := funcSink(func(e store.OutboxEntry) error {
		b.Clock.Advance(10 * time.Second) // each delivery takes its whole timeout
		delivered.Add(1)
		return nil
	})
	eng, pending := outboxRound(t, b, engine.OutboxConfig{Sink: sink, Timeout: 10 * time.Second, ClaimFor: 25 * time.Second})
	if delivered.Load() != 2 || len(pending) != 1 || pending[0].Attempts != 0 || pending[0].ClaimedTill != nil || pending[0].NextAt.After(b.Clock.Now()) {
		t.Fatalf("delivered %d; pending %+v; want 2 delivered and the third handed back untried, unclaimed and due", delivered.Load(), pending)
	}
	if n, err := eng.OutboxRound(b.Ctx); err != nil || n != 1 || delivered.Load() != 3 {
		t.Fatalf("the next round: %d claimed, %v, %d delivered in all", n, err, delivered.Load())
	}
}

// outboxRound queues three receipts' worth of tasks through an engine whose
// outbox delivers to sink (cfg with Sink set; one worker), runs one round,
// and returns the engine and what the round left pending.
func outboxRound(t *testing.T, b *Bundle, cfg engine.OutboxConfig) (*engine.Engine, []store.OutboxEntry) {
	t.Helper()
	cfg.Workers = 1
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Delivery: engine.DeliveryConfig{OutboxConfig: cfg, Retention: engine.RetentionConfig{Interval: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	for range 3 {
		if _, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work"}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := eng.OutboxRound(b.Ctx); err != nil || n != 3 {
		t.Fatalf("round: %d claimed, %v", n, err)
	}
	var pending []store.OutboxEntry
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		pending, err = r.ListOutbox(b.Ctx, store.OutboxPending, 0, 10)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return eng, pending
}

// claimReceipts claims up to ten due receipt entries at at, for a minute.
func (b *Bundle) claimReceipts(t *testing.T, at time.Time) []store.OutboxEntry {
	t.Helper()
	var got []store.OutboxEntry
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		var err error
		got, err = tx.ClaimOutbox(b.Ctx, at, at.Add(time.Minute), 10, []string{"receipt"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return got
}
