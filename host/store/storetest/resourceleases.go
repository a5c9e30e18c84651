package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Resource leases (KLIS-3): one case per rule of the seed, and a hammer whose
// checker proves from the stored history that no two conflicting leases on
// one resource overlapped by server time and no lease was honoured past its
// expiry.

func runResourceLeases(t *testing.T, open Opener, hammer bool) {
	cases := []struct {
		name string
		fn   func(t *testing.T, b *Bundle, eng *engine.Engine, ev *eventLog)
	}{
		{"ResourceLeaseMutatesExclusiveReadsShared", testRLPredicates},
		{"ResourceLeaseManifestAllOrNothing", testRLManifest},
		{"ResourceLeaseNamesNormalized", testRLNames},
		{"ResourceLeaseTTLDefaultAndCap", testRLTTL},
		{"ResourceLeaseStrictExpiry", testRLStrictExpiry},
		{"ResourceLeaseHeartbeatExtendsFromNow", testRLHeartbeat},
		{"ResourceLeaseReleaseIdempotent", testRLRelease},
		{"ResourceLeaseWaitDie", testRLWaitDie},
		{"ResourceLeaseGraceOnceThenVerify", testRLGrace},
		{"ResourceLeaseQuotas", testRLQuotas},
		{"ResourceLeaseRefundStaysInItsWindow", testRLRefundWindow},
		{"ResourceLeaseVerifyAll", testRLVerify},
		{"ResourceLeaseOtherHolder", testRLOtherHolder},
		{"ResourceLeaseSweepAndAudit", testRLSweepAudit},
		{"ResourceLeaseWaitDieNeverDeadlocks", testRLNoDeadlock},
		{"ResourceLeaseHammer", testRLHammer},
		{"ResourceLeaseCheckerCatchesViolations", testRLChecker},
		{"ResourceLeaseFencingTokens", testRLFencingTokens}, // fencing.go
		{"ResourceLeaseStalledHolderFenced", testRLStalledHolderFenced},
		{"ResourceLeasePriorityBound", testRLPriorityBound},
		{"ResourceLeasePriorityFloor", testRLPriorityFloor},
		{"ResourceLeaseHeartbeatShortens", testRLHeartbeatShortens},
		{"ResourceLeaseRefusalsCarryServerTime", testRLRefusalsCarryServerTime},
		{"ResourceLeaseMinTTL", testRLMinTTL},
		{"ResourceLeaseHolders", testRLHolders},
		{"ResourceLeaseWakeOnRelease", testRLWakeOnRelease}, // resourcewake.go
		{"ResourceLeaseWakeOnExpiry", testRLWakeOnExpiry},
		{"ResourceLeaseTaskWakeOnRelease", testRLTaskWakeOnRelease},
		{"ResourceLeaseWatchResources", testRLWatchResources},
		{"ResourceLeaseFairWriter", testRLFairWriter}, // resourcefair.go
		{"ResourceLeaseFairTask", testRLFairTask},
		{"ResourceLeaseWaiterRows", testRLWaiterRows},
		{"ResourceLeaseSessions", testRLSessions}, // resourcesessions.go
		{"ResourceLeaseSessionBounds", testRLSessionBounds},
		{"ResourceLeaseRevoke", testRLRevoke},
	}
	// The cases that measure latency run one at a time, before the others
	// start: under -race on a small machine the parallel cases' load, not
	// the gate, would decide them.
	serial := map[string]bool{"ResourceLeaseWakeOnRelease": true, "ResourceLeaseWakeOnExpiry": true, "ResourceLeaseTaskWakeOnRelease": true,
		"ResourceLeaseFairWriter": true, "ResourceLeaseFairTask": true}
	for _, c := range cases {
		if c.name == "ResourceLeaseHammer" && !hammer {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			if !serial[c.name] {
				t.Parallel()
			}
			b := Setup(t, open)
			ev := &eventLog{}
			eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1, OnEvent: ev.add,
				ResourceLeases: engine.ResourceLeaseConfig{MaxLeasesPerHolder: 3, HoldQuota: 10 * time.Minute, QuotaWindow: time.Hour}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(eng.Close)
			c.fn(t, b, eng, ev)
		})
	}
}

// eventLog records engine events.
type eventLog struct {
	mu  sync.Mutex
	evs []engine.Event
}

func (l *eventLog) add(e engine.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *eventLog) count(k engine.EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.evs {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func rlActor(p string) engine.Actor {
	return engine.Actor{Tenant: "acme", Principal: p, Role: engine.RoleAgent}
}

func intents(pairs ...string) []engine.ResourceIntent {
	var out []engine.ResourceIntent
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, engine.ResourceIntent{Resource: pairs[i], Predicate: host.LeasePredicate(pairs[i+1])})
	}
	return out
}

func acquire(eng *engine.Engine, holder string, ttl time.Duration, pairs ...string) (*engine.AcquireResult, error) {
	return eng.AcquireResources(context.Background(), engine.AcquireRequest{Tenant: "acme", Holder: holder, TTL: ttl, Intents: intents(pairs...)})
}

func mustAcquire(t *testing.T, eng *engine.Engine, holder string, ttl time.Duration, pairs ...string) *engine.AcquireResult {
	t.Helper()
	res, err := acquire(eng, holder, ttl, pairs...)
	if err != nil {
		t.Fatalf("acquire %v by %s: %v", pairs, holder, err)
	}
	return res
}

