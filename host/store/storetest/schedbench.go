package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// ScheduleLeases is the body of each driver's BenchmarkScheduleLeases: it
// measures the latency of lease calls in task cycles (enqueue → lease →
// complete, workers goroutines) for one phase without schedules, then
// creates schedules every-minute schedules ("* * * * *", all due at the
// same second) and measures another phase of the same length while a firer
// fires them as a gate host does (every 500 ms). Each phase lasts
// ASYNCGATE_BENCH_PHASE (default 65 s, so it spans a minute's fire). It
// reports both phases' lease p50 and p99, their cycle rates, the fired
// tasks and the longest a minute's fires took to enqueue.
func ScheduleLeases(b *testing.B, eng *engine.Engine, schedules, workers int) {
	benchTypes(b, eng, "sched.cycle", "sched.fired")
	phase := 65 * time.Second
	if v := os.Getenv("ASYNCGATE_BENCH_PHASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		phase = d
	}
	ctx := context.Background()
	run := func() (p50, p99 time.Duration, rate float64) {
		var mu sync.Mutex
		var lats []time.Duration
		var cycles atomic.Int64
		stop := time.Now().Add(phase)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				worker := fmt.Sprintf("sched.w%d", w)
				var mine []time.Duration
				for time.Now().Before(stop) {
					if _, err := eng.Enqueue(ctx, benchAgent, engine.EnqueueRequest{TaskType: "sched.cycle", Params: json.RawMessage(`{}`)}); err != nil {
						b.Error(err)
						return
					}
					t0 := time.Now()
					offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: worker, Types: []string{"sched.cycle"}, MaxTasks: 1})
					mine = append(mine, time.Since(t0))
					if err != nil {
						b.Error(err)
						return
					}
					for _, o := range offers {
						if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: worker, LeaseID: o.LeaseID},
							Result: host.Result{Pointer: "inline:eA=="}}); err != nil {
							b.Error(err)
							return
						}
						cycles.Add(1)
					}
				}
				mu.Lock()
				lats = append(lats, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		if len(lats) == 0 {
			b.Fatal("no lease calls")
		}
		return lats[len(lats)/2], lats[len(lats)*99/100], float64(cycles.Load()) / phase.Seconds()
	}
	b.ResetTimer()
	p50a, p99a, rateA := run()

	// The schedules, then the firer, as every gate host runs it.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(schedules); i = next.Add(1) - 1 {
				// Spread over owners: one owns at most host.MaxSchedulesPerOwner.
				owner := benchAgent
				owner.Principal = fmt.Sprint(benchAgent.Principal, ".", i/host.MaxSchedulesPerOwner)
				if _, err := eng.CreateSchedule(ctx, owner, engine.CreateScheduleRequest{Name: fmt.Sprint("s", i), Cron: "* * * * *",
					Template: host.ScheduleTemplate{TaskType: "sched.fired", Params: json.RawMessage(`{}`)}}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	firerDone := make(chan struct{})
	stopFirer := make(chan struct{})
	var fired atomic.Int64
	var longest time.Duration
	go func() {
		defer close(firerDone)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		burstStart, inBurst := time.Time{}, false
		for {
			select {
			case <-stopFirer:
				return
			case <-t.C:
				t0 := time.Now()
				n, err := eng.FireSchedules(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				fired.Add(int64(n))
				switch {
				case n > 0 && !inBurst:
					burstStart, inBurst = t0, true
					fallthrough
				case n > 0:
					longest = max(longest, time.Since(burstStart))
				default:
					inBurst = false
				}
			}
		}
	}()
	p50b, p99b, rateB := run()
	close(stopFirer)
	<-firerDone
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(p50a), "lease-p50-ms-without")
	b.ReportMetric(ms(p99a), "lease-p99-ms-without")
	b.ReportMetric(ms(p50b), "lease-p50-ms-with")
	b.ReportMetric(ms(p99b), "lease-p99-ms-with")
	b.ReportMetric(rateA, "cycles/s-without")
	b.ReportMetric(rateB, "cycles/s-with")
	b.ReportMetric(float64(fired.Load()), "fired-tasks")
	b.ReportMetric(ms(longest), "fire-burst-ms")
}
