package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/private"
)

// writeAtomicMode is writeAtomic with the file's mode set before it is
// renamed in, so no scan sees it with another mode.
func writeAtomicMode(t testing.TB, path string, b []byte, mode os.FileMode) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestDropInRefusesFilesOthersCanWrite: a drop-in found while the gate runs
// is held to the rule `gate serve` applies to the plugins folder at start
// (private.Entry): a module or manifest another user can write, or a
// symlink (here into a folder anyone can write), is refused for that
// plugin alone, with the reason; the last good version keeps serving, and
// the same files made private load.
func TestDropInRefusesFilesOthersCanWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyPlugin(t, "backoff", "pol", dir)
	rt := newTestRuntime(t, Limits{})
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	ctx := context.Background()
	first, err := reg.Plugin("pol")
	if err != nil {
		t.Fatal(err)
	}
	pol, err := reg.Policy("pol", nil)
	if err != nil {
		t.Fatal(err)
	}
	in := host.FailureInput{TaskID: "t", TaskType: "fine", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3}
	reason := func() string {
		t.Helper()
		d, err := pol.Decide(ctx, in)
		if err != nil {
			t.Fatalf("decide: %v", err)
		}
		return d.Reason
	}
	hwasm, hman := readBuilt(t, "hostile")
	hman = []byte(setField(replaceName(string(hman), "hostile", "pol"), "wasm_sha256", Digest(hwasm)))
	refused := func(name, want string) {
		t.Helper()
		reg.Scan(ctx)
		if in := infoOf(reg, name); !strings.Contains(in.Refused, want) {
			t.Fatalf("%s: %+v; want refused with %q", name, in, want)
		}
	}

	// A new module anyone can write: refused; the old version serves.
	writeAtomicMode(t, filepath.Join(dir, "pol.wasm"), hwasm, 0o666)
	writeAtomic(t, filepath.Join(dir, "pol.manifest.json"), hman)
	refused("pol", "writable by its group or by others")
	if p, _ := reg.Plugin("pol"); p != first || reason() != "" {
		t.Fatal("a module others can write replaced the serving version")
	}
	// The manifest as well.
	writeAtomic(t, filepath.Join(dir, "pol.wasm"), hwasm)
	writeAtomicMode(t, filepath.Join(dir, "pol.manifest.json"), hman, 0o646)
	refused("pol", "pol.manifest.json: it is writable")
	if p, _ := reg.Plugin("pol"); p != first {
		t.Fatal("a manifest others can write replaced the serving version")
	}

	// A symlink to a module in a folder anyone can write: refused.
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	writeAtomicMode(t, filepath.Join(open, "pol.wasm"), hwasm, 0o644)
	writeAtomic(t, filepath.Join(dir, "pol.manifest.json"), hman)
	os.Remove(filepath.Join(dir, "pol.wasm"))
	if err := os.Symlink(filepath.Join(open, "pol.wasm"), filepath.Join(dir, "pol.wasm")); err != nil {
		t.Fatal(err)
	}
	refused("pol", "pol.wasm: it is a symbolic link")
	if p, _ := reg.Plugin("pol"); p != first || reason() != "" {
		t.Fatal("a symlinked module replaced the serving version")
	}

	// A new plugin with a module others can write is refused, and serves
	// nothing; the other plugins are untouched.
	writeAtomicMode(t, filepath.Join(dir, "fresh.wasm"), hwasm, 0o666)
	writeAtomic(t, filepath.Join(dir, "fresh.manifest.json"), []byte(replaceName(string(hman), "pol", "fresh")))
	refused("fresh", "writable by its group or by others")
	if p, err := reg.Plugin("fresh"); err == nil {
		t.Fatalf("fresh serves %s from a module others can write", p.Source)
	}
	if in := infoOf(reg, "fresh"); in.State != "refused" {
		t.Fatalf("fresh: %+v", in)
	}

	if err := os.Chmod(filepath.Join(dir, "fresh.wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Owned by another user (only root can give a file away).
	if os.Geteuid() == 0 {
		if err := os.Chown(filepath.Join(dir, "fresh.wasm"), 4242, 4242); err != nil {
			t.Fatal(err)
		}
		refused("fresh", "belongs to user 4242")
		if _, err := reg.Plugin("fresh"); err == nil {
			t.Fatal("fresh serves from a module another user owns")
		}
		if err := os.Chown(filepath.Join(dir, "fresh.wasm"), 0, 0); err != nil {
			t.Fatal(err)
		}
	}

	// Made private (chmod go-w, given back, the link replaced by the
	// file), both load.
	writeAtomic(t, filepath.Join(dir, "pol.wasm"), hwasm)
	reg.Scan(ctx)
	for _, name := range []string{"pol", "fresh"} {
		if in := infoOf(reg, name); in.State != "ready" || in.Refused != "" || in.Digest != Digest(hwasm) {
			t.Fatalf("%s once private: %+v", name, in)
		}
	}
	if r := reason(); r != "hostile-ok" {
		t.Fatalf("pol once private: reason %q", r)
	}
	// And the folder passes the check of the next start.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range entries {
		if fi, err := d.Info(); err != nil || private.Entry(fi) != nil {
			t.Fatalf("a start would refuse %s: %v %v", d.Name(), err, private.Entry(fi))
		}
	}
}
