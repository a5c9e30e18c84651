package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// MigrationFencingTokens checks a driver's migration 0023 (fencing tokens)
// on a database that held resource leases before it: each lease gets the
// token its grant would have had (the count of grants of its resource so
// far, in grant order), the resource's counter goes on from there, and a
// counter outlives the lease rows. open opens the same database each call;
// exec runs statements on it directly, with no store open.
func MigrationFencingTokens(t *testing.T, open func(t *testing.T) store.Store, exec func(stmts ...string)) {
	ctx := context.Background()
	grant := func(st store.Store, resource string) *host.ResourceLease {
		t.Helper()
		eng, err := engine.New(engine.Config{Store: st})
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		res, err := eng.AcquireResources(ctx, engine.AcquireRequest{Tenant: "t", Holder: "h-" + resource, Intents: []engine.ResourceIntent{{Resource: resource, Predicate: host.PredicateReads}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Leases[0]
	}
	st := open(t)
	for _, r := range []string{"R:a", "R:b", "R:a", "R:a", "R:b"} {
		grant(st, r)
	}
	st.Close()
	// Back to the schema before 0023: no counters, no token column.
	exec(`DROP TABLE resource_fences`, `ALTER TABLE resource_leases DROP COLUMN fencing_token`, `DELETE FROM schema_migrations WHERE version = 23`)
	st = open(t)
	var got []string
	err := st.View(ctx, func(r store.Reader) error {
		ls, _, err := r.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: "t", Limit: 100})
		for _, l := range ls {
			got = append(got, fmt.Sprintf("%s=%d", l.Resource, l.FencingToken))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "R:a=1 R:b=1 R:a=2 R:a=3 R:b=2" {
		t.Fatalf("tokens after the migration: %v", got)
	}
	if l := grant(st, "R:a"); l.FencingToken != 4 {
		t.Fatalf("first grant of R:a after the migration: token %d, want 4", l.FencingToken)
	}
	st.Close()
	exec(`DELETE FROM resource_leases`)
	st = open(t)
	defer st.Close()
	if a, b := grant(st, "R:a"), grant(st, "R:b"); a.FencingToken != 5 || b.FencingToken != 3 {
		t.Fatalf("grants after a restart with every lease row gone: R:a %d, R:b %d; want 5, 3", a.FencingToken, b.FencingToken)
	}
}