func wantConflict(t *testing.T, err error, holderLease string, mayWait bool) {
	t.Helper()
	var ce *engine.ResourceConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a resource conflict", err)
	}
	WantCode(t, err, host.CodeResourceConflict)
	if ce.Holder == nil || (holderLease != "" && ce.Holder.ID != holderLease) || !strings.Contains(err.Error(), ce.Holder.ID) {
		t.Fatalf("conflict names %v, want lease %s (error: %v)", ce.Holder, holderLease, err)
	}
	if ce.MayWait != mayWait {
		t.Fatalf("conflict MayWait = %v, want %v", ce.MayWait, mayWait)
	}
}

func testRLPredicates(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	r1 := mustAcquire(t, eng, "a", 0, "FILE:/x.go", "READS")
	mustAcquire(t, eng, "b", 0, "FILE:/x.go", "READS")
	_, err := acquire(eng, "c", 0, "FILE:/x.go", "MUTATES")
	wantConflict(t, err, "", false)
	w := mustAcquire(t, eng, "c", 0, "FILE:/y.go", "MUTATES")
	_, err = acquire(eng, "d", 0, "FILE:/y.go", "READS")
	wantConflict(t, err, w.Leases[0].ID, false)
	_, err = acquire(eng, "d", 0, "FILE:/y.go", "MUTATES")
	wantConflict(t, err, w.Leases[0].ID, false)
	// The same holder gets no exception: a lease is held by a lease, not a name.
	_, err = acquire(eng, "c", 0, "FILE:/y.go", "MUTATES")
	wantConflict(t, err, w.Leases[0].ID, false)
	if l := r1.Leases[0]; l.Predicate != host.PredicateReads || l.State != host.ResourceLeaseActive || l.Holder != "a" {
		t.Fatalf("lease = %+v", l)
	}
}

func testRLManifest(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	held := mustAcquire(t, eng, "a", 0, "R:2", "MUTATES")
	_, err := acquire(eng, "b", 0, "R:1", "MUTATES", "R:2", "READS", "R:3", "MUTATES")
	wantConflict(t, err, held.Leases[0].ID, false)
	// Nothing of the refused manifest was granted.
	mustAcquire(t, eng, "c", 0, "R:1", "MUTATES", "R:3", "MUTATES")
	// A granted manifest is one manifest id; a resource named twice is held
	// once, MUTATES winning.
	m := mustAcquire(t, eng, "d", 0, "R:4", "READS", "R:5", "READS", "R:4", "MUTATES")
	if len(m.Leases) != 2 || m.Leases[0].Resource != "R:4" || m.Leases[0].Predicate != host.PredicateMutates ||
		m.Leases[0].ManifestID != m.ManifestID || m.Leases[1].ManifestID != m.ManifestID {
		t.Fatalf("manifest = %+v", m.Leases)
	}
}

func testRLNames(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	m := mustAcquire(t, eng, "a", 0, "  file:/repo/./src/../x.go ", "mutates")
	if got := m.Leases[0].Resource; got != "FILE:/repo/x.go" {
		t.Fatalf("normalized = %q", got)
	}
	_, err := acquire(eng, "b", 0, "FILE:/repo/x.go", "READS")
	wantConflict(t, err, m.Leases[0].ID, false)
	// One name however its characters are composed: "é" as one code point
	// (U+00E9) and as "e" and a combining acute (U+0301) look the same to
	// whoever typed them, so they must lock the same resource.
	composed := mustAcquire(t, eng, "a", 0, "FILE:/repo/caf\u00e9.go", "MUTATES")
	if got := composed.Leases[0].Resource; got != "FILE:/repo/caf\u00e9.go" {
		t.Fatalf("composed name normalized to %q", got)
	}
	_, err = acquire(eng, "b", 0, "FILE:/repo/cafe\u0301.go", "MUTATES")
	wantConflict(t, err, composed.Leases[0].ID, false)
	// Compatibility forms fold (issue 37): full-width ＦＩＬＥ： and letters
	// name the resource they look like.
	_, err = acquire(eng, "b", 0, "\uff26\uff29\uff2c\uff25\uff1a/repo/\uff58.go", "READS")
	wantConflict(t, err, m.Leases[0].ID, false)
	for _, bad := range []struct{ res, rule string }{
		{"FILE:/repo/x\u200b.go", "format characters"},
		{"FILE:/repo/\u202eog.x", "format characters"},
		{"FILE:/repo/x\u0445.go", "mixes the scripts"},
		{"", "must not be empty"},
		{"   ", "must not be empty"},
		{"a\x00b", "control characters"},
		{"a\nb", "control characters"},
		{"FILE:", "needs a name"},
		{strings.Repeat("x", host.MaxResourceLen+1), "at most 512 bytes"},
		{"\xff\xfe", "valid UTF-8"},
	} {
		_, err := acquire(eng, "a", 0, bad.res, "READS")
		WantCode(t, err, host.CodeInvalidResource)
		if !strings.Contains(host.ErrorDetail(err), bad.rule) {
			t.Errorf("resource %q: detail %q does not name the rule %q", bad.res, host.ErrorDetail(err), bad.rule)
		}
	}
	_, err = acquire(eng, "a", 0, "R:1", "WRITES")
	WantCode(t, err, host.CodeBadRequest)
	_, err = eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: "a"})
	WantCode(t, err, host.CodeBadRequest)
	_, err = eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: "", Intents: intents("R:1", "READS")})
	WantCode(t, err, host.CodeBadRequest)
	many := make([]string, 0, 130)
	for i := 0; i < 65; i++ {
		many = append(many, fmt.Sprintf("R:%d", i), "READS")
	}
	_, err = acquire(eng, "a", 0, many...)
	WantCode(t, err, host.CodeTooLarge)
}

