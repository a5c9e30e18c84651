package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNoRefusalWithoutReason: every plugin the registry lists as refused
// carries its reason, text and code; a name nothing serves for another
// cause says so. A drop-in whose files left the folder and that was
// unloaded (no built-in of its name) is removed, not refused (it was listed
// "refused" with no reason); so is a refused drop-in once its files left.
// A manifest without its module, or beside a module it does not name, is
// incomplete: the registry waits for a consistent pair.
func TestNoRefusalWithoutReason(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyPlugin(t, "backoff", "gone", dir)
	wasm, man := readBuilt(t, "backoff")
	writePair(t, dir, "bad", []byte("\x00asm\x01\x00\x00\x00garbage"), []byte(replaceName(string(man), "backoff", "bad")))
	// half: a manifest alone; odd: a manifest naming another module.
	writeAtomic(t, filepath.Join(dir, "half.manifest.json"), []byte(setField(replaceName(string(man), "backoff", "half"), "wasm_sha256", Digest(wasm))))
	writeAtomic(t, filepath.Join(dir, "odd.wasm"), wasm)
	writeAtomic(t, filepath.Join(dir, "odd.manifest.json"), []byte(setField(replaceName(string(man), "backoff", "odd"), "wasm_sha256", strings.Repeat("ab", 32))))

	rt := newTestRuntime(t, Limits{})
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, Background: true, PollInterval: 20 * time.Millisecond, RemoveAfter: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go reg.Run(ctx)

	// noBareRefusal fails on a refused entry without its reason.
	noBareRefusal := func() {
		t.Helper()
		for _, in := range reg.List() {
			if in.State == "refused" && (in.Refused == "" || in.RefusedCode == "") {
				t.Fatalf("%s is listed refused without its reason: refused %q, refused_code %q (%+v)", in.Name, in.Refused, in.RefusedCode, in)
			}
		}
	}
	stateIs := func(name, state string) func() bool {
		return func() bool { noBareRefusal(); return infoOf(reg, name).State == state }
	}
	waitFor(t, func() bool { noBareRefusal(); return reg.Ready() })
	waitFor(t, stateIs("gone", "ready"))
	waitFor(t, stateIs("bad", "refused"))
	if in := infoOf(reg, "bad"); in.RefusedCode != RefusalLoad {
		t.Fatalf("bad: %+v; want refused_code %s", in, RefusalLoad)
	}
	for _, name := range []string{"half", "odd"} {
		if in := infoOf(reg, name); in.State != "incomplete" || in.Note == "" || in.Refused != "" {
			t.Fatalf("%s: state %q, note %q, refused %q; want incomplete with a note", name, in.State, in.Note, in.Refused)
		}
		if st, _, why := reg.State(name); st != "incomplete" || why == "" {
			t.Fatalf("State(%s) = %s, %q", name, st, why)
		}
	}

	for _, name := range []string{"gone", "bad", "half", "odd"} {
		for _, f := range []string{name + ".wasm", name + ".manifest.json"} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	}
	for _, name := range []string{"gone", "bad", "half", "odd"} {
		waitFor(t, stateIs(name, "removed"))
		in := infoOf(reg, name)
		if in.Note == "" || in.Refused != "" || in.RefusedCode != "" {
			t.Fatalf("%s after its files left: note %q, refused %q, refused_code %q", name, in.Note, in.Refused, in.RefusedCode)
		}
	}
	// Back in the folder, it serves again.
	copyPlugin(t, "backoff", "gone", dir)
	waitFor(t, stateIs("gone", "ready"))
	noBareRefusal()
}
