package storetest

import (
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/faultstore"
)

// RunFaults runs the engine's write paths over stores made by open wrapped in
// a faultstore: for each operation and each step a store call can fail at
// (before begin, at commit, after an ambiguous commit), it fails that one
// write, checks the caller hears database_unavailable, that a failure before
// or at commit changed nothing, and that retrying the call once the store is
// healthy ends exactly where one clean call ends (no double write, no lost
// write, the ledger verifies). It also runs the conformance cases (but the
// hammer) with latency on every store call.
func RunFaults(t *testing.T, open Opener) {
	wrap := func(t testing.TB) store.Store { return faultstore.New(open(t), nil) }
	for _, sc := range faultScenarios {
		for _, step := range []faultstore.Step{faultstore.Begin, faultstore.Commit, faultstore.Ambiguous} {
			t.Run(sc.name+"/"+string(step), func(t *testing.T) {
				t.Parallel()
				runFaultScenario(t, wrap, sc, step)
			})
		}
	}
	for _, step := range []faultstore.Step{faultstore.Begin, faultstore.Commit, faultstore.Ambiguous} {
		t.Run("CompletePayload/"+string(step), func(t *testing.T) {
			t.Parallel()
			testCompletePayloadAmbiguousCommit(t, wrap, step)
		})
	}
	t.Run("LeaseAnswerLost", func(t *testing.T) {
		t.Parallel()
		testLeaseAnswerLost(t, Setup(t, wrap))
	})
	t.Run("Latency", func(t *testing.T) {
		// Every store call waits a little: the cases must not depend on
		// calls finishing in any particular time. (The hammer runs on the
		// plain store; with latency on every call it only runs longer.)
		run(t, func(t testing.TB) store.Store {
			return faultstore.New(open(t), func(op faultstore.Op) faultstore.Fault {
				return faultstore.Fault{Latency: time.Duration(op.N%3) * time.Millisecond}
			})
		}, false)
	})
}

// faultScenario is one engine call whose write is failed.
type faultScenario struct {
	name string
	// prepare brings a fresh bundle to the state before the call and returns
	// the task the call is about.
	prepare func(t *testing.T, b *Bundle) (taskID string, call func() error)
	// repeats: a retry is a call of its own that writes again (a second
	// heartbeat), so after it the row version may be one ahead.
	repeats bool
}

const faultWorker = "w.fault"

func leasedAccepted(t *testing.T, b *Bundle) (string, host.Offer) {
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, faultWorker)
	if _, _, err := b.Engine.Accept(b.Ctx, Call(faultWorker, o)); err != nil {
		t.Fatal(err)
	}
	return res.TaskID, o
}

var faultScenarios = []faultScenario{
	{"Enqueue", func(t *testing.T, b *Bundle) (string, func() error) {
		return "", func() error {
			_, err := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", IdempotencyKey: "fault-key"})
			return err
		}
	}, false},
	{"Accept", func(t *testing.T, b *Bundle) (string, func() error) {
		res := b.Enqueue(t, "work")
		o := b.LeaseOne(t, faultWorker)
		return res.TaskID, func() error { _, _, err := b.Engine.Accept(b.Ctx, Call(faultWorker, o)); return err }
	}, false},
	{"Heartbeat", func(t *testing.T, b *Bundle) (string, func() error) {
		id, o := leasedAccepted(t, b)
		return id, func() error {
			_, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call(faultWorker, o)})
			return err
		}
	}, true},
	{"Complete", func(t *testing.T, b *Bundle) (string, func() error) {
		id, o := leasedAccepted(t, b)
		return id, func() error {
			_, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call(faultWorker, o), Result: Pointer})
			return err
		}
	}, false},
	{"FailRetryable", func(t *testing.T, b *Bundle) (string, func() error) {
		id, o := leasedAccepted(t, b)
		return id, func() error {
			_, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call(faultWorker, o), Error: "flaky", Retryable: true})
			return err
		}
	}, false},
	{"FailFatal", func(t *testing.T, b *Bundle) (string, func() error) {
		id, o := leasedAccepted(t, b)
		return id, func() error {
			_, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call(faultWorker, o), Error: "fatal", Retryable: false})
			return err
		}
	}, false},
	{"Release", func(t *testing.T, b *Bundle) (string, func() error) {
		id, o := leasedAccepted(t, b)
		return id, func() error { _, err := b.Engine.Release(b.Ctx, Call(faultWorker, o), "busy"); return err }
	}, false},
	{"CancelQueued", func(t *testing.T, b *Bundle) (string, func() error) {
		res := b.Enqueue(t, "work")
		return res.TaskID, func() error { _, err := b.Engine.Cancel(b.Ctx, b.Agent, res.TaskID, "no longer needed"); return err }
	}, false},
	{"Sweep", func(t *testing.T, b *Bundle) (string, func() error) {
		id, _ := leasedAccepted(t, b)
		b.Clock.Advance(61 * time.Second)
		return id, func() error { _, err := b.Engine.Sweep(b.Ctx); return err }
	}, false},
}