func testRLTTL(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	now := b.Clock.Now()
	d := mustAcquire(t, eng, "a", 0, "R:1", "READS").Leases[0]
	if d.TTLMs != 60000 || !d.ExpiresAt.Equal(now.Add(60*time.Second)) || !d.AcquiredAt.Equal(now) {
		t.Fatalf("default TTL lease = %+v", d)
	}
	c := mustAcquire(t, eng, "b", time.Hour, "R:2", "READS").Leases[0]
	if c.TTLMs != 300000 || !c.ExpiresAt.Equal(now.Add(5*time.Minute)) {
		t.Fatalf("capped TTL lease = %+v", c)
	}
	_, err := acquire(eng, "a", -time.Second, "R:3", "READS")
	WantCode(t, err, host.CodeBadRequest)
}

func testRLStrictExpiry(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	a := rlActor("a")
	l := mustAcquire(t, eng, "a", 10*time.Second, "R:1", "MUTATES").Leases[0]
	b.Clock.Advance(10*time.Second - time.Microsecond)
	if _, err := acquire(eng, "b", 0, "R:1", "MUTATES"); err == nil {
		t.Fatal("a live lease was overridden one microsecond before its expiry")
	}
	b.Clock.Advance(time.Microsecond) // now == expires_at: no longer honoured
	_, err := eng.HeartbeatResources(b.Ctx, a, []string{l.ID}, 0)
	WantCode(t, err, host.CodeLeaseExpired)
	got, _, err := eng.GetResourceLease(b.Ctx, a, l.ID)
	if err != nil || got.State != host.ResourceLeaseExpired {
		t.Fatalf("lease at its expiry = %+v, %v", got, err)
	}
	n := mustAcquire(t, eng, "b", 0, "R:1", "MUTATES").Leases[0]
	if !n.AcquiredAt.Equal(l.ExpiresAt) {
		t.Fatalf("next lease acquired at %s, want the old expiry %s", n.AcquiredAt, l.ExpiresAt)
	}
	// Releasing the expired lease is a no-op answered with its state.
	rel, err := eng.ReleaseResources(b.Ctx, a, []string{l.ID})
	if err != nil || rel.Leases[0].State != host.ResourceLeaseExpired || !rel.Leases[0].EndedAt.Equal(l.ExpiresAt) {
		t.Fatalf("release of an expired lease = %+v, %v", rel, err)
	}
}

func testRLHeartbeat(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	a := rlActor("a")
	m := mustAcquire(t, eng, "a", 20*time.Second, "R:1", "MUTATES", "R:2", "READS")
	b.Clock.Advance(15 * time.Second)
	hb, err := eng.HeartbeatResources(b.Ctx, a, []string{m.Leases[0].ID, m.Leases[1].ID}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := b.Clock.Now().Add(20 * time.Second)
	for _, l := range hb.Leases {
		if !l.ExpiresAt.Equal(want) {
			t.Fatalf("heartbeat set expires_at %s, want now+TTL %s", l.ExpiresAt, want)
		}
	}
	if !hb.ServerTime.Equal(b.Clock.Now()) {
		t.Fatalf("server_time = %s", hb.ServerTime)
	}
	// A new TTL on a heartbeat is capped and becomes the lease's TTL.
	hb, err = eng.HeartbeatResources(b.Ctx, a, []string{m.Leases[0].ID}, time.Hour)
	if err != nil || hb.Leases[0].TTLMs != 300000 || !hb.Leases[0].ExpiresAt.Equal(b.Clock.Now().Add(5*time.Minute)) {
		t.Fatalf("heartbeat with ttl = %+v, %v", hb, err)
	}
	// All or nothing: one released lease refuses the whole heartbeat.
	if _, err := eng.ReleaseResources(b.Ctx, a, []string{m.Leases[1].ID}); err != nil {
		t.Fatal(err)
	}
	before, _, _ := eng.GetResourceLease(b.Ctx, a, m.Leases[0].ID)
	b.Clock.Advance(time.Second)
	_, err = eng.HeartbeatResources(b.Ctx, a, []string{m.Leases[0].ID, m.Leases[1].ID}, 0)
	WantCode(t, err, host.CodeLeaseExpired)
	if !strings.Contains(err.Error(), m.Leases[1].ID) {
		t.Fatalf("refusal does not name the released lease: %v", err)
	}
	after, _, _ := eng.GetResourceLease(b.Ctx, a, m.Leases[0].ID)
	if !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Fatalf("a refused heartbeat extended a lease: %s -> %s", before.ExpiresAt, after.ExpiresAt)
	}
	_, err = eng.HeartbeatResources(b.Ctx, a, []string{"rlease-nope"}, 0)
	WantCode(t, err, host.CodeNotFound)
}

func testRLRelease(t *testing.T, b *Bundle, eng *engine.Engine, ev *eventLog) {
	a := rlActor("a")
	l := mustAcquire(t, eng, "a", 0, "R:1", "MUTATES").Leases[0]
	b.Clock.Advance(time.Second)
	for i := 0; i < 2; i++ {
		rel, err := eng.ReleaseResources(b.Ctx, a, []string{l.ID, l.ID})
		if err != nil || len(rel.Leases) != 1 || rel.Leases[0].State != host.ResourceLeaseReleased || !rel.Leases[0].EndedAt.Equal(Epoch.Add(time.Second)) {
			t.Fatalf("release #%d = %+v, %v", i+1, rel, err)
		}
	}
	if n := ev.count(engine.EvResourceReleased); n != 1 {
		t.Fatalf("released events = %d, want 1 (the second release is a no-op)", n)
	}
	mustAcquire(t, eng, "b", 0, "R:1", "MUTATES")
	_, err := eng.HeartbeatResources(b.Ctx, a, []string{l.ID}, 0)
	WantCode(t, err, host.CodeLeaseExpired)
}

