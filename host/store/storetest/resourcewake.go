package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// Wake-ups of resource leases (issue 43 item 2): a waiting acquire is granted
// when the lease it waits for is released or expires, and a task stepped
// aside for its resources is offered again when they are released, each by
// its wake-up: the engines that measure them look again on their own only
// after UnwokenPoll, far past wakeBound and the waits' own deadlines, so no
// fallback poll can pass for a wake-up.

// wakeP50 and wakeBound are the median and p99 a wake-up must beat, with
// room for a loaded machine running -race; a waiter nothing woke answers
// after its 20 s wait at the earliest.
const (
	wakeP50   = 250 * time.Millisecond
	wakeBound = 5 * time.Second
)

// UnwokenPoll is the fallback poll (and a stepped-aside task's retry delay)
// of engines that measure wake-ups: longer than any wait they make, so
// only a wake-up (or the expiry a waiter parks until) can answer in time.
const UnwokenPoll = time.Minute

// WakeOnly sets cfg's fallback poll and step-aside delay to UnwokenPoll.
func WakeOnly(cfg engine.Config) engine.Config {
	cfg.FallbackPoll, cfg.ResourceLeases.StepAside = UnwokenPoll, UnwokenPoll
	return cfg
}

// realClockEngine opens a second engine on b's store on the system clock
// (wake-up latency is measured in real time).
func realClockEngine(t *testing.T, b *Bundle, ev *eventLog) *engine.Engine {
	t.Helper()
	return realClockEngineWith(t, b, ev, func(c engine.Config) engine.Config { return c })
}

// wakeEngine is realClockEngine with WakeOnly's polls.
func wakeEngine(t *testing.T, b *Bundle, ev *eventLog) *engine.Engine {
	t.Helper()
	return realClockEngineWith(t, b, ev, WakeOnly)
}

func realClockEngineWith(t *testing.T, b *Bundle, ev *eventLog, set func(engine.Config) engine.Config) *engine.Engine {
	t.Helper()
	cfg := engine.Config{Store: b.Store, ExpiryJitter: -1, MaxWait: 30 * time.Second, MaxLeaseSeconds: 3600}
	if ev != nil {
		cfg.OnEvent = ev.add
	}
	eng, err := engine.New(set(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	return eng
}

// Percentiles returns the p50 and p99 of ds (nearest rank).
func Percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p int) time.Duration { return s[min(len(s)-1, (len(s)*p+99)/100-1)] }
	return at(50), at(99)
}

