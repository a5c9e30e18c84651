package engine

import (
	"testing"
	"time"
)

// wokenOf returns the waiters of ws whose channel is closed.
func wokenOf(ws ...*waiter) []*waiter {
	var out []*waiter
	for _, w := range ws {
		select {
		case <-w.ch:
			out = append(out, w)
		default:
		}
	}
	return out
}

// The wake-ups of a burst of tasks go to one parked waiter while it has
// room (its lease call's max_tasks), not to a waiter each; past its room,
// and once it has looked again, they wake another.
func TestWakeUpsOfABurstGoToOneWaiterWhileItHasRoom(t *testing.T) {
	ws := newWaiters()
	a, b, c := ws.add("acme", []string{"work"}, 4), ws.add("acme", []string{"work"}, 4), ws.add("acme", []string{"work"}, 4)
	for range 3 {
		ws.wake("acme", "work", 1)
	}
	got := wokenOf(a, b, c)
	if len(got) != 1 {
		t.Fatalf("three wake-ups for waiters with room for 4 woke %d waiters, want 1", len(got))
	}
	ws.wake("acme", "work", 2) // the first has room for one more: the other wakes a second
	if got := wokenOf(a, b, c); len(got) != 2 {
		t.Fatalf("wake-ups past the first waiter's room woke %d waiters in all, want 2", len(got))
	}
	// Once the woken ones look again (remove), a wake-up wakes the third.
	for _, w := range wokenOf(a, b, c) {
		ws.remove("acme", w)
	}
	ws.wake("acme", "work", 1)
	if got := wokenOf(a, b, c); len(got) != 3 {
		t.Fatalf("a wake-up after the woken waiters looked again woke %d in all, want 3", len(got))
	}
	// A wake-up of another type is not taken by a waiter that does not
	// want it (the woken ones have looked again: none stands for it).
	for _, w := range []*waiter{a, b, c} {
		ws.remove("acme", w)
	}
	d := ws.add("acme", []string{"other"}, 4)
	ws.wake("acme", "work", 1)
	if len(wokenOf(d)) != 0 {
		t.Fatal("a wake-up of type work woke a waiter for type other")
	}
}

// A waiter that leaves without looking again passes the wake-ups it took on
// to another waiter, so no ready task is left without a look.
func TestAWaiterThatLeavesPassesItsWakeUpsOn(t *testing.T) {
	ws := newWaiters()
	a, b := ws.add("acme", []string{"work"}, 16), ws.add("acme", []string{"work"}, 16)
	ws.wake("acme", "work", 1)
	ws.wake("acme", "work", 1)
	got := wokenOf(a, b)
	if len(got) != 1 {
		t.Fatalf("setup: two wake-ups woke %d waiters, want 1", len(got))
	}
	other := a
	if got[0] == a {
		other = b
	}
	ws.leave("acme", got[0])
	if len(wokenOf(other)) != 1 {
		t.Fatal("the wake-ups of a waiter that left without looking were not passed on")
	}
	// One that looks again (remove) does not pass them on.
	c := ws.add("acme", []string{"work"}, 16)
	ws.remove("acme", other)
	if len(wokenOf(c)) != 0 {
		t.Fatal("a waiter that looked again passed its wake-ups on")
	}
}

