package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Fencing tokens and the issue 43 defects: one case each, on every driver.

// FencedStore is a protected system as a lock-service user builds one: it
// remembers the highest fencing token it accepted per resource and refuses
// a write that carries a lower one. It is what makes a token useful: a
// holder that stalled past its expiry cannot write after the next holder did.
type FencedStore struct {
	mu     sync.Mutex
	last   map[string]int64
	writes map[string][]string
}

// ErrStaleToken is FencedStore.Write's refusal of an older holder's write.
var ErrStaleToken = errors.New("fencing token older than one already seen")

// Write records value on resource if token is at least the highest token
// seen there, and refuses it with ErrStaleToken otherwise.
func (f *FencedStore) Write(resource string, token int64, value string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last, f.writes = map[string]int64{}, map[string][]string{}
	}
	if token < f.last[resource] {
		return fmt.Errorf("%s: token %d < %d: %w", resource, token, f.last[resource], ErrStaleToken)
	}
	f.last[resource] = token
	f.writes[resource] = append(f.writes[resource], value)
	return nil
}

// Writes returns the values written to resource, in order.
func (f *FencedStore) Writes(resource string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.writes[resource]...)
}

// testRLFencingTokens: every grant of a resource gets a token above every
// earlier grant's of that resource (READS grants too, and a task's), counted
// per resource and per tenant; heartbeats and restarts of the holder keep it.
func testRLFencingTokens(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	a := rlActor("a")
	var seen []int64
	for i := 0; i < 3; i++ {
		l := mustAcquire(t, eng, "a", 0, "T:1", "MUTATES").Leases[0]
		seen = append(seen, l.FencingToken)
		if _, err := eng.ReleaseResources(b.Ctx, a, []string{l.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if seen[0] < 1 || seen[1] <= seen[0] || seen[2] <= seen[1] {
		t.Fatalf("tokens of successive grants of one resource = %v, want strictly increasing from 1", seen)
	}
	// Another resource has a counter of its own; READS grants each get one.
	r1 := mustAcquire(t, eng, "a", 0, "T:2", "READS").Leases[0]
	r2 := mustAcquire(t, eng, "b", 0, "T:2", "READS").Leases[0]
	if r1.FencingToken != 1 || r2.FencingToken != 2 {
		t.Fatalf("tokens of T:2 = %d, %d, want 1, 2 (a counter per resource)", r1.FencingToken, r2.FencingToken)
	}
	// A manifest's leases each carry their own resource's token.
	m := mustAcquire(t, eng, "c", 0, "T:1", "MUTATES", "T:3", "MUTATES")
	if m.Leases[0].Resource != "T:1" || m.Leases[0].FencingToken <= seen[2] || m.Leases[1].FencingToken != 1 {
		t.Fatalf("manifest tokens = %+v", m.Leases)
	}
	// Another tenant's grants of the same name do not move this one's.
	other, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "globex", Holder: "a", Intents: intents("T:1", "MUTATES")})
	if err != nil || other.Leases[0].FencingToken != 1 {
		t.Fatalf("another tenant's first grant of T:1 = %+v, %v; want token 1", other, err)
	}
	// The token is the grant's: a heartbeat, a DIE_RESTART and VERIFY_ALL
	// keep it, and every read answers it.
	c := rlActor("c")
	hb, err := eng.HeartbeatResources(b.Ctx, c, []string{m.Leases[0].ID}, 0)
	if err != nil || hb.Leases[0].FencingToken != m.Leases[0].FencingToken {
		t.Fatalf("heartbeat = %+v, %v; want the grant's token %d", hb, err, m.Leases[0].FencingToken)
	}
	if _, err := eng.DieRestart(b.Ctx, c); err != nil {
		t.Fatal(err)
	}
	v, err := eng.VerifyResources(b.Ctx, c, engine.VerifyRequest{IDs: []string{m.Leases[0].ID}})
	if err != nil || v.Leases[0].FencingToken != m.Leases[0].FencingToken {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	got, _, err := eng.GetResourceLease(b.Ctx, c, m.Leases[0].ID)
	if err != nil || got.FencingToken != m.Leases[0].FencingToken {
		t.Fatalf("get = %+v, %v", got, err)
	}
	// An expired lease's token is not handed out again.
	b.Clock.Advance(time.Hour)
	if _, err := eng.SweepResourceLeases(b.Ctx); err != nil {
		t.Fatal(err)
	}
	next := mustAcquire(t, eng, "d", 0, "T:1", "MUTATES").Leases[0]
	if next.FencingToken != m.Leases[0].FencingToken+1 {
		t.Fatalf("grant after an expiry: token %d, want %d", next.FencingToken, m.Leases[0].FencingToken+1)
	}
}

// testRLStalledHolderFenced is the case fencing tokens exist for: a holder
// stalls past its expiry (a GC pause, SIGSTOP), another holder is granted
// the resource and writes, and the stalled holder's late write is refused by
// the protected system's token check. The stalled holder's heartbeat is
// refused by the gate too.
func testRLStalledHolderFenced(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	var db FencedStore
	first := mustAcquire(t, eng, "stalls", 10*time.Second, "DB:orders", "MUTATES").Leases[0]
	if err := db.Write("DB:orders", first.FencingToken, "stalls: early"); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(11 * time.Second) // the holder is paused past its expiry
	second := mustAcquire(t, eng, "next", 10*time.Second, "DB:orders", "MUTATES").Leases[0]
	if second.FencingToken <= first.FencingToken {
		t.Fatalf("the next holder's token %d is not above the stalled holder's %d", second.FencingToken, first.FencingToken)
	}
	if err := db.Write("DB:orders", second.FencingToken, "next"); err != nil {
		t.Fatal(err)
	}
	// The stalled holder wakes up and writes as if it still held the lease.
	if err := db.Write("DB:orders", first.FencingToken, "stalls: late"); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("the stalled holder's late write: %v, want ErrStaleToken", err)
	}
	if got := db.Writes("DB:orders"); strings.Join(got, ",") != "stalls: early,next" {
		t.Fatalf("writes = %q", got)
	}
	_, err := eng.HeartbeatResources(b.Ctx, rlActor("stalls"), []string{first.ID}, 0)
	WantCode(t, err, host.CodeLeaseExpired)
}

// testRLPriorityBound: a holder's wait-die timestamp is bound while it holds
// live leases. Without the binding two holders could each wait for the
// other (issue 43): A holds R1 with priority 10 and B holds R2 with 20; A
// asks for R2 claiming priority 5 (older than B: waits) and B asks for R1
// claiming priority 1 (older than A: waits).
func testRLPriorityBound(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	base := b.Clock.Now()
	// Priorities in the past, within the longest wait (30 s by default):
	// at(30) is now.
	at := func(s int) *time.Time { p := base.Add(time.Duration(s-30) * time.Second); return &p }
	acq := func(holder string, prio *time.Time, pairs ...string) (*engine.AcquireResult, error) {
		return eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: holder, Intents: intents(pairs...), PriorityAt: prio})
	}
	ra, err := acq("A", at(10), "P:1", "MUTATES")
	if err != nil {
		t.Fatal(err)
	}
	rb, err := acq("B", at(20), "P:2", "MUTATES")
	if err != nil {
		t.Fatal(err)
	}
	// A claims an older priority than the one its lease holds: refused.
	_, err = acq("A", at(5), "P:2", "MUTATES")
	WantCode(t, err, host.CodeConflict)
	if host.ErrorServerTime(err).IsZero() || !strings.Contains(host.ErrorDetail(err), "bound") {
		t.Fatalf("refusal %v: want the bound priority named, with the server time", err)
	}
	// B likewise.
	_, err = acq("B", at(1), "P:1", "MUTATES")
	WantCode(t, err, host.CodeConflict)
	// Naming none, each runs with its bound priority: A (10) is older than B
	// (20) and may wait for P:2; B is younger than A and dies at once for P:1.
	_, err = acq("A", nil, "P:2", "MUTATES")
	wantConflict(t, err, rb.Leases[0].ID, true)
	var ce *engine.ResourceConflictError
	if errors.As(err, &ce); !ce.PriorityAt.Equal(*at(10)) {
		t.Fatalf("A ran with priority %s, want its bound %s", ce.PriorityAt, *at(10))
	}
	_, err = acq("B", nil, "P:1", "MUTATES")
	wantConflict(t, err, ra.Leases[0].ID, false)
	// A younger priority is the holder giving up seniority: accepted.
	if _, err := acq("A", at(30), "P:3", "READS"); err != nil {
		t.Fatalf("a younger priority: %v", err)
	}
	// A holder that asks again for a resource it holds never waits on itself.
	_, err = acq("A", nil, "P:1", "MUTATES")
	wantConflict(t, err, ra.Leases[0].ID, false)
	// Once its leases end the binding goes: any priority again.
	if _, err := eng.ReleaseResources(b.Ctx, rlActor("B"), []string{rb.Leases[0].ID}); err != nil {
		t.Fatal(err)
	}
	if res, err := acq("B", at(1), "P:4", "MUTATES"); err != nil || !res.PriorityAt.Equal(*at(1)) {
		t.Fatalf("a holder with no live lease names a priority: %+v, %v", res, err)
	}
}

