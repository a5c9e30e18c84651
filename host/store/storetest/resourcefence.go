package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// testResourceLeaseUpdateIsFenced checks the store's side of resource lease
// fencing without the engine: an UpdateResourceLease whose fence no longer
// holds (the lease ran out, has not run out, or has ended) is ErrFenced and
// writes nothing; one whose fence holds writes.
func testResourceLeaseUpdateIsFenced(t *testing.T, b *Bundle) {
	now := b.Clock.Now()
	l := &host.ResourceLease{ID: host.NewID(host.PrefixResourceLease), Tenant: "acme", Resource: "FILE:/repo/fence.go",
		Predicate: host.PredicateMutates, Holder: "agent.kee", State: host.ResourceLeaseActive, ManifestID: host.NewID(host.PrefixManifest),
		PriorityAt: now, AcquiredAt: now, ExpiresAt: now.Add(time.Minute), TTLMs: 60_000}
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.InsertResourceLease(b.Ctx, l) }); err != nil {
		t.Fatal(err)
	}
	stored := func() *host.ResourceLease {
		t.Helper()
		var got *host.ResourceLease
		if err := b.Store.View(b.Ctx, func(r store.Reader) error {
			var err error
			got, err = r.GetResourceLease(b.Ctx, "acme", l.ID)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	update := func(state host.ResourceLeaseState, f store.ResourceLeaseFence) error {
		c := *l
		end := now.Add(2 * time.Minute)
		c.State, c.ExpiresAt, c.EndedAt = state, end, &end
		return b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.UpdateResourceLease(b.Ctx, &c, f) })
	}
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	for _, c := range []struct {
		what  string
		fence store.ResourceLeaseFence
	}{
		{"a heartbeat after the expiry", store.ResourceLeaseFence{LiveAt: at(time.Minute)}},
		{"a sweep before the expiry", store.ResourceLeaseFence{ExpiredAt: at(59 * time.Second)}},
	} {
		if err := update(host.ResourceLeaseReleased, c.fence); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("%s: %v, want ErrFenced", c.what, err)
		}
		if got := stored(); got.State != host.ResourceLeaseActive || !got.ExpiresAt.Equal(l.ExpiresAt) || got.EndedAt != nil {
			t.Fatalf("%s wrote the lease: %+v", c.what, got)
		}
	}
	if err := update(host.ResourceLeaseReleased, store.ResourceLeaseFence{LiveAt: at(59 * time.Second)}); err != nil {
		t.Fatalf("an update whose fence holds: %v", err)
	}
	if got := stored(); got.State != host.ResourceLeaseReleased || got.EndedAt == nil {
		t.Fatalf("the update whose fence held wrote %+v", got)
	}
	// An ended lease is fenced whatever the time.
	if err := update(host.ResourceLeaseExpired, store.ResourceLeaseFence{ExpiredAt: at(time.Hour)}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("an update of an ended lease: %v, want ErrFenced", err)
	}
	if got := stored(); got.State != host.ResourceLeaseReleased {
		t.Fatalf("an update of an ended lease wrote %+v", got)
	}
}