func testRLWaitDie(t *testing.T, b *Bundle, eng *engine.Engine, ev *eventLog) {
	older := b.Clock.Now().Add(-20 * time.Second) // within the longest wait: kept (testRLPriorityFloor)
	younger := b.Clock.Now().Add(time.Minute)
	held := mustAcquire(t, eng, "holder", 0, "R:1", "MUTATES")
	// Younger than the holder: refused at once, even with a wait.
	_, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: "young", Intents: intents("R:1", "MUTATES"),
		PriorityAt: &younger, Wait: 10 * time.Second})
	wantConflict(t, err, held.Leases[0].ID, false)
	if ev.count(engine.EvResourceWaiting) != 0 {
		t.Fatal("a younger request waited")
	}
	// Same age as the holder: refused too (wait only when strictly older).
	same := held.PriorityAt
	_, err = eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: "same", Intents: intents("R:1", "MUTATES"), PriorityAt: &same, Wait: time.Second})
	wantConflict(t, err, held.Leases[0].ID, false)
	// Older without wait_seconds: refused at once, told it may wait.
	_, err = eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: "old", Intents: intents("R:1", "MUTATES"), PriorityAt: &older})
	wantConflict(t, err, held.Leases[0].ID, true)
	// Older with a wait: waits until the holder releases, then is granted
	// with its priority unchanged.
	type out struct {
		res *engine.AcquireResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: "old", Intents: intents("R:1", "MUTATES"),
			PriorityAt: &older, Wait: 20 * time.Second})
		done <- out{res, err}
	}()
	waitFor(t, "the older request to wait", func() bool { return ev.count(engine.EvResourceWaiting) == 1 })
	if _, err := eng.ReleaseResources(b.Ctx, rlActor("holder"), []string{held.Leases[0].ID}); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil || !o.res.PriorityAt.Equal(older) || !o.res.Leases[0].PriorityAt.Equal(older) {
		t.Fatalf("waiting acquire = %+v, %v", o.res, o.err)
	}
}

// waitFor polls cond until it holds, failing the test after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testRLGrace(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	a := rlActor("a")
	l := mustAcquire(t, eng, "a", 10*time.Second, "R:1", "MUTATES").Leases[0]
	b.Clock.Advance(5 * time.Second)
	dr, err := eng.DieRestart(b.Ctx, a)
	if err != nil || len(dr.Leases) != 1 || !dr.Leases[0].ExpiresAt.Equal(l.ExpiresAt.Add(15*time.Second)) || !dr.Leases[0].Restarting || !dr.Leases[0].GraceUsed {
		t.Fatalf("DIE_RESTART = %+v, %v", dr, err)
	}
	// The heartbeat is missed; the lease is kept through the grace period.
	b.Clock.Advance(10 * time.Second) // 5 s past the old expiry
	if _, err := acquire(eng, "b", 0, "R:1", "MUTATES"); err == nil {
		t.Fatal("a lease in its grace period was overridden")
	}
	_, err = eng.HeartbeatResources(b.Ctx, a, []string{l.ID}, 0)
	WantCode(t, err, host.CodeVerifyRequired)
	v, err := eng.VerifyResources(b.Ctx, a, engine.VerifyRequest{})
	if err != nil || len(v.Leases) != 1 || v.Leases[0].State != host.ResourceLeaseActive || v.Leases[0].Restarting {
		t.Fatalf("VERIFY_ALL = %+v, %v", v, err)
	}
	hb, err := eng.HeartbeatResources(b.Ctx, a, []string{l.ID}, 0)
	if err != nil || !hb.Leases[0].ExpiresAt.Equal(b.Clock.Now().Add(10*time.Second)) {
		t.Fatalf("heartbeat after VERIFY_ALL = %+v, %v", hb, err)
	}
	// Once: a second DIE_RESTART gives no more time.
	exp := hb.Leases[0].ExpiresAt
	dr, err = eng.DieRestart(b.Ctx, a)
	if err != nil || !dr.Leases[0].ExpiresAt.Equal(exp) {
		t.Fatalf("second DIE_RESTART = %+v, %v", dr, err)
	}
	b.Clock.Set(exp)
	mustAcquire(t, eng, "b", 0, "R:1", "MUTATES")
	v, err = eng.VerifyResources(b.Ctx, a, engine.VerifyRequest{IDs: []string{l.ID}})
	if err != nil || v.Leases[0].State != host.ResourceLeaseExpired {
		t.Fatalf("VERIFY_ALL after expiry = %+v, %v", v, err)
	}
}

