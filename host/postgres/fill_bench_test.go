package postgres

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// BenchmarkFill times a queue that only fills: 64 producers enqueue b.N
// tasks and no worker leases (the writer queue's enqueue budget is never
// in force). It reports enqueues/s.
//
//	go test ./host/postgres -run '^$' -bench Fill -benchtime 20000x
func BenchmarkFill(b *testing.B) {
	storetest.GCAsGate(b)
	ctx := context.Background()
	st := openIn(b, newSchema(b), Options{})
	e, err := engine.New(engine.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ExpiryJitter: -1})
	if err != nil {
		b.Fatal(err)
	}
	e.Start()
	b.Cleanup(e.Close)
	tt := host.NewTaskType("bench")
	tt.Tenant = "acme"
	if _, err := e.PutTaskType(ctx, tt); err != nil {
		b.Fatal(err)
	}
	agent := engine.Actor{Tenant: "acme", Principal: "agent.bench", Role: engine.RoleAgent}
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if _, err := e.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "bench", Params: json.RawMessage(`{"n":1}`)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "enqueues/s")
}
