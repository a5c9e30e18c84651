package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store/faultstore"
)

// recChannel is a gate-managed result channel in memory that stores each
// payload under its task, as the file channel does ("rec:<task>/<sha256>",
// an equal payload of the same task is the same object), and whose ack
// releases every object of the pointer's task, as the file channel's ack
// removes the task's folder. onPut, when set, runs after a payload is
// stored, before Put returns: what happens while a slow channel stores.
type recChannel struct {
	mu    sync.Mutex
	data  map[string][]byte
	puts  int
	acked []string
	onPut func()
}

func (c *recChannel) Put(_ context.Context, taskID string, payload []byte) (string, error) {
	sum := sha256.Sum256(payload)
	p := "rec:" + taskID + "/" + hex.EncodeToString(sum[:])
	c.mu.Lock()
	c.data[p] = append([]byte(nil), payload...)
	c.puts++
	hook := c.onPut
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	return p, nil
}

func (c *recChannel) Get(_ context.Context, pointer string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.data[pointer]
	if !ok {
		return nil, host.Errorf(host.CodeNotFound, "no payload %s", pointer)
	}
	return b, nil
}

func (c *recChannel) Ack(_ context.Context, pointer string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	task, _, _ := strings.Cut(pointer, "/")
	for p := range c.data {
		if strings.HasPrefix(p, task+"/") {
			delete(c.data, p)
		}
	}
	c.acked = append(c.acked, pointer)
	return nil
}

func (c *recChannel) Capabilities(context.Context) (host.ChannelCapabilities, error) {
	return host.ChannelCapabilities{}, nil
}

// state is what the channel holds and did: objects held, puts, acks.
func (c *recChannel) state() (held, puts int, acked []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.data), c.puts, append([]string(nil), c.acked...)
}

func (c *recChannel) setOnPut(f func()) { c.mu.Lock(); c.onPut = f; c.mu.Unlock() }

// recPlugins resolves only the channel "rec".
type recPlugins struct{ ch *recChannel }

func (recPlugins) Policy(*host.TaskType) (host.RetryPolicy, error)     { return nil, nil }
func (recPlugins) Validators(*host.TaskType) ([]host.Validator, error) { return nil, nil }
func (p recPlugins) Channel(name string) (host.Channel, error) {
	if name == "rec" {
		return p.ch, nil
	}
	return nil, host.Errorf(host.CodeNotFound, "no channel %s", name)
}

// payloadEngine is an engine over b's store and clock whose task types
// "stored" (dead-lettered at its first failure or lease expiry) and
// "stored.again" (three expiries) store payloads in a recChannel.
func payloadEngine(t *testing.T, b *Bundle) (*engine.Engine, *recChannel) {
	t.Helper()
	for name, expiries := range map[string]int{"stored": 1, "stored.again": 3} {
		tt := host.NewTaskType(name)
		tt.Tenant, tt.DefaultResultChannel, tt.LeaseSeconds, tt.DefaultMaxRetries = "acme", "rec", 60, 0
		tt.RequeueDelaySeconds, tt.MaxLeaseExpiries = 1, expiries
		b.MustPutType(t, tt)
	}
	ch := &recChannel{data: map[string][]byte{}}
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, Plugins: recPlugins{ch},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	return eng, ch
}

// leaseStored queues a task of type typ and leases it for worker.
func (b *Bundle) leaseStored(t *testing.T, eng *engine.Engine, typ, worker string) (string, host.Offer) {
	t.Helper()
	res, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: typ})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: worker, Types: []string{typ}, MaxTasks: 1})
	if err != nil || len(offers) != 1 || offers[0].Task.ID != res.TaskID {
		t.Fatalf("lease: %v %v", offers, err)
	}
	return res.TaskID, offers[0]
}