func testRLQuotas(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	a := rlActor("a")
	// Concurrent leases: 3 per holder in this suite.
	mustAcquire(t, eng, "a", 0, "Q:1", "READS", "Q:2", "READS")
	_, err := acquire(eng, "a", 0, "Q:3", "READS", "Q:4", "READS")
	WantCode(t, err, host.CodeQuotaExceeded)
	if !strings.Contains(host.ErrorDetail(err), "quota of 3 concurrent leases") {
		t.Fatalf("detail = %q", host.ErrorDetail(err))
	}
	if d := host.ErrorRetryAfter(err); d != 0 {
		t.Fatalf("a count quota names a wait of %s: only a release frees it", d)
	}
	mustAcquire(t, eng, "b", 0, "Q:3", "READS", "Q:4", "READS") // nothing was granted to a
	// Total lease time per resource: 10 min per hour in this suite.
	l := mustAcquire(t, eng, "a", 5*time.Minute, "Q:9", "MUTATES").Leases[0]
	for i := 0; i < 2; i++ {
		b.Clock.Advance(4 * time.Minute)
		_, err = eng.HeartbeatResources(b.Ctx, a, []string{l.ID}, 0)
		if i == 0 && err != nil {
			t.Fatalf("heartbeat within the quota: %v", err)
		}
	}
	WantCode(t, err, host.CodeQuotaExceeded)
	if !strings.Contains(host.ErrorDetail(err), "Q:9") {
		t.Fatalf("detail = %q", host.ErrorDetail(err))
	}
	if _, err := eng.ReleaseResources(b.Ctx, a, []string{l.ID}); err != nil {
		t.Fatal(err)
	}
	// Releasing and acquiring again does not reset it; the refusal names
	// the wait until the window (opened by the first grant) ends.
	windowEnd := l.AcquiredAt.Add(time.Hour)
	_, err = acquire(eng, "a", 5*time.Minute, "Q:9", "MUTATES")
	WantCode(t, err, host.CodeQuotaExceeded)
	if d, w := host.ErrorRetryAfter(err), windowEnd.Sub(b.Clock.Now()); d != w {
		t.Fatalf("the window refusal names a wait of %s, want %s (the window's end)", d, w)
	}
	mustAcquire(t, eng, "b", 5*time.Minute, "Q:9", "MUTATES") // another holder has its own
}

// testRLRefundWindow: a release gives the unused time of a lease back to the
// quota window it was booked in, never to a later one (10 min per hour in
// this suite).
func testRLRefundWindow(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	start := b.Clock.Now()
	// Within one window the refund is made: 8 min booked and given back at
	// once leave room for 10 more.
	l := mustAcquire(t, eng, "c", 8*time.Minute, "W:2", "READS").Leases[0]
	if _, err := eng.ReleaseResources(b.Ctx, rlActor("c"), []string{l.ID}); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, eng, "c", 10*time.Minute, "W:2", "READS")
	// A lease booked at the end of one window and released in the next
	// gives nothing to the next.
	mustAcquire(t, eng, "a", 5*time.Minute, "W:1", "READS")
	b.Clock.Set(start.Add(59 * time.Minute))
	late := mustAcquire(t, eng, "a", 5*time.Minute, "W:1", "READS").Leases[0] // the first window is full
	b.Clock.Set(start.Add(60 * time.Minute))
	mustAcquire(t, eng, "a", 5*time.Minute, "W:1", "READS") // opens the second window: 5 min
	if _, err := eng.ReleaseResources(b.Ctx, rlActor("a"), []string{late.ID}); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, eng, "a", 5*time.Minute, "W:1", "READS") // 10 min: the quota
	_, err := acquire(eng, "a", 4*time.Minute, "W:1", "READS")
	WantCode(t, err, host.CodeQuotaExceeded)
	if !strings.Contains(host.ErrorDetail(err), "of lease time on W:1") {
		t.Fatalf("detail = %q", host.ErrorDetail(err))
	}
}

func testRLVerify(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	a := rlActor("a")
	m := mustAcquire(t, eng, "a", 10*time.Second, "V:1", "READS")
	m2 := mustAcquire(t, eng, "a", 30*time.Second, "V:2", "READS")
	b.Clock.Advance(20 * time.Second)
	v, err := eng.VerifyResources(b.Ctx, a, engine.VerifyRequest{IDs: []string{m.Leases[0].ID, m2.Leases[0].ID}})
	if err != nil || len(v.Leases) != 2 || v.Leases[0].State != host.ResourceLeaseExpired || v.Leases[1].State != host.ResourceLeaseActive ||
		!v.ServerTime.Equal(b.Clock.Now()) {
		t.Fatalf("VERIFY_ALL by ids = %+v, %v", v, err)
	}
	v, err = eng.VerifyResources(b.Ctx, b.Admin, engine.VerifyRequest{Holder: "a"})
	if err != nil || len(v.Leases) != 2 {
		t.Fatalf("VERIFY_ALL by holder = %+v, %v", v, err)
	}
	_, err = eng.VerifyResources(b.Ctx, rlActor("b"), engine.VerifyRequest{Holder: "a"})
	WantCode(t, err, host.CodeForbidden)
	_, err = eng.VerifyResources(b.Ctx, a, engine.VerifyRequest{IDs: []string{"rlease-nope"}})
	WantCode(t, err, host.CodeNotFound)
	// Another tenant sees nothing.
	_, err = eng.VerifyResources(b.Ctx, engine.Actor{Tenant: "other", Principal: "a", Role: engine.RoleAgent}, engine.VerifyRequest{IDs: []string{m2.Leases[0].ID}})
	WantCode(t, err, host.CodeNotFound)
}

func testRLOtherHolder(t *testing.T, b *Bundle, eng *engine.Engine, _ *eventLog) {
	l := mustAcquire(t, eng, "a", 0, "O:1", "MUTATES").Leases[0]
	_, err := eng.HeartbeatResources(b.Ctx, rlActor("b"), []string{l.ID}, 0)
	WantCode(t, err, host.CodeForbidden)
	_, err = eng.ReleaseResources(b.Ctx, rlActor("b"), []string{l.ID})
	WantCode(t, err, host.CodeForbidden)
	// An operator may release anyone's lease.
	rel, err := eng.ReleaseResources(b.Ctx, b.Admin, []string{l.ID})
	if err != nil || rel.Leases[0].State != host.ResourceLeaseReleased {
		t.Fatalf("admin release = %+v, %v", rel, err)
	}
}

