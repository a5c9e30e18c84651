package plugin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// TestDropInReload drops new versions into a watched folder the way
// docs/plugins.md says to (manifest naming the module's sha256, each file
// renamed in): a good one is picked up without a restart, half of a new pair
// is never run, broken ones are refused while the previous version keeps
// serving, and files briefly removed and copied back do not unload it.
func TestDropInReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyPlugin(t, "backoff", "pol", dir)
	rt := newTestRuntime(t, Limits{})
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, PollInterval: 20 * time.Millisecond, RemoveAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go reg.Run(ctx)

	pol, err := reg.Policy("pol", nil)
	if err != nil {
		t.Fatal(err)
	}
	in := host.FailureInput{TaskID: "t", TaskType: "fine", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3}
	reason := func() string {
		t.Helper()
		d, err := pol.Decide(context.Background(), in)
		if err != nil {
			t.Fatalf("decide: %v", err)
		}
		return d.Reason
	}
	if r := reason(); r != "" {
		t.Fatalf("backoff gives no reason for a retry, got %q", r)
	}
	first, _ := reg.Plugin("pol")

	// Half of a new pair (the module, its manifest not yet there): the old
	// version keeps serving, nothing is refused.
	hwasm, hman := readBuilt(t, "hostile")
	hman = []byte(setField(replaceName(string(hman), "hostile", "pol"), "wasm_sha256", Digest(hwasm)))
	writeAtomic(t, filepath.Join(dir, "pol.wasm"), hwasm)
	reg.Scan(context.Background())
	if p, _ := reg.Plugin("pol"); p != first {
		t.Fatalf("a module was loaded under another module's manifest: %s %s", p.Manifest.Version, p.Digest)
	}
	if in := infoOf(reg, "pol"); in.State != "ready" || in.Refused != "" {
		t.Fatalf("half a pair: %+v", in)
	}
	if r := reason(); r != "" {
		t.Fatalf("half a pair ran: reason %q", r)
	}

	// The other half: the new version loads and the same adapter answers from it.
	writeAtomic(t, filepath.Join(dir, "pol.manifest.json"), hman)
	waitFor(t, func() bool { p, _ := reg.Plugin("pol"); return p != first })
	if r := reason(); r != "hostile-ok" {
		t.Fatalf("after reload: reason %q", r)
	}
	second, _ := reg.Plugin("pol")
	if second.Digest != Digest(hwasm) || second.Manifest.Version != "0.0.1" {
		t.Fatalf("loaded %s v%s, want the hostile module", second.Digest, second.Manifest.Version)
	}
	// The loader closes the replaced version just after the swap the wait
	// above saw: its instances go then.
	waitFor(t, func() bool { live, _ := first.Instances(); return live == 0 })

	// rm, then cp: the plugin is never unloaded meanwhile.
	os.Remove(filepath.Join(dir, "pol.wasm"))
	os.Remove(filepath.Join(dir, "pol.manifest.json"))
	reg.Scan(context.Background())
	if p, err := reg.Plugin("pol"); p != second {
		t.Fatalf("files briefly removed unloaded the plugin: %v", err)
	}
	if r := reason(); r != "hostile-ok" {
		t.Fatalf("while removed: reason %q", r)
	}
	writePair(t, dir, "pol", hwasm, hman)
	reg.Scan(context.Background())
	if p, _ := reg.Plugin("pol"); p != second {
		t.Fatal("the same files copied back reloaded the plugin")
	}

	// A broken module (with a manifest that names it): refused, the
	// previous version keeps serving.
	_, bman := readBuilt(t, "backoff")
	writePair(t, dir, "pol", []byte("\x00asm\x01\x00\x00\x00garbage"), []byte(replaceName(string(bman), "backoff", "pol")))
	waitFor(t, func() bool { return strings.Contains(infoOf(reg, "pol").Refused, "compile") })
	if p, _ := reg.Plugin("pol"); p != second {
		t.Fatal("a refused version replaced the serving one")
	}
	if r := reason(); r != "hostile-ok" {
		t.Fatalf("after refusal: reason %q", r)
	}
	if in := infoOf(reg, "pol"); in.State != "ready" || in.Version != "0.0.1" {
		t.Fatalf("info after refusal: %+v", in)
	}

	// A broken manifest (beside a good module): refused as well.
	bwasm, _ := readBuilt(t, "backoff")
	writeAtomic(t, filepath.Join(dir, "pol.wasm"), bwasm)
	writeAtomic(t, filepath.Join(dir, "pol.manifest.json"), []byte(`{"name": "pol", "kind": "sorcery"}`))
	waitFor(t, func() bool { return strings.Contains(infoOf(reg, "pol").Refused, "manifest") })
	if r := reason(); r != "hostile-ok" {
		t.Fatalf("after manifest refusal: reason %q", r)
	}

	// A manifest that names no module: refused, with the way to fix it.
	writeAtomic(t, filepath.Join(dir, "pol.manifest.json"), []byte(setField(replaceName(string(bman), "backoff", "pol"), "wasm_sha256", nil)))
	waitFor(t, func() bool { return strings.Contains(infoOf(reg, "pol").Refused, "wasm_sha256") })
	if r := reason(); r != "hostile-ok" {
		t.Fatalf("after unnamed module: reason %q", r)
	}

	// Fixing the manifest loads the new version and clears the refusal.
	copyPlugin(t, "backoff", "pol", dir)
	waitFor(t, func() bool { return infoOf(reg, "pol").Version == "1.0.0" })
	if in := infoOf(reg, "pol"); in.Refused != "" || in.Calls == 0 {
		t.Fatalf("info after fix: %+v", in)
	}
}