// testRLPriorityFloor: a holder that holds nothing has no bound priority
// yet, so a priority_at older than the request's start less the longest wait
// (Config.MaxWait, 30 s here) runs as that floor, and one from the future as
// now: a requester naming 1970 no longer jumps a waiter that has waited
// longer than any call may wait. A holder's bound priority is unaffected.
func testRLPriorityFloor(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	now := b.Clock.Now()
	floor := now.Add(-30 * time.Second)
	// A task stepped aside for F:1 45 s ago and still waits for it.
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		return tx.PutResourceWaiter(b.Ctx, host.ResourceWaiter{Tenant: "acme", Resource: "F:1", WaiterID: "T-senior", TaskID: "T-senior",
			Predicate: host.PredicateMutates, PriorityAt: now.Add(-45 * time.Second), ExpiresAt: now.Add(time.Minute)})
	}); err != nil {
		t.Fatal(err)
	}
	acq := func(holder string, prio time.Time, res string) (*engine.AcquireResult, error) {
		return eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: holder, Intents: intents(res, "MUTATES"), TTL: 5 * time.Minute, PriorityAt: &prio})
	}
	// 1970 runs as the floor, younger than the task: refused behind it.
	_, err := acq("ancient", time.Unix(0, 0), "F:1")
	var ce *engine.ResourceConflictError
	if !errors.As(err, &ce) || ce.Ahead == nil || ce.Ahead.TaskID != "T-senior" || !ce.PriorityAt.Equal(floor) {
		t.Fatalf("priority_at 1970 behind a task waiting 45 s: %v (%+v); want refused behind T-senior, run with %s", err, ce, floor)
	}
	// On a free resource it is granted with the floor, not 1970.
	got, err := acq("ancient", time.Unix(0, 0), "F:2")
	if err != nil || !got.PriorityAt.Equal(floor) || !got.Leases[0].PriorityAt.Equal(floor) {
		t.Fatalf("priority_at 1970 on a free resource: %+v, %v; want priority %s", got, err, floor)
	}
	// Within the floor a priority is kept as sent.
	kept := now.Add(-10 * time.Second)
	if got, err := acq("recent", kept, "F:3"); err != nil || !got.PriorityAt.Equal(kept) {
		t.Fatalf("priority_at 10 s ago: %+v, %v; want kept", got, err)
	}
	// From the future: runs as now.
	if got, err := acq("future", now.Add(time.Hour), "F:4"); err != nil || !got.PriorityAt.Equal(now) {
		t.Fatalf("priority_at in an hour: %+v, %v; want %s", got, err, now)
	}
	// A holder's bound priority is its own: two minutes on, "ancient" still
	// runs with the floor its lease was granted with, older than the new
	// floor, and naming it keeps it.
	b.Clock.Advance(2 * time.Minute)
	if got, err := acq("ancient", floor, "F:5"); err != nil || !got.PriorityAt.Equal(floor) {
		t.Fatalf("a holder naming its bound priority, older than the floor: %+v, %v", got, err)
	}
}

