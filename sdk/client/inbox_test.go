package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// The gate's stores: SQLite (its data folder) and PostgreSQL (a fresh
// schema on the test server).
var stores = []string{"sqlite", "postgres"}

// startGateOn starts a gate on driver's store.
func startGateOn(t *testing.T, driver string) *gate {
	t.Helper()
	if driver == "postgres" {
		return startGate(t, "--db", postgresSchema(t))
	}
	return startGate(t)
}

// postgresSchema returns the URL of a fresh schema on the test PostgreSQL
// server (ASYNCGATE_TEST_POSTGRES, default postgres://postgres@127.0.0.1:5432/test),
// dropped when the test ends. The module has the standard library only, so
// psql makes the schema. Without psql or a server the test skips, except
// under CI, where it fails.
func postgresSchema(t *testing.T) string {
	t.Helper()
	base := os.Getenv("ASYNCGATE_TEST_POSTGRES")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf(format+" (CI is set, so this fails)", args...)
		}
		t.Skipf(format+"; run scripts/ensure-postgres.sh", args...)
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		unavailable("no psql to make a PostgreSQL schema with: %v", err)
	}
	schema := fmt.Sprintf("ag_sdk_%d_%d", os.Getpid(), time.Now().UnixNano())
	run := func(sql string) error {
		out, err := exec.Command(psql, base, "-v", "ON_ERROR_STOP=1", "-qc", sql).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := run("CREATE SCHEMA " + schema); err != nil {
		unavailable("PostgreSQL at %s: %v", base, err)
	}
	t.Cleanup(func() { _ = run("DROP SCHEMA " + schema + " CASCADE") })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestInboxObligationsReceiptsAgainstTheGate reads, with the typed methods,
// what a later session of an agent needs to find its outcomes, on each
// store: the open obligations and session bootstrap while its tasks run,
// then, once a worker completed one and failed the other, the inbox
// (filters, paging, delivered but not read until MarkRead), the obligations
// gone, a workflow's end as one item, and each task's receipts, one
// receipt, its chain and its terminator. Refusals are typed errors.
func TestInboxObligationsReceiptsAgainstTheGate(t *testing.T) {
	for _, driver := range stores {
		t.Run(driver, func(t *testing.T) {
			testInboxObligationsReceipts(t, startGateOn(t, driver))
		})
	}
}

func testInboxObligationsReceipts(t *testing.T, g *gate) {
	ctx := context.Background()
	admin := client.New(g.URL, g.Admin)
	if _, err := admin.Do(ctx, "PUT", "/v1/admin/task-types/ib.work", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	c := client.New(g.URL, g.key(t, "agent", "producer.ib"))
	other := client.New(g.URL, g.key(t, "agent", "producer.other"))
	worker := client.New(g.URL, g.key(t, "worker", "ib.w1"))

	ok, err := c.Enqueue(ctx, "ib.work", map[string]int{"n": 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := c.Enqueue(ctx, "ib.work", map[string]int{"n": 2}, nil)
	if err != nil {
		t.Fatal(err)
	}

	// While they run, the gate owes the agent both outcomes.
	owed, cur, err := c.OpenObligations(ctx, client.ObligationOptions{Role: client.RoleObligee})
	if err != nil || cur != "" || len(owed) != 2 {
		t.Fatalf("open obligations: %+v %q %v", owed, cur, err)
	}
	for i, want := range []*client.Enqueued{ok, bad} {
		o := owed[i]
		if o.ReceiptID != want.ReceiptID || o.TaskID != want.TaskID || o.ReceiptType != "task.assigned" || o.Obligee != "producer.ib" || o.Obligor != "asyncgate" || o.CreatedAt.IsZero() {
			t.Fatalf("obligation %d: %+v, want the assign receipt of %s", i, o, want.TaskID)
		}
	}
	if page, cur, err := c.OpenObligations(ctx, client.ObligationOptions{Role: client.RoleObligee, Limit: 1}); err != nil || len(page) != 1 || page[0].TaskID != ok.TaskID || cur == "" {
		t.Fatalf("first page of one: %+v %q %v", page, cur, err)
	} else if next, _, err := c.OpenObligations(ctx, client.ObligationOptions{Role: client.RoleObligee, Limit: 1, Cursor: cur}); err != nil || len(next) != 1 || next[0].TaskID != bad.TaskID {
		t.Fatalf("second page of one: %+v %v", next, err)
	}
	if owes, _, err := c.OpenObligations(ctx, client.ObligationOptions{Role: client.RoleObligor}); err != nil || len(owes) != 0 {
		t.Fatalf("what the agent owes: %+v %v", owes, err)
	}
	boot, err := c.SessionBootstrap(ctx, 0)
	if err != nil || boot.Principal != "producer.ib" || boot.ServerTime.IsZero() || len(boot.OwedToYou) != 2 || len(boot.YouOwe) != 0 || len(boot.Inbox) != 0 || boot.NextStep == "" {
		t.Fatalf("bootstrap while running: %+v %v", boot, err)
	}

	// A worker completes one and fails the other for good.
	var leases struct {
		Leases []struct {
			LeaseID string `json:"lease_id"`
			Task    struct {
				TaskID string `json:"task_id"`
			} `json:"task"`
		} `json:"leases"`
	}
	if _, err := worker.Do(ctx, "POST", "/v1/leases", map[string]any{"worker_id": "ib.w1", "task_types": []string{"ib.work"}, "max_tasks": 2}, &leases); err != nil || len(leases.Leases) != 2 {
		t.Fatalf("lease: %+v %v", leases, err)
	}
	for _, l := range leases.Leases {
		if l.Task.TaskID == ok.TaskID {
			_, err = worker.Do(ctx, "POST", "/v1/leases/"+l.LeaseID+"/complete", map[string]any{"result": map[string]int{"n": 1}, "summary": "done"}, nil)
		} else {
			_, err = worker.Do(ctx, "POST", "/v1/leases/"+l.LeaseID+"/fail", map[string]any{"error_message": "no", "retryable": false}, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// A later session: the bootstrap hands over both outcomes, unread.
	boot, err = c.SessionBootstrap(ctx, 0)
	if err != nil || len(boot.OwedToYou) != 0 || len(boot.Inbox) != 2 || boot.MoreInbox {
		t.Fatalf("bootstrap once they ended: %+v %v", boot, err)
	}
	kinds := map[string]string{}
	for _, it := range boot.Inbox {
		kinds[it.TaskID] = it.Kind
	}
	if kinds[ok.TaskID] != client.InboxCompleted || kinds[bad.TaskID] != client.InboxFailed {
		t.Fatalf("inbox kinds %v, want %s completed and %s failed", kinds, ok.TaskID, bad.TaskID)
	}
	var items []client.InboxItem
	for cur := ""; ; {
		page, next, err := c.Inbox(ctx, client.InboxOptions{Limit: 1, Cursor: cur})
		if err != nil || len(page) > 1 {
			t.Fatalf("inbox page after %q: %+v %v", cur, page, err)
		}
		items = append(items, page...)
		if next == "" {
			break
		}
		if len(items) > 2 {
			t.Fatalf("the inbox pages on past its two items: %+v", items)
		}
		cur = next
	}
	if len(items) != 2 || items[0].InboxID == items[1].InboxID || items[0].CreatedAt.After(items[1].CreatedAt) {
		t.Fatalf("the inbox, one item a page: %+v, want two items oldest first", items)
	}
	for _, it := range items {
		if it.Recipient != "producer.ib" || it.ReceiptID == "" || it.TaskType != "ib.work" || it.Summary == "" || it.DeliveredAt == nil || it.ReadAt != nil {
			t.Fatalf("inbox item %+v, want delivered by the bootstrap and not read", it)
		}
	}
	only, _, err := c.Inbox(ctx, client.InboxOptions{TaskID: ok.TaskID})
	if err != nil || len(only) != 1 || only[0].TaskID != ok.TaskID || only[0].Kind != client.InboxCompleted {
		t.Fatalf("the inbox of one task: %+v %v", only, err)
	}
	res, err := c.Result(ctx, only[0].TaskID)
	if err != nil || res.Summary != "done" {
		t.Fatalf("the result the item points at: %+v %v", res, err)
	}

	// Marking one read leaves the other unread; a repeat names it.
	mr, err := c.MarkRead(ctx, only[0].InboxID)
	if err != nil || mr.Marked != 1 || len(mr.AlreadyRead) != 0 {
		t.Fatalf("mark read: %+v %v", mr, err)
	}
	if mr, err := c.MarkRead(ctx, only[0].InboxID); err != nil || mr.Marked != 0 || len(mr.AlreadyRead) != 1 || mr.AlreadyRead[0] != only[0].InboxID {
		t.Fatalf("mark read again: %+v %v", mr, err)
	}
	unread, _, err := c.Inbox(ctx, client.InboxOptions{Unread: true})
	if err != nil || len(unread) != 1 || unread[0].TaskID != bad.TaskID {
		t.Fatalf("unread after marking %s: %+v %v", ok.TaskID, unread, err)
	}
	if read, _, err := c.Inbox(ctx, client.InboxOptions{TaskID: ok.TaskID}); err != nil || len(read) != 1 || read[0].ReadAt == nil {
		t.Fatalf("the item marked read: %+v %v", read, err)
	}
	if _, err := other.MarkRead(ctx, unread[0].InboxID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("another agent marks the item read: %v, want not found", err)
	}
	var ae *client.APIError
	if _, err := c.MarkRead(ctx); !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "bad_request" {
		t.Fatalf("mark read of no ids: %v", err)
	}
	if _, _, err := other.Inbox(ctx, client.InboxOptions{Recipient: "producer.ib"}); !errors.As(err, &ae) || ae.Status != 403 {
		t.Fatalf("another agent reads the inbox: %v, want 403", err)
	}
	if got, _, err := admin.Inbox(ctx, client.InboxOptions{Recipient: "producer.ib", Unread: true}); err != nil || len(got) != 1 || got[0].InboxID != unread[0].InboxID {
		t.Fatalf("an admin reads the agent's unread items: %+v %v", got, err)
	}
	if owed, _, err := c.OpenObligations(ctx, client.ObligationOptions{}); err != nil || len(owed) != 0 {
		t.Fatalf("open obligations once both ended: %+v %v", owed, err)
	}
	if _, _, err := other.OpenObligations(ctx, client.ObligationOptions{Principal: "producer.ib"}); !errors.As(err, &ae) || ae.Status != 403 || ae.Code != "forbidden" {
		t.Fatalf("another agent lists the agent's obligations: %v", err)
	}

	// A workflow's end is one item, about the workflow, for its submitter.
	wf, err := c.SubmitWorkflow(ctx, client.NewWorkflow{Name: "one", Steps: []client.WorkflowStep{client.Step("only", "ib.work", nil)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Do(ctx, "POST", "/v1/leases", map[string]any{"worker_id": "ib.w1", "task_types": []string{"ib.work"}}, &leases); err != nil || len(leases.Leases) != 1 {
		t.Fatalf("lease the step: %+v %v", leases, err)
	}
	if _, err := worker.Do(ctx, "POST", "/v1/leases/"+leases.Leases[0].LeaseID+"/complete", map[string]any{"result": map[string]int{}, "summary": "wf done"}, nil); err != nil {
		t.Fatal(err)
	}
	wfItems, _, err := c.Inbox(ctx, client.InboxOptions{Unread: true, TaskID: wf.WorkflowID})
	if err != nil || len(wfItems) != 1 || wfItems[0].Kind != client.InboxCompleted || wfItems[0].ReceiptID == "" {
		t.Fatalf("the workflow's inbox item: %+v %v", wfItems, err)
	}
	if term, err := c.CheckTerminator(ctx, wf.ReceiptID); err != nil || !term.HasTerminator || term.TerminatorID != wfItems[0].ReceiptID {
		t.Fatalf("the workflow's submit receipt: %+v %v, want terminated by %s", term, err, wfItems[0].ReceiptID)
	}

	// The receipts: the task's in ledger order, one, its chain, its terminator.
	rs, cur, err := c.Receipts(ctx, ok.TaskID, "", 0)
	if err != nil || cur != "" || len(rs) < 2 {
		t.Fatalf("receipts: %+v %q %v", rs, cur, err)
	}
	first, last := rs[0], rs[len(rs)-1]
	if first.ReceiptID != ok.ReceiptID || first.ReceiptType != "task.assigned" || first.TaskID != ok.TaskID || last.ReceiptType != "task.completed" || first.Hash == "" {
		t.Fatalf("receipts %+v, want task.assigned first and task.completed last", rs)
	}
	for i := 1; i < len(rs); i++ {
		if rs[i].Seq <= rs[i-1].Seq {
			t.Fatalf("receipts out of ledger order: %+v", rs)
		}
	}
	var paged []client.Receipt
	for cur := ""; ; {
		page, next, err := c.Receipts(ctx, ok.TaskID, cur, 1)
		if err != nil || len(page) > 1 {
			t.Fatalf("receipts page after %q: %+v %v", cur, page, err)
		}
		paged = append(paged, page...)
		if next == "" || len(paged) > len(rs) {
			break
		}
		cur = next
	}
	if len(paged) != len(rs) || paged[len(paged)-1].ReceiptID != last.ReceiptID {
		t.Fatalf("receipts one a page: %d, want the %d of one call", len(paged), len(rs))
	}
	assigned, err := c.GetReceipt(ctx, ok.ReceiptID)
	if err != nil || assigned.ReceiptType != "task.assigned" || assigned.To != "producer.ib" || assigned.TerminatedBy != last.ReceiptID {
		t.Fatalf("the assign receipt: %+v %v, want terminated by %s", assigned, err, last.ReceiptID)
	}
	chain, err := c.ReceiptChain(ctx, last.ReceiptID)
	if err != nil || len(chain) < 2 || chain[0].ReceiptID != last.ReceiptID || chain[0].Depth != 0 {
		t.Fatalf("the chain of the completion: %+v %v", chain, err)
	}
	found := false
	for _, l := range chain[1:] {
		if l.ReceiptID == ok.ReceiptID && l.Depth >= 1 && l.TerminatedBy == last.ReceiptID {
			found = true
		}
	}
	if !found {
		t.Fatalf("the chain of the completion %+v lacks the assign receipt", chain)
	}
	term, err := c.CheckTerminator(ctx, ok.ReceiptID)
	if err != nil || !term.HasTerminator || term.TerminatorID != last.ReceiptID || !term.IsObligation || term.ParentReceiptID != ok.ReceiptID {
		t.Fatalf("check terminator: %+v %v", term, err)
	}
	if rs, _, err := c.Receipts(ctx, bad.TaskID, "", 0); err != nil || rs[len(rs)-1].ReceiptType != "task.failed" {
		t.Fatalf("the failed task's receipts: %+v %v", rs, err)
	}
	if _, err := c.GetReceipt(ctx, "R-nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("an unknown receipt: %v", err)
	}
	if _, _, err := other.Receipts(ctx, ok.TaskID, "", 0); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("another agent's task's receipts: %v", err)
	}
	if _, _, err := c.Receipts(ctx, "", "", 0); !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "bad_request" {
		t.Fatalf("receipts without a task: %v", err)
	}
}
