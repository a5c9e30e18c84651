package engine

import "sync"

// waiters parks long-polling lease calls per tenant and wakes them when work
// may have arrived. A waiter registers before it looks at the queue, so a task
// queued between its look and its park still wakes it (no lost wake-ups).
type waiters struct {
	mu  sync.Mutex
	byT map[string]map[*waiter]struct{}
}

type waiter struct {
	types map[string]bool // nil: any type
	ch    chan struct{}   // closed once to wake
	once  sync.Once
}

func newWaiters() *waiters { return &waiters{byT: map[string]map[*waiter]struct{}{}} }

func (w *waiter) wake() { w.once.Do(func() { close(w.ch) }) }

func (ws *waiters) add(tenant string, types []string) *waiter {
	w := &waiter{ch: make(chan struct{})}
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

func (ws *waiters) remove(tenant string, w *waiter) {
	ws.mu.Lock()
	if m := ws.byT[tenant]; m != nil {
		delete(m, w)
		if len(m) == 0 {
			delete(ws.byT, tenant)
		}
	}
	ws.mu.Unlock()
}

// wake wakes up to n waiters of tenant that want taskType, and removes them.
func (ws *waiters) wake(tenant, taskType string, n int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.byT[tenant] {
		if n <= 0 {
			return
		}
		if w.types == nil || w.types[taskType] {
			w.wake()
			delete(ws.byT[tenant], w)
			n--
		}
	}
}

// wakeAll wakes every waiter of tenant.
func (ws *waiters) wakeAll(tenant string) {
	ws.mu.Lock()
	for w := range ws.byT[tenant] {
		w.wake()
	}
	delete(ws.byT, tenant)
	ws.mu.Unlock()
}

func (ws *waiters) wakeEveryone() {
	ws.mu.Lock()
	for _, m := range ws.byT {
		for w := range m {
			w.wake()
		}
	}
	ws.byT = map[string]map[*waiter]struct{}{}
	ws.mu.Unlock()
}
