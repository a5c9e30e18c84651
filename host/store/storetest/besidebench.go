package storetest

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// EnqueueBesideABacklog is the body of each driver's
// BenchmarkEnqueueBesideABacklog: one tenant, two task types. The "slow"
// type's 32 producers never wait and its 4 workers (leasing 16, each
// completion 2 ms of work) fall behind, so its lease calls find a full
// backlog; the "quick" type's 2 producers enqueue every 10 ms and its 2
// workers keep up. It reports the quick enqueues' p50 and p99 latency
// over b.N of them, and the slow enqueues' p50: the enqueue budget holds
// the slow type's enqueues, and a quick enqueue waits only for the writer.
func EnqueueBesideABacklog(b *testing.B, eng *engine.Engine) {
	benchTypes(b, eng, "slow", "quick")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var quick, slow []time.Duration
	for range 32 {
		wg.Go(func() {
			for ctx.Err() == nil {
				start := time.Now()
				if _, err := eng.Enqueue(ctx, benchAgent, engine.EnqueueRequest{TaskType: "slow", Params: json.RawMessage(`{}`)}); err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				mu.Lock()
				slow = append(slow, time.Since(start))
				mu.Unlock()
			}
		})
	}
	work := func(typ string, d time.Duration) {
		for ctx.Err() == nil {
			offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: "w." + typ, Types: []string{typ}, MaxTasks: 16, Wait: 50 * time.Millisecond})
			if err != nil {
				if ctx.Err() == nil {
					b.Error(err)
				}
				return
			}
			for _, o := range offers {
				time.Sleep(d)
				if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: "w." + typ, LeaseID: o.LeaseID},
					Result: host.Result{Pointer: "inline:eA=="}}); err != nil && ctx.Err() == nil {
					b.Error(err)
					return
				}
			}
		}
	}
	for range 4 {
		wg.Go(func() { work("slow", 2*time.Millisecond) })
	}
	for range 2 {
		wg.Go(func() { work("quick", 0) })
	}
	time.Sleep(2 * time.Second) // the slow type's backlog builds
	b.ResetTimer()
	var left atomic.Int64
	left.Store(int64(b.N))
	var producers sync.WaitGroup
	for range 2 {
		producers.Go(func() {
			for left.Add(-1) >= 0 {
				start := time.Now()
				if _, err := eng.Enqueue(ctx, benchAgent, engine.EnqueueRequest{TaskType: "quick", Params: json.RawMessage(`{}`)}); err != nil {
					b.Error(err)
					return
				}
				d := time.Since(start)
				mu.Lock()
				quick = append(quick, d)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	producers.Wait()
	b.StopTimer()
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	pct := func(ds []time.Duration, p float64) float64 {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(quick, 0.5), "quick_p50_ms")
	b.ReportMetric(pct(quick, 0.99), "quick_p99_ms")
	b.ReportMetric(pct(slow, 0.5), "slow_p50_ms")
}
