package storetest

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// memChannel is a gate-managed result channel in memory that records acks
// and can be told to fail them.
type memChannel struct {
	mu    sync.Mutex
	data  map[string][]byte
	acked []string
	fail  bool
	// onAck, when set, runs at each Ack before the payload goes (outside
	// the lock).
	onAck func()
}

func (c *memChannel) Put(_ context.Context, taskID string, payload []byte) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := "mem:" + taskID
	c.data[p] = append([]byte(nil), payload...)
	return p, nil
}

func (c *memChannel) Get(_ context.Context, pointer string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.data[pointer]
	if !ok {
		return nil, host.Errorf(host.CodeNotFound, "no payload %s", pointer)
	}
	return b, nil
}

func (c *memChannel) Ack(_ context.Context, pointer string) error {
	c.mu.Lock()
	hook := c.onAck
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail {
		return errors.New("mem channel is down")
	}
	delete(c.data, pointer)
	c.acked = append(c.acked, pointer)
	return nil
}

func (c *memChannel) Capabilities(context.Context) (host.ChannelCapabilities, error) {
	return host.ChannelCapabilities{}, nil
}

func (c *memChannel) setFail(v bool) { c.mu.Lock(); c.fail = v; c.mu.Unlock() }

func (c *memChannel) held() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.data) }

// memPlugins resolves only the channel "mem".
type memPlugins struct{ ch *memChannel }

func (memPlugins) Policy(*host.TaskType) (host.RetryPolicy, error)     { return nil, nil }
func (memPlugins) Validators(*host.TaskType) ([]host.Validator, error) { return nil, nil }
func (p memPlugins) Channel(name string) (host.Channel, error) {
	if name == "mem" {
		return p.ch, nil
	}
	return nil, host.Errorf(host.CodeNotFound, "no channel %s", name)
}

// retentionEngine is an engine over b's store and clock with the mem channel.
func retentionEngine(t *testing.T, b *Bundle, rc engine.RetentionConfig) (*engine.Engine, *memChannel) {
	ch := &memChannel{data: map[string][]byte{}}
	rc.Interval = -1
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, Plugins: memPlugins{ch}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Delivery: engine.DeliveryConfig{Retention: rc}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	return eng, ch
}

func (b *Bundle) finish(t *testing.T, eng *engine.Engine, typ string, payload string) string {
	t.Helper()
	res, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: typ})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{typ}, MaxTasks: 1})
	if err != nil || len(offers) != 1 {
		t.Fatalf("lease %v %v", offers, err)
	}
	req := engine.CompleteRequest{WorkerCall: Call("w.1", offers[0])}
	switch payload {
	case "fail":
		if _, err := eng.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", offers[0]), Error: "fatal", Retryable: false}); err != nil {
			t.Fatal(err)
		}
		return res.TaskID
	case "inline":
		req.Result = host.Result{Pointer: "inline:" + base64.StdEncoding.EncodeToString([]byte("secret")), Summary: "inline"}
	default:
		req.Result, req.Payload = host.Result{Channel: "mem"}, []byte(payload)
	}
	if _, err := eng.Complete(b.Ctx, req); err != nil {
		t.Fatal(err)
	}
	return res.TaskID
}