// testRLHeartbeatShortens: a heartbeat with a shorter ttl_ms sets the
// expiry to now + that TTL, so the answer's ttl_ms and expires_at agree and
// the lease ends then.
func testRLHeartbeatShortens(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	a := rlActor("a")
	l := mustAcquire(t, eng, "a", time.Minute, "S:1", "MUTATES").Leases[0]
	b.Clock.Advance(time.Second)
	hb, err := eng.HeartbeatResources(b.Ctx, a, []string{l.ID}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := hb.Leases[0]
	if got.TTLMs != 5000 || !got.ExpiresAt.Equal(hb.ServerTime.Add(5*time.Second)) {
		t.Fatalf("heartbeat with ttl_ms 5000 answered ttl_ms %d, expires_at %s (server time %s)", got.TTLMs, got.ExpiresAt, hb.ServerTime)
	}
	stored, _, err := eng.GetResourceLease(b.Ctx, a, l.ID)
	if err != nil || !stored.ExpiresAt.Equal(got.ExpiresAt) {
		t.Fatalf("stored = %+v, %v; want the answered expiry %s", stored, err, got.ExpiresAt)
	}
	b.Clock.Set(got.ExpiresAt)
	if _, err := acquire(eng, "b", 0, "S:1", "MUTATES"); err != nil {
		t.Fatalf("the resource at the shortened expiry: %v", err)
	}
}

// testRLRefusalsCarryServerTime: lease_expired, verify_required and
// quota_exceeded refusals carry the server time they were decided at.
func testRLRefusalsCarryServerTime(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	a := rlActor("a")
	l := mustAcquire(t, eng, "a", 10*time.Second, "Q:1", "MUTATES").Leases[0]
	b.Clock.Advance(10 * time.Second)
	_, err := eng.HeartbeatResources(b.Ctx, a, []string{l.ID}, 0)
	WantCode(t, err, host.CodeLeaseExpired)
	if at := host.ErrorServerTime(err); !at.Equal(b.Clock.Now()) {
		t.Fatalf("lease_expired server time %s, want %s", at, b.Clock.Now())
	}
	v := mustAcquire(t, eng, "v", 0, "Q:2", "MUTATES").Leases[0]
	if _, err := eng.DieRestart(b.Ctx, rlActor("v")); err != nil {
		t.Fatal(err)
	}
	_, err = eng.HeartbeatResources(b.Ctx, rlActor("v"), []string{v.ID}, 0)
	WantCode(t, err, host.CodeVerifyRequired)
	if at := host.ErrorServerTime(err); !at.Equal(b.Clock.Now()) {
		t.Fatalf("verify_required server time %s, want %s", at, b.Clock.Now())
	}
	// The suite's engine caps a holder at 3 live leases.
	mustAcquire(t, eng, "q", 0, "Q:3", "READS", "Q:4", "READS", "Q:5", "READS")
	_, err = acquire(eng, "q", 0, "Q:6", "READS")
	WantCode(t, err, host.CodeQuotaExceeded)
	if at := host.ErrorServerTime(err); !at.Equal(b.Clock.Now()) {
		t.Fatalf("quota_exceeded server time %s, want %s", at, b.Clock.Now())
	}
}

// testRLMinTTL: a TTL below the minimum is raised to it, and the lease says so.
func testRLMinTTL(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	min := eng.ResourceLeaseConfig().MinTTL
	if min != 100*time.Millisecond {
		t.Fatalf("default MinTTL = %s, want 100ms", min)
	}
	l := mustAcquire(t, eng, "a", time.Millisecond, "M:1", "MUTATES").Leases[0]
	if l.TTLMs != 100 || !l.ExpiresAt.Equal(l.AcquiredAt.Add(min)) {
		t.Fatalf("ttl 1 ms granted ttl_ms %d until %s (acquired %s), want the minimum", l.TTLMs, l.ExpiresAt, l.AcquiredAt)
	}
	hb, err := eng.HeartbeatResources(b.Ctx, rlActor("a"), []string{l.ID}, time.Millisecond)
	if err != nil || hb.Leases[0].TTLMs != 100 {
		t.Fatalf("heartbeat with ttl 1 ms = %+v, %v; want ttl_ms 100", hb, err)
	}
}

// testRLHolders: an agent asks who holds a resource without taking it: the
// leases honoured now, by the name as an acquire normalizes it, in its
// tenant only.
func testRLHolders(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	w := mustAcquire(t, eng, "writer", 10*time.Second, "FILE:/w/x.go", "MUTATES").Leases[0]
	mustAcquire(t, eng, "reader", 0, "FILE:/w/y.go", "READS")
	if _, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "globex", Holder: "spy", Intents: intents("FILE:/w/x.go", "READS")}); err != nil {
		t.Fatalf("another tenant's lease conflicted: %v", err)
	}
	got, err := eng.ResourceHolders(b.Ctx, rlActor("asker"), []string{" file:/w/./x.go", "FILE:/w/none.go"})
	if err != nil || len(got.Leases) != 1 || got.Leases[0].ID != w.ID || got.Leases[0].Holder != "writer" || got.Leases[0].FencingToken != w.FencingToken {
		t.Fatalf("holders = %+v, %v; want the writer's lease only", got, err)
	}
	// Asking took nothing: the asker holds no lease.
	mine, _, _, err := eng.ListResourceLeases(b.Ctx, store.ResourceLeaseFilter{Tenant: "acme", Holder: "asker"})
	if err != nil || len(mine) != 0 {
		t.Fatalf("the asker holds %v, %v", mine, err)
	}
	b.Clock.Advance(10 * time.Second)
	got, err = eng.ResourceHolders(b.Ctx, rlActor("asker"), []string{"FILE:/w/x.go"})
	if err != nil || len(got.Leases) != 0 || !got.ServerTime.Equal(b.Clock.Now()) {
		t.Fatalf("holders after the expiry = %+v, %v", got, err)
	}
	_, err = eng.ResourceHolders(b.Ctx, rlActor("asker"), nil)
	WantCode(t, err, host.CodeBadRequest)
	_, err = eng.ResourceHolders(b.Ctx, rlActor("asker"), []string{"FILE:"})
	WantCode(t, err, host.CodeInvalidResource)
}

