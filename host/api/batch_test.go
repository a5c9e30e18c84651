package api

import (
	"fmt"
	"runtime"
	"strings"
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
	}, func(i int, v any, _ []byte) {
		t.Errorf("entry %d panicked: %v", i, v)
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

// TestRunBatchRecoversEachEntry: a panicking entry is handed to panicked
// with its value and stack and answered alone; the process lives on, and
// every other entry, the later ones of the same key included, still runs.
func TestRunBatchRecoversEachEntry(t *testing.T) {
	const n = 50
	key := func(i int) string {
		if i%2 == 0 {
			return "k"
		}
		return ""
	}
	var ran [n]atomic.Int32
	var mu sync.Mutex
	caught := map[int]string{}
	RunBatch(n, 8, key, func(i int) {
		if i%10 == 0 {
			panic(fmt.Sprintf("boom %d", i))
		}
		ran[i].Add(1)
	}, func(i int, v any, stack []byte) {
		if !strings.Contains(string(stack), "TestRunBatchRecoversEachEntry") {
			t.Errorf("entry %d: the stack does not show where it panicked:\n%s", i, stack)
		}
		mu.Lock()
		caught[i] = fmt.Sprint(v)
		mu.Unlock()
	})
	for i := range n {
		if i%10 == 0 {
			if caught[i] != fmt.Sprintf("boom %d", i) {
				t.Fatalf("entry %d: panicked got %q", i, caught[i])
			}
			continue
		}
		if ran[i].Load() != 1 || caught[i] != "" {
			t.Fatalf("entry %d ran %d times, caught %q", i, ran[i].Load(), caught[i])
		}
	}
	if len(caught) != n/10 {
		t.Fatalf("%d panics caught, want %d", len(caught), n/10)
	}
}
