package plugin

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// hogParams asks the hog validator to allocate and touch 40 MiB.
var hogParams = json.RawMessage(`{"mib": 40}`)

// idleSizes returns the memory sizes, in bytes, of a plugin's pooled instances.
func idleSizes(p *Plugin) []uint32 {
	pl := p.pool()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	var out []uint32
	for _, inst := range pl.idle {
		out = append(out, inst.mod.Memory().Size())
	}
	return out
}

// TestGrownInstanceNotPooled: an instance whose memory grew past
// Limits.KeepPages (a hostile validator touching 40 MiB of its 64 MiB cap)
// is closed after its call instead of going back to the pool, so a pool
// holds at most MaxInstances × KeepPages however its plugin behaves; an
// instance that stayed small is pooled as before.
func TestGrownInstanceNotPooled(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{Timeout: 30 * time.Second, MaxInstances: 2}, "hog")
	v, err := b.reg.Validator("hog", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := b.reg.Plugin("hog")
	keep := uint32(p.limits.KeepPages) << 16
	ctx := context.Background()
	const calls = 6
	before := p.Stats()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range calls / 2 {
				if err := v.Validate(ctx, "hog", hogParams); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if live, idle := p.Instances(); live != 0 || idle != 0 {
		t.Errorf("after %d calls that grew their instance to 40 MiB: %d live, %d idle instances (sizes %v), want none kept", calls, live, idle, idleSizes(p))
	}
	if cold := p.Stats().ColdStarts - before.ColdStarts; cold < calls-1 {
		t.Errorf("%d cold starts for %d grown calls: grown instances were reused", cold, calls)
	}
	if err := v.Validate(ctx, "fine", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	sizes := idleSizes(p)
	if len(sizes) != 1 || sizes[0] > keep {
		t.Fatalf("after a call that stayed small: pooled sizes %v, want one instance of at most %d bytes", sizes, keep)
	}
}

// TestGuestMemoryOutsideGoHeap: guest memory lives in a mapping of its own,
// not in the Go heap (where GOGC 400 let the heap grow to five times it),
// and is unmapped when its instance closes. Not parallel: it reads the
// process's heap.
func TestGuestMemoryOutsideGoHeap(t *testing.T) {
	if !guestMapping {
		t.Skip("off Linux guest memory is wazero's own, in the Go heap")
	}
	mappedBefore := guestMapped.Load()
	b := setup(t, nil, Limits{Timeout: 30 * time.Second, KeepPages: 1024}, "hog")
	v, err := b.reg.Validator("hog", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := b.reg.Plugin("hog")
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	heapBefore := heap()
	if err := v.Validate(context.Background(), "hog", hogParams); err != nil {
		t.Fatal(err)
	}
	sizes := idleSizes(p)
	if len(sizes) != 1 || sizes[0] < 40<<20 {
		t.Fatalf("pooled sizes %v, want one instance of 40 MiB or more (KeepPages is the cap)", sizes)
	}
	if grew := int64(heap()) - int64(heapBefore); grew > 16<<20 {
		t.Errorf("the live Go heap grew by %d MiB with a pooled instance of %d MiB", grew>>20, sizes[0]>>20)
	}
	if guestMapped.Load() <= mappedBefore {
		t.Errorf("no guest memory mapped while an instance is pooled")
	}
	b.reg.Close()
	if m := guestMapped.Load(); m != mappedBefore {
		t.Errorf("%d bytes of guest memory still mapped after the registry closed (%d before)", m-mappedBefore, mappedBefore)
	}
}

// BenchmarkHostileValidatorMemory runs b.N calls of a hostile validator that
// touches 40 MiB of its 64 MiB cap, four at once (MaxInstances' default),
// at the gate's GOGC, and reports the process's memory: its peak RSS during
// the calls and its RSS after them (/proc/self/status; the peak is reset
// through clear_refs first), the live Go heap after a GC, the bytes the Go
// heap allocated per call, and the guest memory the pool kept.
func BenchmarkHostileValidatorMemory(b *testing.B) {
	prev := debug.SetGCPercent(host.GCPercent)
	defer debug.SetGCPercent(prev)
	bd := setup(b, nil, Limits{Timeout: 30 * time.Second}, "hog")
	v, err := bd.reg.Validator("hog", nil)
	if err != nil {
		b.Fatal(err)
	}
	p, _ := bd.reg.Plugin("hog")
	ctx := context.Background()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	allocated := ms.TotalAlloc
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // reset VmHWM
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range 4 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := v.Validate(ctx, "hog", hogParams); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	peak, rss := procKB("VmHWM"), procKB("VmRSS")
	runtime.GC()
	runtime.ReadMemStats(&ms)
	var kept uint64
	for _, s := range idleSizes(p) {
		kept += uint64(s)
	}
	b.ReportMetric(float64(peak)/1024, "peak-RSS-MB")
	b.ReportMetric(float64(rss)/1024, "RSS-MB")
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(ms.TotalAlloc-allocated)/(1<<20)/float64(b.N), "alloc-MiB/call")
	b.ReportMetric(float64(kept)/(1<<20), "pooled-MiB")
}

// procKB reads a "<key>: <n> kB" line of /proc/self/status (0 if absent).
func procKB(key string) int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, key+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// TestStartThatExitsRefused: a plugin whose start function exits with
// status 0 (proc_exit in _initialize) gets a closed module back from
// wazero; the load is refused, nothing runs on the module (its memory is
// the gate's to unmap, not wazero's: running on an unmapped memory would
// bring the process down), and no mapping is left behind. Not parallel: it
// reads the process's count of mappings.
func TestStartThatExitsRefused(t *testing.T) {
	mappedBefore := guestMapped.Load()
	rt := newTestRuntime(t, Limits{})
	wasm, man := readBuilt(t, "exitinit")
	_, err := rt.Load(context.Background(), wasm, man, Grant{}, "test")
	if err == nil || !strings.Contains(err.Error(), "start function exited") {
		t.Fatalf("got %v, want the load refused for its exiting start", err)
	}
	if m := guestMapped.Load(); m != mappedBefore {
		t.Fatalf("%d bytes of guest memory still mapped after the refused load", m-mappedBefore)
	}
}

// TestExitingCallUnmaps: a call that exits (proc_exit, its memory grown)
// closes its module inside wazero, which frees nothing here; the gate
// closes the instance and unmaps its memory. Not parallel: it reads the
// process's count of mappings.
func TestExitingCallUnmaps(t *testing.T) {
	if !guestMapping {
		t.Skip("off Linux guest memory is wazero's own, in the Go heap")
	}
	mappedBefore := guestMapped.Load()
	b := setup(t, nil, Limits{Timeout: 30 * time.Second}, "hog")
	v, err := b.reg.Validator("hog", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(context.Background(), "hog-exit", hogParams); err == nil {
		t.Fatal("the call that exited succeeded")
	}
	b.reg.Close()
	if m := guestMapped.Load(); m != mappedBefore {
		t.Fatalf("%d MiB of guest memory still mapped after the registry closed", (m-mappedBefore)>>20)
	}
}
