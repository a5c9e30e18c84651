package plugin

import (
	"errors"
	"io"
	"log/slog"
	"testing"
)

// TestTransientRetriesGiveUp: a folder version refused for a transient
// cause is tried again retryLimit times in a row, then no more until its
// files change (a start that never finishes is not a busy machine, and
// each try holds the folder's scan for the start's deadline); a refusal
// for what the module is schedules no try at all.
func TestTransientRetriesGiveUp(t *testing.T) {
	r := &Registry{log: slog.New(slog.NewTextHandler(io.Discard, nil)), entries: map[string]*entry{}}
	e := r.entry("slow")
	slow := transientError{errors.New("start instance: module closed with context deadline exceeded")}
	for i := 1; i <= retryLimit; i++ {
		r.refuse(e, RefusalStartTimeout, slow)
		if e.retryAt.IsZero() || e.retries != i {
			t.Fatalf("refusal %d: retry_at %v, tries %d; want a try due", i, e.retryAt, e.retries)
		}
		if e.retryDelay > retryMax {
			t.Fatalf("refusal %d: the wait %v is over %v", i, e.retryDelay, retryMax)
		}
	}
	r.refuse(e, RefusalStartTimeout, slow)
	if !e.retryAt.IsZero() {
		t.Fatalf("after %d transient refusals in a row a try is still due at %v", retryLimit+1, e.retryAt)
	}
	r.refuse(e, RefusalLoad, errors.New("compile: unexpected EOF"))
	if !e.retryAt.IsZero() || e.retries != 0 {
		t.Fatalf("a module refused for what it is: retry_at %v, tries %d", e.retryAt, e.retries)
	}
}

// TestDropInStartTimeoutsHoldReadinessBriefly: a drop-in whose start ran
// out of time is named by Pending (so /readyz is 503) for its first
// pendingDropInTries refusals — a busy machine at boot — and no longer
// after, though its retries go on: a drop-in whose start never ends must
// not keep the gate out of rotation for all of its retries.
func TestDropInStartTimeoutsHoldReadinessBriefly(t *testing.T) {
	r := &Registry{log: slog.New(slog.NewTextHandler(io.Discard, nil)), entries: map[string]*entry{}}
	e := r.entry("slow")
	e.inDir = true
	e.markLoaded()
	slow := transientError{errors.New("start instance: module closed with context deadline exceeded")}
	for i := 1; i <= retryLimit; i++ {
		r.refuse(e, RefusalStartTimeout, slow)
		p := r.Pending()
		held := len(p) == 1 && p[0] == "slow"
		if want := i < pendingDropInTries; held != want {
			t.Fatalf("after refusal %d: Pending() = %v; want it named: %v", i, p, want)
		}
		if e.retryAt.IsZero() {
			t.Fatalf("refusal %d: no try due", i)
		}
	}
}
