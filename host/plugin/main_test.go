package plugin

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/plugin/pluginbuild"
)

// builtDir holds every plugin built from source (plugins/ and
// testdata/plugins/) in the flat <name>.wasm + <name>.manifest.json layout.
var builtDir string

// wasmCacheDir is a compilation cache shared by the tests, so each module is
// compiled once per machine rather than once per test.
var wasmCacheDir string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	root, err := pluginbuild.ModuleRoot(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var srcs []string
	for _, d := range []string{"plugins", "testdata/plugins"} {
		s, err := pluginbuild.Sources(filepath.Join(root, d))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		srcs = append(srcs, s...)
	}
	builtDir, err = os.MkdirTemp("", "asyncgate-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(builtDir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := pluginbuild.BuildAll(ctx, srcs, builtDir, ""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "built %d plugins in %v\n", len(srcs), time.Since(start))
	}
	wasmCacheDir = filepath.Join(pluginbuild.DefaultCacheDir(), "..", "wasm-cache-test")
	return m.Run()
}

// testLogger discards logs unless -v.
func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// readBuilt returns a built plugin's module and manifest.
func readBuilt(t testing.TB, name string) (wasm, manifest []byte) {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join(builtDir, name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err = os.ReadFile(filepath.Join(builtDir, name+".manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	return wasm, manifest
}

// newTestRuntime returns a Runtime on the shared compilation cache, closed
// when the test ends.
func newTestRuntime(t testing.TB, limits Limits) *Runtime {
	t.Helper()
	rt, err := NewRuntime(Options{CacheDir: wasmCacheDir, Limits: limits, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// bundle is a registry over a private plugins folder holding the named built plugins.
type bundle struct {
	rt  *Runtime
	reg *Registry
	dir string
}

// setup's grants are bound to the modules copied, as an operator binds a
// grant to a plugin dropped into the folder (Grant.SHA256).
func setup(t testing.TB, grants map[string]Grant, limits Limits, names ...string) *bundle {
	t.Helper()
	return setupOn(t, false, grants, limits, names...)
}

// setupOn is setup with every plugin on wazero's interpreter when interp
// is set (as a start serves them until their compiled code is ready).
func setupOn(t testing.TB, interp bool, grants map[string]Grant, limits Limits, names ...string) *bundle {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		copyPlugin(t, n, n, dir)
		if g, ok := grants[n]; ok && len(g.SHA256) == 0 {
			wasm, _ := readBuilt(t, n)
			g.SHA256 = []string{Digest(wasm)}
			grants[n] = g
		}
	}
	rt := newTestRuntime(t, limits)
	rt.interpOnly = interp
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, Grants: grants})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	return &bundle{rt: rt, reg: reg, dir: dir}
}

// copyPlugin copies built plugin src into dir under the name dst (the
// manifest's name is rewritten to dst), as docs/plugins.md tells operators
// to: the manifest names the module's sha256, and each file is written under
// a temporary name and renamed in.
func copyPlugin(t testing.TB, src, dst, dir string) {
	t.Helper()
	wasm, man := readBuilt(t, src)
	man = []byte(replaceName(string(man), src, dst))
	writePair(t, dir, dst, wasm, man)
}

// writePair drops a module and its manifest into dir by atomic renames,
// the manifest stamped with the module's sha256.
func writePair(t testing.TB, dir, name string, wasm, man []byte) {
	t.Helper()
	man = []byte(setField(string(man), "wasm_sha256", Digest(wasm)))
	writeAtomic(t, filepath.Join(dir, name+".wasm"), wasm)
	writeAtomic(t, filepath.Join(dir, name+".manifest.json"), man)
}

// writeAtomic writes b to a temporary file beside path and renames it in.
func writeAtomic(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func replaceName(manifest, from, to string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(manifest), &m); err != nil {
		panic(err)
	}
	if m["name"] == from {
		m["name"] = to
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// setField returns the JSON object manifest with key set to value (removed
// when value is nil).
func setField(manifest, key string, value any) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(manifest), &m); err != nil {
		return manifest // a deliberately broken manifest stays broken
	}
	m[key] = value
	if value == nil {
		delete(m, key)
	}
	b, _ := json.Marshal(m)
	return string(b)
}
