package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// CascadeCancel measures the cancel of a root with 20,020 waiters (20
// waiters of the root, 1,000 of each of them), once with the default
// settle budget and once with none (the whole cascade in the cancel's
// transaction, as before pending settlements). It reports the cancel's
// own time (bounded by store.DefaultTimeout, as a request's store calls
// are: cancel-failed 1 when it gave up), the time until no task waits
// (drained-ms), and the longest enqueue of a plain task that another
// caller made meanwhile (max-enqueue-ms). One round per budget; run with
// -benchtime 1x. Under -short (the smoke run of every benchmark) each
// waiter of the root has 100 waiters, 2,020 in all.
func CascadeCancel(b *testing.B, open Opener) {
	mids, leaves := 20, 1000
	if testing.Short() {
		leaves = 100
	}
	for _, budget := range []int{engine.DefaultSettleBudget, -1} {
		name := fmt.Sprintf("budget=%d", budget)
		if budget < 0 {
			name = "budget=off"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				bu := Setup(b, open)
				eng := cascadeEngine(b, bu, budget)
				eng.Start()
				root := bu.Enqueue(b, "work").TaskID
				var ids []string
				for range mids {
					ids = append(ids, bu.Enqueue(b, "other", after("", root)).TaskID)
				}
				var wg sync.WaitGroup
				for _, m := range ids {
					for range 4 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range leaves / 4 {
								if _, err := bu.Engine.Enqueue(bu.Ctx, bu.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{m}}); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
				}
				wg.Wait()
				if b.Failed() {
					return
				}
				waiting := func() int64 {
					qs, err := bu.Engine.Stats(bu.Ctx, "acme")
					if err != nil {
						b.Fatal(err)
					}
					return qs.ByState[host.StateWaiting]
				}
				if n := waiting(); n != int64(mids*leaves+mids) {
					b.Fatalf("%d waiting, want %d", n, mids*leaves+mids)
				}
				stop := make(chan struct{})
				var maxEnq time.Duration
				var side sync.WaitGroup
				side.Add(1)
				go func() {
					defer side.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						t0 := time.Now()
						if _, err := bu.Engine.Enqueue(bu.Ctx, bu.Agent, engine.EnqueueRequest{TaskType: "work"}); err != nil {
							b.Error(err)
							return
						}
						maxEnq = max(maxEnq, time.Since(t0))
					}
				}()
				b.ResetTimer()
				t0 := time.Now()
				_, err := eng.Cancel(store.WithTimeout(bu.Ctx, store.DefaultTimeout), bu.Agent, root, "stop the tree")
				cancelTook := time.Since(t0)
				failed := 0.0
				if err != nil {
					failed = 1
					b.Logf("cancel failed after %v: %v", cancelTook, err)
				}
				var drained time.Duration
				if err == nil {
					for waiting() != 0 {
						if time.Since(t0) > 5*time.Minute {
							b.Fatal("not drained after 5 minutes")
						}
						time.Sleep(time.Millisecond)
					}
					drained = time.Since(t0)
				}
				b.StopTimer()
				close(stop)
				side.Wait()
				b.ReportMetric(float64(cancelTook.Milliseconds()), "cancel-ms")
				b.ReportMetric(failed, "cancel-failed")
				b.ReportMetric(float64(drained.Milliseconds()), "drained-ms")
				b.ReportMetric(float64(maxEnq.Milliseconds()), "max-enqueue-ms")
			}
		})
	}
}
