package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// A budget allows its hour's messages at once, then one every hour/budget;
// a principal's refusal spends nothing of the tenant's; a negative limit
// never refuses.
func TestEmailBudgetRefills(t *testing.T) {
	var eb emailBudget
	lim := EmailLimit{PerPrincipalPerHour: 4, PerTenantPerHour: 6}
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for i := 0; i < 4; i++ {
		if err := eb.take(lim, "acme", "a", t0); err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
	}
	err := eb.take(lim, "acme", "a", t0)
	if !host.IsCode(err, host.CodeQuotaExceeded) || !strings.Contains(err.Error(), "15m0s") {
		t.Fatalf("the fifth message: %v; want quota_exceeded, next in 15m0s", err)
	}
	if err := eb.take(lim, "acme", "a", t0.Add(14*time.Minute)); !host.IsCode(err, host.CodeQuotaExceeded) {
		t.Fatalf("14 minutes on: %v", err)
	}
	if err := eb.take(lim, "acme", "a", t0.Add(15*time.Minute)); err != nil {
		t.Fatalf("15 minutes on: %v", err)
	}
	// The tenant's budget: 6 - 4 + 1.5 (a quarter hour's refill) - 1 = 2.5
	// left, so b gets two, then the tenant's budget refuses.
	for i := 0; i < 2; i++ {
		if err := eb.take(lim, "acme", "b", t0.Add(15*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	err = eb.take(lim, "acme", "b", t0.Add(15*time.Minute))
	if !host.IsCode(err, host.CodeQuotaExceeded) || !strings.Contains(err.Error(), "per_tenant_per_hour") {
		t.Fatalf("the tenant's seventh: %v", err)
	}
	if err := eb.take(lim, "other", "b", t0.Add(15*time.Minute)); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	none := EmailLimit{PerPrincipalPerHour: -1, PerTenantPerHour: -1}
	for i := 0; i < 5000; i++ {
		if err := eb.take(none, "acme", "a", t0); err != nil {
			t.Fatalf("no limit, message %d: %v", i, err)
		}
	}
}

// The buckets kept are bounded: full ones are dropped past maxBuckets.
func TestEmailBudgetBounded(t *testing.T) {
	var eb emailBudget
	lim := EmailLimit{PerPrincipalPerHour: 10, PerTenantPerHour: -1}
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for i := 0; i < 3*maxBuckets; i++ {
		// Each principal sends once; an hour later its bucket is full again.
		if err := eb.take(lim, "acme", "p"+string(rune('a'+i%26))+time.Duration(i).String(), t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(eb.buckets); n > maxBuckets {
		t.Fatalf("%d buckets kept", n)
	}
}

// A send the store refused gives its message back to both budgets.
func TestEmailBudgetRefund(t *testing.T) {
	var eb emailBudget
	lim := EmailLimit{PerPrincipalPerHour: 2, PerTenantPerHour: 2}
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for i := 0; i < 2; i++ {
		if err := eb.take(lim, "acme", "a", t0); err != nil {
			t.Fatal(err)
		}
	}
	eb.refund(lim, "acme", "a", t0)
	if err := eb.take(lim, "acme", "a", t0); err != nil {
		t.Fatalf("after a refund: %v", err)
	}
	if err := eb.take(lim, "acme", "a", t0); !host.IsCode(err, host.CodeQuotaExceeded) {
		t.Fatalf("the budget spent again: %v", err)
	}
}
