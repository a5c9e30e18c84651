package host_test

import (
	"errors"
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is the module path of the repository.
const module = "github.com/asyncgate/asyncgate"

// doors are the gate's doors: each serves the engine to callers of one
// kind, and none is built on another.
var doors = []string{"host/httpapi", "host/mcpapi", "host/ui"}

// importRules are the arrows the import graph must not hold, directly or
// through other packages of the module. Test files are not counted: a
// door's tests may compose doors as cmd/gate does.
var importRules = []struct {
	from, not []string
	why       string
}{
	{doors, doors, "a door does not import another door: what doors share lives in its own package " +
		"(host/auth: keys and callers; host/api: the answers both the HTTP and MCP doors give), " +
		"and cmd/gate mounts one door on another (httpapi.WithRoutes)"},
	{[]string{"host/httpapi"}, []string{"host/plugin"}, "the HTTP door does not read the plugin runtime; " +
		"cmd/gate hands the dashboard the plugin list and mounts the plugins route"},
	{[]string{"host/engine"}, []string{"host/mail"}, "the engine reaches mail through engine.Mailer; " +
		"cmd/gate passes the *mail.Client in"},
	{[]string{"host/sqlite", "host/postgres"}, []string{"host/engine"}, "a store driver sits below the engine " +
		"and knows only host and host/store"},
}

// TestDoorsStayDoors fails when a package of the module imports what
// importRules forbid, naming the chain of imports that does.
func TestDoorsStayDoors(t *testing.T) {
	graph := moduleGraph(t, "..")
	for _, r := range importRules {
		for _, from := range r.from {
			if _, ok := graph[from]; !ok {
				t.Fatalf("package %s is gone: update importRules", from)
			}
			for _, not := range r.not {
				if not == from {
					continue
				}
				if _, ok := graph[not]; !ok {
					t.Fatalf("package %s is gone: update importRules", not)
				}
				if chain := importChain(graph, from, not); chain != nil {
					t.Errorf("%s imports %s (%s): %s", from, not, strings.Join(chain, " → "), r.why)
				}
			}
		}
	}
}

// moduleGraph reads the non-test imports of every package under root's
// host and cmd folders, as the default build context sees them, keeping
// only the module's own packages (paths relative to the module).
func moduleGraph(t *testing.T, root string) map[string][]string {
	t.Helper()
	graph := map[string][]string{}
	for _, top := range []string{"host", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(dir string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if name := d.Name(); name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			pkg, err := build.Default.ImportDir(dir, 0)
			var noGo *build.NoGoError
			if errors.As(err, &noGo) {
				return nil
			}
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				return err
			}
			var own []string
			for _, imp := range pkg.Imports {
				if p, ok := strings.CutPrefix(imp, module+"/"); ok {
					own = append(own, p)
				}
			}
			graph[filepath.ToSlash(rel)] = own
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return graph
}

// importChain returns the shortest chain of imports from from to to, or
// nil when from does not depend on to.
func importChain(graph map[string][]string, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, q := range graph[p] {
			if _, seen := prev[q]; seen {
				continue
			}
			prev[q] = p
			if q == to {
				chain := []string{q}
				for c := p; c != ""; c = prev[c] {
					chain = append(chain, c)
				}
				slices.Reverse(chain)
				return chain
			}
			queue = append(queue, q)
		}
	}
	return nil
}
