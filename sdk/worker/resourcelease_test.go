package worker_test

import (
	"context"
	"errors"
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
