package plugin

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// TestIdlePluginGoesDormant: a compiled plugin with no instance for its idle
// timeout closes its wazero runtime (machine code, decoded module, guest
// memory: issue 38 item 5), and its next call loads it again from the
// compilation cache and answers as before; the plugin version stays the same.
func TestIdlePluginGoesDormant(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{IdleTimeout: 50 * time.Millisecond}, "backoff")
	pol, err := b.reg.Policy("backoff", nil)
	if err != nil {
		t.Fatal(err)
	}
	in := host.FailureInput{TaskID: "t", TaskType: "x", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3}
	first, err := pol.Decide(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := b.reg.Plugin("backoff")
	awake := p.pool()
	waitFor(t, func() bool {
		b.reg.Reap()
		return infoOf(b.reg, "backoff").Engine == "dormant"
	})
	awake.mu.Lock()
	live, closed := awake.live, awake.closed
	awake.mu.Unlock()
	if live != 0 || !closed {
		t.Fatalf("the compiled pool of a dormant plugin: %d live instances, closed %v", live, closed)
	}
	if in := infoOf(b.reg, "backoff"); in.State != "ready" || in.Instances != 0 {
		t.Fatalf("dormant plugin listed as %+v", in)
	}
	again, err := pol.Decide(context.Background(), in)
	if err != nil || again.Action != first.Action {
		t.Fatalf("call after dormancy: %+v, %v; want %+v", again, err, first)
	}
	if in := infoOf(b.reg, "backoff"); in.Engine != "compiler" || in.Instances != 1 {
		t.Fatalf("woken plugin listed as %+v", in)
	}
	if p2, _ := b.reg.Plugin("backoff"); p2 != p {
		t.Fatal("waking made a new plugin version")
	}
}

// TestDormantFolderPluginWakesAfterItsFileChanged: an operator who drops a
// new module into the plugins folder while a plugin sleeps (half of a new
// pair: the manifest not yet matching) must not leave the sleeping version
// unable to wake — the registry keeps serving it until the new pair is
// whole, so its next call answers as before, from the bytes it was loaded
// from, instead of failing over to another policy.
func TestDormantFolderPluginWakesAfterItsFileChanged(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{IdleTimeout: 50 * time.Millisecond}, "backoff")
	pol, err := b.reg.Policy("backoff", nil)
	if err != nil {
		t.Fatal(err)
	}
	in := host.FailureInput{TaskID: "t", TaskType: "x", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3}
	first, err := pol.Decide(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		b.reg.Reap()
		return infoOf(b.reg, "backoff").Engine == "dormant"
	})
	other, _ := readBuilt(t, "escalate")
	writeAtomic(t, filepath.Join(b.dir, "backoff.wasm"), other)
	again, err := pol.Decide(context.Background(), in)
	if err != nil || again.Action != first.Action {
		t.Fatalf("call after dormancy with the file replaced: %+v, %v; want %+v", again, err, first)
	}
	if in := infoOf(b.reg, "backoff"); in.Engine != "compiler" {
		t.Fatalf("woken plugin listed as %+v", in)
	}
}
