package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

func benchEngine(b *testing.B) (*engine.Engine, *sqlite.Store) {
	b.Helper()
	storetest.GCAsGate(b)
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	eng, err := engine.New(engine.Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(eng.Close)
	tt := host.NewTaskType("bench")
	tt.Tenant = "t"
	if _, err := eng.PutTaskType(context.Background(), tt); err != nil {
		b.Fatal(err)
	}
	return eng, st
}

var agent = engine.Actor{Tenant: "t", Principal: "agent.bench", Role: engine.RoleAgent}

// BenchmarkFullCycle measures enqueue → lease → complete with every receipt
// written and every commit durable (synchronous=FULL), with N workers each
// running whole cycles concurrently. It reports cycles/s.
func BenchmarkFullCycle(b *testing.B) {
	for _, workers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			eng, st := benchEngine(b)
			ctx := context.Background()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					worker := fmt.Sprintf("bench.%d", w)
					for next.Add(1) <= int64(b.N) {
						if _, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "bench", Params: json.RawMessage(`{"n":1}`)}); err != nil {
							b.Error(err)
							return
						}
						offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: worker, Types: []string{"bench"}})
						if err != nil || len(offers) != 1 {
							b.Errorf("lease: %v %d", err, len(offers))
							return
						}
						if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: worker, LeaseID: offers[0].LeaseID},
							Result: host.Result{Pointer: "inline:eA=="}}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
			if ws := st.WriterStats(); ws.Batches > 0 {
				b.ReportMetric(float64(ws.Updates)/float64(ws.Batches), "updates/commit")
			}
		})
	}
}

// BenchmarkLeaseDepth measures one lease + release with 1,000 or 1,000,000
// tasks queued: the cost must not grow with the depth of the queue.
func BenchmarkLeaseDepth(b *testing.B) {
	for _, depth := range []int{1_000, 1_000_000} {
		b.Run(fmt.Sprintf("queued=%d", depth), func(b *testing.B) {
			if depth > 1000 && testing.Short() {
				b.Skip("deep queue in -short mode")
			}
			eng, _ := benchEngine(b)
			ctx := context.Background()
			// Fill concurrently so group commit batches the inserts.
			var wg sync.WaitGroup
			var left atomic.Int64
			left.Store(int64(depth))
			for w := 0; w < 256; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						if _, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "bench"}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: "bench.1", Types: []string{"bench"}})
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

// BenchmarkPipeline is the full cycle as a deployment runs it: 64 producers
// enqueue, W workers lease batches of up to 50 and complete each task of a
// batch concurrently (as the worker SDK does with its concurrency), every
// commit durable. It reports completed cycles/s.
func BenchmarkPipeline(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { pipeline(b, workers, false) })
	}
}

// BenchmarkPipelineKeyed is BenchmarkPipeline with 8 workers and every task
// queued under its own idempotency key, as agents queue work: each enqueue
// looks its key up inside the batch before inserting.
func BenchmarkPipelineKeyed(b *testing.B) { pipeline(b, 8, true) }

func pipeline(b *testing.B, workers int, keyed bool) {
	eng, st := benchEngine(b)
	b.ResetTimer()
	start := time.Now()
	runCycles(b, eng, b.N, workers, keyed)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
	if ws := st.WriterStats(); ws.Batches > 0 {
		b.ReportMetric(float64(ws.Updates)/float64(ws.Batches), "updates/commit")
	}
}

// runCycles runs total whole cycles: 64 producers enqueue, workers lease up to
// 50 at a time and complete each.
func runCycles(b *testing.B, eng *engine.Engine, total, workers int, keyed bool) {
	ctx := context.Background()
	var produced, completed atomic.Int64
	var wg sync.WaitGroup
	for p := 0; p < 64; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := produced.Add(1); n <= int64(total); n = produced.Add(1) {
				key := ""
				if keyed {
					key = fmt.Sprintf("k-%d", n)
				}
				if _, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "bench", Params: json.RawMessage(`{"n":1}`), IdempotencyKey: key}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		worker := fmt.Sprintf("bench.%d", w)
		go func() {
			defer wg.Done()
			for completed.Load() < int64(total) {
				offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: worker, Types: []string{"bench"}, MaxTasks: 50, Wait: 50 * time.Millisecond})
				if err != nil {
					b.Error(err)
					return
				}
				var inner sync.WaitGroup
				for _, o := range offers {
					inner.Add(1)
					go func() {
						defer inner.Done()
						if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: worker, LeaseID: o.LeaseID},
							Result: host.Result{Pointer: "inline:eA=="}}); err != nil {
							b.Error(err)
							return
						}
						completed.Add(1)
					}()
				}
				inner.Wait()
			}
		}()
	}
	wg.Wait()
}

// BenchmarkVerifyLedger times gate ledger verify (engine.VerifyLedger) over
// the ledger of b.N × 1,000 whole cycles (two receipts and an obligation
// each), built before the clock starts.
//
//	go test ./host/sqlite -run '^$' -bench VerifyLedger -benchtime 50x
func BenchmarkVerifyLedger(b *testing.B) {
	eng, st := benchEngine(b)
	runCycles(b, eng, b.N*1000, 8, false)
	b.ResetTimer()
	start := time.Now()
	rep, err := engine.VerifyLedger(context.Background(), st)
	if err != nil || !rep.OK {
		b.Fatalf("verify: %+v, %v", rep, err)
	}
	b.ReportMetric(float64(rep.Receipts)/time.Since(start).Seconds(), "receipts/s")
}

// BenchmarkEnqueueBesideABacklog: enqueues of a type whose workers keep up,
// beside another type's backlog in the same tenant
// (storetest.EnqueueBesideABacklog).
func BenchmarkEnqueueBesideABacklog(b *testing.B) {
	eng, _ := benchEngine(b)
	storetest.EnqueueBesideABacklog(b, eng)
}
