package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
)

// TestGuestGarbageIsCollected pushes ~50 MiB of garbage through a 16 MiB
// instance and checks that it stays healthy and its memory stays bounded.
// (A 4 KiB put loop once ran an instance out of memory after ~17,000 calls;
// the SDK now yields after every call so GC workers run, and the host sets
// GOMEMLIMIT in the guest.)
func TestGuestGarbageIsCollected(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]Grant{"inline": {Config: json.RawMessage(`{"max_size_bytes": 8192}`)}}, Limits{MemoryPages: 256}, "inline")
	ch, err := b.reg.Channel("inline")
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("x"), 8000)
	for i := range 2500 {
		if _, err := ch.Put(context.Background(), "t", payload); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	p, _ := b.reg.Plugin("inline")
	p.pool().mu.Lock()
	defer p.pool().mu.Unlock()
	for _, inst := range p.pool().idle {
		if kib := inst.mod.Memory().Size() / 1024; kib > 12*1024 {
			t.Errorf("guest memory grew to %d KiB", kib)
		}
	}
}
