package pluginbuild

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSourceKeyCoversScaffoldSDK: a scaffold made by `gate plugin new`
// carries the SDK in .asyncgate/sdk/plugin; a different SDK there (written by
// another gate) must not reuse the module built with the old one.
func TestSourceKeyCoversScaffoldSDK(t *testing.T) {
	dir := t.TempDir()
	sdk := filepath.Join(dir, ".asyncgate", "sdk", "plugin")
	if err := os.MkdirAll(sdk, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"go.mod":                     "module mypolicy\n\ngo 1.24\n",
		"main.go":                    "package main\n\nfunc main() {}\n",
		"manifest.json":              `{"name": "mypolicy"}`,
		".asyncgate/sdk/plugin/a.go": "package plugin\n\nconst V = 1\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before, err := sourceKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sdk, "a.go"), []byte("package plugin\n\nconst V = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	after, err := sourceKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if before == after {
		t.Fatal("changing the scaffold's SDK copy did not change the build cache key")
	}
}

// TestWriteAtomicConcurrent: two test binaries (or a build and a running
// gate's scaffold) may build the same plugin into one folder at once; each
// write must land whole, and neither may fail because the other renamed a
// temporary file they shared.
func TestWriteAtomicConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.wasm")
	const writers = 8
	errs := make(chan error, writers)
	for i := 0; i < writers; i++ {
		go func() {
			var err error
			for k := 0; k < 50 && err == nil; k++ {
				err = WriteFileAtomic(path, []byte(strings.Repeat("x", 4096)))
			}
			errs <- err
		}()
	}
	for i := 0; i < writers; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) != 4096 {
		t.Fatalf("read back %d bytes, %v; want 4096", len(b), err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".p.wasm.tmp*"))
	if len(left) > 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}
