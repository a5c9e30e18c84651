package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPagesDroppableRefusesPIE: the pages of a position-independent
// executable are relocated by the loader (PT_GNU_RELRO), so dropping them
// would crash the process on its next access; only a position-dependent
// executable's read-only mappings may be dropped.
func TestPagesDroppableRefusesPIE(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module pie\n\ngo 1.26\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	build := func(name string, args ...string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", append(append([]string{"build", "-o", out}, args...), ".")...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", args, err, b)
		}
		return out
	}
	if pagesDroppable(build("pie", "-buildmode=pie")) {
		t.Fatal("a -buildmode=pie executable is droppable: its relocated read-only pages would be dropped")
	}
	if !pagesDroppable(build("exe", "-buildmode=exe")) {
		t.Fatal("a position-dependent executable is not droppable")
	}
	if pagesDroppable(filepath.Join(dir, "missing")) {
		t.Fatal("a file that cannot be read is droppable")
	}
}
