package postgres

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// gateHost is one gate host in a test: its own pool, writer, listener and engine.
type gateHost struct {
	name string
	st   *Store
	eng  *engine.Engine
}

func startHost(t *testing.T, schema, name string) *gateHost {
	t.Helper()
	return startHostWith(t, schema, name, Options{})
}

// startHostWith is startHost with the store's options.
func startHostWith(t *testing.T, schema, name string, opts Options) *gateHost {
	t.Helper()
	st := openIn(t, schema, opts)
	eng, err := engine.New(engine.Config{Store: st, ExpiryJitter: -1, SweepInterval: 100 * time.Millisecond,
		MaxWait: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	t.Cleanup(eng.Close)
	return &gateHost{name: name, st: st, eng: eng}
}

// TestMultiHost runs three gate hosts on one database with workers spread
// across them, then kills one host while its workers hold accepted leases.
// Every task must complete exactly once, no task may be leased again unless its
// previous lease expired, nothing may be lost, and the one receipt chain the
// three hosts wrote together must verify.
func TestMultiHost(t *testing.T) {
	const (
		tasks         = 3000
		workersA      = 4 // per host
		leaseSeconds  = 2
		killAfterDone = tasks / 4
	)
	schema := newSchema(t)
	hosts := []*gateHost{startHost(t, schema, "a"), startHost(t, schema, "b"), startHost(t, schema, "c")}
	ctx := context.Background()
	agent := engine.Actor{Tenant: "acme", Principal: "agent.kee", Role: engine.RoleAgent}
	admin := engine.Actor{Tenant: "acme", Principal: "ops", Role: engine.RoleAdmin}
	tt := host.NewTaskType("work")
	tt.Tenant = "acme"
	tt.LeaseSeconds = leaseSeconds
	tt.RequeueDelaySeconds = 0
	tt.MaxLeaseExpiries = 100
	if _, err := hosts[0].eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}

	// Enqueue from all three hosts at once.
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := i; j < tasks; j += len(hosts) {
				if _, err := h.eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, j)),
					IdempotencyKey: fmt.Sprintf("k%d", j)}); err != nil {
					errs <- fmt.Errorf("enqueue on %s: %w", h.name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("enqueued %d tasks through 3 hosts in %v", tasks, time.Since(start))
	start = time.Now()

	var (
		mu         sync.Mutex
		offersOf   = map[string][]host.Offer{} // task -> offers granted, in the order workers saw them
		completed  = map[string]int{}          // task -> successful, non-duplicate completions
		doneCount  atomic.Int64
		dropped    atomic.Int64 // leases the killed host's workers abandoned
		killed     = make(chan struct{})
		killOnce   sync.Once
		allDone    = make(chan struct{})
		finishOnce sync.Once
		victims    sync.WaitGroup
	)
	record := func(o host.Offer) error {
		mu.Lock()
		defer mu.Unlock()
		offersOf[o.Task.ID] = append(offersOf[o.Task.ID], o)
		return nil
	}
	worker := func(h *gateHost, id string, victim bool) {
		defer wg.Done()
		if victim {
			defer victims.Done()
		}
		for {
			select {
			case <-allDone:
				return
			default:
			}
			if victim {
				select {
				case <-killed:
					// The host is about to die: take what it can, accept it and
					// never complete it.
					offers, err := h.eng.Lease(ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: id, MaxTasks: 2})
					if err != nil {
						errs <- fmt.Errorf("%s lease: %w", id, err)
						return
					}
					for _, o := range offers {
						if err := record(o); err != nil {
							errs <- err
							return
						}
						if _, _, err := h.eng.Accept(ctx, engine.WorkerCall{Tenant: "acme", WorkerID: id, LeaseID: o.LeaseID}); err == nil {
							dropped.Add(1)
						}
					}
					return
				default:
				}
			}
			offers, err := h.eng.Lease(ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: id, MaxTasks: 5, Wait: 200 * time.Millisecond})
			if err != nil {
				if victim {
					return // the host is gone
				}
				errs <- fmt.Errorf("%s lease: %w", id, err)
				return
			}
			for _, o := range offers {
				if err := record(o); err != nil {
					errs <- err
					return
				}
				call := engine.WorkerCall{Tenant: "acme", WorkerID: id, LeaseID: o.LeaseID}
				if _, _, err := h.eng.Accept(ctx, call); err != nil {
					if host.IsCode(err, host.CodeLeaseExpired) || victim {
						continue // expired under load (or the host died): the sweeper requeues it
					}
					errs <- fmt.Errorf("%s accept: %w", id, err)
					return
				}
				res, err := h.eng.Complete(ctx, engine.CompleteRequest{WorkerCall: call, Result: host.Result{Channel: "inline", Pointer: "inline:" + base64.StdEncoding.EncodeToString([]byte(o.Task.ID))}})
				if err != nil {
					if host.IsCode(err, host.CodeLeaseExpired) || victim {
						continue
					}
					errs <- fmt.Errorf("%s complete: %w", id, err)
					return
				}
				if res.Duplicate {
					continue
				}
				mu.Lock()
				completed[o.Task.ID]++
				mu.Unlock()
				n := doneCount.Add(1)
				if n == killAfterDone {
					killOnce.Do(func() { close(killed) })
				}
				if n == tasks {
					finishOnce.Do(func() { close(allDone) })
				}
			}
		}
	}
	for i, h := range hosts {
		for w := 0; w < workersA; w++ {
			wg.Add(1)
			if i == 2 {
				victims.Add(1)
			}
			go worker(h, fmt.Sprintf("w.%s%d", h.name, w), i == 2)
		}
	}
	// Kill host c once a quarter of the work is done: its workers stop with
	// their leases held, then the host closes its engine and store.
	select {
	case <-killed:
	case err := <-errs:
		finishOnce.Do(func() { close(allDone) })
		t.Fatal(err)
	case <-time.After(4 * time.Minute):
		finishOnce.Do(func() { close(allDone) })
		t.Fatalf("after 4 minutes only %d of the %d completions that trigger the kill", doneCount.Load(), killAfterDone)
	}
	victimsDone := make(chan struct{})
	go func() { victims.Wait(); close(victimsDone) }()
	select {
	case <-victimsDone:
	case <-time.After(time.Minute):
		finishOnce.Do(func() { close(allDone) })
		t.Fatal("host c's workers did not stop within a minute of the kill")
	}
	hosts[2].eng.Close()
	hosts[2].st.Close()

	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case err := <-errs:
		finishOnce.Do(func() { close(allDone) })
		t.Fatal(err)
	case <-time.After(4 * time.Minute):
		finishOnce.Do(func() { close(allDone) })
		t.Fatalf("after 4 minutes only %d of %d tasks completed", doneCount.Load(), tasks)
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("worked them off in %v", time.Since(start))

	// Every task succeeded exactly once; a task was leased again only after
	// its previous lease expired.
	a := hosts[0]
	var expired int
	cursor := ""
	seen := 0
	for {
		ts, next, err := a.eng.ListTasks(ctx, admin, store.TaskFilter{Cursor: cursor, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			seen++
			if tk.State != host.StateSucceeded {
				t.Errorf("task %s is %s", tk.ID, tk.State)
			}
			if completed[tk.ID] != 1 {
				t.Errorf("task %s completed %d times", tk.ID, completed[tk.ID])
			}
			if tk.LeaseCount != tk.LeaseExpiries+1 {
				t.Errorf("task %s: %d leases but %d expiries: a lease was granted while another was live", tk.ID, tk.LeaseCount, tk.LeaseExpiries)
			}
			if len(offersOf[tk.ID]) != tk.LeaseCount {
				t.Errorf("task %s: workers saw %d offers, the store counted %d leases", tk.ID, len(offersOf[tk.ID]), tk.LeaseCount)
			}
			checkLeaseWindows(t, tk, offersOf[tk.ID])
			expired += tk.LeaseExpiries
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if seen != tasks {
		t.Errorf("listed %d tasks, want %d", seen, tasks)
	}
	if dropped.Load() == 0 {
		t.Error("host c died holding no accepted lease: the test did not exercise expiry")
	}
	if int64(expired) < dropped.Load() {
		t.Errorf("host c died holding %d accepted leases but only %d leases expired", dropped.Load(), expired)
	}
	// No obligation is left open: every assignment and acceptance was discharged.
	for _, p := range []string{"agent.kee"} {
		open, _, err := a.eng.OpenObligations(ctx, admin, store.ObligationFilter{Principal: p, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(open) > 0 {
			t.Errorf("%d open obligations remain for %s, e.g. %+v", len(open), p, open[0])
		}
	}
	rep, err := engine.VerifyLedger(ctx, a.st)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Fatalf("ledger does not verify: %+v", rep)
	}
	// assigned + accepted + completed per task, plus the expiry escalations.
	if rep.Receipts < 3*tasks {
		t.Errorf("ledger holds %d receipts, want at least %d", rep.Receipts, 3*tasks)
	}
	t.Logf("%d tasks, %d receipts, %d leases abandoned by the killed host, %d expiries, batch retries a=%d b=%d",
		tasks, rep.Receipts, dropped.Load(), expired, hosts[0].st.BatchRetries(), hosts[1].st.BatchRetries())
}

// TestNotifyAcrossHosts checks that a task queued through one host wakes the
// listener of another, and that a host does not hear its own notifications.
func TestNotifyAcrossHosts(t *testing.T) {
	_, a, b, ch := listening(t)
	ctx := t.Context()
	enqueue := func(s *Store, tenant string) {
		t.Helper()
		now := time.Now().UTC().Truncate(time.Microsecond)
		err := s.Update(ctx, func(tx store.Tx) error {
			return tx.InsertTask(ctx, &host.Task{ID: host.NewID(host.PrefixTask), Tenant: tenant, Type: "work", CreatedBy: "x", Recipient: "x",
				State: host.StateQueued, Priority: 5, Params: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now, AvailableAt: now})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Own notification first, then one from b: the first thing a hears must be b's.
	enqueue(a, "own")
	enqueue(b, "other")
	select {
	case got := <-ch:
		if got != "other" {
			t.Fatalf("a heard %q first, want %q (its own notifications must be skipped)", got, "other")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no notification within 30 s")
	}
	// A delayed task is not ready: it notifies nobody. A ready one after it does.
	now := time.Now().UTC().Truncate(time.Microsecond)
	err := b.Update(ctx, func(tx store.Tx) error {
		return tx.InsertTask(ctx, &host.Task{ID: host.NewID(host.PrefixTask), Tenant: "later", Type: "work", CreatedBy: "x", Recipient: "x",
			State: host.StateQueued, Priority: 5, Params: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now, AvailableAt: now.Add(time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
	enqueue(b, "ready")
	select {
	case got := <-ch:
		if got != "ready" {
			t.Fatalf("a heard %q, want %q (a delayed task must not notify)", got, "ready")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no notification within 30 s")
	}

	// The listener survives losing its connection.
	if _, err := b.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(60 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		enqueue(b, "again")
		select {
		case got := <-ch:
			if got == "again" {
				return
			}
		case <-tick.C:
		case <-deadline:
			t.Fatal("the listener did not come back within 60 s")
		}
	}
}

// TestWriterSurvivesLostConnection kills the writer's backend; the next batch
// must run again on a new connection instead of failing its callers.
func TestWriterSurvivesLostConnection(t *testing.T) {
	st := openIn(t, newSchema(t), Options{Writers: 1}) // the batch after the kill must be the killed writer's
	ctx := context.Background()
	put := func(name string) error {
		return st.Update(ctx, func(tx store.Tx) error {
			tt := host.NewTaskType(name)
			tt.Tenant = "acme"
			return tx.PutTaskType(ctx, &tt)
		})
	}
	if err := put("one"); err != nil {
		t.Fatal(err)
	}
	st.pidMu.Lock()
	var pids []uint32
	for p := range st.writerPIDs {
		pids = append(pids, p)
	}
	st.pidMu.Unlock()
	if len(pids) == 0 {
		t.Fatal("no writer connection recorded")
	}
	for _, p := range pids {
		if _, err := st.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, int32(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := put("two"); err != nil {
		t.Fatalf("update after the writer's connection was killed: %v", err)
	}
	if st.BatchRetries() == 0 {
		t.Error("the batch was not rerun")
	}
	err := st.View(ctx, func(r store.Reader) error {
		ts, err := r.ListTaskTypes(ctx, "acme")
		if err == nil && len(ts) != 2 {
			err = fmt.Errorf("got %d task types, want 2", len(ts))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHeadContention makes two hosts (three writers) append receipts at
// once, some requests failing after their append: each writer's chain holds
// exactly its committed receipts, nothing waits on another writer, and the
// ledger verifies.
func TestHeadContention(t *testing.T) {
	schema := newSchema(t)
	a, b := openIn(t, schema, Options{}), openIn(t, schema, Options{Writers: 2})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	const per = 300
	for _, s := range []*Store{a, b, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				err := s.Update(ctx, func(tx store.Tx) error {
					r := &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: "acme", Type: host.ReceiptProgress, From: "x", To: "y",
						Parents: []string{}, Body: json.RawMessage(`{}`), CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
					if err := tx.AppendReceipt(ctx, r); err != nil {
						return err
					}
					if i%7 == 0 {
						return errors.New("undo me") // a failing request must give its seq back
					}
					return nil
				})
				if err != nil && err.Error() != "undo me" {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rep, err := engine.VerifyLedger(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(3 * (per - (per+6)/7))
	if !rep.OK || rep.Receipts != want || rep.Chains < 3 {
		t.Fatalf("ledger: %+v, want %d receipts in a chain per writer", rep, want)
	}
}

// checkLeaseWindows checks, by the gates' clock, that no lease of a task was
// granted while an earlier one was live. In this test only the last lease of a
// task completes and every earlier one expired (lease_count ==
// lease_expiries + 1, checked beside it) and nobody heartbeats, so an earlier
// lease was live from its grant (server_time) until lease_expires_at.
func checkLeaseWindows(t *testing.T, tk *host.Task, offers []host.Offer) {
	t.Helper()
	sorted := append([]host.Offer(nil), offers...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ServerTime.Before(sorted[j].ServerTime) })
	for i := 1; i < len(sorted); i++ {
		prev, cur := sorted[i-1], sorted[i]
		if cur.ServerTime.Before(prev.LeaseExpiresAt) {
			t.Errorf("task %s: lease %s granted at %v while lease %s (granted %v) was live until %v",
				tk.ID, cur.LeaseID, cur.ServerTime, prev.LeaseID, prev.ServerTime, prev.LeaseExpiresAt)
		}
	}
}

// A host whose LISTEN connection was lost hears nothing committed while it
// was down; once it listens again it says so (store.NotifyEveryone), so
// its long-polls look at every queue instead of waiting for their next
// poll.
func TestNotifierReportsWhatItMayHaveMissed(t *testing.T) {
	schema, _, b, ch := listening(t)
	ctx := t.Context()
	listenPID := func() (pid int32) {
		if err := b.pool.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%'`, schema).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	waitPID := func(what string, ok func(int32) bool) int32 {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if p := listenPID(); ok(p) {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	old := waitPID("host A never listened", func(p int32) bool { return p != 0 })
	if _, err := b.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, old); err != nil {
		t.Fatal(err)
	}
	waitPID("host A never listened again", func(p int32) bool { return p != 0 && p != old })
	select {
	case got := <-ch:
		if got != store.NotifyEveryone {
			t.Fatalf("first thing heard after the LISTEN connection came back: %q, want store.NotifyEveryone", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing heard after the LISTEN connection came back")
	}
}

// listening opens two hosts on a fresh schema and subscribes the first to
// the notifications, until the test ends, and checks that the first thing
// it hears is store.NotifyEveryone.
func listening(t *testing.T) (schema string, a, b *Store, ch <-chan string) {
	t.Helper()
	schema = newSchema(t)
	a, b = openIn(t, schema, Options{}), openIn(t, schema, Options{})
	ch, err := a.Subscribe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The first word is "look again": what was notified before the LISTEN
	// began was missed, and a consumer may have parked waiters before it.
	select {
	case got := <-ch:
		if got != store.NotifyEveryone {
			t.Fatalf("first thing heard after subscribing: %q, want store.NotifyEveryone", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing heard after subscribing")
	}
	return schema, a, b, ch
}

// TestMultiHostFencingTokens runs three gate hosts on one database. Holders
// spread over the hosts take turns on a few resources at once, each writing
// to a fenced store with its token while it holds the lease: every write must
// be accepted, so each resource's tokens rise strictly in grant order
// whichever host granted them. Stalled holders then sleep past their expiry
// while another host grants the resource to the next holder: the late write
// of each stalled holder is refused by the token check (and its heartbeat,
// on a third host, by the gate). A hammer over the three hosts ends the test,
// and the stored history must show every resource's tokens distinct and in
// grant order.
func TestMultiHostFencingTokens(t *testing.T) {
	schema := newSchema(t)
	hosts := []*gateHost{startHost(t, schema, "a"), startHost(t, schema, "b"), startHost(t, schema, "c")}
	ctx := context.Background()
	acquire := func(h *gateHost, holder, res string, ttl time.Duration) (*host.ResourceLease, error) {
		r, err := h.eng.AcquireResources(ctx, engine.AcquireRequest{Tenant: "acme", Holder: holder, TTL: ttl,
			Intents: []engine.ResourceIntent{{Resource: res, Predicate: host.PredicateMutates}}})
		if err != nil {
			return nil, err
		}
		return r.Leases[0], nil
	}

	// Turns: 3 holders per resource, one on each host, 20 grants each.
	var db storetest.FencedStore
	resources := []string{"F:1", "F:2", "F:3"}
	var wg sync.WaitGroup
	var grants atomic.Int64
	for _, res := range resources {
		for i, h := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				holder := fmt.Sprintf("turn-%s-%d", res, i)
				me := engine.Actor{Tenant: "acme", Principal: holder, Role: engine.RoleAgent}
				deadline := time.Now().Add(2 * time.Minute)
				for n := 0; n < 20; {
					l, err := acquire(h, holder, res, time.Minute)
					if host.IsCode(err, host.CodeResourceConflict) {
						if time.Now().After(deadline) {
							t.Errorf("%s got %d of 20 grants of %s in 2 minutes: a release was lost?", holder, n, res)
							return
						}
						time.Sleep(time.Millisecond)
						continue
					}
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					n++
					grants.Add(1)
					if err := db.Write(res, l.FencingToken, fmt.Sprintf("%d", l.FencingToken)); err != nil {
						t.Errorf("a live holder's write (via host %s) was refused: %v", h.name, err)
					}
					if _, err := hosts[(i+1)%3].eng.ReleaseResources(ctx, me, []string{l.ID}); err != nil {
						t.Errorf("release: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, res := range resources {
		w := db.Writes(res)
		if len(w) != 60 {
			t.Errorf("%s: %d writes accepted, want 60", res, len(w))
		}
		for i := 1; i < len(w); i++ {
			var a, b int64
			fmt.Sscan(w[i-1], &a)
			fmt.Sscan(w[i], &b)
			if b <= a {
				t.Errorf("%s: token %d written after %d", res, b, a)
			}
		}
	}

	// Stalled holders, one resource each, all at once.
	var stale atomic.Int64
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := fmt.Sprintf("S:%d", i)
			stalled, err := acquire(hosts[i%3], "stalls-"+res, res, 200*time.Millisecond)
			if err != nil {
				t.Errorf("acquire: %v", err)
				return
			}
			if err := db.Write(res, stalled.FencingToken, "stalled: early"); err != nil {
				t.Error(err)
				return
			}
			// The holder is paused: the next holder, on another host, gets
			// the resource once the lease ran out by the server clock.
			var next *host.ResourceLease
			deadline := time.Now().Add(30 * time.Second)
			for next == nil {
				next, err = acquire(hosts[(i+1)%3], "next-"+res, res, time.Minute)
				if err != nil && !host.IsCode(err, host.CodeResourceConflict) {
					t.Errorf("acquire: %v", err)
					return
				}
				if time.Now().After(deadline) {
					t.Errorf("%s: the stalled lease never ran out", res)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			if next.FencingToken <= stalled.FencingToken || next.AcquiredAt.Before(stalled.ExpiresAt) {
				t.Errorf("%s: next grant %v (token %d) after the stalled %v (token %d)", res, next, next.FencingToken, stalled, stalled.FencingToken)
			}
			if err := db.Write(res, next.FencingToken, "next"); err != nil {
				t.Error(err)
			}
			if err := db.Write(res, stalled.FencingToken, "stalled: late"); !errors.Is(err, storetest.ErrStaleToken) {
				t.Errorf("%s: the stalled holder's late write: %v, want a stale-token refusal", res, err)
			} else {
				stale.Add(1)
			}
			_, err = hosts[(i+2)%3].eng.HeartbeatResources(ctx, engine.Actor{Tenant: "acme", Principal: "stalls-" + res, Role: engine.RoleAgent}, []string{stalled.ID}, 0)
			if !host.IsCode(err, host.CodeLeaseExpired) {
				t.Errorf("%s: the stalled holder's heartbeat: %v, want lease_expired", res, err)
			}
		}()
	}
	wg.Wait()
	if stale.Load() != 6 {
		t.Fatalf("%d of 6 stalled holders' late writes refused", stale.Load())
	}

	engines := []*engine.Engine{hosts[0].eng, hosts[1].eng, hosts[2].eng}
	st := storetest.HammerResourceLeases(t, engines, 9, 20)
	t.Logf("turns: %d grants; hammer: %+v", grants.Load(), st)
	storetest.CheckResourceLeaseHistory(t, hosts[0].st, "acme")
}
