package store

import (
	"context"
	"slices"
	"testing"

	"github.com/asyncgate/asyncgate/host/store/groupcommit"
)

// The enqueue budget's keys of claims and bulk updates: a type named is
// that type's key; none named, the tenant's own; an empty name is no
// type's (a lease call naming "" must not end or start the whole tenant's
// backlog); no tenant, no key.
func TestBudgetKeysOfClaimsAndBulkUpdates(t *testing.T) {
	acme, work := groupcommit.Key("acme", ""), groupcommit.Key("acme", "work")
	for _, c := range []struct {
		tenant           string
		types            []string
		claimed, bulkFor []string
	}{
		{"acme", nil, []string{acme}, []string{acme}},
		{"acme", []string{"work"}, []string{work}, []string{work}},
		{"acme", []string{""}, []string{}, []string{acme}},
		{"acme", []string{"work", ""}, []string{work}, []string{work}},
		{"", []string{"work"}, nil, nil},
	} {
		if got := ClaimKeys(c.tenant, c.types); !slices.Equal(got, c.claimed) {
			t.Errorf("ClaimKeys(%q, %q) = %q, want %q", c.tenant, c.types, got, c.claimed)
		}
		got, bulk := BulkKeys(BulkUpdate(context.Background(), c.tenant, c.types...))
		if !bulk || !slices.Equal(got, c.bulkFor) {
			t.Errorf("BulkKeys of BulkUpdate(%q, %q) = %q, %v; want %q, true", c.tenant, c.types, got, bulk, c.bulkFor)
		}
	}
	if keys, bulk := BulkKeys(context.Background()); bulk || keys != nil {
		t.Errorf("BulkKeys of an unmarked context = %q, %v", keys, bulk)
	}
}
