package ui_test

import (
	"testing"
	"time"
)

// waitFor polls cond until it holds. The bound only ends a test that would
// otherwise hang: background work (a ledger verification) on a busy machine
// under -race may take many seconds.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	const bound = 2 * time.Minute
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
