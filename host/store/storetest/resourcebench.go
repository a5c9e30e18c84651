package storetest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// ResourceLeasePairs is the body of each driver's BenchmarkResourceLeasePairs:
// holders concurrent holders, each on a resource of its own, run uncontended
// acquire+release pairs on eng until b.N pairs are done. It reports pairs/s
// and the p99 acquire latency.
func ResourceLeasePairs(b *testing.B, eng *engine.Engine, holders int) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	lats := make([][]time.Duration, holders)
	b.ResetTimer()
	start := time.Now()
	for h := 0; h < holders; h++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("holder-%d", h)
			me := engine.Actor{Tenant: "t", Principal: holder, Role: engine.RoleAgent}
			in := []engine.ResourceIntent{{Resource: "FILE:/bench/" + holder, Predicate: host.PredicateMutates}}
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				res, err := eng.AcquireResources(ctx, engine.AcquireRequest{Tenant: "t", Holder: holder, Intents: in})
				lats[h] = append(lats[h], time.Since(t0))
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := eng.ReleaseResources(ctx, me, []string{res.Leases[0].ID}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(b.N)/el.Seconds(), "pairs/s")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99_acquire_ms")
	}
}
