package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// benchTypes registers the task types the dependency benchmarks use in
// tenant t of eng.
func benchTypes(b *testing.B, eng *engine.Engine, names ...string) {
	b.Helper()
	for _, n := range names {
		tt := host.NewTaskType(n)
		tt.Tenant = "t"
		tt.LeaseSeconds = 600
		if _, err := eng.PutTaskType(context.Background(), tt); err != nil {
			b.Fatal(err)
		}
	}
}

var benchAgent = engine.Actor{Tenant: "t", Principal: "agent.bench", Role: engine.RoleAgent}

// FanIn is the body of each driver's BenchmarkFanIn: each of b.N rounds
// fans out children tasks and queues one merge after all of them
// (all_succeeded); workers complete every child but the last, a worker
// long-polls for the merge, and the clock runs from the moment the last
// child's completion is called to the moment the long-poll returns the
// merge's offer (with every child's outcome). It reports the p50 and p99 of
// that latency over the rounds, and the children's cycles/s.
func FanIn(b *testing.B, eng *engine.Engine, children int) {
	fanIn(b, eng, children, func(ctx context.Context) string {
		ids := make([]string, children)
		var wg sync.WaitGroup
		var next atomic.Int64
		for p := 0; p < 16; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(children); i = next.Add(1) - 1 {
					res, err := eng.Enqueue(ctx, benchAgent, engine.EnqueueRequest{TaskType: "fanin.part", Params: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
					if err != nil {
						b.Error(err)
						return
					}
					ids[i] = res.TaskID
				}
			}()
		}
		wg.Wait()
		merge, err := eng.Enqueue(ctx, benchAgent, engine.EnqueueRequest{TaskType: "fanin.merge", After: ids})
		if err != nil || merge.Status != string(host.StateWaiting) {
			b.Fatalf("merge: %+v %v", merge, err)
		}
		return merge.TaskID
	})
}

// fanIn runs FanIn's rounds; build makes a round's children and merge and
// returns the merge's task id.
func fanIn(b *testing.B, eng *engine.Engine, children int, build func(context.Context) string) {
	benchTypes(b, eng, "fanin.part", "fanin.merge")
	ctx := context.Background()
	var lats []time.Duration
	var childCycles int
	var childTime time.Duration
	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		mergeID := build(ctx)
		var wg sync.WaitGroup
		type got struct {
			at     time.Time
			offers []host.Offer
			err    error
		}
		polled := make(chan got, 1)
		go func() {
			// Parked in a long-poll until the merge is offered; a poll that
			// ends empty (its wait ran out while the children ran) parks again.
			for {
				offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: "merge.1", Types: []string{"fanin.merge"}, Wait: 30 * time.Second})
				if err != nil || len(offers) > 0 {
					polled <- got{time.Now(), offers, err}
					return
				}
			}
		}()
		// Every child but one, by four workers in batches of 50.
		var last host.Offer
		var lastMu sync.Mutex
		var done atomic.Int64
		start := time.Now()
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				worker := fmt.Sprintf("part.%d", w)
				for done.Load() < int64(children) {
					offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: worker, Types: []string{"fanin.part"}, MaxTasks: 50})
					if err != nil {
						b.Error(err)
						return
					}
					if len(offers) == 0 {
						return
					}
					var inner sync.WaitGroup
					for _, o := range offers {
						if done.Add(1) == int64(children) {
							lastMu.Lock()
							last = o // kept back: completed alone, on the clock
							lastMu.Unlock()
							continue
						}
						inner.Add(1)
						go func() {
							defer inner.Done()
							if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: worker, LeaseID: o.LeaseID},
								Result: host.Result{Pointer: "inline:eA==", Summary: "part"}}); err != nil {
								b.Error(err)
							}
						}()
					}
					inner.Wait()
				}
			}()
		}
		wg.Wait()
		childTime += time.Since(start)
		childCycles += children - 1
		if b.Failed() || last.LeaseID == "" {
			b.Fatalf("round %d: the last child was not leased", round)
		}
		t0 := time.Now()
		if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: last.Task.WorkerID, LeaseID: last.LeaseID},
			Result: host.Result{Pointer: "inline:eA==", Summary: "part"}}); err != nil {
			b.Fatal(err)
		}
		g := <-polled
		if g.err != nil || len(g.offers) != 1 || g.offers[0].Task.ID != mergeID || len(g.offers[0].Dependencies) != children {
			b.Fatalf("round %d: merge offer %v (%d offers)", round, g.err, len(g.offers))
		}
		lats = append(lats, g.at.Sub(t0))
		if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: "merge.1", LeaseID: g.offers[0].LeaseID},
			Result: host.Result{Pointer: "inline:eA=="}}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lats[len(lats)/2]), "p50_fanin_ms")
	b.ReportMetric(ms(lats[(len(lats)*99)/100]), "p99_fanin_ms")
	b.ReportMetric(ms(lats[len(lats)-1]), "max_fanin_ms")
	b.ReportMetric(float64(childCycles)/childTime.Seconds(), "child_cycles/s")
}

// DependencyCycles is the body of each driver's BenchmarkDependencyCost:
// b.N whole task cycles (enqueue, lease, complete) by 64 producers and
// workers leasing up to 50 at a time, either plain tasks or (with after)
// in pairs, the second task of each queued after the first, so every pair
// pays for the edge, the wait, the settlement in the first one's
// completion and the outcome in the second one's offer. It reports cycles/s
// (tasks, not pairs).
func DependencyCycles(b *testing.B, eng *engine.Engine, workers int, after bool) {
	benchTypes(b, eng, "dep.cycle")
	ctx := context.Background()
	total := int64(b.N)
	var produced, completed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for p := 0; p < 64; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := produced.Add(1)
				if n > total {
					return
				}
				first, err := eng.Enqueue(ctx, benchAgent, engine.EnqueueRequest{TaskType: "dep.cycle", Params: json.RawMessage(`{"n":1}`)})
				if err != nil {
					b.Error(err)
					return
				}
				if !after {
					continue
				}
				if n = produced.Add(1); n > total {
					// An odd last task: plain, so the total stays b.N.
					continue
				}
				if _, err := eng.Enqueue(ctx, benchAgent, engine.EnqueueRequest{TaskType: "dep.cycle", Params: json.RawMessage(`{"n":2}`), After: []string{first.TaskID}}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		worker := fmt.Sprintf("dep.%d", w)
		go func() {
			defer wg.Done()
			for completed.Load() < total && !b.Failed() {
				offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: worker, Types: []string{"dep.cycle"}, MaxTasks: 50, Wait: 50 * time.Millisecond})
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
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
}
