package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A plugin author outside the repository: an empty folder, the gate binary,
// Go, and no network to the module proxy.

var (
	goCacheOnce sync.Once
	goCache     string
)

// authorEnv is the environment of such an author: GOPROXY=off and
// GOFLAGS=-mod=mod (a missing module would be an error, not a download), and
// a fresh user cache folder (the gate's plugin build cache starts empty).
// Go's own build cache is shared with the test run, as on a machine where Go
// has been used before.
func authorEnv(t testing.TB) []string {
	t.Helper()
	goCacheOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOCACHE").Output()
		if err == nil {
			goCache = strings.TrimSpace(string(out))
		}
	})
	if goCache == "" {
		t.Fatal("go env GOCACHE failed: is Go on PATH?")
	}
	var env []string
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "GOFLAGS", "GOPROXY", "GOCACHE", "XDG_CACHE_HOME", "GOWORK", "ASYNCGATE_URL", "ASYNCGATE_ADMIN_KEY":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GOFLAGS=-mod=mod", "GOPROXY=off", "GOCACHE="+goCache, "XDG_CACHE_HOME="+t.TempDir())
}

// inFolder runs a command in dir with env and returns its combined output
// and exit code.
func inFolder(t testing.TB, dir string, env []string, name string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return out.String(), 0
}

// mustIn is inFolder that fails the test unless the command succeeds.
func mustIn(t testing.TB, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, code := inFolder(t, dir, env, name, args...)
	if code != 0 {
		t.Fatalf("%s %s (in %s) exited %d:\n%s", filepath.Base(name), strings.Join(args, " "), dir, code, out)
	}
	return out
}

