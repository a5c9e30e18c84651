package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// BenchmarkCycle measures full task cycles per second — enqueue (task.assigned)
// → lease → complete (task.completed, both obligations discharged), every step
// a durable commit — on SQLite and on PostgreSQL through one and through three
// engines (gate hosts, each with its own pool and writer) sharing one
// database, with 1 and 8 concurrent workers. Every worker runs whole cycles
// one after another; the hosts' group commit batches what the workers do at
// the same time.
//
//	go test ./host/postgres -run '^$' -bench Cycle -benchtime 2000x
func BenchmarkCycle(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("sqlite/hosts=1/workers=%d", workers), func(b *testing.B) {
			st, err := sqlite.Open(filepath.Join(b.TempDir(), "gate.db"), sqlite.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			runCycles(b, []store.Store{st}, workers)
		})
		for _, hosts := range []int{1, 3} {
			b.Run(fmt.Sprintf("postgres/hosts=%d/workers=%d", hosts, workers), func(b *testing.B) {
				schema := newSchema(b)
				var sts []store.Store
				for i := 0; i < hosts; i++ {
					sts = append(sts, openIn(b, schema, Options{Writers: benchWriters}))
				}
				runCycles(b, sts, workers)
			})
		}
	}
}

var benchWriters, _ = strconv.Atoi(os.Getenv("AG_BENCH_WRITERS"))

func runCycles(b *testing.B, sts []store.Store, workers int) {
	storetest.GCAsGate(b)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var engs []*engine.Engine
	for _, st := range sts {
		e, err := engine.New(engine.Config{Store: st, Logger: quiet, ExpiryJitter: -1})
		if err != nil {
			b.Fatal(err)
		}
		e.Start()
		b.Cleanup(e.Close)
		engs = append(engs, e)
	}
	tt := host.NewTaskType("bench")
	tt.Tenant = "acme"
	if _, err := engs[0].PutTaskType(ctx, tt); err != nil {
		b.Fatal(err)
	}
	agent := engine.Actor{Tenant: "acme", Principal: "agent.bench", Role: engine.RoleAgent}
	params := json.RawMessage(`{"n":1}`)
	// A worker that finds no task (another took the one it queued) goes on
	// with its next cycle instead of long-polling, so the figure measures the
	// store, not the engine's wake-up timing.
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("bench.w%d", w)
			for i := w; done.Load() < int64(b.N); i++ {
				e := engs[i%len(engs)]
				if _, err := e.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "bench", Params: params}); err != nil {
					errs <- err
					return
				}
				offers, err := e.Lease(ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: id, MaxTasks: 1})
				if err != nil {
					errs <- err
					return
				}
				for _, o := range offers {
					_, err := e.Complete(ctx, engine.CompleteRequest{
						WorkerCall: engine.WorkerCall{Tenant: "acme", WorkerID: id, LeaseID: o.LeaseID},
						Result:     host.Result{Channel: "inline", Pointer: "inline:b2s="}})
					if err != nil {
						errs <- err
						return
					}
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(done.Load())/elapsed.Seconds(), "cycles/s")
	var trips, stmts int64
	for _, st := range sts {
		if pg, ok := st.(*Store); ok {
			trips += pg.WriterTrips()
			stmts += pg.WriterStatements()
		}
	}
	if trips > 0 && done.Load() > 0 {
		b.ReportMetric(float64(trips)/float64(done.Load()), "trips/cycle")
		b.ReportMetric(float64(stmts)/float64(done.Load()), "stmts/cycle")
	}
}

// BenchmarkBurnDown queues depth tasks first (64 concurrent enqueuers), then
// times 8 workers each leasing up to 50 and completing them concurrently
// until b.N tasks are done: the rate must not fall as the queue deepens.
//
//	go test ./host/postgres -run '^$' -bench BurnDown -benchtime 2000x
func BenchmarkBurnDown(b *testing.B) {
	for _, depth := range []int{2_000, 20_000} {
		b.Run(fmt.Sprintf("queued=%d", depth), func(b *testing.B) {
			storetest.GCAsGate(b)
			ctx := context.Background()
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			st := openIn(b, newSchema(b), Options{})
			e, err := engine.New(engine.Config{Store: st, Logger: quiet, ExpiryJitter: -1})
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
			n := max(depth, b.N)
			var left atomic.Int64
			left.Store(int64(n))
			var wg sync.WaitGroup
			for p := 0; p < 64; p++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						if _, err := e.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "bench", Params: json.RawMessage(`{"n":1}`)}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			resetStatementStats(b)
			var done atomic.Int64
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < 8; w++ {
				wg.Add(1)
				id := fmt.Sprintf("bench.w%d", w)
				go func() {
					defer wg.Done()
					for done.Load() < int64(b.N) {
						offers, err := e.Lease(ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: id, Types: []string{"bench"}, MaxTasks: 50})
						if err != nil {
							b.Error(err)
							return
						}
						var inner sync.WaitGroup
						for _, o := range offers {
							inner.Add(1)
							go func() {
								defer inner.Done()
								if _, err := e.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "acme", WorkerID: id, LeaseID: o.LeaseID},
									Result: host.Result{Channel: "inline", Pointer: "inline:b2s="}}); err != nil {
									b.Error(err)
									return
								}
								done.Add(1)
							}()
						}
						inner.Wait()
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(done.Load())/time.Since(start).Seconds(), "cycles/s")
		})
	}
}

// resetStatementStats clears pg_stat_statements when AG_BENCH_PGSS_RESET is
// set, so the server's time a statement can be read for the timed part of a
// benchmark alone (docs/performance.md). The extension must be loaded.
func resetStatementStats(b *testing.B) {
	if os.Getenv("AG_BENCH_PGSS_RESET") == "" {
		return
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT public.pg_stat_statements_reset()`); err != nil {
		b.Fatal(err)
	}
}
