package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// testAttemptsHistory: every lease of a task is kept as an attempt when it
// ends, in the transaction that ends it — who held it, when it was granted
// and accepted, how long, how it ended and with which error — and the
// task's timeline tells the same story with its receipts and progress.
func testAttemptsHistory(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	id := res.TaskID

	// 1: an offer given back before it was accepted.
	o1 := b.LeaseOne(t, "w.1")
	b.Clock.Advance(time.Second)
	if _, err := b.Engine.Release(b.Ctx, Call("w.1", o1), "busy"); err != nil {
		t.Fatal(err)
	}
	// 2: accepted, then failed with metadata after 5 s: a retry.
	o2 := b.LeaseOne(t, "w.2")
	if _, _, err := b.Engine.Accept(b.Ctx, Call("w.2", o2)); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(5 * time.Second)
	fr, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.2", o2), Error: "upstream 503",
		Retryable: true, Metadata: json.RawMessage(`{"code": "E503", "host": "api"}`)})
	if err != nil || !fr.WillRetry {
		t.Fatalf("fail = %+v %v", fr, err)
	}
	// 3: an offer that expired.
	b.Clock.Set(*fr.RetryScheduledAt)
	o3 := b.LeaseOne(t, "w.3")
	b.Clock.Set(o3.LeaseExpiresAt)
	if n, err := b.Engine.Sweep(b.Ctx); err != nil || n != 1 {
		t.Fatalf("sweep = %d %v", n, err)
	}
	// 4: running, with progress.
	b.Clock.Advance(31 * time.Second)
	o4 := b.LeaseOne(t, "w.4")
	if _, _, err := b.Engine.Accept(b.Ctx, Call("w.4", o4)); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(2 * time.Second)
	pct := 50.0
	hb, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.4", o4), ProgressPercent: &pct, ProgressMessage: "half way"})
	if err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(time.Second)

	ta, err := b.Engine.Attempts(b.Ctx, b.Agent, id)
	if err != nil {
		t.Fatal(err)
	}
	as := ta.Attempts
	if ta.Task.ID != id || !ta.At.Equal(b.Clock.Now()) || ta.Task.ID != id || len(as) != 4 {
		t.Fatalf("attempts of a leased task: %d, want 3 ended and the running one: %+v", len(as), as)
	}
	want := []struct {
		worker  string
		outcome host.AttemptOutcome
		attempt int
		lease   int
		accept  bool
		ms      int64
	}{
		{"w.1", host.AttemptReleased, 1, 1, false, 1000},
		{"w.2", host.AttemptFailed, 1, 2, true, 5000},
		{"w.3", host.AttemptExpired, 2, 3, false, 60000},
		{"w.4", host.AttemptRunning, 2, 4, true, 3000},
	}
	for i, w := range want {
		a := as[i]
		if a.WorkerID != w.worker || a.Outcome != w.outcome || a.Attempt != w.attempt || a.Lease != w.lease ||
			(a.AcceptedAt != nil) != w.accept || a.DurationMS != w.ms || a.TaskID != id || a.LeaseID == "" {
			t.Fatalf("attempt %d = %+v, want %+v", i+1, a, w)
		}
		if (a.EndedAt == nil) != (w.outcome == host.AttemptRunning) {
			t.Fatalf("attempt %d: ended_at %v with outcome %s", i+1, a.EndedAt, a.Outcome)
		}
	}
	if as[0].LeaseID != o1.LeaseID || as[1].LeaseID != o2.LeaseID || as[3].LeaseID != o4.LeaseID {
		t.Fatalf("attempts name the wrong leases: %+v", as)
	}
	f := as[1]
	var meta map[string]string
	if f.Error != "upstream 503" || !f.Retryable || json.Unmarshal(f.ErrorMetadata, &meta) != nil || meta["code"] != "E503" ||
		f.RetryAt == nil || !f.RetryAt.Equal(*fr.RetryScheduledAt) || f.ReceiptID != fr.ReceiptID {
		t.Fatalf("the failed attempt lost its error: %+v", f)
	}
	if as[2].RetryAt == nil || as[2].LeaseExpiresAt == nil || !as[2].LeaseExpiresAt.Equal(o3.LeaseExpiresAt) {
		t.Fatalf("the expired attempt: %+v", as[2])
	}
	if as[3].LeaseExpiresAt == nil || as[3].LeaseExpiresAt.Before(o4.LeaseExpiresAt) {
		t.Fatalf("the running attempt's expiry: %+v", as[3])
	}

	// 4 completes: its attempt is told with the completion's receipt and
	// the lease as it stood (accepted, its expiry after the heartbeat), but
	// not stored: the succeeded task's row and its receipt hold it.
	running := as[3]
	cr := b.Complete(t, "w.4", o4)
	ta, err = b.Engine.Attempts(b.Ctx, b.Agent, id)
	as = ta.Attempts
	if err != nil || len(as) != 4 {
		t.Fatalf("after complete: %+v %v", as, err)
	}
	if a := as[3]; a.Outcome != host.AttemptSucceeded || a.ReceiptID != cr.ReceiptID || a.EndedAt == nil || !a.EndedAt.Equal(b.Clock.Now()) ||
		a.LeaseID != o4.LeaseID || a.WorkerID != "w.4" || a.Attempt != 2 || a.Lease != 4 || a.DurationMS != 3000 ||
		a.AcceptedAt == nil || !a.AcceptedAt.Equal(*running.AcceptedAt) || !a.LeasedAt.Equal(running.LeasedAt) ||
		a.LeaseExpiresAt == nil || !a.LeaseExpiresAt.Equal(hb.LeaseExpiresAt) || a.LastHeardAt != nil {
		t.Fatalf("the succeeded attempt = %+v, want the running one %+v ended now, expiring at %v", a, running, hb.LeaseExpiresAt)
	}
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		stored, err := r.ListAttempts(b.Ctx, "acme", id, store.MaxAttemptsListed)
		if err != nil || len(stored) != 3 {
			t.Errorf("stored attempts after the success: %d %v, want the 3 that ended before it", len(stored), err)
			return nil
		}
		// One lease's attempt, read by the lease: who held it and how it
		// ended; none for a lease not stored as ended, or named with
		// another task or tenant.
		for i, o := range []host.Offer{o1, o2, o3} {
			a, err := r.GetAttemptByLease(b.Ctx, "acme", id, o.LeaseID)
			if err != nil || a.LeaseID != o.LeaseID || a.WorkerID != stored[i].WorkerID || a.Outcome != stored[i].Outcome || a.Tenant != "acme" || a.TaskID != id {
				t.Errorf("GetAttemptByLease(%s) = %+v, %v; want %+v", o.LeaseID, a, err, stored[i])
			}
		}
		for _, q := range [][3]string{{"acme", id, o4.LeaseID}, {"acme", id, "lease-never"}, {"evil", id, o1.LeaseID}, {"acme", "task-none", o1.LeaseID}} {
			a, err := r.GetAttemptByLease(b.Ctx, q[0], q[1], q[2])
			if !host.IsCode(err, host.CodeNotFound) {
				t.Errorf("GetAttemptByLease(%q, %q, %q) = %+v, %v; want not found", q[0], q[1], q[2], a, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	tl, err := b.Engine.Timeline(b.Ctx, b.Agent, id)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for i, ev := range tl.Events {
		types = append(types, ev.Type)
		if ev.EventID != i+1 || i > 0 && ev.Time.Before(tl.Events[i-1].Time) {
			t.Fatalf("event %d out of order: %+v", i+1, tl.Events)
		}
	}
	wantTypes := strings.Join([]string{"task.assigned", "lease.granted", "lease.released", "lease.granted", "task.accepted",
		"task.retry_scheduled", "lease.granted", "lease.expired", "lease.granted", "task.accepted", "progress", "task.completed"}, " ")
	if got := strings.Join(types, " "); got != wantTypes || tl.Truncated {
		t.Fatalf("timeline:\n got %s\nwant %s", got, wantTypes)
	}
	if ev := tl.Events[10]; ev.WorkerID != "w.4" || ev.Attempt != 2 || ev.Lease != 4 || !strings.Contains(string(ev.Details), "half way") {
		t.Fatalf("progress event: %+v %s", ev, ev.Details)
	}
	if ev := tl.Events[5]; ev.WorkerID != "w.2" || ev.ReceiptID != fr.ReceiptID || !strings.Contains(string(ev.Details), "E503") {
		t.Fatalf("retry event: %+v %s", ev, ev.Details)
	}

	// A success an older gate stored is told once, as stored.
	old := as[3]
	old.DurationMS = 2999
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		if err := tx.InsertAttempt(b.Ctx, &old); err != nil {
			return err
		}
		// The transaction that writes an attempt reads it by its lease.
		if a, err := tx.GetAttemptByLease(b.Ctx, "acme", id, o4.LeaseID); err != nil || a.DurationMS != 2999 || a.WorkerID != "w.4" {
			t.Errorf("GetAttemptByLease of the attempt just written = %+v, %v", a, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ta, err = b.Engine.Attempts(b.Ctx, b.Agent, id)
	if as = ta.Attempts; err != nil || len(as) != 4 || as[3].Outcome != host.AttemptSucceeded || as[3].DurationMS != 2999 {
		t.Fatalf("with a stored success: %+v %v", as, err)
	}

	// A fatal failure: the attempt says dead_letter and why.
	res2 := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.5")
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.5", o), Error: "bad input"}); err != nil {
		t.Fatal(err)
	}
	ta, err = b.Engine.Attempts(b.Ctx, b.Admin, res2.TaskID)
	as = ta.Attempts
	if err != nil || len(as) != 1 || as[0].Outcome != host.AttemptDead || as[0].DeadReason != host.ReasonFatalError {
		t.Fatalf("dead letter attempt: %+v %v", as, err)
	}

	// Who may read it: the same as the task. Another principal of the
	// tenant, another tenant's admin and a worker that held an earlier lease
	// are told there is no such task.
	for _, a := range []engine.Actor{
		{Tenant: "acme", Principal: "agent.other", Role: engine.RoleAgent},
		{Tenant: "evil", Principal: "ops", Role: engine.RoleAdmin},
		{Tenant: "acme", Principal: "w.2", Role: engine.RoleWorker},
	} {
		_, err := b.Engine.Attempts(b.Ctx, a, id)
		WantCode(t, err, host.CodeNotFound)
		_, err = b.Engine.Timeline(b.Ctx, a, id)
		WantCode(t, err, host.CodeNotFound)
	}
	_, err = b.Engine.Timeline(b.Ctx, b.Admin, "task-none")
	WantCode(t, err, host.CodeNotFound)
	b.Verify(t)
}
