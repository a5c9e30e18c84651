package host

import (
	"strings"
	"testing"
)

// TestLeaseIDs: a lease id carries its task's id behind 26 random
// characters, never repeats, and one of the older form (or anything else)
// carries no task.
func TestLeaseIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewLeaseID("T-01M8GME6G9P78S4Y21S82KRJ2A")
		if seen[id] {
			t.Fatalf("lease id %s made twice", id)
		}
		seen[id] = true
		task, ok := LeaseTaskID(id)
		if !ok || task != "T-01M8GME6G9P78S4Y21S82KRJ2A" || !strings.HasPrefix(id, PrefixLease) {
			t.Fatalf("LeaseTaskID(%s) = %q %v", id, task, ok)
		}
	}
	for _, id := range []string{"", "lease-", NewID(PrefixLease), "lease-01M8GME6G9P78S4Y21S82KRJ2A.", "lease-01M8GME6G9P78S4Y21S82KRJ2AxT-1", "lx-01M8GME6G9P78S4Y21S82KRJ2A.T-1", "lease-short.T-1"} {
		if task, ok := LeaseTaskID(id); ok {
			t.Errorf("LeaseTaskID(%q) = %q, want no task", id, task)
		}
	}
	if task, ok := LeaseTaskID("lease-01M8GME6G9P78S4Y21S82KRJ2A.a.b"); !ok || task != "a.b" {
		t.Errorf("a task id with a dot: %q %v", task, ok)
	}
}
