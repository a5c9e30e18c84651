package plugin

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"
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