func testRLSweepAudit(t *testing.T, b *Bundle, eng *engine.Engine, ev *eventLog) {
	a := rlActor("a")
	l1 := mustAcquire(t, eng, "a", 10*time.Second, "S:1", "MUTATES").Leases[0]
	l2 := mustAcquire(t, eng, "a", 10*time.Second, "S:2", "MUTATES").Leases[0]
	b.Clock.Advance(5 * time.Second)
	if _, err := eng.HeartbeatResources(b.Ctx, a, []string{l1.ID}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.ReleaseResources(b.Ctx, a, []string{l1.ID}); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(5 * time.Second)
	n, err := eng.SweepResourceLeases(b.Ctx)
	if err != nil || n != 1 || ev.count(engine.EvResourceExpired) != 1 {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	if n, _ := eng.SweepResourceLeases(b.Ctx); n != 0 {
		t.Fatalf("second sweep expired %d", n)
	}
	got, _, _ := eng.GetResourceLease(b.Ctx, a, l2.ID)
	if got.State != host.ResourceLeaseExpired || !got.EndedAt.Equal(l2.ExpiresAt) {
		t.Fatalf("swept lease = %+v", got)
	}
	evs, _, err := eng.ResourceLeaseEvents(b.Ctx, store.ResourceLeaseEventFilter{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.LeaseID[len(e.LeaseID)-4:]+":"+string(e.Kind))
	}
	want := []string{"granted", "granted", "heartbeat", "released", "expired"}
	if len(evs) != len(want) {
		t.Fatalf("audit trail = %v", kinds)
	}
	for i, e := range evs {
		if string(e.Kind) != want[i] {
			t.Fatalf("audit trail = %v, want kinds %v", kinds, want)
		}
	}
	if evs[2].PrevExpiresAt == nil || !evs[2].PrevExpiresAt.Equal(l1.ExpiresAt) || !evs[2].At.Equal(Epoch.Add(5*time.Second)) {
		t.Fatalf("heartbeat entry = %+v", evs[2])
	}
	counts, err := eng.CountLiveResourceLeases(b.Ctx, "acme")
	if err != nil || counts[host.PredicateMutates] != 0 {
		t.Fatalf("live counts = %v, %v", counts, err)
	}
	mustAcquire(t, eng, "b", 0, "S:3", "MUTATES", "S:4", "READS")
	counts, _ = eng.CountLiveResourceLeases(b.Ctx, "")
	if counts[host.PredicateMutates] != 1 || counts[host.PredicateReads] != 1 {
		t.Fatalf("live counts = %v", counts)
	}
}

// testRLNoDeadlock builds a cycle: each of n agents holds one resource and
// asks, waiting, for its neighbour's. Under wait-die the younger ones are
// refused at once and, as agents must, release and restart with the same
// priority; the run ends with every agent served.
func testRLNoDeadlock(t *testing.T, b *Bundle, _ *engine.Engine, _ *eventLog) {
	eng, err := engine.New(engine.Config{Store: b.Store, ExpiryJitter: -1, MaxWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	const n = 5
	base := time.Now().UTC().Truncate(time.Microsecond)
	var wg sync.WaitGroup
	var served atomic.Int64
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prio := base.Add(time.Duration(i) * time.Millisecond)
			holder := fmt.Sprintf("agent-%d", i)
			me := engine.Actor{Tenant: "acme", Principal: holder, Role: engine.RoleAgent}
			mine := fmt.Sprintf("D:%d", i)
			next := fmt.Sprintf("D:%d", (i+1)%n)
			for attempt := 0; attempt < 5000; attempt++ {
				own, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: holder, PriorityAt: &prio,
					Intents: intents(mine, "MUTATES"), TTL: 30 * time.Second, Wait: 5 * time.Second})
				if err != nil {
					if !host.IsCode(err, host.CodeResourceConflict) {
						t.Errorf("acquire %s: %v", mine, err)
						return
					}
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) // the agent backs off, then restarts
					continue
				}
				more, err := eng.AcquireResources(b.Ctx, engine.AcquireRequest{Tenant: "acme", Holder: holder, PriorityAt: &prio,
					Intents: intents(next, "MUTATES"), TTL: 30 * time.Second, Wait: 5 * time.Second})
				ids := []string{own.Leases[0].ID}
				if err == nil {
					ids = append(ids, more.Leases[0].ID)
				}
				if _, rerr := eng.ReleaseResources(b.Ctx, me, ids); rerr != nil {
					t.Errorf("release: %v", rerr)
					return
				}
				if err == nil {
					served.Add(1)
					return
				}
				if !host.IsCode(err, host.CodeResourceConflict) {
					t.Errorf("acquire %s: %v", next, err)
					return
				}
			}
			t.Errorf("%s was never served", holder)
		}()
	}
	wg.Wait()
	if served.Load() != n {
		t.Fatalf("served %d of %d", served.Load(), n)
	}
}

