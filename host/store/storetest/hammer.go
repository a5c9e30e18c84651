package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// testHammer runs producers, workers that complete, fail, release, heartbeat
// or abandon their leases, a canceler, a sweeper and a clock that jumps
// forward, all at once; then it checks the invariants from the ledger, whose
// order is commit order.
func testHammer(t *testing.T, b *Bundle) {
	const tasks = 300
	tt := host.NewTaskType("hammer")
	tt.Tenant, tt.LeaseSeconds, tt.RequeueDelaySeconds, tt.MaxLeaseExpiries, tt.DefaultMaxRetries = "acme", 20, 1, 1000, 2
	b.MustPutType(t, tt)
	ctx, cancel := context.WithTimeout(b.Ctx, 20*time.Second)
	defer cancel()

	var ids sync.Map
	var wg sync.WaitGroup
	var stop atomic.Bool
	var violations atomic.Int64
	report := func(format string, args ...any) {
		violations.Add(1)
		t.Errorf(format, args...)
	}
	// Producers.
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < tasks/2; i++ {
				res, err := b.Engine.Enqueue(ctx, b.Agent, engine.EnqueueRequest{TaskType: "hammer", Priority: 1 + rand.IntN(10)})
				if err != nil {
					report("enqueue: %v", err)
					return
				}
				ids.Store(res.TaskID, true)
			}
		}()
	}
	// Clock and sweeper.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			b.Clock.Advance(time.Duration(rand.IntN(4000)) * time.Millisecond)
			if _, err := b.Engine.Sweep(ctx); err != nil && ctx.Err() == nil {
				report("sweep: %v", err)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	// Canceler.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			ids.Range(func(k, _ any) bool {
				if rand.IntN(40) == 0 {
					if _, err := b.Engine.Cancel(ctx, b.Agent, k.(string), "hammer"); err != nil && !host.IsCode(err, host.CodeConflict) && ctx.Err() == nil {
						report("cancel: %v", err)
					}
				}
				return rand.IntN(10) != 0
			})
			time.Sleep(5 * time.Millisecond)
		}
	}()
	// Workers.
	okCode := func(err error) bool {
		return err == nil || host.IsCode(err, host.CodeLeaseExpired) || ctx.Err() != nil
	}
	for w := 0; w < 6; w++ {
		wg.Add(1)
		worker := fmt.Sprintf("hammer.%d", w)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				offers, err := b.Engine.Lease(ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: worker, Types: []string{"hammer"}, MaxTasks: 1 + rand.IntN(3)})
				if err != nil {
					if ctx.Err() == nil {
						report("lease: %v", err)
					}
					return
				}
				if len(offers) == 0 {
					time.Sleep(time.Millisecond)
				}
				for _, o := range offers {
					call := engine.WorkerCall{Tenant: "acme", WorkerID: worker, LeaseID: o.LeaseID}
					expiry := o.LeaseExpiresAt
					if _, _, err := b.Engine.Accept(ctx, call); !okCode(err) {
						report("accept: %v", err)
					}
					if rand.IntN(4) == 0 {
						hb, err := b.Engine.Heartbeat(ctx, engine.HeartbeatRequest{WorkerCall: call})
						if !okCode(err) {
							report("heartbeat: %v", err)
						}
						if err == nil {
							expiry = hb.LeaseExpiresAt
						}
					}
					before := b.Clock.Now()
					switch r := rand.IntN(20); {
					case r < 10:
						res, err := b.Engine.Complete(ctx, engine.CompleteRequest{WorkerCall: call, Result: Pointer})
						if !okCode(err) {
							report("complete: %v", err)
						}
						if err == nil {
							if !before.Before(expiry) {
								report("completion accepted after expiry: %s at %v, expiry %v", o.LeaseID, before, expiry)
							}
							if rc, _, err := b.Engine.GetReceipt(ctx, b.Admin, res.ReceiptID); err == nil && !rc.CreatedAt.Before(expiry) {
								report("completion receipt at %v after lease expiry %v", rc.CreatedAt, expiry)
							}
						}
					case r < 14:
						if _, err := b.Engine.Fail(ctx, engine.FailRequest{WorkerCall: call, Error: "flaky", Retryable: r != 13}); !okCode(err) {
							report("fail: %v", err)
						}
					case r < 16:
						if _, err := b.Engine.Release(ctx, call, "hammer"); !okCode(err) {
							report("release: %v", err)
						}
					default:
						// Abandon: the lease expires.
					}
				}
			}
		}()
	}
	// Run until every task is finished or time is up.
	for ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		qs, err := b.Engine.Stats(ctx, "acme")
		if err == nil && qs.ByState[host.StateQueued]+qs.ByState[host.StateLeased] == 0 && countIDs(&ids) == tasks {
			break
		}
	}
	stop.Store(true)
	cancel()
	wg.Wait()
	if violations.Load() > 0 {
		return
	}
	checkInvariants(t, b, &ids)
}

