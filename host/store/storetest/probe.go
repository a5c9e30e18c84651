package storetest

import (
	"errors"
	"testing"

	"github.com/asyncgate/asyncgate/host"
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

// testRefusedCommit: a store that reports refused commits (CommitHealth)
// reports none while its commits succeed, and an update that fails on its
// own, even with database_unavailable, is no refused commit: one caller's
// error must not turn the host's /readyz 503 (issue 38 item 4).
func testRefusedCommit(t *testing.T, b *Bundle) {
	ch, ok := b.Store.(store.CommitHealth)
	if !ok {
		t.Skipf("%s does not report refused commits", b.Store.Driver())
	}
	b.Enqueue(t, "work")
	own := host.Errorf(host.CodeDatabaseUnavailable, "this update's own failure")
	if err := b.Store.Update(b.Ctx, func(store.Tx) error { return own }); !errors.Is(err, own) {
		t.Fatalf("Update returned %v, want the update's own error", err)
	}
	err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		_, err := tx.GetTask(b.Ctx, "default", "T-missing")
		return err
	})
	if !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("Update reading a missing task returned %v, want not_found", err)
	}
	b.Enqueue(t, "work")
	if at, err := ch.RefusedCommit(); err != nil {
		t.Fatalf("a working store reports a refused commit at %v: %v", at, err)
	}
}
