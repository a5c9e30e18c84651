package engine

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// waiters parks long-polling lease calls per tenant and wakes them when work
// may have arrived. A waiter registers before it looks at the queue, so a task
// queued between its look and its park still wakes it (no lost wake-ups).
//
// A woken waiter stands for as many of the tasks that wake waiters as its
// lease call may take (its MaxTasks) until it looks at the queue again: the
// wake-ups of the tasks a batch queues together go to one waiter while it
// has room, not one waiter each, so a burst of enqueues does not send every
// parked worker to claim what one of them takes (each of the others' claims
// a writer's round trip that finds nothing). A waiter that leaves without
// looking again (its call ended, or its look found offers before the tasks
// it stood for were visible to it) passes its wake-ups on.
type waiters struct {
	mu  sync.Mutex
	byT map[string]map[*waiter]struct{}
	// woken are the waiters woken and not yet removed, per tenant: they
	// take the wake-ups of further tasks up to their room.
	woken map[string]map[*waiter]struct{}

	// gen counts, per tenant, the wake-ups no waiter took (no waiter
	// wanted the task or had room for it) and the wake-ups of every
	// waiter of the tenant; epoch counts those of every tenant. A look
	// that found the queue short of ready tasks is marked with them
	// (drained); an arriving lease call of the same kind parks without a
	// look of its own while they have not moved since, for at most
	// drainedFor.
	gen    map[string]uint64
	epoch  uint64
	drains map[string]drainMark
	// drainedFor bounds how long a drained mark holds (drainedHold).
	drainedFor time.Duration
	// skips counts the arriving calls that parked on a drained mark
	// without a look of their own; woke counts the parked calls woken.
	skips, woke atomic.Int64
}

// lookMark is the generation of a tenant's wake-ups when a look began.
type lookMark struct{ gen, epoch uint64 }

type drainMark struct {
	lookMark
	at time.Time
}

// drainedHold bounds how long a drained mark holds: a task made ready by
// time alone (a delay, a retry's backoff) wakes no one, and is otherwise
// found by the parked calls' poll.
const drainedHold = 50 * time.Millisecond

// maxDrains bounds the drained marks kept (one per tenant and set of
// types); past it they start again empty.
const maxDrains = 4096

// lookKey is the kind of a lease call's look: its tenant and its set of
// types.
func lookKey(tenant string, types []string) string {
	if len(types) == 0 {
		return tenant + "\x01"
	}
	ts := slices.Clone(types)
	slices.Sort(ts)
	return tenant + "\x00" + strings.Join(slices.Compact(ts), "\x00")
}

// mark returns the generation of tenant's wake-ups now, before a look.
func (ws *waiters) mark(tenant string) lookMark {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return lookMark{gen: ws.gen[tenant], epoch: ws.epoch}
}

// markDrained records that a look of kind key, begun at m, found fewer
// ready tasks than it asked for.
func (ws *waiters) markDrained(key string, m lookMark, now time.Time) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.drains == nil || len(ws.drains) >= maxDrains {
		ws.drains = map[string]drainMark{}
	}
	ws.drains[key] = drainMark{m, now}
}

// drained reports whether a look of kind key found the queue short of
// ready tasks less than drainedFor ago and no wake-up of tenant went
// untaken (or to every waiter) since it began, and if so how long the mark
// still holds: a call that parks on it looks by then at the latest.
func (ws *waiters) drained(key, tenant string, now time.Time) (time.Duration, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	d, ok := ws.drains[key]
	left := ws.drainedFor - now.Sub(d.at)
	if !ok || d.gen != ws.gen[tenant] || d.epoch != ws.epoch || left <= 0 {
		return 0, false
	}
	return left, true
}

type waiter struct {
	types map[string]bool // nil: any type
	room  int             // tasks its next look may take
	ch    chan struct{}   // closed once to wake
	once  sync.Once
	// stands is how many tasks' wake-ups it took since it was woken, and
	// stood how many of each type (under waiters.mu).
	stands int
	stood  map[string]int
}

func newWaiters() *waiters {
	return &waiters{byT: map[string]map[*waiter]struct{}{}, woken: map[string]map[*waiter]struct{}{}, gen: map[string]uint64{}, drainedFor: drainedHold}
}

