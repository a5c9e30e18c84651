package httpapi

import (
	"context"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// TestPendingSettlementsGauge: /metrics has
// asyncgate_dependency_settlements_pending, the finished tasks whose
// waiters a cascade left to the drainers, counted gate-wide for the
// operator; a tenant admin's scrape, which sees one tenant, has none of it.
// The bundle's engine is not started, so no drainer takes the rows.
func TestPendingSettlementsGauge(t *testing.T) {
	b := setup(t)
	const series = "asyncgate_dependency_settlements_pending"
	if n, ok := samples(t, b, b.admin)[series]; !ok || n != 0 {
		t.Fatalf("before any cascade: %s = %v (present %v), want 0", series, n, ok)
	}
	now := time.Now()
	ps := []store.PendingSettlement{
		{Tenant: "default", TaskID: "T-a", State: host.StateCanceled, CreatedAt: now},
		{Tenant: "default", TaskID: "T-b", State: host.StateCanceled, CreatedAt: now},
		{Tenant: "acme", TaskID: "T-c", State: host.StateDeadLetter, CreatedAt: now},
	}
	if err := b.st.Update(context.Background(), func(tx store.Tx) error { return tx.AddPendingSettlements(context.Background(), ps) }); err != nil {
		t.Fatal(err)
	}
	if n := samples(t, b, b.admin)[series]; n != 3 {
		t.Fatalf("%s = %v, want 3 (every tenant's)", series, n)
	}
	other, err := auth.CreateKey(context.Background(), b.st, auth.NewKeyRequest{Role: engine.RoleAdmin, Principal: "ops.acme", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := samples(t, b, other.APIKey)[series]; ok {
		t.Fatalf("a tenant admin's scrape has the gate-wide %s = %v", series, n)
	}
}
