package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoSDKsOneLine runs the README's one command that makes a module use
// sdk/worker (and, as the README says, the same for sdk/client) from a
// checkout beside it, offline (GOPROXY=off), and builds a program importing
// both.
func TestGoSDKsOneLine(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(readme), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "`go mod edit -require=github.com/asyncgate/asyncgate/sdk/worker") {
			line = strings.Trim(l, "`")
		}
	}
	if line == "" || !strings.Contains(line, "=../asyncgate/sdk/worker") {
		t.Fatalf("README.md has no one-line go mod edit for sdk/worker pointing at ../asyncgate: %q", line)
	}
	// The checkout beside the module, as the command expects it.
	tmp := t.TempDir()
	if err := os.Symlink(root, filepath.Join(tmp, "asyncgate")); err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(tmp, "w")
	if err := os.Mkdir(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	env := authorEnv(t)
	mustIn(t, mod, env, "go", "mod", "init", "example.com/w")
	mustIn(t, mod, env, bash, "-c", line)
	mustIn(t, mod, env, bash, "-c", strings.ReplaceAll(line, "sdk/worker", "sdk/client"))
	src := `package main

import (
	"fmt"

	"github.com/asyncgate/asyncgate/sdk/client"
	"github.com/asyncgate/asyncgate/sdk/worker"
)

func main() {
	c := client.New("http://127.0.0.1:8080", "")
	w := worker.NewClient("http://127.0.0.1:8080", "")
	fmt.Println(c.BaseURL(), w != nil)
}
`
	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustIn(t, mod, env, "go", "run", "."); strings.TrimSpace(out) != "http://127.0.0.1:8080 true" {
		t.Fatalf("the program printed %q", out)
	}
}