func (w *waiter) wake() { w.once.Do(func() { close(w.ch) }) }

func (w *waiter) wants(taskType string) bool { return w.types == nil || w.types[taskType] }

// stand records that w takes the wake-ups of k tasks of taskType.
func (w *waiter) stand(taskType string, k int) {
	if w.stood == nil {
		w.stood = map[string]int{}
	}
	w.stood[taskType] += k
	w.stands += k
}

// add registers a waiter of tenant for types (none: any) whose look takes up
// to room tasks.
func (ws *waiters) add(tenant string, types []string, room int) *waiter {
	w := &waiter{ch: make(chan struct{}), room: max(room, 1)}
	if len(types) > 0 {
		w.types = make(map[string]bool, len(types))
		for _, t := range types {
			w.types[t] = true
		}
	}
	ws.mu.Lock()
	m := ws.byT[tenant]
	if m == nil {
		m = map[*waiter]struct{}{}
		ws.byT[tenant] = m
	}
	m[w] = struct{}{}
	ws.mu.Unlock()
	return w
}

// remove unregisters w before it looks at the queue again: the wake-ups it
// took are its look's to answer.
func (ws *waiters) remove(tenant string, w *waiter) {
	ws.mu.Lock()
	ws.drop(tenant, w)
	ws.mu.Unlock()
}

// leave unregisters w when it will not look at the queue again, and passes
// the wake-ups it took on to the other waiters, type by type.
func (ws *waiters) leave(tenant string, w *waiter) {
	ws.mu.Lock()
	for t, n := range ws.drop(tenant, w) {
		ws.wakeLocked(tenant, t, n)
	}
	ws.mu.Unlock()
}

// drop unregisters w and returns the wake-ups it took, by type.
func (ws *waiters) drop(tenant string, w *waiter) (stood map[string]int) {
	if m := ws.byT[tenant]; m != nil {
		delete(m, w)
		if len(m) == 0 {
			delete(ws.byT, tenant)
		}
	}
	if m := ws.woken[tenant]; m != nil {
		if _, ok := m[w]; ok {
			stood = w.stood
			delete(m, w)
			if len(m) == 0 {
				delete(ws.woken, tenant)
			}
		}
	}
	return stood
}

// wake hands the wake-ups of n tasks of tenant and taskType to the woken
// waiters that want them and have room, then wakes as many parked ones as
// the rest needs.
func (ws *waiters) wake(tenant, taskType string, n int) {
	ws.mu.Lock()
	ws.wakeLocked(tenant, taskType, n)
	ws.mu.Unlock()
}

func (ws *waiters) wakeLocked(tenant, taskType string, n int) {
	for w := range ws.woken[tenant] {
		if n <= 0 {
			return
		}
		if w.wants(taskType) && w.stands < w.room {
			k := min(n, w.room-w.stands)
			w.stand(taskType, k)
			n -= k
		}
	}
	for w := range ws.byT[tenant] {
		if n <= 0 {
			return
		}
		if w.wants(taskType) {
			w.wake()
			ws.woke.Add(1)
			delete(ws.byT[tenant], w)
			k := min(n, w.room)
			w.stand(taskType, k)
			n -= k
			m := ws.woken[tenant]
			if m == nil {
				m = map[*waiter]struct{}{}
				ws.woken[tenant] = m
			}
			m[w] = struct{}{}
		}
	}
	if n > 0 {
		// No waiter stands for these: the next arriving call looks.
		ws.gen[tenant]++
	}
}

// wakeAll wakes every waiter of tenant.
func (ws *waiters) wakeAll(tenant string) {
	ws.mu.Lock()
	ws.wakeAllLocked(tenant)
	ws.mu.Unlock()
}

func (ws *waiters) wakeAllLocked(tenant string) {
	for w := range ws.byT[tenant] {
		w.wake()
		ws.woke.Add(1)
	}
	delete(ws.byT, tenant)
	ws.gen[tenant]++
}

func (ws *waiters) wakeEveryone() {
	ws.mu.Lock()
	for _, m := range ws.byT {
		for w := range m {
			w.wake()
		}
	}
	ws.byT = map[string]map[*waiter]struct{}{}
	ws.epoch++
	ws.mu.Unlock()
}