func countIDs(m *sync.Map) int {
	n := 0
	m.Range(func(_, _ any) bool { n++; return true })
	return n
}

// checkInvariants reads back every task and its receipts.
func checkInvariants(t *testing.T, b *Bundle, ids *sync.Map) {
	t.Helper()
	b.Verify(t)
	finished := 0
	ids.Range(func(k, _ any) bool {
		id := k.(string)
		tk := b.Task(t, id)
		if !tk.State.Valid() {
			t.Errorf("task %s in unknown state %q", id, tk.State)
		}
		if tk.Attempts > tk.MaxRetries+1 {
			t.Errorf("task %s used %d attempts, max retries %d", id, tk.Attempts, tk.MaxRetries)
		}
		rs := b.Receipts(t, id)
		// Never two live (accepted) leases: in ledger order, a task's accepted
		// receipt is always terminated before the next one appears.
		open := ""
		completions := 0
		for _, r := range rs {
			switch r.Type {
			case host.ReceiptAccepted:
				if open != "" {
					term := terminatorOf(t, b, open)
					if term == "" || seqOf(rs, term) > r.Seq {
						t.Errorf("task %s: lease accepted (%s) while accepted receipt %s was still live", id, r.ID, open)
					}
				}
				open = r.ID
			case host.ReceiptCompleted:
				completions++
			}
			if open != "" && terminatorOf(t, b, open) == r.ID {
				open = ""
			}
		}
		if (tk.State == host.StateSucceeded) != (completions == 1) || completions > 1 {
			t.Errorf("task %s is %s with %d completions", id, tk.State, completions)
		}
		assignOpen := terminatorOf(t, b, tk.AssignReceipt) == ""
		switch {
		case tk.State.Terminal():
			finished++
			if assignOpen {
				t.Errorf("task %s is %s but its assignment %s is still open", id, tk.State, tk.AssignReceipt)
			}
			obs, _, err := b.Engine.OpenObligations(b.Ctx, b.Admin, store.ObligationFilter{Principal: tk.Recipient, Limit: 500})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range obs {
				if o.TaskID == id {
					t.Errorf("finished task %s has open obligation %s (%s)", id, o.ReceiptID, o.Type)
				}
			}
		default:
			if !assignOpen {
				t.Errorf("task %s is %s but its assignment was terminated", id, tk.State)
			}
		}
		return true
	})
	if finished == 0 {
		t.Errorf("no task finished: the hammer did not exercise the engine")
	}
	t.Logf("hammer: %d tasks, %d finished", countIDs(ids), finished)
}

func terminatorOf(t *testing.T, b *Bundle, id string) string {
	var term string
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		term, err = r.Terminator(b.Ctx, "acme", id)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return term
}

func seqOf(rs []*host.Receipt, id string) int64 {
	for _, r := range rs {
		if r.ID == id {
			return r.Seq
		}
	}
	return 1 << 62
}
