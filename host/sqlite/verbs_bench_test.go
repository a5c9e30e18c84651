package sqlite_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// BenchmarkLeasePaused measures one lease (its release untimed) of a
// worker that names no task type, with 1,000 tasks queued: with no type
// paused, and with another registered type paused (the lease call is then
// narrowed to the types not paused).
func BenchmarkLeasePaused(b *testing.B) {
	for _, paused := range []bool{false, true} {
		b.Run(fmt.Sprintf("paused=%v", paused), func(b *testing.B) {
			eng, _ := benchEngine(b)
			ctx := context.Background()
			other := host.NewTaskType("other")
			other.Tenant = "t"
			if _, err := eng.PutTaskType(ctx, other); err != nil {
				b.Fatal(err)
			}
			fill(b, eng, 1000, 0)
			if paused {
				if _, err := eng.PauseTaskType(ctx, "t", "other", "ops", ""); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: "bench.1"})
				if err != nil || len(offers) != 1 {
					b.Fatalf("lease: %v", err)
				}
				b.StopTimer()
				if _, err := eng.Release(ctx, engine.WorkerCall{Tenant: "t", WorkerID: "bench.1", LeaseID: offers[0].LeaseID}, ""); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkStatsScheduled measures the queue stats of a tenant with 1,000
// ready tasks and 0 or 10,000 scheduled ones: the scheduled count reads the
// tenant's queued tasks (ScheduledCounts), the rest is O(1).
func BenchmarkStatsScheduled(b *testing.B) {
	for _, scheduled := range []int{0, 10_000} {
		b.Run(fmt.Sprintf("scheduled=%d", scheduled), func(b *testing.B) {
			eng, _ := benchEngine(b)
			ctx := context.Background()
			fill(b, eng, 1000, 0)
			fill(b, eng, scheduled, 3600)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				qs, err := eng.Stats(ctx, "t")
				if err != nil || qs.ByState[host.StateScheduled] != int64(scheduled) {
					b.Fatalf("stats: %v %v", qs.ByState, err)
				}
			}
		})
	}
}

// fill enqueues n tasks delayed by delay seconds, concurrently so that
// group commit batches the inserts.
func fill(b *testing.B, eng *engine.Engine, n, delay int) {
	b.Helper()
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(n))
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if _, err := eng.Enqueue(context.Background(), agent, engine.EnqueueRequest{TaskType: "bench", DelaySeconds: delay}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
