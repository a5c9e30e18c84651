package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// TestHolderKeepsLeasesThenReleases holds a manifest over several TTLs: the
// holder's heartbeats keep it (another holder is refused throughout), and
// Release cancels the context and frees the resource.
func TestHolderKeepsLeasesThenReleases(t *testing.T) {
	t.Parallel()
	g := sharedGate(t)
	c := worker.NewClient(g.URL, g.Agent)
	other := worker.NewClient(g.URL, g.Worker)
	ctx := context.Background()
	// A TTL of 2 s leaves each heartbeat 1.3 s of slack on a busy machine.
	const ttl = 2 * time.Second
	h, err := c.Hold(ctx, worker.AcquireRequest{TTL: ttl,
		Intents: []worker.ResourceIntent{{Resource: "FILE:/sdk/holder.go", Predicate: worker.Mutates}}})
	if err != nil {
		t.Fatal(err)
	}
	first := h.Leases()[0]
	// Held past two TTLs: only heartbeats, one after the first expiry among
	// them, can have kept it.
	eventually(t, "the lease to be extended past two TTLs", func() bool {
		l, err := c.GetResourceLease(ctx, first.ID)
		return err == nil && l.State == "active" && l.ExpiresAt.Sub(first.AcquiredAt) > 2*ttl
	})
	if h.Context().Err() != nil {
		t.Fatalf("holder context ended: %v", context.Cause(h.Context()))
	}
	_, err = other.AcquireResources(ctx, worker.AcquireRequest{Intents: []worker.ResourceIntent{{Resource: "file:/sdk/holder.go", Predicate: worker.Reads}}})
	if !worker.IsResourceConflict(err) {
		t.Fatalf("another holder's acquire: %v, want a resource conflict", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h.Context().Err() == nil {
		t.Fatal("Release left the holder's context live")
	}
	m, err := other.AcquireResources(ctx, worker.AcquireRequest{Intents: []worker.ResourceIntent{{Resource: "FILE:/sdk/holder.go", Predicate: worker.Mutates}}})
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	other.ReleaseResources(ctx, []string{m.Leases[0].ID})
}

// TestHolderCancelsWhenLost: an operator releases the holder's lease; the
// next heartbeat is refused and the holder's context is cancelled with
// ErrLeaseLost as its cause.
func TestHolderCancelsWhenLost(t *testing.T) {
	t.Parallel()
	g := sharedGate(t)
	c := worker.NewClient(g.URL, g.Agent)
	ctx := context.Background()
	h, err := c.Hold(ctx, worker.AcquireRequest{TTL: 3 * time.Second,
		Intents: []worker.ResourceIntent{{Resource: "FILE:/sdk/lost.go", Predicate: worker.Mutates}}})
	if err != nil {
		t.Fatal(err)
	}
	if code := g.call("POST", "/v1/resource-leases/release", g.Admin, map[string]any{"lease_ids": h.IDs()}, nil); code != 200 {
		t.Fatalf("admin release: %d", code)
	}
	select {
	case <-h.Context().Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the holder's context outlived its lease")
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, worker.ErrLeaseLost) {
		t.Fatalf("cause = %v, want ErrLeaseLost", cause)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("release of a lost lease (idempotent): %v", err)
	}
}

// TestResourceFencingTokens: every grant carries a fencing token, larger for
// each later grant of the resource (Holder.FencingToken reads it); another
// key sees who holds the resource without taking it; a refused heartbeat
// carries the gate's server time; and a task whose intents name the
// resource is offered with its own resource lease and a larger token still.
func TestResourceFencingTokens(t *testing.T) {
	t.Parallel()
	g := sharedGate(t)
	agent := worker.NewClient(g.URL, g.Agent)
	w := worker.NewClient(g.URL, g.Worker)
	ctx := context.Background()
	// Names of this run's own: the shared gate outlives a -count run.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	res, taskType := "FILE:/sdk/fenced-"+run+".go", "fenced-"+run
	h, err := agent.Hold(ctx, worker.AcquireRequest{TTL: 10 * time.Second, Intents: []worker.ResourceIntent{{Resource: res, Predicate: worker.Mutates}}})
	if err != nil {
		t.Fatal(err)
	}
	first := h.FencingToken(res)
	if first < 1 || first != h.Leases()[0].FencingToken {
		t.Fatalf("first token %d, lease %+v", first, h.Leases()[0])
	}
	held, err := w.ResourceHolders(ctx, "file:/sdk/fenced-"+run+".go")
	if err != nil || len(held.Leases) != 1 || held.Leases[0].ID != h.IDs()[0] || held.Leases[0].FencingToken != first {
		t.Fatalf("holders: %+v, %v", held, err)
	}
	if still, err := w.AwaitResourceFree(ctx, res, worker.Reads, 50*time.Millisecond); err != nil || len(still.Leases) != 1 {
		t.Fatalf("a wait that ran out: %+v, %v", still, err)
	}
	freed := make(chan error, 1)
	go func() {
		free, err := w.AwaitResourceFree(ctx, res, "", 20*time.Second)
		if err == nil && len(free.Leases) != 0 {
			err = fmt.Errorf("still held: %+v", free.Leases)
		}
		freed <- err
	}()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-freed; err != nil {
		t.Fatalf("wait for the release: %v", err)
	}
	if _, err := w.AwaitResourceFree(ctx, res, "OWNS", time.Second); !isCode(err, "bad_request") {
		t.Fatalf("a bad predicate: %v", err)
	}
	_, err = agent.HeartbeatResources(ctx, h.IDs())
	var ae *worker.APIError
	if !errors.As(err, &ae) || ae.Code != "lease_expired" || ae.ServerTime.IsZero() {
		t.Fatalf("heartbeat of a released lease: %v (%+v), want lease_expired with the server time", err, ae)
	}
	g.putType(taskType, 60, map[string]any{"resource_intents": []map[string]string{{"resource": res, "predicate": "MUTATES"}}})
	id := g.enqueue(taskType, map[string]any{}, nil)
	offers, err := w.Lease(ctx, worker.LeaseRequest{TaskTypes: []string{taskType}, WaitSeconds: 10})
	if err != nil || len(offers) != 1 || offers[0].Task.ID != id {
		t.Fatalf("lease: %+v, %v", offers, err)
	}
	if rl := offers[0].ResourceLeases; len(rl) != 1 || rl[0].Resource != res || rl[0].TaskID != id || rl[0].FencingToken <= first {
		t.Fatalf("the offer's resource leases %+v: want one on %s with a token above %d", rl, res, first)
	}
	if tok := offers[0].Task.FencingToken(res); tok != offers[0].ResourceLeases[0].FencingToken {
		t.Fatalf("Task.FencingToken = %d, the offer's lease has %d", tok, offers[0].ResourceLeases[0].FencingToken)
	}
	if err := w.Release(ctx, offers[0].LeaseID, id, "done looking"); err != nil {
		t.Fatal(err)
	}
}

func isCode(err error, code string) bool {
	var ae *worker.APIError
	return errors.As(err, &ae) && ae.Code == code
}
