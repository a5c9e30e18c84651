package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
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
	// Generous: the run ends as soon as every task is finished; the deadline
	// only bounds a run that would otherwise hang.
	const runFor = 3 * time.Minute
	ctx, cancel := context.WithTimeout(b.Ctx, runFor)
	defer cancel()

	var ids sync.Map
	book := newLeaseBook()
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
					book.granted(o)
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
							book.extended(o.LeaseID, hb.LeaseExpiresAt)
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
							book.ended(o.LeaseID, res.Task.UpdatedAt)
							if !before.Before(expiry) {
								report("completion accepted after expiry: %s at %v, expiry %v", o.LeaseID, before, expiry)
							}
							if rc, _, err := b.Engine.GetReceipt(ctx, b.Admin, res.ReceiptID); err == nil && !rc.CreatedAt.Before(expiry) {
								report("completion receipt at %v after lease expiry %v", rc.CreatedAt, expiry)
							}
						}
					case r < 14:
						fr, err := b.Engine.Fail(ctx, engine.FailRequest{WorkerCall: call, Error: "flaky", Retryable: r != 13})
						if !okCode(err) {
							report("fail: %v", err)
						}
						if err == nil {
							book.ended(o.LeaseID, fr.Task.UpdatedAt)
						}
					case r < 16:
						tk, err := b.Engine.Release(ctx, call, "hammer")
						// not_found: the lease expired and a later lease of
						// its task replaced it.
						if !okCode(err) && !host.IsCode(err, host.CodeNotFound) {
							report("release: %v", err)
						}
						if err == nil && tk != nil {
							book.released(o.LeaseID, tk.UpdatedAt)
						}
					default:
						// Abandon: the lease expires.
					}
				}
			}
		}()
	}
	// Run until every task is finished or time is up.
	var left store.QueueStats
	for ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		qs, err := b.Engine.Stats(ctx, "acme")
		if err == nil {
			left = qs
			if qs.ByState[host.StateQueued]+qs.ByState[host.StateScheduled]+qs.ByState[host.StateLeased] == 0 && countIDs(&ids) == tasks {
				break
			}
		}
	}
	timedOut := ctx.Err() != nil
	stop.Store(true)
	cancel()
	wg.Wait()
	if timedOut {
		t.Errorf("after %v, %d of %d tasks queued, %d still queued, %d scheduled and %d leased", runFor, countIDs(&ids), tasks,
			left.ByState[host.StateQueued], left.ByState[host.StateScheduled], left.ByState[host.StateLeased])
	}
	if violations.Load() > 0 || timedOut {
		return
	}
	checkInvariants(t, b, &ids)
	checkLeases(t, b, &ids, book)
}

// leaseBook records, per task, every lease the workers were granted: when it
// was granted and when it ended by the server clock (the time of the call that
// ended it, or its last expiry), and how many leases a release ended.
type leaseBook struct {
	mu       sync.Mutex
	byLease  map[string]*leaseWindow
	byTask   map[string][]*leaseWindow
	releases map[string]int
}

type leaseWindow struct {
	id            string
	grantedAt     time.Time
	expiresAt     time.Time
	endedAt       *time.Time // set when a worker call ended it
	grantedAgain  bool
	grantedTaskID string
}

func newLeaseBook() *leaseBook {
	return &leaseBook{byLease: map[string]*leaseWindow{}, byTask: map[string][]*leaseWindow{}, releases: map[string]int{}}
}

func (lb *leaseBook) granted(o host.Offer) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if w, dup := lb.byLease[o.LeaseID]; dup {
		w.grantedAgain = true
		return
	}
	w := &leaseWindow{id: o.LeaseID, grantedAt: o.ServerTime, expiresAt: o.LeaseExpiresAt, grantedTaskID: o.Task.ID}
	lb.byLease[o.LeaseID] = w
	lb.byTask[o.Task.ID] = append(lb.byTask[o.Task.ID], w)
}

