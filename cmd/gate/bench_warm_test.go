package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchWaitsForPlugins: gate bench starts its clock only once the gate
// it loads has compiled its plugins. A gate on an empty compilation cache
// listens at once and compiles in the background; waitPluginsReady returns
// only when the gate says every plugin's first load is done, and a wrong
// key is a clear error, not an endless wait.
func TestBenchWaitsForPlugins(t *testing.T) {
	url, admin := benchTarget(t, filepath.Join(t.TempDir(), "cold-cache"))
	c := newBenchClient(url, 2)
	waited, err := waitPluginsReady(c, admin, pluginWarmTimeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Ready bool `json:"ready"`
	}
	call(t, "GET", url+"/v1/admin/plugins", admin, nil).Into(t, &list)
	if !list.Ready {
		t.Fatalf("waitPluginsReady returned (after %s) while the gate's plugins were still compiling", waited)
	}
	if _, err := waitPluginsReady(c, "agk_wrong", pluginWarmTimeout, nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a wrong admin key: %v, want an error carrying the 401", err)
	}
}

// benchTarget starts a real gate (compilation cache in cache) for the
// bench's helpers to load, stopped when the test ends, and returns its URL
// and admin key.
func benchTarget(t *testing.T, cache string) (url, admin string) {
	t.Helper()
	ensureGate(t)
	url, data, _, stop := launchGate(t, cache)
	t.Cleanup(stop)
	key, err := os.ReadFile(filepath.Join(data, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	return url, strings.TrimSpace(string(key))
}
