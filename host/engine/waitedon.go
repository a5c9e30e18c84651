package engine

import "sync"

// waitedOn remembers the tasks this engine's enqueues marked as waited on
// (store.DependencyWriter.MarkWaitedOn), for the terminal writes built from
// a copy of a task read before the marker was written: a completion built
// from the copy this engine kept when it leased the task. Such a write
// would otherwise be fenced out on the marker (store.Fence.NoWaiters) and
// built again from the row. It is a hint that only saves that second
// build: an entry of an enqueue that rolled back makes one terminal write
// settle nothing, and a lost entry (the set is bounded, and other hosts
// have their own) leaves the fence to catch the marker. An entry is
// dropped once the terminal write that used it has committed (afterCommit),
// not when the write is built: a transaction rolled back and run again (a
// driver reruns a batch when another request of it fails) builds the write
// again and needs the entry again.
type waitedOn struct {
	mu sync.Mutex
	m  map[waitedKey]struct{}
}

type waitedKey struct{ tenant, id string }

// maxWaitedOn bounds the set; past it the set starts again empty.
const maxWaitedOn = 1 << 16

func (w *waitedOn) add(tenant string, ids []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil || len(w.m)+len(ids) > maxWaitedOn {
		w.m = make(map[waitedKey]struct{}, len(ids))
	}
	for _, id := range ids {
		w.m[waitedKey{tenant, id}] = struct{}{}
	}
}

func (w *waitedOn) has(tenant, id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.m[waitedKey{tenant, id}]
	return ok
}

func (w *waitedOn) drop(tenant, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, waitedKey{tenant, id})
}
