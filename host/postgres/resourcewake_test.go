package postgres

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// startWaitHost is a gate host whose long-polls may wait 30 s, counting its
// resource waits.
func startWaitHost(t *testing.T, schema, name string, waits *atomic.Int64) *gateHost {
	t.Helper()
	st := openIn(t, schema, Options{})
	eng, err := engine.New(storetest.WakeOnly(engine.Config{Store: st, ExpiryJitter: -1, SweepInterval: 100 * time.Millisecond, MaxWait: 30 * time.Second,
		MaxLeaseSeconds: 3600, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnEvent: func(ev engine.Event) {
			if ev.Kind == engine.EvResourceWaiting {
				waits.Add(1)
			}
		}}))
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	t.Cleanup(eng.Close)
	return &gateHost{name: name, st: st, eng: eng}
}

// TestResourceWakeAcrossHosts: a release answered by one gate host wakes an
// acquire waiting on another, and a task stepped aside there, through
// LISTEN/NOTIFY: the hosts' fallback polls (storetest.UnwokenPoll) are longer
// than the waits, so only the notice can answer in time. Undo it
// (NotifyResourceEnded a no-op) and the waits end unanswered.
func TestResourceWakeAcrossHosts(t *testing.T) {
	requirePostgres(t)
	schema := newSchema(t)
	var waitsA, waitsB atomic.Int64
	a := startWaitHost(t, schema, "a", &waitsA)
	b := startWaitHost(t, schema, "b", &waitsB)
	lat := storetest.WakeOnRelease(t, a.eng, b.eng, func() int { return int(waitsB.Load()) }, "acme", 20)
	p50, p99 := storetest.Percentiles(lat)
	t.Logf("release on a → waiter on b granted: p50 %s, p99 %s", p50, p99)
	if p50 > 250*time.Millisecond || p99 > 5*time.Second {
		t.Fatalf("across hosts: p50 %s, p99 %s; want under 250 ms and 5 s (the fallback poll is %s)", p50, p99, storetest.UnwokenPoll)
	}
	lat = storetest.TaskWakeOnRelease(t, a.eng, b.eng, "acme", 5)
	p50, p99 = storetest.Percentiles(lat)
	t.Logf("release on a → task stepped aside on b offered: p50 %s, p99 %s", p50, p99)
	if p50 > 250*time.Millisecond || p99 > 5*time.Second {
		t.Fatalf("task across hosts: p50 %s, p99 %s; want under 250 ms and 5 s (the fallback poll is %s)", p50, p99, storetest.UnwokenPoll)
	}
}