// testCompleteRefusalStoresNothing: every refusal a completion's own fields
// decide comes before its payload is stored, so a faulty worker's refused
// completions leave nothing in the channel; fields that conflict with the
// payload (a checksum that is not its sha256, one of another algorithm, a
// pointer of the worker's) are refused, not dropped for the gate's own.
func testCompleteRefusalStoresNothing(t *testing.T, b *Bundle) {
	eng, ch := payloadEngine(t, b)
	id, o := b.leaseStored(t, eng, "stored", "w.1")
	payload := []byte(`{"b":"` + strings.Repeat("q", 3000) + `"}`)
	sum := sha256.Sum256(payload)
	good := "sha256:" + hex.EncodeToString(sum[:])
	for _, c := range []struct {
		name string
		res  host.Result
		code string
		says string
	}{
		{"metadata not an object", host.Result{Metadata: json.RawMessage(`[1]`)}, host.CodeBadRequest, "metadata"},
		{"metadata not JSON", host.Result{Metadata: json.RawMessage(`{`)}, host.CodeBadRequest, "metadata"},
		{"summary too long", host.Result{Summary: strings.Repeat("s", 8193)}, host.CodeTooLarge, "summary"},
		{"checksum too long", host.Result{Checksum: "sha256:" + strings.Repeat("a", 200)}, host.CodeTooLarge, "result_checksum"},
		{"checksum of another payload", host.Result{Checksum: "sha256:deadbeef"}, "checksum_mismatch", "sha256:" + good[7:]},
		{"checksum of one byte more", host.Result{Checksum: "sha256:" + strings.Repeat("0", 64)}, "checksum_mismatch", "result_checksum"},
		{"checksum of another algorithm", host.Result{Checksum: "md5:abc"}, host.CodeBadRequest, "md5"},
		{"checksum malformed", host.Result{Checksum: "sha256:xyz"}, host.CodeBadRequest, "result_checksum"},
		{"pointer and payload", host.Result{Pointer: "s3://x"}, host.CodeBadRequest, "result_pointer"},
		{"artifact without a type", host.Result{Artifacts: []host.Artifact{{URL: "x"}}}, host.CodeBadRequest, "artifacts[0].type"},
		{"artifact of a blank type", host.Result{Artifacts: []host.Artifact{{Type: "report"}, {Type: " ", URL: "x"}}}, host.CodeBadRequest, "artifacts[1].type"},
		{"too many artifacts", host.Result{Artifacts: make([]host.Artifact, host.MaxArtifacts+1)}, host.CodeTooLarge, "artifacts"},
		{"bad channel name", host.Result{Channel: "Bad Name"}, host.CodeBadRequest, "result_channel"},
		{"delivery proof not JSON", host.Result{DeliveryProof: json.RawMessage(`{"a":`)}, host.CodeBadRequest, "delivery_proof"},
	} {
		_, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: c.res, Payload: payload})
		WantCode(t, err, c.code)
		if !strings.Contains(err.Error(), c.says) {
			t.Fatalf("%s: the refusal does not say %q: %v", c.name, c.says, err)
		}
		if held, puts, _ := ch.state(); held != 0 || puts != 0 {
			t.Fatalf("%s: refused with %v, yet %d payloads were stored (%d held)", c.name, err, puts, held)
		}
	}
	// The same refusals without a payload name their field too.
	_, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: host.Result{Pointer: "s3://x/" + strings.Repeat("p", 8192)}})
	WantCode(t, err, host.CodeTooLarge)
	if !strings.Contains(err.Error(), "result_pointer is") {
		t.Fatalf("an over-long pointer's refusal does not name it: %v", err)
	}
	_, err = eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: host.Result{Pointer: "s3://x", Artifacts: []host.Artifact{{URL: "x"}}}})
	WantCode(t, err, host.CodeBadRequest)
	if tk := b.Task(t, id); tk.State != host.StateLeased {
		t.Fatalf("refused completions changed the task: %s", tk.State)
	}
	// The checksum the payload has, in either case, is taken; the gate
	// records its own spelling.
	done, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: host.Result{Checksum: strings.ToUpper(good[:7]) + strings.ToUpper(good[7:])}, Payload: payload})
	if err == nil {
		t.Fatalf("an upper-case algorithm name was taken: %+v", done.Task.Result)
	}
	done, err = eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: host.Result{Checksum: "sha256:" + strings.ToUpper(good[7:])}, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	if r := done.Task.Result; r.Checksum != good || r.Channel != "rec" {
		t.Fatalf("recorded %q in %q, want %q in rec", r.Checksum, r.Channel, good)
	}
	if held, puts, acked := ch.state(); held != 1 || puts != 1 || len(acked) != 0 {
		t.Fatalf("after one completion: %d held, %d stored, acked %v", held, puts, acked)
	}
}