// TestDropInRemoved: a plugin whose files stay gone for RemoveAfter is
// unloaded, and calls through an existing adapter fail cleanly.
func TestDropInRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyPlugin(t, "backoff", "pol", dir)
	rt := newTestRuntime(t, Limits{})
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, RemoveAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	pol, err := reg.Policy("pol", nil)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "pol.wasm"))
	os.Remove(filepath.Join(dir, "pol.manifest.json"))
	waitFor(t, func() bool { reg.Scan(context.Background()); _, err := reg.Plugin("pol"); return err != nil })
	in := host.FailureInput{TaskID: "t", TaskType: "fine", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3}
	if _, err := pol.Decide(context.Background(), in); !host.IsCode(err, host.CodePluginUnavailable) {
		t.Fatalf("removed plugin: %v, want plugin_unavailable", err)
	}
}

func TestBuiltinsAndOverride(t *testing.T) {
	t.Parallel()
	builtins := t.TempDir()
	copyPlugin(t, "backoff", "backoff", builtins)
	// A built-in whose module was never built is listed as missing.
	_, man := readBuilt(t, "escalate")
	os.WriteFile(filepath.Join(builtins, "escalate.manifest.json"), man, 0o644)
	dir := t.TempDir()
	rt := newTestRuntime(t, Limits{})
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, Builtins: os.DirFS(builtins), RemoveAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	if in := infoOf(reg, "escalate"); in.State != "missing" {
		t.Fatalf("escalate: %+v", in)
	}
	if in := infoOf(reg, "backoff"); in.State != "ready" || in.Source != "builtin" || len(in.Digest) != 64 {
		t.Fatalf("backoff: %+v", in)
	}
	// The folder overrides a built-in of the same name, and removing it restores the built-in.
	copyPlugin(t, "hostile", "backoff", dir)
	reg.Scan(context.Background())
	if in := infoOf(reg, "backoff"); in.Version != "0.0.1" {
		t.Fatalf("override: %+v", in)
	}
	os.Remove(filepath.Join(dir, "backoff.wasm"))
	waitFor(t, func() bool { reg.Scan(context.Background()); return infoOf(reg, "backoff").Source == "builtin" })
	if in := infoOf(reg, "backoff"); in.Source != "builtin" {
		t.Fatalf("restore: %+v", in)
	}
}

func TestPoolShrinksToZero(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{IdleTimeout: time.Millisecond}, "backoff")
	pol, _ := b.reg.Policy("backoff", nil)
	in := host.FailureInput{TaskID: "t", TaskType: "x", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 1}
	if _, err := pol.Decide(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	b.reg.Reap()
	p, _ := b.reg.Plugin("backoff")
	if live, _ := p.Instances(); live != 0 {
		t.Fatalf("%d instances after reap, want 0", live)
	}
	cold := p.Stats().ColdStarts
	if _, err := pol.Decide(context.Background(), in); err != nil {
		t.Fatalf("cold start after shrinking to zero: %v", err)
	}
	if p.Stats().ColdStarts != cold+1 {
		t.Fatal("expected a cold start")
	}
}

func infoOf(reg *Registry, name string) Info {
	for _, in := range reg.List() {
		if in.Name == name {
			return in
		}
	}
	return Info{}
}

// waitFor polls cond until it holds, failing the test after a bound (below).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	// A reload compiles the new module. Alone under -race with a cold
	// compilation cache TestDropInReload takes 17 s here; with this package's
	// parallel tests compiling every plugin at once, and a second test run on
	// the same 2 cores, one compile took over 90 s. The bound only ends a
	// test that would otherwise hang.
	waitForWithin(t, 5*time.Minute, cond)
}