// testRLHammer runs many holders against few resources on the real clock:
// they acquire manifests (some waiting), heartbeat with random pauses (some
// longer than the TTL), release, or crash (walk away). CheckResourceLeaseHistory
// then proves the invariants from what the store kept.
func testRLHammer(t *testing.T, b *Bundle, _ *engine.Engine, _ *eventLog) {
	eng, err := engine.New(engine.Config{Store: b.Store, ExpiryJitter: -1,
		ResourceLeases: engine.ResourceLeaseConfig{MaxLeasesPerHolder: -1, HoldQuota: -1, MinTTL: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	stats := HammerResourceLeases(t, []*engine.Engine{eng}, 12, 40)
	CheckResourceLeaseHistory(t, b.Store, "acme")
	if stats.Granted == 0 || stats.Conflicts == 0 {
		t.Fatalf("the hammer did not contend: %+v", stats)
	}
	t.Logf("hammer: %+v", stats)
}

// HammerStats counts what a resource lease hammer did. Bound counts
// acquires refused because they named a priority older than the one their
// holder's live leases (left by a crash) bound it to.
type HammerStats struct {
	Granted, Conflicts, Bound, Released, Crashed, Lost int64
}

// HammerResourceLeases runs holders goroutines, each doing rounds rounds of
// acquire → work (heartbeats, pauses) → release or crash, spread over the
// engines (one per gate host), on tenant "acme". Every heartbeat the server
// accepts must have been sent before the lease's expiry by the server's own
// clock; the function fails t otherwise.
func HammerResourceLeases(t *testing.T, engines []*engine.Engine, holders, rounds int) HammerStats {
	t.Helper()
	ctx := context.Background()
	resources := []string{"H:a", "H:b", "H:c", "H:d"}
	var st HammerStats
	var wg sync.WaitGroup
	for h := 0; h < holders; h++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("holder-%d", h)
			me := engine.Actor{Tenant: "acme", Principal: holder, Role: engine.RoleAgent}
			for r := 0; r < rounds; r++ {
				eng := engines[rand.IntN(len(engines))]
				var in []engine.ResourceIntent
				for _, res := range resources {
					if rand.IntN(3) == 0 {
						p := host.PredicateMutates
						if rand.IntN(4) == 0 {
							p = host.PredicateReads
						}
						in = append(in, engine.ResourceIntent{Resource: res, Predicate: p})
					}
				}
				if len(in) == 0 {
					in = append(in, engine.ResourceIntent{Resource: resources[rand.IntN(len(resources))], Predicate: host.PredicateMutates})
				}
				prio := time.Now().UTC().Add(-time.Duration(rand.IntN(50)) * time.Millisecond)
				wait := time.Duration(0)
				if rand.IntN(2) == 0 {
					wait = time.Duration(20+rand.IntN(200)) * time.Millisecond
				}
				ttl := time.Duration(30+rand.IntN(70)) * time.Millisecond
				res, err := eng.AcquireResources(ctx, engine.AcquireRequest{Tenant: "acme", Holder: holder, Intents: in, TTL: ttl, PriorityAt: &prio, Wait: wait})
				if err != nil {
					if host.IsCode(err, host.CodeResourceConflict) {
						atomic.AddInt64(&st.Conflicts, 1)
						continue
					}
					if host.IsCode(err, host.CodeConflict) && strings.Contains(host.ErrorDetail(err), "bound") {
						atomic.AddInt64(&st.Bound, 1)
						continue
					}
					t.Errorf("acquire: %v", err)
					return
				}
				atomic.AddInt64(&st.Granted, 1)
				ids := make([]string, len(res.Leases))
				for i, l := range res.Leases {
					ids[i] = l.ID
				}
				expires := res.Leases[0].ExpiresAt
				lost := false
				for k := rand.IntN(4); k > 0 && !lost; k-- {
					time.Sleep(time.Duration(rand.IntN(int(ttl/time.Millisecond)*3/2)) * time.Millisecond)
					hb, err := engines[rand.IntN(len(engines))].HeartbeatResources(ctx, me, ids, 0)
					switch {
					case err == nil:
						if !hb.ServerTime.Before(expires) {
							t.Errorf("heartbeat honoured at %s, past the expiry %s", hb.ServerTime, expires)
						}
						expires = hb.Leases[0].ExpiresAt
					case host.IsCode(err, host.CodeLeaseExpired):
						lost = true
						atomic.AddInt64(&st.Lost, 1)
					default:
						t.Errorf("heartbeat: %v", err)
						return
					}
				}
				if rand.IntN(5) == 0 {
					atomic.AddInt64(&st.Crashed, 1) // walk away: the leases expire
					continue
				}
				if _, err := engines[rand.IntN(len(engines))].ReleaseResources(ctx, me, ids); err != nil {
					t.Errorf("release: %v", err)
					return
				}
				atomic.AddInt64(&st.Released, 1)
			}
		}()
	}
	wg.Wait()
	return st
}

// CheckResourceLeaseHistory reads every resource lease and audit entry of a
// tenant and fails t when two conflicting leases on one resource were
// honoured at the same server time, or when any change (heartbeat, release,
// grace, resume) was accepted at or after the lease's expiry at that moment.
// A lease is honoured from acquired_at until its end: ended_at once released
// or expired, else its current expires_at.
func CheckResourceLeaseHistory(t *testing.T, st store.Store, tenant string) {
	t.Helper()
	problems, summary, err := checkResourceLeaseHistory(st, tenant)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range problems {
		if i == 20 {
			t.Errorf("... and %d more", len(problems)-i)
			break
		}
		t.Error(p)
	}
	t.Log(summary)
}

func checkResourceLeaseHistory(st store.Store, tenant string) (problems []string, summary string, err error) {
	ctx := context.Background()
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var leases []*host.ResourceLease
	var evs []host.ResourceLeaseEvent
	err = st.View(ctx, func(r store.Reader) error {
		cur := ""
		for {
			ls, next, err := r.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: tenant, Cursor: cur, Limit: 1000})
			if err != nil {
				return err
			}
			leases = append(leases, ls...)
			if next == "" {
				break
			}
			cur = next
		}
		cur = ""
		for {
			es, next, err := r.ListResourceLeaseEvents(ctx, store.ResourceLeaseEventFilter{Tenant: tenant, Cursor: cur, Limit: 1000})
			if err != nil {
				return err
			}
			evs = append(evs, es...)
			if next == "" {
				break
			}
			cur = next
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	end := func(l *host.ResourceLease) time.Time {
		if l.EndedAt != nil {
			return *l.EndedAt
		}
		return l.ExpiresAt
	}
	byRes := map[string][]*host.ResourceLease{}
	for _, l := range leases {
		if l.EndedAt != nil && l.EndedAt.After(l.ExpiresAt) {
			fail("lease %s ended at %s, after its expiry %s", l.ID, l.EndedAt, l.ExpiresAt)
		}
		byRes[l.Resource] = append(byRes[l.Resource], l)
	}
	// Fencing tokens: distinct per resource and increasing in grant order
	// (acquired_at is the server time of the grant), whichever host granted.
	tokens := 0
	for res, ls := range byRes {
		sort.Slice(ls, func(i, j int) bool { return ls[i].FencingToken < ls[j].FencingToken })
		for i, l := range ls {
			if l.FencingToken < 1 {
				fail("%s: lease %s has no fencing token", res, l.ID)
			}
			if i == 0 {
				continue
			}
			p := ls[i-1]
			if p.FencingToken == l.FencingToken {
				fail("%s: leases %s and %s share fencing token %d", res, p.ID, l.ID, l.FencingToken)
			}
			if l.AcquiredAt.Before(p.AcquiredAt) {
				fail("%s: lease %s (token %d, granted %s) was granted before lease %s (token %d, granted %s)", res,
					l.ID, l.FencingToken, l.AcquiredAt.Format(time.StampMicro), p.ID, p.FencingToken, p.AcquiredAt.Format(time.StampMicro))
			}
		}
		tokens += len(ls)
	}
	overlaps := 0
	for res, ls := range byRes {
		sort.Slice(ls, func(i, j int) bool { return ls[i].AcquiredAt.Before(ls[j].AcquiredAt) })
		for i, a := range ls {
			for _, b := range ls[i+1:] {
				if !b.AcquiredAt.Before(end(a)) {
					break // sorted by start: later ones start later still
				}
				if a.Predicate.Conflicts(b.Predicate) && end(b).After(b.AcquiredAt) {
					overlaps++
					{
						fail("%s: lease %s (%s %s..%s) overlaps lease %s (%s %s..%s)", res,
							a.ID, a.Predicate, a.AcquiredAt.Format(time.StampMicro), end(a).Format(time.StampMicro),
							b.ID, b.Predicate, b.AcquiredAt.Format(time.StampMicro), end(b).Format(time.StampMicro))
					}
				}
			}
		}
	}
	// Every change but a grant or an expiry was decided while the lease was live.
	for _, e := range evs {
		switch e.Kind {
		case host.ResourceEventHeartbeat, host.ResourceEventGrace, host.ResourceEventVerified:
			if e.PrevExpiresAt == nil || !e.At.Before(*e.PrevExpiresAt) {
				fail("%s of lease %s at %s, not before its expiry %v", e.Kind, e.LeaseID, e.At, e.PrevExpiresAt)
			}
		case host.ResourceEventReleased:
			if !e.At.Before(e.ExpiresAt) {
				fail("release of lease %s honoured at %s, not before its expiry %s", e.LeaseID, e.At, e.ExpiresAt)
			}
		case host.ResourceEventExpired:
			if e.At.Before(e.ExpiresAt) {
				fail("lease %s recorded expired at %s, before its expiry %s", e.LeaseID, e.At, e.ExpiresAt)
			}
		}
	}
	return problems, fmt.Sprintf("checked %d leases (%d fencing tokens) and %d audit entries: %d overlapping pairs", len(leases), tokens, len(evs), overlaps), nil
}

// testRLChecker writes a history that breaks both invariants straight into
// the store and expects the hammer's checker to report each: a checker that
// finds nothing in a broken history would prove nothing.
func testRLChecker(t *testing.T, b *Bundle, _ *engine.Engine, _ *eventLog) {
	at := func(s int) time.Time { return Epoch.Add(time.Duration(s) * time.Second) }
	mk := func(id string, p host.LeasePredicate, from, to int) *host.ResourceLease {
		return &host.ResourceLease{ID: id, Tenant: "acme", Resource: "C:1", Predicate: p, Holder: id, State: host.ResourceLeaseActive,
			ManifestID: "manifest-" + id, PriorityAt: at(from), AcquiredAt: at(from), ExpiresAt: at(to), TTLMs: 1000}
	}
	err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		for _, l := range []*host.ResourceLease{mk("r1", "READS", 0, 10), mk("r2", "READS", 5, 15), mk("m1", "MUTATES", 20, 30), mk("m2", "MUTATES", 29, 40)} {
			if err := tx.InsertResourceLease(b.Ctx, l); err != nil {
				return err
			}
		}
		late := at(30)
		return tx.AppendResourceLeaseEvent(b.Ctx, &host.ResourceLeaseEvent{Tenant: "acme", LeaseID: "m1", Resource: "C:1", Predicate: "MUTATES",
			Holder: "m1", Kind: host.ResourceEventHeartbeat, At: late, PrevExpiresAt: &late, ExpiresAt: at(31)})
	})
	if err != nil {
		t.Fatal(err)
	}
	problems, _, err := checkResourceLeaseHistory(b.Store, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 2 || !strings.Contains(problems[0], "m1") || !strings.Contains(problems[0], "overlaps lease m2") ||
		!strings.Contains(problems[1], "heartbeat of lease m1") {
		t.Fatalf("checker found %q, want the m1/m2 overlap and the late heartbeat (READS with READS is no overlap)", problems)
	}
}
