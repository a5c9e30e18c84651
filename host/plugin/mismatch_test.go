package plugin

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// TestNameMismatchLogsOnlyTheRefusal: a manifest whose name is not its
// file's is refused before the module is loaded, so the log says only
// that (not "plugin loaded" under the manifest's name, then "refused"), for
// a drop-in and for a built-in alike; the module's code never runs.
func TestNameMismatchLogsOnlyTheRefusal(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	rt, err := NewRuntime(Options{CacheDir: wasmCacheDir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	wasm, man := readBuilt(t, "backoff")
	dir, builtins := t.TempDir(), t.TempDir()
	writePair(t, dir, "mism", wasm, []byte(replaceName(string(man), "backoff", "other")))
	writePair(t, builtins, "bmism", wasm, []byte(replaceName(string(man), "backoff", "bother")))
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, Builtins: os.DirFS(builtins)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	out := logs.String()
	if strings.Contains(out, "plugin loaded") {
		t.Errorf("a plugin whose manifest names another was logged as loaded:\n%s", out)
	}
	if !strings.Contains(out, `msg="plugin refused" plugin=mism reason="manifest name \"other\" does not match file name \"mism\""`) {
		t.Errorf("no refusal of mism in the log:\n%s", out)
	}
	if !strings.Contains(out, `plugin=bmism reason="manifest name \"bother\" does not match file name \"bmism\""`) {
		t.Errorf("no refusal of the built-in bmism in the log:\n%s", out)
	}
	for _, name := range []string{"mism", "bmism"} {
		if in := infoOf(reg, name); in.State == "ready" || in.Instances != 0 || in.ColdStarts != 0 {
			t.Errorf("%s: %+v; want refused, never started", name, in)
		}
	}
}
