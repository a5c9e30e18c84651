package api

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestRunBatchKeepsEachKeysOrder: entries sharing a key never run at the
// same time and run in their order; entries without a key, and different
// keys, do run at once; every entry runs exactly once.
func TestRunBatchKeepsEachKeysOrder(t *testing.T) {
	const n, keys = 400, 7
	key := func(i int) string {
		if i%keys == 0 {
			return ""
		}
		return string(rune('a' + i%keys))
	}
	var mu sync.Mutex
	last := map[string]int{}
	active := map[string]*atomic.Int32{}
	for k := range keys {
		active[string(rune('a'+k))] = &atomic.Int32{}
	}
	var ran [n]atomic.Int32
	var now, most atomic.Int32
	RunBatch(n, 16, key, func(i int) {
		ran[i].Add(1)
		c := now.Add(1)
		defer now.Add(-1)
		for m := most.Load(); c > m && !most.CompareAndSwap(m, c); m = most.Load() {
		}
		k := key(i)
		if k == "" {
			runtime.Gosched()
			return
		}
		if active[k].Add(1) != 1 {
			t.Errorf("two entries of key %s at once", k)
		}
		mu.Lock()
		if p, ok := last[k]; ok && p > i {
			t.Errorf("entry %d of key %s ran after %d", i, k, p)
		}
		last[k] = i
		mu.Unlock()
		for range 10 {
			runtime.Gosched()
		}
		active[k].Add(-1)
	})
	for i := range ran {
		if ran[i].Load() != 1 {
			t.Fatalf("entry %d ran %d times", i, ran[i].Load())
		}
	}
	if most.Load() < 2 {
		t.Fatalf("at most %d entries ran at once", most.Load())
	}
}