// testRetention: on the injected clock, a type's retention_days archives its
// succeeded tasks (payload acked through a managed channel and purged, inline
// pointer purged), dead letters wait for their own retention, a channel that
// fails keeps its task for the next sweep, receipts and inbox items stay and
// the ledger still verifies.
func testRetention(t *testing.T, b *Bundle) {
	short := host.NewTaskType("short")
	short.Tenant, short.DefaultRetentionDays = "acme", 1
	b.MustPutType(t, short)
	eng, ch := retentionEngine(t, b, engine.RetentionConfig{DeadLetterDays: 5})
	stored := b.finish(t, eng, "short", `{"pages":3}`)
	inline := b.finish(t, eng, "short", "inline")
	dead := b.finish(t, eng, "short", "fail")
	long := b.finish(t, eng, "work", `{"long":true}`)
	late := b.finish(t, eng, "short", `{"late":true}`)
	receiptsBefore := len(b.Receipts(t, stored))

	rep, err := eng.RetentionSweep(b.Ctx)
	if err != nil || rep.Archived != 0 {
		t.Fatalf("sweep before any retention ran out: %+v %v", rep, err)
	}
	b.Clock.Advance(24*time.Hour + time.Second)
	ch.mu.Lock()
	ch.fail = true
	ch.mu.Unlock()
	rep, err = eng.RetentionSweep(b.Ctx)
	if err != nil || rep.Archived != 1 || rep.ChannelErrors != 2 {
		t.Fatalf("sweep with the channel down: %+v %v (want the inline task archived, 2 channel errors)", rep, err)
	}
	if tk := b.Task(t, stored); tk.State != host.StateSucceeded || tk.Result.Pointer == "" {
		t.Fatalf("a task whose channel failed to archive moved on: %+v", tk)
	}
	ch.setFail(false)
	rep, err = eng.RetentionSweep(b.Ctx)
	if err != nil || rep.Archived != 2 || rep.Purged != 2 {
		t.Fatalf("sweep: %+v %v", rep, err)
	}
	for _, id := range []string{stored, inline, late} {
		tk := b.Task(t, id)
		if tk.State != host.StateArchived || tk.Result == nil || tk.Result.Pointer != "" || tk.Result.PurgedAt == nil || tk.Result.Checksum == "" && id != inline {
			t.Fatalf("task %s after retention: %+v %+v", id, tk, tk.Result)
		}
	}
	// An archived success keeps the attempt that ended it, which is derived
	// from its row and receipt, not stored, and its timeline keeps the grant.
	for _, id := range []string{stored, inline} {
		ta, err := eng.Attempts(b.Ctx, b.Agent, id)
		if err != nil || len(ta.Attempts) != 1 || ta.Attempts[0].Outcome != host.AttemptSucceeded || ta.Attempts[0].ReceiptID == "" {
			t.Fatalf("attempts of archived task %s: %+v %v", id, ta, err)
		}
		tl, err := eng.Timeline(b.Ctx, b.Agent, id)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, ev := range tl.Events {
			types = append(types, ev.Type)
		}
		if got := strings.Join(types, " "); got != "task.assigned lease.granted task.completed" {
			t.Fatalf("timeline of archived task %s: %s", id, got)
		}
	}
	if ch.held() != 1 || len(ch.acked) != 2 || !strings.HasPrefix(ch.acked[0], "mem:") {
		t.Fatalf("mem channel holds %d payloads, acked %v", ch.held(), ch.acked)
	}
	if tk := b.Task(t, dead); tk.State != host.StateDeadLetter {
		t.Fatalf("a dead letter was archived by its type's retention: %s", tk.State)
	}
	if tk := b.Task(t, long); tk.State != host.StateSucceeded {
		t.Fatalf("a 30-day task was archived after a day: %s", tk.State)
	}
	if n := len(b.Receipts(t, stored)); n != receiptsBefore {
		t.Fatalf("receipts of an archived task: %d, want %d", n, receiptsBefore)
	}
	if items := b.inbox(t, b.Admin, engine.InboxQuery{Recipient: b.Agent.Principal, TaskID: stored}); len(items) != 1 {
		t.Fatalf("inbox items of an archived task: %d", len(items))
	}
	if _, err := eng.FetchResult(b.Ctx, b.Agent, stored); !host.IsCode(err, host.CodeConflict) {
		t.Fatalf("fetching an archived result: %v, want conflict", err)
	}
	b.Clock.Advance(4 * 24 * time.Hour)
	if rep, err = eng.RetentionSweep(b.Ctx); err != nil || rep.Archived != 1 || b.Task(t, dead).State != host.StateArchived {
		t.Fatalf("dead letter retention: %+v %v", rep, err)
	}
	b.Clock.Advance(25 * 24 * time.Hour)
	if rep, err = eng.RetentionSweep(b.Ctx); err != nil || rep.Archived != 1 || b.Task(t, long).State != host.StateArchived {
		t.Fatalf("30-day retention: %+v %v", rep, err)
	}
	if v := b.Verify(t); !v.OK {
		t.Fatalf("ledger after retention: %+v", v)
	}
}

// testRetentionBatches: a sweep does at most Batch × MaxBatches tasks per
// type; the rest wait for the next sweep. Tasks of a type no longer
// registered use the global default.
func testRetentionBatches(t *testing.T, b *Bundle) {
	gone := host.NewTaskType("gone")
	gone.Tenant, gone.DefaultRetentionDays = "acme", 365
	b.MustPutType(t, gone)
	eng, _ := retentionEngine(t, b, engine.RetentionConfig{Batch: 2, MaxBatches: 1, DefaultDays: 3})
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, b.finish(t, eng, "gone", "inline"))
	}
	if err := eng.DeleteTaskType(b.Ctx, "acme", "gone"); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(3*24*time.Hour + time.Second)
	rep, err := eng.RetentionSweep(b.Ctx)
	if err != nil || rep.Archived != 2 {
		t.Fatalf("first bounded sweep: %+v %v", rep, err)
	}
	rep, err = eng.RetentionSweep(b.Ctx)
	if err != nil || rep.Archived != 1 {
		t.Fatalf("second sweep: %+v %v", rep, err)
	}
	for _, id := range ids {
		if tk := b.Task(t, id); tk.State != host.StateArchived {
			t.Fatalf("task %s is %s", id, tk.State)
		}
	}
}

// testRetentionOrphansOldestFirst finishes tasks of two types alternately,
// deletes both types, and sweeps one bounded batch: it must archive the two
// oldest across both types, not the oldest two of one.
func testRetentionOrphansOldestFirst(t *testing.T, b *Bundle) {
	for _, name := range []string{"gone-x", "gone-y"} {
		tt := host.NewTaskType(name)
		tt.Tenant = "acme"
		b.MustPutType(t, tt)
	}
	eng, _ := retentionEngine(t, b, engine.RetentionConfig{Batch: 2, MaxBatches: 1, DefaultDays: 3})
	var ids []string // x, y, x, y: in completion order
	for i := 0; i < 4; i++ {
		ids = append(ids, b.finish(t, eng, []string{"gone-x", "gone-y"}[i%2], "inline"))
		b.Clock.Advance(time.Second)
	}
	for _, name := range []string{"gone-x", "gone-y"} {
		if err := eng.DeleteTaskType(b.Ctx, "acme", name); err != nil {
			t.Fatal(err)
		}
	}
	b.Clock.Advance(3 * 24 * time.Hour)
	rep, err := eng.RetentionSweep(b.Ctx)
	if err != nil || rep.Archived != 2 {
		t.Fatalf("bounded sweep: %+v %v", rep, err)
	}
	for i, id := range ids {
		want := host.StateSucceeded
		if i < 2 {
			want = host.StateArchived
		}
		if tk := b.Task(t, id); tk.State != want {
			t.Errorf("task %d (%s) is %s after one batch of two, want %s", i, id, tk.State, want)
		}
	}
}
