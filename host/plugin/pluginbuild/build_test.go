package pluginbuild

import (
	"os"
	"path/filepath"
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
