package groupcommit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// granted reports whether a held request's channel is closed, without
// waiting.
func granted(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestBudgetRule: the enqueue budget on a clock of the test's own. Without
// a backlog, or without a prompt request within Window, every bulk request
// passes; while both hold, Burst pass, then each prompt request lets one
// more through, oldest first; a claim that finds no backlog, or the
// backlog or the prompt requests growing older than Window, lets every held
// request go and refills the budget.
func TestBudgetRule(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	// A queue that only fills: no claim, no prompt request.
	b := newBudget()
	for i := range 10 * Burst {
		if ch := b.admit(at(time.Duration(i)*time.Microsecond), []string{""}); ch != nil {
			t.Fatalf("fill without workers: bulk request %d held", i)
		}
	}
	// Prompt requests but no backlog (the claims found fewer than asked).
	b.claimed(at(0), []string{""}, false)
	for i := range 10 * Burst {
		b.prompt(at(time.Millisecond))
		if ch := b.admit(at(time.Millisecond), []string{""}); ch != nil {
			t.Fatalf("no backlog: bulk request %d held", i)
		}
	}
	// A backlog but no prompt request within Window.
	b = newBudget()
	b.prompt(at(0))
	b.claimed(at(Window), []string{""}, true)
	for i := range 10 * Burst {
		if ch := b.admit(at(Window), []string{""}); ch != nil {
			t.Fatalf("no prompt request within Window: bulk request %d held", i)
		}
	}

	// A backlog and prompt requests: Burst pass, then one per prompt.
	b = newBudget()
	b.claimed(at(0), []string{""}, true)
	b.prompt(at(0))
	for i := range Burst {
		if ch := b.admit(at(time.Millisecond), []string{""}); ch != nil {
			t.Fatalf("bulk request %d of the first Burst held", i)
		}
	}
	held := make([]<-chan struct{}, 5)
	for i := range held {
		if held[i] = b.admit(at(2*time.Millisecond), []string{""}); held[i] == nil {
			t.Fatalf("bulk request %d past Burst not held", i)
		}
	}
	if b.held() != 5 {
		t.Fatalf("held %d, want 5", b.held())
	}
	for i := range 3 { // three prompt requests: the three oldest go, in order
		b.prompt(at(3 * time.Millisecond))
		for j, ch := range held {
			if granted(ch) != (j <= i) {
				t.Fatalf("after %d prompt requests, request %d granted %v", i+1, j, granted(ch))
			}
		}
	}
	// A later arrival queues behind the held ones even if a token is left.
	b.cancel(held[3]) // its hold passed
	if b.held() != 1 {
		t.Fatalf("held %d after a cancel, want 1", b.held())
	}
	late := b.admit(at(4*time.Millisecond), []string{""})
	if late == nil {
		t.Fatal("a request behind a held one passed")
	}
	b.prompt(at(5 * time.Millisecond))
	if !granted(held[4]) || granted(late) {
		t.Fatal("the token went past the oldest held request")
	}
	// A claim that finds fewer than it asked: no backlog, all go, full again.
	b.claimed(at(6*time.Millisecond), []string{""}, false)
	if !granted(late) || b.held() != 0 {
		t.Fatal("a claim without backlog did not let the held requests go")
	}
	for i := range 10 * Burst {
		b.prompt(at(7 * time.Millisecond))
		if ch := b.admit(at(7*time.Millisecond), []string{""}); ch != nil {
			t.Fatalf("after the backlog ended: bulk request %d held", i)
		}
	}
	// The backlog again; held requests go once the backlog is Window old.
	b.claimed(at(10*time.Millisecond), []string{""}, true)
	for range Burst {
		b.admit(at(10*time.Millisecond), []string{""})
	}
	ch := b.admit(at(11*time.Millisecond), []string{""})
	if ch == nil {
		t.Fatal("budget spent: a bulk request passed")
	}
	b.prompt(at(10*time.Millisecond + Window - 1)) // spent on ch
	if !granted(ch) {
		t.Fatal("a prompt request did not grant the held request")
	}
	ch = b.admit(at(10*time.Millisecond+Window-1), []string{""})
	if ch == nil {
		t.Fatal("budget spent: a bulk request passed")
	}
	if b.admit(at(10*time.Millisecond+Window), []string{""}) != nil || !granted(ch) {
		t.Fatal("a backlog Window old still holds bulk requests")
	}
	// Ratio: n prompt requests earn n·Ratio tokens, at most Burst saved.
	b = newBudget()
	b.claimed(at(0), []string{""}, true)
	for range 3 * Burst {
		b.prompt(at(0))
	}
	n := 0
	for b.admit(at(0), []string{""}) == nil {
		n++
	}
	if n != Burst {
		t.Fatalf("%d bulk requests passed on saved tokens, want Burst (%d)", n, Burst)
	}
}

// TestBudgetIsPerKey: one key's backlog holds only that key's bulk
// requests. With tenant "busy" in force and its tokens spent, a bulk
// request of "quiet" (no claim of it found a backlog) passes at once
// however many wait; a claim of "quiet" that finds a backlog puts it under
// the budget too; a claim of "busy" that finds none lets only busy's held
// requests go; once no key is in force the tokens are refilled.
func TestBudgetIsPerKey(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	b := newBudget()
	b.claimed(at(0), []string{"busy"}, true)
	b.prompt(at(0))
	for b.admit(at(0), []string{"busy"}) == nil {
	}
	busy := b.admit(at(time.Millisecond), []string{"busy"}) // held behind the first one
	for i := range 4 * Burst {
		if ch := b.admit(at(time.Millisecond), []string{"quiet"}); ch != nil {
			t.Fatalf("quiet's bulk request %d held by busy's backlog", i)
		}
	}
	if b.held() != 2 {
		t.Fatalf("%d held, want busy's 2", b.held())
	}
	// quiet's own backlog: its requests now wait their turn too.
	b.claimed(at(2*time.Millisecond), []string{"quiet"}, true)
	quiet := b.admit(at(2*time.Millisecond), []string{"quiet"})
	if quiet == nil {
		t.Fatal("quiet's bulk request passed with its own backlog and no token")
	}
	// busy's workers catch up: only busy's held requests go, no token spent.
	b.claimed(at(3*time.Millisecond), []string{"busy"}, false)
	if b.held() != 1 || granted(quiet) || !granted(busy) {
		t.Fatalf("after busy's backlog ended: held %d, quiet granted %v, busy granted %v; want quiet alone held", b.held(), granted(quiet), granted(busy))
	}
	if ch := b.admit(at(3*time.Millisecond), []string{"busy"}); ch != nil {
		t.Fatal("busy's bulk request held after its backlog ended")
	}
	// A prompt request's token goes to quiet's held request.
	b.prompt(at(4 * time.Millisecond))
	if !granted(quiet) || b.held() != 0 {
		t.Fatal("a prompt request did not let quiet's held request go")
	}
	// quiet's backlog Window old: no key in force, the tokens refilled.
	b.prompt(at(2*time.Millisecond + Window))
	if len(b.backlogAt) != 0 {
		t.Fatalf("backlogs kept past Window: %v", b.backlogAt)
	}
	b.claimed(at(2*time.Millisecond+Window), []string{"quiet"}, true)
	n := 0
	for b.admit(at(2*time.Millisecond+Window), []string{"quiet"}) == nil {
		n++
	}
	if n != Burst {
		t.Fatalf("%d passed after the refill, want Burst (%d)", n, Burst)
	}
}

// TestBudgetIsPerType: a key's parts (a tenant's task types) are budgeted
// apart. A claim naming the type "slow" that finds a backlog holds bulk
// requests of slow, of the tenant as a whole (types unknown) and of
// several types among them slow, but not of "fast"; a claim naming no type
// (the whole tenant) that finds a backlog holds fast's too; one that finds
// none ends the tenant's backlog and its types', letting every held request
// go; a claim naming slow that finds none ends slow's alone.
func TestBudgetIsPerType(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	slow, fast, acme := []string{Key("acme", "slow")}, []string{Key("acme", "fast")}, []string{Key("acme", "")}
	b := newBudget()
	b.claimed(at(0), slow, true)
	b.prompt(at(0))
	n := 0
	for b.admit(at(0), slow) == nil {
		n++
	}
	if n != Burst {
		t.Fatalf("%d of slow's bulk requests passed on the saved tokens, want Burst (%d)", n, Burst)
	}
	for i := range 4 * Burst {
		if ch := b.admit(at(time.Millisecond), fast); ch != nil {
			t.Fatalf("fast's bulk request %d held by slow's backlog", i)
		}
	}
	whole := b.admit(at(time.Millisecond), acme)
	both := b.admit(at(time.Millisecond), []string{Key("acme", "fast"), Key("acme", "slow")})
	if whole == nil || both == nil {
		t.Fatalf("with slow's backlog and no token: the tenant's request held %v, fast's and slow's %v; want both held", whole != nil, both != nil)
	}
	if ch := b.admit(at(time.Millisecond), []string{Key("globex", "slow")}); ch != nil {
		t.Fatal("another tenant's request of a type of the same name held")
	}
	// A claim of every type finds a backlog: fast's requests wait too.
	b.claimed(at(2*time.Millisecond), acme, true)
	f := b.admit(at(2*time.Millisecond), fast)
	if f == nil {
		t.Fatal("fast's bulk request passed with the whole tenant's backlog and no token")
	}
	// slow's workers catch up: slow's backlog ends, and the tenant's still
	// holds all four (the loop's last slow request among them).
	b.claimed(at(3*time.Millisecond), slow, false)
	if _, on := b.backlogAt[slow[0]]; on || b.held() != 4 || granted(f) || granted(whole) || granted(both) {
		t.Fatalf("after slow's backlog ended beside the tenant's: slow's kept %v, %d held; want slow's gone, 4 held", on, b.held())
	}
	// A claim of every type finds none: every type's backlog ends.
	b.claimed(at(4*time.Millisecond), slow, true)
	b.claimed(at(4*time.Millisecond), acme, false)
	if b.held() != 0 || !granted(f) || !granted(whole) || !granted(both) || len(b.backlogAt) != 0 {
		t.Fatalf("after the tenant's backlog ended: %d held, backlogs %v; want none", b.held(), b.backlogAt)
	}
	if ch := b.admit(at(5*time.Millisecond), slow); ch != nil {
		t.Fatal("slow's bulk request held after the tenant's claim found no backlog")
	}
	// A request of the whole tenant held by one type's backlog alone goes
	// when that backlog ends; another tenant's claims leave acme's keys be,
	// and a claim of no tenant ("") ends none.
	b.claimed(at(6*time.Millisecond), slow, true)
	b.claimed(at(6*time.Millisecond), []string{Key("globex", "")}, true)
	for b.admit(at(6*time.Millisecond), slow) == nil {
	}
	whole = b.admit(at(6*time.Millisecond), acme)
	if whole == nil {
		t.Fatal("the tenant's request passed with slow's backlog and no token")
	}
	b.claimed(at(7*time.Millisecond), []string{Key("globex", "")}, false)
	b.claimed(at(7*time.Millisecond), []string{""}, false)
	if _, on := b.backlogAt[slow[0]]; !on || granted(whole) {
		t.Fatal("another tenant's claim, or a claim of no tenant, ended acme's backlog")
	}
	b.claimed(at(8*time.Millisecond), slow, false)
	if !granted(whole) || b.held() != 0 {
		t.Fatalf("the tenant's request held by slow's backlog alone not let go when it ended: %d held", b.held())
	}
	b.claimed(at(9*time.Millisecond), []string{Key("acme", ""), Key("globex", "")}, true)
	b.claimed(at(9*time.Millisecond), []string{""}, false)
	if len(b.backlogAt) != 2 {
		t.Fatalf("a claim of no tenant ended tenants' backlogs: %v left", b.backlogAt)
	}
}

// TestBudgetHoldIsBounded: with the budget in force and spent, a bulk Put
// waits MaxHold and is then queued (not refused, not held longer); a
// prompt Put lets the oldest held one go at once; a fill with no backlog
// is never held. Real time: MaxHold is the bound the queue promises.
func TestBudgetHoldIsBounded(t *testing.T) {
	ctx := context.Background()
	q := New[int](4096)
	q.Claimed([]string{""}, true)
	if err := q.Put(ctx, 0, Prompt, ""); err != nil {
		t.Fatal(err)
	}
	for i := range Burst {
		if err := q.Put(ctx, 1000+i, Bulk, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Spent: two held Puts, the first let go by a prompt request.
	var wg sync.WaitGroup
	took := make([]time.Duration, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			if err := q.Put(ctx, 2000+i, Bulk, ""); err != nil {
				t.Error(err)
			}
			took[i] = time.Since(start)
		}()
		for q.Held() != i+1 { // in order: the first is held before the second comes
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(MaxHold / 5)
	if err := q.Put(ctx, 1, Prompt, ""); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if took[0] >= MaxHold {
		t.Fatalf("the held Put a prompt request let go took %v, want less than MaxHold %v", took[0], MaxHold)
	}
	// Its timer let it go (HoldStats counts it expired, below); how soon
	// after MaxHold it then ran is the scheduler's business on a loaded
	// machine, bounded here only against a hang.
	if took[1] < MaxHold || took[1] > MaxHold+10*time.Second {
		t.Fatalf("the held Put nothing let go took %v, want MaxHold %v and a little", took[1], MaxHold)
	}
	if q.Held() != 0 || q.Len() != 2+Burst+2 {
		t.Fatalf("held %d, queued %d, want 0 and %d", q.Held(), q.Len(), 2+Burst+2)
	}
	// The operators' counters: two held, one of them the whole MaxHold.
	if h := q.HoldStats(); h.Held != 2 || h.Expired != 1 || h.Waiting != 0 || h.Waited < MaxHold || h.Waited > took[0]+took[1] {
		t.Fatalf("HoldStats after two holds (took %v): %+v, want 2 held, 1 expired, waited between MaxHold and %v", took, h, took[0]+took[1])
	}
	// A held Put whose context ends is refused, not queued.
	cctx, cancel := context.WithTimeout(ctx, MaxHold/10)
	defer cancel()
	if err := q.Put(cctx, 3000, Bulk, ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a held Put whose context ended: %v, want its deadline", err)
	}
	if q.Held() != 0 || q.Len() != 2+Burst+2 {
		t.Fatalf("after a refused Put: held %d, queued %d", q.Held(), q.Len())
	}
	if h := q.HoldStats(); h.Held != 3 || h.Expired != 1 {
		t.Fatalf("HoldStats after a refused hold: %+v, want 3 held, 1 expired", h)
	}
	// Close lets a held Put go, to be refused.
	go func() {
		for q.Held() == 0 {
			time.Sleep(time.Millisecond)
		}
		q.Close()
	}()
	start := time.Now()
	if err := q.Put(ctx, 4000, Bulk, ""); !errors.Is(err, ErrClosed) || time.Since(start) >= MaxHold {
		t.Fatalf("a Put held while the queue closed: %v after %v, want ErrClosed at once", err, time.Since(start))
	}
	// No claim found a backlog: a fill is never held.
	q = New[int](4096)
	for i := range 4 * Burst {
		if err := q.Put(ctx, 1, Prompt, ""); err != nil {
			t.Fatal(err)
		}
		if err := q.Put(ctx, i, Bulk, ""); err != nil || q.Held() != 0 {
			t.Fatal("a bulk request held with no backlog")
		}
	}
	if h := q.HoldStats(); h != (HoldStats{}) {
		t.Fatalf("HoldStats of a queue that held nothing: %+v", h)
	}
}