// WakeOnRelease measures, rounds times, the latency from a release
// answered by holderEng to the grant of an older request that waited for it
// on waiterEng (the same engine, or another host's on the same database).
// waits counts the EvResourceWaiting events of waiterEng.
func WakeOnRelease(t *testing.T, holderEng, waiterEng *engine.Engine, waits func() int, tenant string, rounds int) []time.Duration {
	t.Helper()
	ctx := context.Background()
	var lat []time.Duration
	for i := 0; i < rounds; i++ {
		res := fmt.Sprintf("wake:%d", i%3)
		held, err := holderEng.AcquireResources(ctx, engine.AcquireRequest{Tenant: tenant, Holder: "holder", Intents: intents(res, "MUTATES"), TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		older := held.PriorityAt.Add(-time.Second)
		type out struct {
			res *engine.AcquireResult
			err error
			at  time.Time
		}
		done := make(chan out, 1)
		go func() {
			r, err := waiterEng.AcquireResources(ctx, engine.AcquireRequest{Tenant: tenant, Holder: "waiter", Intents: intents(res, "MUTATES"),
				PriorityAt: &older, Wait: 20 * time.Second, TTL: time.Minute})
			done <- out{r, err, time.Now()}
		}()
		// The waiter parks after its event (and registered before its
		// look, so a release from here on wakes it).
		waitFor(t, "the waiter to park", func() bool { return waits() > i })
		if _, err := holderEng.ReleaseResources(ctx, engine.Actor{Tenant: tenant, Principal: "holder", Role: engine.RoleAgent}, []string{held.Leases[0].ID}); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		o := <-done
		if o.err != nil {
			t.Fatalf("round %d: waiter: %v", i, o.err)
		}
		lat = append(lat, o.at.Sub(released))
		if _, err := waiterEng.ReleaseResources(ctx, engine.Actor{Tenant: tenant, Principal: "waiter", Role: engine.RoleAgent}, []string{o.res.Leases[0].ID}); err != nil {
			t.Fatal(err)
		}
	}
	return lat
}

func checkLatency(t *testing.T, what string, lat []time.Duration) {
	t.Helper()
	p50, p99 := Percentiles(lat)
	t.Logf("%s: %d rounds, p50 %s, p99 %s", what, len(lat), p50.Round(time.Microsecond), p99.Round(time.Microsecond))
	if p50 > wakeP50 || p99 > wakeBound {
		t.Fatalf("%s: p50 %s, p99 %s; want p50 under %s and p99 under %s (the fallback poll is %s)", what, p50, p99, wakeP50, wakeBound, UnwokenPoll)
	}
}

func testRLWakeOnRelease(t *testing.T, b *Bundle, _ *engine.Engine, _ *eventLog) {
	ev := &eventLog{}
	eng := wakeEngine(t, b, ev)
	waits := func() int { return ev.count(engine.EvResourceWaiting) }
	checkLatency(t, "release → waiter granted", WakeOnRelease(t, eng, eng, waits, "acme", 20))
}

func testRLWakeOnExpiry(t *testing.T, b *Bundle, _ *engine.Engine, _ *eventLog) {
	// No sweeper runs: the waiter parks until the holder's expiry, no
	// longer, and is granted just after it.
	eng := wakeEngine(t, b, nil)
	var lat []time.Duration
	for i := 0; i < 5; i++ {
		held, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: "holder", Intents: intents("exp:1", "MUTATES"), TTL: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		older := held.PriorityAt.Add(-time.Second)
		res, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: "waiter", Intents: intents("exp:1", "MUTATES"),
			PriorityAt: &older, Wait: 20 * time.Second, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Leases[0].AcquiredAt.After(held.Leases[0].ExpiresAt) && !res.Leases[0].AcquiredAt.Equal(held.Leases[0].ExpiresAt) {
			t.Fatalf("granted at %s, before the holder's expiry %s", res.Leases[0].AcquiredAt, held.Leases[0].ExpiresAt)
		}
		lat = append(lat, res.Leases[0].AcquiredAt.Sub(held.Leases[0].ExpiresAt))
		if _, err := eng.ReleaseResources(b.Ctx, engine.Actor{Tenant: "acme", Principal: "waiter", Role: engine.RoleAgent}, []string{res.Leases[0].ID}); err != nil {
			t.Fatal(err)
		}
	}
	checkLatency(t, "expiry → waiter granted", lat)
}

// TaskWakeOnRelease measures, rounds times, the latency from an agent's
// release answered by agentEng to the offer of a task that had stepped aside
// for the resource, to a worker long-polling on workerEng. The task type
// "wakeedit" MUTATES res.
func TaskWakeOnRelease(t *testing.T, agentEng, workerEng *engine.Engine, tenant string, rounds int) []time.Duration {
	t.Helper()
	ctx := context.Background()
	const res = "file:/wake/task"
	tt := host.NewTaskType("wakeedit")
	tt.Tenant = tenant
	tt.LeaseSeconds = 60
	tt.ResourceIntents = []host.ResourceIntent{{Resource: res, Predicate: host.PredicateMutates}}
	if _, err := agentEng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	agent := engine.Actor{Tenant: tenant, Principal: "agent.kee", Role: engine.RoleAgent}
	var lat []time.Duration
	for i := 0; i < rounds; i++ {
		held, err := agentEng.AcquireResources(ctx, engine.AcquireRequest{Tenant: tenant, Holder: "agent.kee", Intents: intents(res, "MUTATES"), TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		enq, err := agentEng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "wakeedit", Params: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		type out struct {
			offers []host.Offer
			err    error
			at     time.Time
		}
		// Read before the worker's claim can step the task aside (its
		// available_at then moves past this one's).
		admin := engine.Actor{Tenant: tenant, Role: engine.RoleAdmin}
		first, err := agentEng.GetTask(ctx, admin, enq.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan out, 1)
		go func() {
			// The first claim steps the task aside; the poll parks and is
			// woken by the re-offer.
			os, err := workerEng.Lease(ctx, engine.LeaseRequest{Tenant: tenant, WorkerID: "wakeedit.1", Types: []string{"wakeedit"}, Wait: 20 * time.Second})
			done <- out{os, err, time.Now()}
		}()
		waitFor(t, "the task to step aside", func() bool {
			tk, err := agentEng.GetTask(ctx, admin, enq.TaskID)
			return err == nil && (tk.State == host.StateQueued || tk.State == host.StateScheduled) && tk.AvailableAt.After(first.AvailableAt)
		})
		if _, err := agentEng.ReleaseResources(ctx, agent, []string{held.Leases[0].ID}); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		o := <-done
		if o.err != nil || len(o.offers) != 1 || o.offers[0].Task.ID != enq.TaskID {
			t.Fatalf("round %d: worker got %+v, %v; want task %s", i, o.offers, o.err, enq.TaskID)
		}
		lat = append(lat, o.at.Sub(released))
		if _, err := workerEng.Complete(ctx, engine.CompleteRequest{WorkerCall: Call("wakeedit.1", o.offers[0]), Result: Pointer}); err != nil {
			t.Fatal(err)
		}
	}
	return lat
}

func testRLTaskWakeOnRelease(t *testing.T, b *Bundle, _ *engine.Engine, _ *eventLog) {
	eng := wakeEngine(t, b, nil)
	checkLatency(t, "release → stepped-aside task offered", TaskWakeOnRelease(t, eng, eng, "acme", 5))
}

// testRLWatchResources: a watcher of a resource hears its release, and only
// its own resource's.
func testRLWatchResources(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	a := mustAcquire(t, eng, "holder", time.Minute, "watch:a", "MUTATES")
	other := mustAcquire(t, eng, "holder", time.Minute, "watch:b", "MUTATES")
	ch, stop := eng.WatchResources("acme", []string{"WATCH:a"})
	defer stop()
	if _, err := eng.ReleaseResources(b.Ctx, rlActor("holder"), []string{other.Leases[0].ID}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("woken by the release of another resource")
	default:
	}
	if _, err := eng.ReleaseResources(b.Ctx, rlActor("holder"), []string{a.Leases[0].ID}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the release of the watched resource did not wake the watcher")
	}
}