// waitForWithin is waitFor with its bound: for a wait that spans a
// backoff's next try (up to retryMax) and a compile besides.
func waitForWithin(t *testing.T, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in %v", bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChannelReloadRaceUsesAnsweringVersion: a put that races a reload is
// answered by the new version with the new version's operator config and
// limits, never with those of the version it first looked up. The first
// version is the inline module with no grant (limit 4096 bytes); the second
// is the same code with a custom section appended (another module, another
// digest) that the operator granted a limit of 8 bytes.
func TestChannelReloadRaceUsesAnsweringVersion(t *testing.T) {
	t.Parallel()
	wasm, man := readBuilt(t, "inline")
	v2 := append(append([]byte(nil), wasm...), wasmSection(0, append(wasmName("version"), "two"...))...)
	grants := map[string]Grant{"inline": {Config: json.RawMessage(`{"max_size_bytes": 8}`), SHA256: []string{Digest(v2)}}}
	b := setup(t, grants, Limits{MaxInstances: 1}, "inline")
	ch, err := b.reg.Channel("inline")
	if err != nil {
		t.Fatal(err)
	}
	v1, _ := b.reg.Plugin("inline")
	if caps, _ := ch.Capabilities(context.Background()); caps.MaxSizeBytes != 4096 {
		t.Fatalf("first version's limit %d, want 4096 (no grant)", caps.MaxSizeBytes)
	}

	// Hold the first version's only instance slot, so the put looks it up,
	// then waits for an instance while the reload retires it.
	v1.sem <- struct{}{}
	type answer struct {
		ptr string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		ptr, err := ch.Put(context.Background(), "task-1", []byte("more than eight bytes"))
		done <- answer{ptr, err}
	}()
	for deadline := time.Now().Add(30 * time.Second); v1.pool().waiting.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the put never waited for the first version's instance")
		}
	}
	writePair(t, b.dir, "inline", v2, man)
	b.reg.Scan(context.Background())
	if p, _ := b.reg.Plugin("inline"); p.Digest != Digest(v2) {
		t.Fatalf("the second version did not load: %+v", b.reg.List())
	}
	<-v1.sem

	a := <-done
	if !host.IsCode(a.err, host.CodeTooLarge) {
		t.Fatalf("put answered by the second version got %q, %v; want too_large by its own limit of 8 bytes", a.ptr, a.err)
	}
}

// TestReloadKeepsTheKind: a new version dropped in under a serving
// plugin's name with another kind (a validator's files replaced by a
// policy's, a built-in channel overridden by a validator) is refused with
// the reason logged and listed, and the serving version keeps serving its
// callers. Once the drop-in's files stayed gone long enough for it to be
// unloaded, the name takes a plugin of the other kind.
func TestReloadKeepsTheKind(t *testing.T) {
	t.Parallel()
	builtins := t.TempDir()
	copyPlugin(t, "inline", "inline", builtins)
	dir := t.TempDir()
	copyPlugin(t, "safe-paths", "check", dir)
	rt := newTestRuntime(t, Limits{})
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, Builtins: os.DirFS(builtins), RemoveAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	ctx := context.Background()
	v, err := reg.Validator("check", nil)
	if err != nil {
		t.Fatal(err)
	}
	serving, _ := reg.Plugin("check")

	copyPlugin(t, "backoff", "check", dir)
	reg.Scan(ctx)
	in := infoOf(reg, "check")
	if p, _ := reg.Plugin("check"); p != serving || in.Kind != KindValidator || in.State != "ready" ||
		!strings.Contains(in.Refused, `manifest kind "policy" is not the serving version's (validator)`) {
		t.Fatalf("a policy dropped in over a validator: %+v", in)
	}
	if err := v.Validate(ctx, "x", json.RawMessage(`{"path": "../x"}`)); !host.IsCode(err, host.CodeInvalidParams) {
		t.Fatalf("the serving validator after the refused reload: %v", err)
	}
	if _, err := reg.Policy("check", nil); !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("the refused policy is bound: %v", err)
	}

	// A built-in serving its name: a drop-in of another kind is refused too.
	copyPlugin(t, "safe-paths", "inline", dir)
	reg.Scan(ctx)
	if in := infoOf(reg, "inline"); in.Kind != KindChannel || in.Source != "builtin" || !strings.Contains(in.Refused, "built-in inline") {
		t.Fatalf("a validator dropped in over the built-in channel: %+v", in)
	}

	// Gone long enough to be unloaded: the name is free for another kind.
	os.Remove(filepath.Join(dir, "check.wasm"))
	os.Remove(filepath.Join(dir, "check.manifest.json"))
	waitFor(t, func() bool { reg.Scan(ctx); _, err := reg.Plugin("check"); return err != nil })
	copyPlugin(t, "backoff", "check", dir)
	reg.Scan(ctx)
	if in := infoOf(reg, "check"); in.Kind != KindPolicy || in.State != "ready" || in.Refused != "" {
		t.Fatalf("a policy under a free name: %+v", in)
	}
}