// faultSnapshot is what a scenario's outcome is compared on: everything but
// ids and times.
type faultSnapshot struct {
	Tasks       int
	State       host.TaskState
	Version     int64
	Attempts    int
	LeaseCount  int
	Expiries    int
	Cancel      bool
	Receipts    []host.ReceiptType
	Obligations []host.ReceiptType
	Ledger      int64
}

func snapshot(t *testing.T, b *Bundle, taskID string) faultSnapshot {
	t.Helper()
	var s faultSnapshot
	ts, _, err := b.Engine.ListTasks(b.Ctx, b.Admin, store.TaskFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	s.Tasks = len(ts)
	if taskID == "" && len(ts) == 1 {
		taskID = ts[0].ID
	}
	if taskID != "" {
		tk := b.Task(t, taskID)
		s.State, s.Version, s.Attempts, s.LeaseCount, s.Expiries, s.Cancel = tk.State, tk.Version, tk.Attempts, tk.LeaseCount, tk.LeaseExpiries, tk.CancelRequested
		s.Receipts = b.ReceiptTypes(t, taskID)
	}
	for _, p := range []string{"agent.kee", faultWorker} {
		for _, o := range b.Open(t, p) {
			s.Obligations = append(s.Obligations, o.Type)
		}
	}
	sort.Slice(s.Obligations, func(i, j int) bool { return s.Obligations[i] < s.Obligations[j] })
	s.Ledger = b.Verify(t).Receipts
	return s
}

func runFaultScenario(t *testing.T, open Opener, sc faultScenario, step faultstore.Step) {
	// The outcome of one clean call, on a bundle of its own.
	clean := Setup(t, open)
	id, call := sc.prepare(t, clean)
	if err := call(); err != nil {
		t.Fatalf("clean call: %v", err)
	}
	want := snapshot(t, clean, id)

	b := Setup(t, open)
	fs := b.Store.(*faultstore.Store)
	id, call = sc.prepare(t, b)
	before := snapshot(t, b, id)
	fs.SetPlan(faultstore.Once(faultstore.Fault{Step: step}))
	err := call()
	fs.SetPlan(nil)
	if n := fs.Injected(step); n != 1 {
		t.Fatalf("%d faults injected at %s, want 1", n, step)
	}
	WantCode(t, err, host.CodeDatabaseUnavailable)
	after := snapshot(t, b, id)
	switch step {
	case faultstore.Begin, faultstore.Commit:
		if !reflect.DeepEqual(after, before) {
			t.Fatalf("a write that failed at %s changed the store:\nbefore %+v\nafter  %+v", step, before, after)
		}
	case faultstore.Ambiguous:
		if !reflect.DeepEqual(after, want) {
			t.Fatalf("a write that committed (ambiguous outcome) is not the clean outcome:\ngot  %+v\nwant %+v", after, want)
		}
	}
	// The caller cannot tell what happened: it retries, and must end where one
	// clean call ends.
	if err := call(); err != nil {
		t.Fatalf("retry after a fault at %s: %v", step, err)
	}
	got := snapshot(t, b, id)
	if sc.repeats && step == faultstore.Ambiguous && got.Version == want.Version+1 {
		got.Version = want.Version
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after a fault at %s and a retry:\ngot  %+v\nwant %+v (one clean call)", step, got, want)
	}
}

// testLeaseAnswerLost: a lease whose commit is ambiguous made an offer the
// worker never heard of. It must not be offered again while that lease
// lives, and once it expires it is offered again without using an attempt.
func testLeaseAnswerLost(t *testing.T, b *Bundle) {
	fs := b.Store.(*faultstore.Store)
	res := b.Enqueue(t, "work")
	// The lease call first records the worker (one update), then claims.
	fs.SetPlan(faultstore.Nth(1, faultstore.Fault{Step: faultstore.Ambiguous}))
	_, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.lost", MaxTasks: 1})
	fs.SetPlan(nil)
	if fs.Injected(faultstore.Ambiguous) != 1 {
		t.Fatal("the claim was not faulted")
	}
	WantCode(t, err, host.CodeDatabaseUnavailable)
	tk := b.Task(t, res.TaskID)
	if tk.State != host.StateLeased || tk.LeaseCount != 1 {
		t.Fatalf("after an ambiguous claim: %s, %d leases; want leased once", tk.State, tk.LeaseCount)
	}
	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.retry"}, "a task whose lease answer was lost was offered while that lease lived")
	b.Clock.Advance(60 * time.Second)
	if n, err := b.Engine.Sweep(b.Ctx); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want the lost lease expired", n, err)
	}
	b.Clock.Advance(30 * time.Second)
	o := b.LeaseOne(t, "w.retry")
	if o.Task.ID != res.TaskID || o.Attempt != 1 {
		t.Fatalf("re-lease: task %s attempt %d; want %s attempt 1 (an unheard offer uses no attempt)", o.Task.ID, o.Attempt, res.TaskID)
	}
	b.Complete(t, "w.retry", o)
	if got := fmt.Sprint(b.ReceiptTypes(t, res.TaskID)); got != fmt.Sprint([]host.ReceiptType{host.ReceiptAssigned, host.ReceiptCompleted}) {
		t.Fatalf("receipts %s: an offer that was never accepted leaves no receipt", got)
	}
	b.Verify(t)
}
