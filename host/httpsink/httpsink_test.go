package httpsink_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpsink"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
)

// Receiver modes.
const (
	modeOK      int32 = iota
	modeFail          // 503
	modeHang          // answer only after the sink's timeout
	modeRefuse        // 422 for task.failed receipts, 200 for the rest
	modeRefuseA       // 422 for everything
)

// receiver is a real HTTP server playing the external ledger. It records
// every item it accepted, by dedupe key, and each task's keys in the order
// they first arrived.
type receiver struct {
	t    testing.TB
	addr string
	mode atomic.Int32
	srv  *http.Server
	hits atomic.Int64

	mu     sync.Mutex
	got    map[string]int      // dedupe key -> accepted deliveries
	order  map[string][]string // task -> keys, first arrival order
	kinds  map[string]string   // dedupe key -> kind
	bodies map[string]json.RawMessage
	header http.Header
}

func newReceiver(t testing.TB) *receiver {
	r := &receiver{t: t, got: map[string]int{}, order: map[string][]string{}, kinds: map[string]string{}, bodies: map[string]json.RawMessage{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(r.stop)
	return r
}

func (r *receiver) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(r.handle)}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go srv.Serve(ln)
}

func (r *receiver) stop() {
	r.mu.Lock()
	srv := r.srv
	r.mu.Unlock()
	srv.Close()
}