// TestE2EPluginAuthorFromEmptyFolder is docs/plugins.md's walkthrough:
// scaffold a policy in an empty folder, build it, test it natively, check it,
// install it into a running gate, and see a failed task get its decision.
func TestE2EPluginAuthorFromEmptyFolder(t *testing.T) {
	t.Parallel()
	work, env := t.TempDir(), authorEnv(t)
	start := time.Now()

	out := mustIn(t, work, env, gateBin, "plugin", "new", "policy", "mypolicy")
	if !strings.Contains(out, "own module") {
		t.Fatalf("plugin new did not make its own module:\n%s", out)
	}
	src := filepath.Join(work, "mypolicy")
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// The scaffold depends on the SDK module only, replaced by its copy.
	if strings.Contains(string(gomod), "github.com/asyncgate/asyncgate ") || !strings.Contains(string(gomod), "=> ./.asyncgate/sdk/plugin") {
		t.Fatalf("scaffold go.mod:\n%s", gomod)
	}
	for _, f := range []string{"main.go", "main_test.go", "manifest.json", ".asyncgate/sdk.json", ".asyncgate/sdk/plugin/go.mod", ".asyncgate/sdk/plugin/plugin.go"} {
		if _, err := os.Stat(filepath.Join(src, f)); err != nil {
			t.Fatalf("scaffold lacks %s: %v", f, err)
		}
	}

	out = mustIn(t, work, env, gateBin, "plugin", "build", "mypolicy")
	wasm := filepath.Join(src, "mypolicy.wasm")
	if _, err := os.Stat(wasm); err != nil {
		t.Fatalf("build wrote no module: %v\n%s", err, out)
	}
	built := time.Since(start)

	// The scaffold's own test runs the policy natively, offline.
	if out := mustIn(t, src, env, "go", "test", "-count=1", "./..."); !strings.Contains(out, "ok") {
		t.Fatalf("go test in the scaffold:\n%s", out)
	}

	// check runs the manifest's examples in the plugin runtime.
	out = mustIn(t, work, env, gateBin, "plugin", "check", "mypolicy/mypolicy.wasm")
	for _, line := range []string{
		`ok   a retryable failure is retried: decide(kind=failure retryable=true attempts=1/3) → {"action":"retry","delay_seconds":5}`,
		`ok   retries used up: decide(kind=failure retryable=true attempts=4/3) → {"action":"dead_letter","reason":"max_retries_exceeded"}`,
		`ok   a fatal error: decide(kind=failure retryable=false attempts=1/3) → {"action":"dead_letter","reason":"fatal_error"}`,
		"PASS",
	} {
		if !strings.Contains(out, line) {
			t.Fatalf("plugin check lacks %q:\n%s", line, out)
		}
	}

	// install drops it into a running gate and returns once it is loaded.
	g := startGate(t, t.TempDir())
	installStart := time.Now()
	out = mustIn(t, work, env, gateBin, "plugin", "install", "--url", g.URL, "--key", g.Admin, "--timeout", "5m", "mypolicy/mypolicy.wasm")
	if !strings.Contains(out, "loaded mypolicy v0.1.0") {
		t.Fatalf("install:\n%s", out)
	}
	if st := g.pluginStates(t)["mypolicy"]; st != "policy/ready" {
		t.Fatalf("after install the gate lists mypolicy as %q", st)
	}
	t.Logf("plugin new → built in %v; install → loaded in %v; new → loaded in %v (plus go test and check)",
		built.Round(time.Millisecond), time.Since(installStart).Round(time.Millisecond), built+time.Since(installStart))

	// A task type using the policy gets its decisions: a retryable failure
	// is retried after the configured 7 s (the built-in default would wait
	// about 300 s), a fatal one is dead-lettered.
	g.putType(t, "authored", map[string]any{"default_max_retries": 3,
		"policy": map[string]any{"name": "mypolicy", "config": map[string]any{"delay_seconds": 7}}}, "")
	agent := g.newKey(t, "agent", "agent.author", "")
	worker := g.newKey(t, "worker", "authored.1", "")
	retried := g.enqueue(t, agent, "authored", nil)
	o := g.lease(t, worker, "authored.1", nil)
	if len(o) != 1 || o[0].Task.ID != retried {
		t.Fatalf("lease: %+v", o)
	}
	fr := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", worker, map[string]any{"error_message": "flaky", "retryable": true})
	want(t, fr, 200, "")
	if m := fr.JSON(t); m["will_retry"] != true {
		t.Fatalf("retryable failure: %s", fr.Body)
	}
	var rs struct {
		Receipts []struct {
			Type string         `json:"receipt_type"`
			Body map[string]any `json:"body"`
		} `json:"receipts"`
	}
	r := call(t, "GET", g.URL+"/v1/receipts?task_id="+retried, g.Admin, nil)
	want(t, r, 200, "")
	r.Into(t, &rs)
	delay, found := 0.0, false
	for _, rc := range rs.Receipts {
		if rc.Type == "task.retry_scheduled" {
			delay, found = rc.Body["delay_seconds"].(float64), true
		}
		if rc.Type == "task.escalated" {
			t.Fatalf("the policy faulted (escalation receipt): %s", r.Body)
		}
	}
	if !found || delay != 7 {
		t.Fatalf("retry_scheduled delay_seconds %v (found %v), want the plugin's 7: %.800s", delay, found, r.Body)
	}

	fatal := g.enqueue(t, agent, "authored", nil)
	o = g.lease(t, worker, "authored.1", nil)
	if len(o) != 1 || o[0].Task.ID != fatal {
		t.Fatalf("lease: %+v", o)
	}
	fr = call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", worker, map[string]any{"error_message": "bad input", "retryable": false})
	want(t, fr, 200, "")
	if m := fr.JSON(t); m["status"] != "dead_letter" {
		t.Fatalf("fatal failure: %s", fr.Body)
	}
	task := call(t, "GET", g.URL+"/v1/tasks/"+fatal, agent, nil)
	want(t, task, 200, "")
	if !strings.Contains(string(task.Body), `"dead_reason":"fatal_error"`) {
		t.Fatalf("dead letter: %s", task.Body)
	}
	// Both decisions were the plugin's.
	lr := call(t, "GET", g.URL+"/v1/admin/plugins", g.Admin, nil)
	var list struct {
		Plugins []struct {
			Name  string `json:"name"`
			Calls int    `json:"calls"`
		} `json:"plugins"`
	}
	lr.Into(t, &list)
	for _, p := range list.Plugins {
		if p.Name == "mypolicy" && p.Calls < 2 {
			t.Fatalf("mypolicy made %d calls, want 2: %s", p.Calls, lr.Body)
		}
	}

	// A module the gate cannot load: install says why, and the gate keeps
	// serving the version it has.
	broken := filepath.Join(work, "broken")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	man, _ := os.ReadFile(filepath.Join(src, "mypolicy.manifest.json"))
	if err := os.WriteFile(filepath.Join(broken, "mypolicy.manifest.json"), bytes.Replace(man, []byte(`"0.1.0"`), []byte(`"0.2.0"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "mypolicy.wasm"), []byte("\x00asm but not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := inFolder(t, work, env, gateBin, "plugin", "install", "--url", g.URL, "--key", g.Admin, "broken/mypolicy.wasm")
	if code != 1 || !strings.Contains(out, "the gate refused mypolicy") || !strings.Contains(out, "keeps serving the previous module") {
		t.Fatalf("installing a broken module exited %d:\n%s", code, out)
	}
	if st := g.pluginStates(t)["mypolicy"]; st != "policy/ready" {
		t.Fatalf("after a refused install mypolicy is %q", st)
	}
	if out, code := inFolder(t, work, env, gateBin, "plugin", "install", "mypolicy/mypolicy.wasm"); code != 1 || !strings.Contains(out, "admin key") {
		t.Fatalf("install without a key or folder exited %d:\n%s", code, out)
	}

	// A gate with another SDK or ABI says so when it rebuilds, and puts its
	// own SDK back in place.
	pinPath := filepath.Join(src, ".asyncgate", "sdk.json")
	var pin map[string]any
	b, _ := os.ReadFile(pinPath)
	if err := json.Unmarshal(b, &pin); err != nil {
		t.Fatal(err)
	}
	good := pin["abi_sha256"]
	pin["abi_sha256"], pin["sdk_sha256"], pin["gate_version"] = "0000", "1111", "v0.0.1"
	b, _ = json.Marshal(pin)
	if err := os.WriteFile(pinPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	typesGo := filepath.Join(src, ".asyncgate", "sdk", "plugin", "types.go")
	orig, _ := os.ReadFile(typesGo)
	if err := os.WriteFile(typesGo, append(orig, "\n// an older SDK\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	out = mustIn(t, work, env, gateBin, "plugin", "build", "mypolicy")
	if !strings.Contains(out, "ABI changed") || !strings.Contains(out, "v0.0.1") {
		t.Fatalf("rebuild against another ABI said:\n%s", out)
	}
	if b, _ := os.ReadFile(typesGo); !bytes.Equal(b, orig) {
		t.Fatal("rebuild did not put this gate's SDK back")
	}
	b, _ = os.ReadFile(pinPath)
	if err := json.Unmarshal(b, &pin); err != nil || pin["abi_sha256"] != good {
		t.Fatalf("pin after rebuild: %s", b)
	}
	if out := mustIn(t, work, env, gateBin, "plugin", "build", "mypolicy"); strings.Contains(out, "ABI") || strings.Contains(out, "sdk:") {
		t.Fatalf("a rebuild with nothing changed still talks about the SDK:\n%s", out)
	}
}

// TestPluginScaffoldEveryKind: a validator and a channel scaffold (the
// policy is the walkthrough above) test natively, build and pass check
// offline; check fails on an example whose want the plugin does not meet.
func TestPluginScaffoldEveryKind(t *testing.T) {
	t.Parallel()
	work, env := t.TempDir(), authorEnv(t)
	for _, c := range []struct{ kind, name, expect string }{
		{"validator", "myvalidator", `ok   a required key is missing: validate({"order":7}) → invalid:`},
		{"channel", "mychannel", "ok   a JSON result round-trips: get(mychannel:"},
	} {
		mustIn(t, work, env, gateBin, "plugin", "new", c.kind, c.name)
		src := filepath.Join(work, c.name)
		mustIn(t, src, env, "go", "test", "-count=1", "./...")
		mustIn(t, work, env, gateBin, "plugin", "build", c.name)
		out := mustIn(t, work, env, gateBin, "plugin", "check", filepath.Join(c.name, c.name+".wasm"))
		if !strings.Contains(out, c.expect) || !strings.Contains(out, "PASS") {
			t.Fatalf("%s check lacks %q:\n%s", c.kind, c.expect, out)
		}
	}

	// A pin from a gate with another SDK but the same ABI: the rebuild says
	// it updates the SDK, and does not cry ABI.
	pinPath := filepath.Join(work, "myvalidator", ".asyncgate", "sdk.json")
	var pin map[string]any
	b, _ := os.ReadFile(pinPath)
	if err := json.Unmarshal(b, &pin); err != nil {
		t.Fatal(err)
	}
	pin["sdk_sha256"], pin["gate_version"] = "1111", "v0.0.2"
	b, _ = json.Marshal(pin)
	if err := os.WriteFile(pinPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustIn(t, work, env, gateBin, "plugin", "build", "myvalidator"); !strings.Contains(out, "sdk: updating .asyncgate/sdk/plugin from the SDK of gate v0.0.2") || strings.Contains(out, "ABI changed") {
		t.Fatalf("rebuild after an SDK-only change said:\n%s", out)
	}

	// An example the plugin does not satisfy fails check, showing the outcome.
	manPath := filepath.Join(work, "myvalidator", "myvalidator.manifest.json")
	b, _ = os.ReadFile(manPath)
	var man map[string]any
	if err := json.Unmarshal(b, &man); err != nil {
		t.Fatal(err)
	}
	man["examples"] = []any{map[string]any{"name": "wrong expectation", "config": map[string]any{"required": []string{"id"}},
		"input": map[string]any{"params": map[string]any{}}, "want": map[string]any{"valid": true}}}
	b, _ = json.Marshal(man)
	if err := os.WriteFile(manPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := inFolder(t, work, env, gateBin, "plugin", "check", "myvalidator/myvalidator.wasm")
	if code != 1 || !strings.Contains(out, "FAIL wrong expectation: validate({}) → invalid:") || !strings.Contains(out, "valid is false, want true") {
		t.Fatalf("check with a failing example exited %d:\n%s", code, out)
	}

	// Bad input to new: exit 2 with a reason, nothing written.
	for _, args := range [][]string{{"new", "workflow", "x"}, {"new", "policy", "Bad_Name"}, {"new", "policy"}} {
		out, code := inFolder(t, work, env, gateBin, append([]string{"plugin"}, args...)...)
		if code != 2 {
			t.Fatalf("plugin %v exited %d:\n%s", args, code, out)
		}
	}
	if out, code := inFolder(t, work, env, gateBin, "plugin", "new", "policy", "myvalidator"); code != 1 || !strings.Contains(out, "already exists") {
		t.Fatalf("new over an existing folder exited %d:\n%s", code, out)
	}
	for _, d := range []string{"x", "Bad_Name"} {
		if _, err := os.Stat(filepath.Join(work, d)); err == nil {
			t.Fatalf("a refused new wrote %s", d)
		}
	}
}

// TestPluginNewInsideTheRepository: a scaffold inside a module that already
// has the SDK is a package of that module, without a go.mod or SDK copy.
func TestPluginNewInsideTheRepository(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module github.com/asyncgate/asyncgate\n\ngo 1.26.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "plugins", "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := mustIn(t, filepath.Join(root, "plugins", "policies"), os.Environ(), gateBin, "plugin", "new", "policy", "house")
	if !strings.Contains(out, "package of the enclosing module") {
		t.Fatalf("new inside the repository:\n%s", out)
	}
	for _, f := range []string{"go.mod", ".asyncgate"} {
		if _, err := os.Stat(filepath.Join(root, "plugins", "policies", "house", f)); err == nil {
			t.Fatalf("in-repository scaffold has %s", f)
		}
	}
}

// BenchmarkPluginNewToLoaded times docs/plugins.md's path from `gate plugin
// new` to the plugin loaded by a running gate: new → build → install (which
// returns when GET /v1/admin/plugins reports the module loaded). Each
// iteration is a new plugin, so the gate compiles a new module every time.
// warm: Go's build cache in use; cold: an empty Go build cache per
// iteration (the runtime and standard library are compiled for wasip1).
//
//	go test -run '^$' -bench PluginNewToLoaded -benchtime 3x ./cmd/gate
func BenchmarkPluginNewToLoaded(b *testing.B) {
	for _, cold := range []bool{false, true} {
		name := "warm"
		if cold {
			name = "cold"
		}
		b.Run(name, func(b *testing.B) {
			env, work := authorEnv(b), b.TempDir()
			url, key := startBenchGate(b)
			for i := range b.N {
				if cold {
					b.StopTimer()
					env = append(env, "GOCACHE="+b.TempDir()) // the last GOCACHE wins
					b.StartTimer()
				}
				p := fmt.Sprintf("p%d%s", i, name)
				mustIn(b, work, env, gateBin, "plugin", "new", "policy", p)
				mustIn(b, work, env, gateBin, "plugin", "build", p)
				mustIn(b, work, env, gateBin, "plugin", "install", "--url", url, "--key", key, p+"/"+p+".wasm")
			}
		})
	}
}

// startBenchGate runs `gate serve` on a temp data folder for a benchmark
// and returns its URL and admin key.
func startBenchGate(b *testing.B) (string, string) {
	b.Helper()
	dir := b.TempDir()
	cmd := exec.Command(gateBin, "serve", "--data", dir, "--listen", "127.0.0.1:0", "--wasm-cache", wasmCache)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if line := sc.Text(); strings.Contains(line, "msg=listening") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						select {
						case addr <- a:
						default:
						}
					}
				}
			}
		}
	}()
	select {
	case a := <-addr:
		key, err := os.ReadFile(filepath.Join(dir, "admin.key"))
		if err != nil {
			b.Fatal(err)
		}
		return "http://" + a, strings.TrimSpace(string(key))
	case <-time.After(2 * time.Minute):
		b.Fatal("gate did not start")
	}
	return "", ""
}