// A drained mark holds while no wake-up went untaken since its look began,
// and for at most drainedFor.
func TestADrainedMarkHoldsUntilAWakeUpGoesUntaken(t *testing.T) {
	ws := newWaiters()
	isDrained := func(key, tenant string, now time.Time) bool {
		_, ok := ws.drained(key, tenant, now)
		return ok
	}
	now := time.Now()
	key := lookKey("acme", []string{"work"})
	if isDrained(key, "acme", now) {
		t.Fatal("a kind of look never made is drained")
	}
	ws.markDrained(key, ws.mark("acme"), now)
	if !isDrained(key, "acme", now) {
		t.Fatal("a look that found the queue short is not drained")
	}
	if isDrained(key, "acme", now.Add(ws.drainedFor)) {
		t.Fatal("a drained mark held past drainedFor")
	}
	if left, _ := ws.drained(key, "acme", now.Add(ws.drainedFor/4)); left != ws.drainedFor*3/4 {
		t.Fatalf("a mark a quarter through its hold has %s left, want %s", left, ws.drainedFor*3/4)
	}
	if isDrained(lookKey("acme", []string{"other"}), "acme", now) {
		t.Fatal("a look of other types is drained")
	}
	// A wake-up a parked waiter takes keeps the mark (that waiter looks),
	// and so does one a woken waiter with room takes.
	w := ws.add("acme", []string{"work"}, 4)
	ws.wake("acme", "work", 1)
	if len(wokenOf(w)) != 1 || !isDrained(key, "acme", now) {
		t.Fatal("a wake-up a parked waiter took ended the drained mark (or woke no one)")
	}
	ws.wake("acme", "work", 2)
	if !isDrained(key, "acme", now) {
		t.Fatal("a wake-up a woken waiter with room took ended the drained mark")
	}
	// One no waiter has room for ends it.
	ws.wake("acme", "work", 2) // room for one: the other goes untaken
	if isDrained(key, "acme", now) {
		t.Fatal("a wake-up no waiter took left the look drained")
	}
	for name, end := range map[string]func(){
		"with no waiter":                func() { ws.wake("acme", "work", 1) },
		"of every waiter of the tenant": func() { ws.wakeAll("acme") },
		"of every waiter":               ws.wakeEveryone,
	} {
		ws.markDrained(key, ws.mark("acme"), now)
		end()
		if isDrained(key, "acme", now) {
			t.Errorf("a wake-up %s left the look drained", name)
		}
	}
	// Another tenant's wake-ups leave it.
	ws.markDrained(key, ws.mark("acme"), now)
	ws.wake("globex", "work", 1)
	if !isDrained(key, "acme", now) {
		t.Error("another tenant's wake-up ended the drained mark")
	}
	// A mark taken before a wake-up went untaken is stale when recorded.
	m := ws.mark("acme")
	ws.wake("acme", "work", 1)
	ws.markDrained(key, m, now)
	if isDrained(key, "acme", now) {
		t.Error("a look begun before an untaken wake-up was marked drained")
	}
}

// A waiter of several types, or of any, passes on what it took type by
// type: a parked waiter of another type is not woken for it, and one that
// wants it is, once.
func TestALeavingWaiterPassesItsWakeUpsOnByType(t *testing.T) {
	for name, types := range map[string][]string{"several types": {"work", "merge"}, "any type": nil} {
		ws := newWaiters()
		w := ws.add("acme", types, 16)
		ws.wake("acme", "work", 2)
		if len(wokenOf(w)) != 1 {
			t.Fatalf("%s: setup: the waiter was not woken", name)
		}
		merge1, merge2, work := ws.add("acme", []string{"merge"}, 16), ws.add("acme", []string{"merge"}, 16), ws.add("acme", []string{"work"}, 16)
		ws.leave("acme", w)
		if len(wokenOf(work)) != 1 || len(wokenOf(merge1, merge2)) != 0 {
			t.Errorf("%s: leaving with two wake-ups of type work woke %d waiters of work and %d of merge, want 1 and 0",
				name, len(wokenOf(work)), len(wokenOf(merge1, merge2)))
		}
	}
}

func TestLookKeyIgnoresOrderAndRepeats(t *testing.T) {
	if lookKey("acme", []string{"b", "a", "b"}) != lookKey("acme", []string{"a", "b"}) {
		t.Error("the same types in another order are another kind of look")
	}
	if lookKey("acme", nil) == lookKey("acme", []string{"*"}) || lookKey("acme", []string{"a"}) == lookKey("acmea", nil) {
		t.Error("distinct looks share a key")
	}
}