// testTRFencingTokens: a task's resource leases draw their tokens from the
// resource's one counter, and the offer carries them to the worker.
func testTRFencingTokens(t *testing.T, b *Bundle) {
	agent := mustAcquireOn(t, b, "agent.a", "FILE:/repo/x.go", "MUTATES")
	if _, err := b.Engine.ReleaseResources(b.Ctx, rlActor("agent.a"), []string{agent.ID}); err != nil {
		t.Fatal(err)
	}
	e := b.Enqueue(t, "edit")
	o := b.LeaseOne(t, "w.1", "edit")
	if o.Task.ID != e.TaskID || len(o.ResourceLeases) != 1 {
		t.Fatalf("offer = %+v, want task %s with one resource lease", o, e.TaskID)
	}
	tl := o.ResourceLeases[0]
	if tl.Resource != "FILE:/repo/x.go" || tl.TaskID != e.TaskID || tl.FencingToken != agent.FencingToken+1 {
		t.Fatalf("task's resource lease = %+v, want token %d", tl, agent.FencingToken+1)
	}
	if stored := oneTaskLease(t, b, e.TaskID); stored.FencingToken != tl.FencingToken {
		t.Fatalf("stored token %d, offered %d", stored.FencingToken, tl.FencingToken)
	}
	b.Complete(t, "w.1", o)
	after := mustAcquireOn(t, b, "agent.a", "FILE:/repo/x.go", "MUTATES")
	if after.FencingToken != tl.FencingToken+1 {
		t.Fatalf("agent's grant after the task: token %d, want %d", after.FencingToken, tl.FencingToken+1)
	}
	// A task without intents gets no resource leases on its offer.
	b.Enqueue(t, "work")
	if o := b.LeaseOne(t, "w.1", "work"); len(o.ResourceLeases) != 0 {
		t.Fatalf("offer of a task without intents carries %v", o.ResourceLeases)
	}
}

func mustAcquireOn(t *testing.T, b *Bundle, holder, resource, pred string) *host.ResourceLease {
	t.Helper()
	res, err := b.Engine.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: holder, Intents: intents(resource, pred)})
	if err != nil {
		t.Fatal(err)
	}
	return res.Leases[0]
}