// restart serves again on the same address, polling until the port is free.
func (r *receiver) restart() {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", r.addr)
		if err == nil {
			r.serve(ln)
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("cannot listen on %s again: %v", r.addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *receiver) handle(w http.ResponseWriter, req *http.Request) {
	r.hits.Add(1)
	var it httpsink.Item
	if err := json.NewDecoder(req.Body).Decode(&it); err != nil || it.DedupeKey == "" || req.Header.Get("Idempotency-Key") != it.DedupeKey {
		http.Error(w, "bad item", http.StatusBadRequest)
		return
	}
	switch r.mode.Load() {
	case modeFail:
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	case modeHang:
		select {
		case <-req.Context().Done():
		case <-time.After(5 * time.Second):
		}
		http.Error(w, "too late", http.StatusServiceUnavailable)
		return
	case modeRefuseA:
		http.Error(w, "refused", http.StatusUnprocessableEntity)
		return
	case modeRefuse:
		var rc host.Receipt
		if json.Unmarshal(it.Body, &rc) == nil && rc.Type == host.ReceiptFailed {
			http.Error(w, "failures are not taken here", http.StatusUnprocessableEntity)
			return
		}
	}
	r.mu.Lock()
	if r.got[it.DedupeKey] == 0 {
		r.order[it.TaskID] = append(r.order[it.TaskID], it.DedupeKey)
	}
	r.got[it.DedupeKey]++
	r.kinds[it.DedupeKey] = it.Kind
	r.bodies[it.DedupeKey] = it.Body
	r.header = req.Header.Clone()
	r.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

func (r *receiver) has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[key] > 0
}

type bundle struct {
	st   *sqlite.Store
	eng  *engine.Engine
	ctx  context.Context
	rcv  *receiver
	sink *httpsink.Sink
}

var agent = engine.Actor{Tenant: "acme", Principal: "agent.a", Role: engine.RoleAgent}

func setup(t testing.TB, timeout time.Duration) *bundle {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t)
	sink, err := httpsink.New(httpsink.Config{URL: "http://" + rcv.addr + "/receipts", Headers: map[string]string{"Authorization": "Bearer sink-token"}})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ExpiryJitter: -1,
		Delivery: engine.DeliveryConfig{OutboxConfig: engine.OutboxConfig{Sink: sink, Workers: 8, Timeout: timeout,
			MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Idle: 20 * time.Millisecond},
			Retention: engine.RetentionConfig{Interval: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(); st.Close() })
	b := &bundle{st: st, eng: eng, ctx: context.Background(), rcv: rcv, sink: sink}
	tt := host.NewTaskType("work")
	tt.Tenant, tt.DefaultMaxRetries = "acme", 0
	if _, err := eng.PutTaskType(b.ctx, tt); err != nil {
		t.Fatal(err)
	}
	eng.Start()
	return b
}

// cycle runs one task to completion (or to a dead letter when fail is set)
// and returns its id. It must not wait for the sink.
func (b *bundle) cycle(t testing.TB, fail bool) string {
	t.Helper()
	res, err := b.eng.Enqueue(b.ctx, agent, engine.EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := b.eng.Lease(b.ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", MaxTasks: 1})
	if err != nil || len(offers) != 1 {
		t.Fatalf("lease %v %v", offers, err)
	}
	call := engine.WorkerCall{Tenant: "acme", WorkerID: "w.1", LeaseID: offers[0].LeaseID}
	if _, _, err := b.eng.Accept(b.ctx, call); err != nil {
		t.Fatal(err)
	}
	if fail {
		_, err = b.eng.Fail(b.ctx, engine.FailRequest{WorkerCall: call, Error: "boom", Retryable: true}) // no retries left: failed, then escalated
	} else {
		_, err = b.eng.Complete(b.ctx, engine.CompleteRequest{WorkerCall: call, Result: host.Result{Pointer: "s3://b/" + res.TaskID, Summary: "ok"}})
	}
	if err != nil {
		t.Fatal(err)
	}
	return res.TaskID
}

// ledgerKeys returns every receipt's dedupe key per task, in ledger order.
func (b *bundle) ledgerKeys(t testing.TB) (map[string][]string, int) {
	t.Helper()
	out := map[string][]string{}
	n := 0
	_ = b.st.View(b.ctx, func(r store.Reader) error {
		rs, err := r.ScanReceipts(b.ctx, 0, 100000)
		for _, rc := range rs {
			out[rc.TaskID] = append(out[rc.TaskID], "receipt:"+rc.ID)
			n++
		}
		return err
	})
	return out, n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (b *bundle) status(t testing.TB) *engine.OutboxStatus {
	t.Helper()
	s, err := b.eng.OutboxStatus(b.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkAllInOrder: every receipt arrived, and each task's receipts first
// arrived in ledger order.
func (b *bundle) checkAllInOrder(t testing.TB, skip map[string]bool) {
	t.Helper()
	want, _ := b.ledgerKeys(t)
	b.rcv.mu.Lock()
	defer b.rcv.mu.Unlock()
	for task, keys := range want {
		var exp []string
		for _, k := range keys {
			if !skip[k] {
				exp = append(exp, k)
			}
		}
		got := b.rcv.order[task]
		if len(got) != len(exp) {
			t.Fatalf("task %s: the sink has %d receipts %v, the ledger %d %v", task, len(got), got, len(exp), exp)
		}
		for i := range exp {
			if got[i] != exp[i] {
				t.Fatalf("task %s: receipts arrived as %v, ledger order is %v", task, got, exp)
			}
		}
	}
}

// TestOutboxDeliversEveryReceiptInOrder: every receipt reaches a live
// receiver once per dedupe key, each task's in ledger order, with the
// operator's header.
func TestOutboxDeliversEveryReceiptInOrder(t *testing.T) {
	b := setup(t, 2*time.Second)
	for i := 0; i < 20; i++ {
		b.cycle(t, i%5 == 4)
	}
	_, n := b.ledgerKeys(t)
	waitFor(t, "the outbox to drain", 20*time.Second, func() bool { s := b.status(t); return s.Pending == 0 })
	b.checkAllInOrder(t, nil)
	b.rcv.mu.Lock()
	defer b.rcv.mu.Unlock()
	if len(b.rcv.got) != n || b.rcv.header.Get("Authorization") != "Bearer sink-token" {
		t.Fatalf("the sink has %d distinct receipts of %d; Authorization %q", len(b.rcv.got), n, b.rcv.header.Get("Authorization"))
	}
}

// TestOutboxSurvivesFailingHangingAndRestartingSink: the receiver answers
// 503, then hangs past the sink's timeout, then goes away entirely while
// the gate keeps leasing and completing; after it comes back every receipt
// arrives, in order per task, and nothing is dead.
func TestOutboxSurvivesFailingHangingAndRestartingSink(t *testing.T) {
	b := setup(t, 200*time.Millisecond)
	b.rcv.mode.Store(modeFail)
	b.cycle(t, false)
	waitFor(t, "failed attempts against a 503 sink", 10*time.Second, func() bool { return b.rcv.hits.Load() >= 3 })
	if s := b.status(t); s.Pending == 0 || s.Dead != 0 {
		t.Fatalf("after 503s: %+v", s.OutboxStats)
	}
	b.rcv.mode.Store(modeHang)
	hits := b.rcv.hits.Load()
	b.cycle(t, true)
	waitFor(t, "attempts against a hanging sink", 10*time.Second, func() bool { return b.rcv.hits.Load() >= hits+2 })
	b.rcv.stop()
	for i := 0; i < 5; i++ {
		b.cycle(t, i == 2) // the lease engine does not wait for the sink
	}
	if s := b.status(t); s.Pending < 15 || s.LagSeconds <= 0 {
		t.Fatalf("while the sink is down: %+v lag %v", s.OutboxStats, s.LagSeconds)
	}
	b.rcv.mode.Store(modeOK)
	b.rcv.restart()
	waitFor(t, "the outbox to drain after the restart", 30*time.Second, func() bool { return b.status(t).Pending == 0 })
	if s := b.status(t); s.Dead != 0 {
		t.Fatalf("dead entries after transient failures: %+v", s)
	}
	b.checkAllInOrder(t, nil)
}

// TestOutboxDeadListAndRetry: receipts the sink refuses go to the dead list
// without holding back the task's later receipts; retry sends them again.
func TestOutboxDeadListAndRetry(t *testing.T) {
	b := setup(t, 2*time.Second)
	b.rcv.mode.Store(modeRefuse)
	ok := b.cycle(t, false)
	bad := b.cycle(t, true)
	waitFor(t, "the outbox to settle", 20*time.Second, func() bool { return b.status(t).Pending == 0 })
	s := b.status(t)
	if s.Dead != 1 || len(s.DeadList) != 1 || s.DeadList[0].TaskID != bad || s.DeadList[0].LastError == "" {
		t.Fatalf("dead list %+v", s)
	}
	deadKey := s.DeadList[0].Key
	b.checkAllInOrder(t, map[string]bool{deadKey: true})
	if keys, _ := b.ledgerKeys(t); len(keys[bad]) != 4 || !b.rcv.has(keys[bad][3]) {
		t.Fatalf("the escalation after the refused failure did not arrive: %v", keys[bad])
	}
	if !b.rcv.has("receipt:" + b.assign(t, ok)) {
		t.Fatal("the completed task's receipts did not arrive")
	}
	b.rcv.mode.Store(modeOK)
	n, err := b.eng.RetryOutbox(b.ctx, nil)
	if err != nil || n != 1 {
		t.Fatalf("retry %d %v", n, err)
	}
	waitFor(t, "the retried entry", 20*time.Second, func() bool { return b.rcv.has(deadKey) })
	waitFor(t, "the dead list to empty", 20*time.Second, func() bool { s := b.status(t); return s.Dead == 0 && s.Pending == 0 })
}

func (b *bundle) assign(t testing.TB, taskID string) string {
	tk, err := b.eng.GetTask(b.ctx, agent, taskID)
	if err != nil {
		t.Fatal(err)
	}
	return tk.AssignReceipt
}

// TestStoreResultInMemory: promoting a result queues a memory item the sink
// receives, sets promoted_to_memory on the inbox item, and is idempotent.
func TestStoreResultInMemory(t *testing.T) {
	b := setup(t, 2*time.Second)
	id := b.cycle(t, false)
	res, err := b.eng.PromoteToMemory(b.ctx, agent, engine.PromoteRequest{TaskID: id, Domain: "research"})
	if err != nil || res.AlreadyPromoted || res.MemoryKey != "memory:"+id {
		t.Fatalf("promote %+v %v", res, err)
	}
	waitFor(t, "the memory item", 20*time.Second, func() bool { return b.rcv.has("memory:" + id) })
	b.rcv.mu.Lock()
	kind, body := b.rcv.kinds["memory:"+id], b.rcv.bodies["memory:"+id]
	b.rcv.mu.Unlock()
	var item struct {
		TaskID string      `json:"task_id"`
		Domain string      `json:"domain"`
		Result host.Result `json:"result"`
	}
	if err := json.Unmarshal(body, &item); err != nil || kind != "memory" || item.TaskID != id || item.Domain != "research" || item.Result.Pointer != "s3://b/"+id {
		t.Fatalf("memory item %s %s: %v", kind, body, err)
	}
	items, _, err := b.eng.Inbox(b.ctx, agent, engine.InboxQuery{TaskID: id})
	if err != nil || len(items) != 1 || items[0].PromotedAt == nil {
		t.Fatalf("inbox after promotion: %+v %v", items, err)
	}
	again, err := b.eng.PromoteToMemory(b.ctx, agent, engine.PromoteRequest{TaskID: id})
	if err != nil || !again.AlreadyPromoted || !again.PromotedAt.Equal(*items[0].PromotedAt) {
		t.Fatalf("second promote %+v %v", again, err)
	}
	queued, err := b.eng.Enqueue(b.ctx, agent, engine.EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.PromoteToMemory(b.ctx, agent, engine.PromoteRequest{TaskID: queued.TaskID}); !host.IsCode(err, host.CodeConflict) {
		t.Fatalf("promoting a queued task: %v, want conflict", err)
	}
	if _, err := b.eng.PromoteToMemory(b.ctx, agent, engine.PromoteRequest{TaskID: "T-NOPE"}); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("promoting an unknown task: %v, want not_found", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, c := range []httpsink.Config{{URL: ""}, {URL: "ftp://x/y"}, {URL: "/relative"}, {URL: "http://h/", Headers: map[string]string{"X": "a\r\nb"}}} {
		if _, err := httpsink.New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}
