package storetest

import (
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// testOutboxEveryReceiptOfAnUpdate: an update that appends several receipts
// queues each of them, and every one reaches the sink (issue 38 item 6a:
// every other outbox case writes one receipt per update, so an outbox that
// queued only an update's first receipt passed them all). Two such updates:
// a final failure (failed, then escalated) and one sweep that expires two
// leases at once.
func testOutboxEveryReceiptOfAnUpdate(t *testing.T, b *Bundle) {
	var mu sync.Mutex
	sent := map[string]int{}
	sink := funcSink(func(e store.OutboxEntry) error {
		mu.Lock()
		defer mu.Unlock()
		sent[e.Key]++
		return nil
	})
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Delivery: engine.DeliveryConfig{OutboxConfig: engine.OutboxConfig{Sink: sink, Workers: 1}, Retention: engine.RetentionConfig{Interval: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	enqueue := func(maxRetries int) string {
		res, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", MaxRetries: &maxRetries})
		if err != nil {
			t.Fatal(err)
		}
		return res.TaskID
	}
	lease := func(n int) []host.Offer {
		offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", MaxTasks: n})
		if err != nil || len(offers) != n {
			t.Fatalf("lease %d: %d offers, %v", n, len(offers), err)
		}
		for _, o := range offers {
			if _, _, err := eng.Accept(b.Ctx, Call("w.1", o)); err != nil {
				t.Fatal(err)
			}
		}
		return offers
	}

	// A final failure: failed and escalated in one update.
	failed := enqueue(0)
	o := lease(1)[0]
	fr, err := eng.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "boom", Retryable: true})
	if err != nil || fr.Status != "dead_letter" {
		t.Fatalf("final failure: %+v %v", fr, err)
	}
	// Two leases swept at once.
	swept := []string{enqueue(3), enqueue(3)}
	offers := lease(2)
	b.Clock.Set(latest(offers[0].LeaseExpiresAt, offers[1].LeaseExpiresAt))
	if n, err := eng.Sweep(b.Ctx); err != nil || n != 2 {
		t.Fatalf("one sweep expired %d leases (%v), want 2", n, err)
	}

	for range 50 {
		n, err := eng.OutboxRound(b.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	want := map[string]bool{}
	var types []string
	for _, id := range append([]string{failed}, swept...) {
		for _, r := range b.Receipts(t, id) {
			want["receipt:"+r.ID] = true
			types = append(types, id+" "+string(r.Type))
		}
	}
	if got := b.ReceiptTypes(t, failed); len(got) < 2 || got[len(got)-2] != host.ReceiptFailed || got[len(got)-1] != host.ReceiptEscalated {
		t.Fatalf("the final failure's receipts %v, want failed then escalated last", got)
	}
	mu.Lock()
	defer mu.Unlock()
	var missing, extra []string
	for k := range want {
		if sent[k] != 1 {
			missing = append(missing, k)
		}
	}
	for k := range sent {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("the sink got %d of %d receipts once; not once: %v; not of these tasks: %v\nreceipts: %v", len(want)-len(missing), len(want), missing, extra, types)
	}
	var st store.OutboxStats
	if err := b.Store.View(b.Ctx, func(r store.Reader) error { st, err = r.OutboxStats(b.Ctx); return err }); err != nil || st.Pending != 0 {
		t.Fatalf("outbox after the rounds: %+v %v, want nothing pending", st, err)
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
