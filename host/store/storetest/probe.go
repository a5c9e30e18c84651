package storetest

import (
	"testing"

	"github.com/asyncgate/asyncgate/host/store"
)

// testProbe: what a readiness probe asks of a store answers on every driver
// (issue 38 item 1: the probe's read named a tenant PostgreSQL refused, so
// every PostgreSQL host was "not ready"). Reading the probe tenant's counts
// works and finds none of a real tenant's tasks, and Ping reads and commits.
func testProbe(t *testing.T, b *Bundle) {
	b.Enqueue(t, "work")
	if err := b.Store.Ping(b.Ctx); err != nil {
		t.Fatalf("Ping on a working store: %v", err)
	}
	var qs store.QueueStats
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		qs, err = r.QueueStats(b.Ctx, store.ProbeTenant)
		return err
	}); err != nil {
		t.Fatalf("the probe's read: %v", err)
	}
	for state, n := range qs.ByState {
		if n != 0 {
			t.Fatalf("the probe tenant counts %d %s tasks: %+v", n, state, qs)
		}
	}
	b.Enqueue(t, "work") // a write after the probe's still commits
}
