package sqlite_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/engine"
)

// BenchmarkFill times a queue that only fills: 64 producers enqueue b.N
// tasks and no worker leases (the writer queue's enqueue budget is never
// in force). It reports enqueues/s.
//
//	go test ./host/sqlite -run '^$' -bench Fill -benchtime 20000x
func BenchmarkFill(b *testing.B) {
	eng, _ := benchEngine(b)
	ctx := context.Background()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if _, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "bench", Params: json.RawMessage(`{"n":1}`)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "enqueues/s")
}