func (lb *leaseBook) extended(leaseID string, to time.Time) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if w := lb.byLease[leaseID]; w != nil && to.After(w.expiresAt) {
		w.expiresAt = to
	}
}

func (lb *leaseBook) ended(leaseID string, at time.Time) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if w := lb.byLease[leaseID]; w != nil {
		w.endedAt = &at
	}
}

func (lb *leaseBook) released(leaseID string, at time.Time) {
	lb.ended(leaseID, at)
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if w := lb.byLease[leaseID]; w != nil {
		lb.releases[w.grantedTaskID]++
	}
}

// end is when the lease stopped being live: the call that ended it, or its
// (last extended) expiry, whichever came first.
func (w *leaseWindow) end() time.Time {
	if w.endedAt != nil && w.endedAt.Before(w.expiresAt) {
		return *w.endedAt
	}
	return w.expiresAt
}

// checkLeases checks that no task was offered while an earlier lease of it was
// live, and that every lease granted is accounted for by exactly one way a
// lease ends: lease_count == lease_expiries + attempts (failures) + releases +
// 1 for the lease that completed. (A cancel during a lease ends it through one
// of these too: the worker's fail or release, or the sweeper's expiry.)
func checkLeases(t *testing.T, b *Bundle, ids *sync.Map, lb *leaseBook) {
	t.Helper()
	lb.mu.Lock()
	defer lb.mu.Unlock()
	leases := 0
	ids.Range(func(k, _ any) bool {
		id := k.(string)
		tk := b.Task(t, id)
		ws := lb.byTask[id]
		leases += len(ws)
		if len(ws) != tk.LeaseCount {
			t.Errorf("task %s: workers were granted %d leases, the store counted %d", id, len(ws), tk.LeaseCount)
		}
		succeeded := 0
		if tk.State == host.StateSucceeded {
			succeeded = 1
		}
		if want := tk.LeaseExpiries + tk.Attempts + lb.releases[id] + succeeded; tk.LeaseCount != want {
			t.Errorf("task %s (%s): lease_count %d != lease_expiries %d + attempts %d + releases %d + %d completed: a lease ended uncounted or was granted while another was live",
				id, tk.State, tk.LeaseCount, tk.LeaseExpiries, tk.Attempts, lb.releases[id], succeeded)
		}
		// In grant order (ties: the one that ended first), each lease was
		// granted no earlier than the previous one ended.
		sort.SliceStable(ws, func(i, j int) bool {
			if !ws[i].grantedAt.Equal(ws[j].grantedAt) {
				return ws[i].grantedAt.Before(ws[j].grantedAt)
			}
			return ws[i].end().Before(ws[j].end())
		})
		for i := 1; i < len(ws); i++ {
			prev, cur := ws[i-1], ws[i]
			if cur.grantedAt.Before(prev.end()) {
				t.Errorf("task %s: lease %s granted at %v while lease %s (granted %v) was live until %v",
					id, cur.id, cur.grantedAt, prev.id, prev.grantedAt, prev.end())
			}
		}
		for _, w := range ws {
			if w.grantedAgain {
				t.Errorf("task %s: lease id %s was offered twice", id, w.id)
			}
		}
		return true
	})
	if leases == 0 {
		t.Error("no lease was granted: the hammer did not exercise leasing")
	}
	t.Logf("hammer: %d leases checked for overlap", leases)
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
					t.Errorf("finished task %s has open obligation %s (%s); its receipts:", id, o.ReceiptID, o.Type)
					for _, r := range rs {
						t.Errorf("  seq %d %s %s lease %s chain %d/%d parents %v terminator %q body %s", r.Seq, r.ID, r.Type, r.LeaseID, r.ChainID, r.ChainSeq, r.Parents, terminatorOf(t, b, r.ID), r.Body)
					}
				}
			}
		default:
			if !assignOpen {
				t.Errorf("task %s is %s but its assignment was terminated", id, tk.State)
			}
		}
		return true
	})
	if n := countIDs(ids); finished != n {
		t.Errorf("%d of %d tasks finished: every task must end (succeeded, canceled or dead letter)", finished, n)
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
