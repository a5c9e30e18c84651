package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestConfigEnvOverridesFileAndFlagsOverrideEnv checks the order defaults <
// file < ASYNCGATE_* < flags, and the reading of each kind of field.
func TestConfigEnvOverridesFileAndFlagsOverrideEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gate.json")
	if err := os.WriteFile(file, []byte(`{"listen":"127.0.0.1:7000","max_lease_seconds":100,"log_format":"json","data":"/from/file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ASYNCGATE_MAX_LEASE_SECONDS", "200")
	t.Setenv("ASYNCGATE_METRICS_PUBLIC", "true")
	t.Setenv("ASYNCGATE_LOG_LEVEL", "debug")
	t.Setenv("ASYNCGATE_DATA", "/from/env")
	t.Setenv("ASYNCGATE_DB", "") // empty: unset
	t.Setenv("ASYNCGATE_HTTP_CHANNEL", `{"endpoint":"https://results.example/in","headers":{"X-A":"b"}}`)
	t.Setenv("ASYNCGATE_URL", "http://ignored")
	t.Setenv("ASYNCGATE_DB_TIMEOUT_SECONDS", "7")
	var warn bytes.Buffer
	cfg, err := parseServeFlags([]string{"--config", file, "--data", "/from/flag"}, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:7000" || cfg.LogFormat != "json" {
		t.Errorf("file fields lost: listen %q log_format %q", cfg.Listen, cfg.LogFormat)
	}
	if cfg.MaxLeaseSeconds != 200 || !cfg.MetricsPublic || cfg.LogLevel != "debug" || cfg.DBTimeoutSeconds != 7 {
		t.Errorf("env did not override: %+v", cfg)
	}
	if cfg.Data != "/from/flag" {
		t.Errorf("data %q: the flag must win over the env", cfg.Data)
	}
	if cfg.DB != "" {
		t.Errorf("db %q from an empty variable", cfg.DB)
	}
	if cfg.HTTPChannel == nil || cfg.HTTPChannel.Endpoint != "https://results.example/in" || cfg.HTTPChannel.Headers["X-A"] != "b" {
		t.Errorf("http_channel %+v", cfg.HTTPChannel)
	}
	if warn.Len() != 0 {
		t.Errorf("warned: %s", warn.String())
	}
}

// TestConfigEnvConfigPath reads the config file named by ASYNCGATE_CONFIG.
func TestConfigEnvConfigPath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gate.json")
	if err := os.WriteFile(file, []byte(`{"listen":"127.0.0.1:7001"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ASYNCGATE_CONFIG", file)
	cfg, err := parseServeFlags(nil, io.Discard)
	if err != nil || cfg.Listen != "127.0.0.1:7001" {
		t.Fatalf("%+v %v", cfg.Listen, err)
	}
}

// TestConfigEnvBadValuesNameTheVariable checks that every refusal names the
// variable, for a value of the wrong kind and for one the schema refuses.
func TestConfigEnvBadValuesNameTheVariable(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"ASYNCGATE_MAX_LEASE_SECONDS", "ten", "not an integer"},
		{"ASYNCGATE_MAX_LEASE_SECONDS", "0", "must be >= 1"},
		{"ASYNCGATE_BODY_LIMIT_BYTES", "12", "must be >= 1024"},
		{"ASYNCGATE_METRICS_PUBLIC", "maybe", "not a boolean"},
		{"ASYNCGATE_LOG_FORMAT", "xml", "value must be one of"},
		{"ASYNCGATE_HTTP_CHANNEL", `{"endpoint":`, "not valid JSON"},
		{"ASYNCGATE_HTTP_CHANNEL", `{"endpoint":"ftp://x"}`, "does not match pattern"},
		{"ASYNCGATE_HTTP_CHANNEL", `{"url":"https://x"}`, "missing properties: 'endpoint'"},
	} {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			_, err := parseServeFlags(nil, io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.name) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %s and saying %q", err, c.name, c.want)
			}
		})
	}
}

// TestConfigEnvWarnsOfUnknownVariables reports a variable that names no
// config field (a typo) without refusing the start.
func TestConfigEnvWarnsOfUnknownVariables(t *testing.T) {
	t.Setenv("ASYNCGATE_LISTN", "127.0.0.1:1")
	t.Setenv("ASYNCGATE_TEST_SOMETHING", "x")
	t.Setenv("ASYNCGATE_ADMIN_KEY", "k") // gate worker's, not a config field
	var warn bytes.Buffer
	if _, err := parseServeFlags(nil, &warn); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warn.String(), "ASYNCGATE_LISTN") || strings.Contains(warn.String(), "ASYNCGATE_TEST_SOMETHING") || strings.Contains(warn.String(), "ASYNCGATE_ADMIN_KEY") {
		t.Fatalf("warning %q", warn.String())
	}
}

// TestE2EConfigFromEnvironment starts the real binary configured by
// environment variables alone, and checks that a bad value stops it before
// anything is written, with an error naming the variable.
func TestE2EConfigFromEnvironment(t *testing.T) {
	t.Parallel()
	ensureGate(t)
	dir := filepath.Join(t.TempDir(), "data")
	bad := exec.Command(gateBin, "serve")
	bad.Env = append(os.Environ(), "ASYNCGATE_DATA="+dir, "ASYNCGATE_LISTEN=127.0.0.1:0", "ASYNCGATE_SWEEP_INTERVAL_MS=5")
	out, err := bad.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "ASYNCGATE_SWEEP_INTERVAL_MS") {
		t.Fatalf("bad value: %v %s", err, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused start wrote the data folder: %v", err)
	}

	cmd := exec.Command(gateBin, "serve")
	cmd.Env = append(os.Environ(), "ASYNCGATE_DATA="+dir, "ASYNCGATE_LISTEN=127.0.0.1:0", "ASYNCGATE_LOG_FORMAT=json",
		"ASYNCGATE_WASM_CACHE_DIR="+wasmCache, "ASYNCGATE_METRICS_PUBLIC=true")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	sc := bufio.NewScanner(stderr)
	var addr string
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			t.Fatalf("not a JSON log line (ASYNCGATE_LOG_FORMAT=json): %s", sc.Text())
		}
		if line["msg"] == "listening" {
			addr, _ = line["addr"].(string)
			if line["data"] != dir {
				t.Fatalf("data %v, want %s", line["data"], dir)
			}
			break
		}
	}
	if addr == "" {
		t.Fatal("no listening line")
	}
	go io.Copy(io.Discard, stderr)
	// metrics_public from the environment: /metrics answers without a key.
	r := call(t, "GET", "http://"+addr+"/metrics", "", nil)
	if r.Status != 200 {
		t.Fatalf("/metrics without a key: %d %s", r.Status, r.Body)
	}
}
