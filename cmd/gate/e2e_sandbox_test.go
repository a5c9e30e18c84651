package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/plugin/pluginbuild"
)

var (
	escapeOnce sync.Once
	escapeDir  string
	escapeErr  error
)

// escapePlugin builds the hostile testdata/plugins/escape (once) and returns
// its module and manifest paths.
func escapePlugin(t *testing.T) (wasm, manifest string) {
	t.Helper()
	escapeOnce.Do(func() {
		escapeDir, escapeErr = os.MkdirTemp("", "gate-e2e-escape-")
		if escapeErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			_, escapeErr = pluginbuild.Build(ctx, "../../testdata/plugins/escape", escapeDir, "")
		}
	})
	if escapeErr != nil {
		t.Fatal(escapeErr)
	}
	return filepath.Join(escapeDir, "escape.wasm"), filepath.Join(escapeDir, "escape.manifest.json")
}

// plantLinks puts links into the results folder of data before any plugin
// runs: a relative symlink to the data folder, an absolute one to admin.key,
// and a hard link to admin.key when it exists.
func plantLinks(t *testing.T, data string) {
	t.Helper()
	results := filepath.Join(data, "results")
	if err := os.MkdirAll(results, 0o700); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"planted": "..", "planted-abs": data, "planted-file": filepath.Join(data, "admin.key")} {
		if err := os.Symlink(target, filepath.Join(results, link)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "admin.key")); err == nil {
		if err := os.Link(filepath.Join(data, "admin.key"), filepath.Join(results, "planted-hard")); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
}

// assertIntact fails the test if admin.key changed or anything was created
// outside the results folder, and returns the escape report if there is one.
func assertIntact(t *testing.T, data, key string) string {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(data, "admin.key")); err != nil || string(b) != key {
		t.Errorf("admin.key was overwritten: %q %v", b, err)
	}
	for _, f := range []string{"escaped.txt", "moved-out"} {
		if _, err := os.Lstat(filepath.Join(data, f)); err == nil {
			t.Errorf("a plugin created %s outside its folder", f)
		}
	}
	b, _ := os.ReadFile(filepath.Join(data, "results", "escape-report.txt"))
	report := string(b)
	for _, line := range strings.Split(report, "\n") {
		if strings.HasPrefix(line, "LEAK") || strings.HasPrefix(line, "WROTE") {
			t.Errorf("sandbox escape: %s", line)
		}
	}
	if key != "" && strings.Contains(report, strings.TrimSpace(key)) {
		t.Error("the admin key reached the plugin")
	}
	return report
}

// TestE2EDropInCannotTakeBuiltinGrant drops the hostile escape plugin into a
// running gate's plugins folder under the built-in file channel's name. It
// must not inherit the file channel's results folder: it is refused at load
// (its capabilities, which run the attack, never run), the built-in keeps
// serving, and admin.key is neither read nor overwritten.
func TestE2EDropInCannotTakeBuiltinGrant(t *testing.T) {
	dir := t.TempDir()
	// A first start refuses a folder that holds anything but a gate, so the
	// links are planted once the gate exists, before the plugin is dropped in.
	g := startGate(t, dir)
	key, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	plantLinks(t, dir) // with the hard link to the key

	wasmPath, manPath := escapePlugin(t)
	wasm, _ := os.ReadFile(wasmPath)
	man, _ := os.ReadFile(manPath)
	var m map[string]any
	if err := json.Unmarshal(man, &m); err != nil {
		t.Fatal(err)
	}
	m["name"] = "file"
	man, _ = json.Marshal(m)
	pdir := filepath.Join(dir, "plugins")
	for name, b := range map[string][]byte{"file.wasm": wasm, "file.manifest.json": man} {
		if err := os.WriteFile(filepath.Join(pdir, name+".tmp"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(pdir, name+".tmp"), filepath.Join(pdir, name)); err != nil {
			t.Fatal(err)
		}
	}
	type info struct {
		Name, Source, State, Refused string
	}
	var file info
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r := call(t, "GET", g.URL+"/v1/admin/plugins", g.Admin, nil)
		want(t, r, 200, "")
		var out struct{ Plugins []info }
		r.Into(t, &out)
		for _, p := range out.Plugins {
			if p.Name == "file" {
				file = p
			}
		}
		if file.Refused != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(file.Refused, "granted none") || file.Source != "builtin" || file.State != "ready" {
		t.Fatalf("the drop-in named file was not refused for want of its own grant: %+v\n%s", file, g.Log())
	}
	if report := assertIntact(t, dir, string(key)); report != "" {
		t.Fatalf("the drop-in ran in the built-in's folder:\n%s", report)
	}
}

// TestE2EPluginCheckSandbox runs `gate plugin check -dir` on the hostile
// escape plugin with a folder that has admin.key beside it and links planted
// in it: check uses the gate's sandbox, so every escape fails.
func TestE2EPluginCheckSandbox(t *testing.T) {
	data := t.TempDir()
	const key = "ag_admin_e2e_secret\n"
	if err := os.WriteFile(filepath.Join(data, "admin.key"), []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	plantLinks(t, data)
	wasm, _ := escapePlugin(t)
	cfg, _ := json.Marshal(map[string]string{"victim_dir": data})
	out, errOut, _ := gateCLI(t, "plugin", "check", "-dir", filepath.Join(data, "results"), "-config", string(cfg), wasm)
	if !strings.Contains(out, "ok   loaded") {
		t.Fatalf("plugin check did not load the plugin:\n%s\n%s", out, errOut)
	}
	report := assertIntact(t, data, key)
	if !strings.Contains(report, "held symlink-up-read") || !strings.Contains(report, "refused symlink-up") || !strings.Contains(report, "works inside") {
		t.Fatalf("unexpected report:\n%s", report)
	}
}
