package postgres

import (
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// Two hosts (one with two writers) keep their task counts in shards of their
// own; the sum over shards is exact although a task is queued on one host and
// leased and completed on another.
func TestQueueCountsAcrossHosts(t *testing.T) {
	schema := newSchema(t)
	a := storetest.Setup(t, func(testing.TB) storetest.Store { return openIn(t, schema, Options{}) })
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return openIn(t, schema, Options{Writers: 2}) })
	for i := 0; i < 6; i++ {
		a.Enqueue(t, "work")
	}
	for i := 0; i < 4; i++ {
		b.Complete(t, "w.1", b.LeaseOne(t, "w.1"))
	}
	a.LeaseOne(t, "w.2")
	for _, bd := range []*storetest.Bundle{a, b} {
		qs, err := bd.Engine.Stats(bd.Ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if qs.ByState[host.StateQueued] != 1 || qs.ByState[host.StateLeased] != 1 || qs.ByState[host.StateSucceeded] != 4 || qs.ByType["work"] != 2 {
			t.Fatalf("stats %+v, want 1 queued, 1 leased, 4 succeeded", qs)
		}
	}
	var shards int
	err := a.Store.View(a.Ctx, func(r store.Reader) error {
		return r.(*reader).ss.queryRow(a.Ctx, []any{&shards}, `SELECT count(DISTINCT shard) FROM queue_counts`)
	})
	if err != nil || shards < 2 {
		t.Fatalf("counts in %d shards (%v), want one per writer that wrote", shards, err)
	}
}
