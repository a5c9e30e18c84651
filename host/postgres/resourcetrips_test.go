package postgres

import (
	"context"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// TestResourceLeasePairRoundTrips counts the writers' round trips to the
// server of an uncontended acquire+release pair, one holder, nothing waiting:
// the figure the pairs/s of BenchmarkResourceLeasePairs follows on a machine
// where the server's answers, not its work, bound a pair. An acquire takes
// the locks, reads its view (the holder's leases, the resource's leases,
// its waiters and the holder's quota row) in one pipeline, inserts, and
// commits; a release reads the lease, locks, reads it again, updates, and
// commits, its quota refund, audit entry, re-offer of stepped-aside tasks
// and notice riding in the COMMIT's round trip.
func TestResourceLeasePairRoundTrips(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1})
	eng, err := engine.New(engine.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	ctx := context.Background()
	me := engine.Actor{Tenant: "t", Principal: "h", Role: engine.RoleAgent}
	in := []engine.ResourceIntent{{Resource: "FILE:/trips", Predicate: host.PredicateMutates}}
	pair := func() {
		res, err := eng.AcquireResources(ctx, engine.AcquireRequest{Tenant: "t", Holder: "h", Intents: in})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eng.ReleaseResources(ctx, me, []string{res.Leases[0].ID}); err != nil {
			t.Fatal(err)
		}
	}
	pair() // the first pair creates the quota and fence rows
	const pairs = 50
	trips, stmts := st.WriterTrips(), st.WriterStatements()
	for i := 0; i < pairs; i++ {
		pair()
	}
	perTrips := float64(st.WriterTrips()-trips) / pairs
	perStmts := float64(st.WriterStatements()-stmts) / pairs
	t.Logf("an acquire+release pair: %.1f round trips, %.1f statements", perTrips, perStmts)
	// 4 for the acquire and 5 for the release; 14 before the acquire's
	// reads went in one pipeline and the release's re-offer and refund
	// into the COMMIT's trip (12 before wake-ups and fairness).
	if perTrips > 9 {
		t.Fatalf("an acquire+release pair took %.1f round trips; want at most 9", perTrips)
	}
}