// testCompleteLeaseLostWhileStoring: a completion whose lease is lost
// while its payload is stored is refused; the payload no row records is
// released through its channel once the task is finished for good
// (canceled), and kept while the task may be attempted again (its next
// holder may store into the same place) or a result is recorded there.
func testCompleteLeaseLostWhileStoring(t *testing.T, b *Bundle) {
	eng, ch := payloadEngine(t, b)

	// The lease expires while the channel stores: refused, and kept: the
	// task may be attempted again (requeued, or redriven once
	// dead-lettered), and its next holder may store into the same place
	// between the read and the release.
	id, o := b.leaseStored(t, eng, "stored", "w.1")
	ch.setOnPut(func() { b.Clock.Advance(61 * time.Second) })
	_, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Payload: []byte(`{"late":1}`)})
	ch.setOnPut(nil)
	WantCode(t, err, host.CodeLeaseExpired)
	if held, puts, acked := ch.state(); puts != 1 || held != 1 || len(acked) != 0 {
		t.Fatalf("a refused completion's payload while its task may run again: %d stored, %d held, acked %v; want it kept", puts, held, acked)
	}
	if n, err := eng.Sweep(b.Ctx); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if tk := b.Task(t, id); tk.State != host.StateDeadLetter || tk.Result != nil {
		t.Fatalf("the task after its lease expired: %s %+v", tk.State, tk.Result)
	}

	// The lease is lost and the task leased to another worker while the
	// channel stores: refused, and kept, as the new holder may store its
	// own result in the same place (the channel's ack is the task's).
	id, o = b.leaseStored(t, eng, "stored.again", "w.1")
	var next host.Offer
	ch.setOnPut(func() {
		b.Clock.Advance(61 * time.Second)
		if _, err := eng.Sweep(b.Ctx); err != nil {
			t.Error(err)
		}
		b.Clock.Advance(2 * time.Second)
		offers, err := eng.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.2", Types: []string{"stored.again"}, MaxTasks: 1})
		if err != nil || len(offers) != 1 || offers[0].Task.ID != id {
			t.Errorf("lease to w.2: %v %v", offers, err)
			return
		}
		next = offers[0]
	})
	_, err = eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Payload: []byte(`{"same":1}`)})
	ch.setOnPut(nil)
	WantCode(t, err, host.CodeLeaseExpired)
	if _, _, acked := ch.state(); len(acked) != 0 {
		t.Fatalf("a payload stored while the task's next holder may store was released: acked %v", acked)
	}
	// The new holder completes with the same payload: the same object,
	// still there to fetch.
	done, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.2", next), Payload: []byte(`{"same":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := eng.FetchResult(b.Ctx, b.Agent, done.Task.ID)
	if err != nil || string(got.Content) != `{"same":1}` || got.ChecksumValid == nil || !*got.ChecksumValid {
		t.Fatalf("the next holder's result: %+v %v", got, err)
	}

	// The lease is lost and the task canceled while the channel stores:
	// finished for good, so the payload no row records is released.
	id, o = b.leaseStored(t, eng, "stored.again", "w.1")
	ch.setOnPut(func() {
		b.Clock.Advance(61 * time.Second)
		if _, err := eng.Sweep(b.Ctx); err != nil {
			t.Error(err)
		}
		if _, err := eng.Cancel(b.Ctx, b.Agent, id, "not needed"); err != nil {
			t.Error(err)
		}
	})
	_, err = eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Payload: []byte(`{"gone":1}`)})
	ch.setOnPut(nil)
	WantCode(t, err, host.CodeLeaseExpired)
	if tk := b.Task(t, id); tk.State != host.StateCanceled {
		t.Fatalf("the canceled task: %s", tk.State)
	}
	if _, _, acked := ch.state(); len(acked) != 1 || !strings.HasPrefix(acked[0], "rec:"+id+"/") {
		t.Fatalf("a payload stored for a task canceled meanwhile: acked %v; want it released", acked)
	}
}

// testCompletePayloadAmbiguousCommit (RunFaults): a completion with a
// payload whose write fails in the store is answered database_unavailable
// and its payload kept, whether or not the write committed: when it did
// (ambiguous), the task's result is that payload, which must stay readable;
// when it did not, the worker's retry stores to the same place and commits.
func testCompletePayloadAmbiguousCommit(t *testing.T, open Opener, step faultstore.Step) {
	b := Setup(t, open)
	fs := b.Store.(*faultstore.Store)
	eng, ch := payloadEngine(t, b)
	id, o := b.leaseStored(t, eng, "stored", "w.1")
	req := engine.CompleteRequest{WorkerCall: Call("w.1", o), Payload: []byte(`{"kept":true}`)}
	fs.SetPlan(func(op faultstore.Op) faultstore.Fault {
		if op.Step == faultstore.Begin {
			fs.SetPlan(nil)
			return faultstore.Fault{Step: step}
		}
		return faultstore.Fault{}
	})
	_, err := eng.Complete(b.Ctx, req)
	fs.SetPlan(nil)
	if n := fs.Injected(step); n != 1 {
		t.Fatalf("%d faults injected at %s, want 1", n, step)
	}
	WantCode(t, err, host.CodeDatabaseUnavailable)
	if held, puts, acked := ch.state(); puts != 1 || held != 1 || len(acked) != 0 {
		t.Fatalf("a payload whose completion may have committed: %d stored, %d held, acked %v; want it kept", puts, held, acked)
	}
	if _, err := eng.Complete(b.Ctx, req); err != nil {
		t.Fatalf("retry after a fault at %s: %v", step, err)
	}
	got, err := eng.FetchResult(b.Ctx, b.Agent, id)
	if err != nil || string(got.Content) != `{"kept":true}` || got.ChecksumValid == nil || !*got.ChecksumValid {
		t.Fatalf("result after a fault at %s and a retry: %+v %v", step, got, err)
	}
	if tk := b.Task(t, id); tk.State != host.StateSucceeded {
		t.Fatalf("task after a fault at %s and a retry: %s", step, tk.State)
	}
	if _, _, acked := ch.state(); len(acked) != 0 {
		t.Fatalf("acked %v", acked)
	}
}
