package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/plugin/pluginbuild"
)

// gateBin is the gate binary the end-to-end tests run; ensureGate builds it
// on first use, so test runs and fuzzers that start no gate do not pay for it.
var gateBin string

// coverDirEnv names the environment variable that, when set to a folder,
// builds the gate with coverage (go build -cover) and has every gate process
// write its coverage counters there (GOCOVERDIR). `make cover` uses it; normal
// runs leave it unset and build the plain binary.
const coverDirEnv = "ASYNCGATE_E2E_COVERDIR"

var (
	buildOnce sync.Once
	buildErr  error
)

// ensureGate builds the built-in plugins and the gate binary once per test
// process, or fails the test.
func ensureGate(t testing.TB) {
	t.Helper()
	buildOnce.Do(func() { buildErr = buildGate() })
	if buildErr != nil {
		t.Fatalf("building the gate: %v", buildErr)
	}
}

func buildGate() error {
	// The binary embeds the built-in plugins from plugins/dist: build them
	// from source first (cached by source hash), as `make plugins` does.
	srcs, err := pluginbuild.Sources("../../plugins")
	if err == nil {
		_, err = pluginbuild.BuildAll(context.Background(), srcs, "../../plugins/dist", "")
	}
	if err != nil {
		return fmt.Errorf("building the built-in plugins: %w", err)
	}
	args := []string{"build", "-o", gateBin}
	if dir := os.Getenv(coverDirEnv); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return err
		}
		// Every gate process started from here on inherits it.
		os.Setenv("GOCOVERDIR", abs)
		args = append(args, "-cover", "-coverpkg=github.com/asyncgate/asyncgate/...")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the gate binary: %w", err)
	}
	return nil
}

// wasmCache is the compiled-plugin cache the test gates share.
var wasmCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gate-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gateBin = filepath.Join(dir, "gate")
	// One compilation cache for every gate the tests start: plugins compile once.
	wasmCache = filepath.Join(dir, "wasm-cache")
	if c := os.Getenv("ASYNCGATE_TEST_WASM_CACHE"); c != "" {
		wasmCache = c // kept across runs: a busy machine compiles each plugin once
	}
	// Build eagerly unless only fuzzing: many tests run gateBin directly.
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f == nil || f.Value.String() == "" {
		buildOnce.Do(func() { buildErr = buildGate() })
		if buildErr != nil {
			fmt.Fprintln(os.Stderr, buildErr)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// gateProc is a running `gate serve` process.
type gateProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	dir   string
	URL   string
	Admin string // the admin key from <data>/admin.key
	mu    sync.Mutex
	log   bytes.Buffer
	done  chan struct{}
	err   error
}

// startGate starts `gate serve` on 127.0.0.1:0 over the data folder dir and
// waits for its "listening" log line and its plugins.
func startGate(t *testing.T, dir string, extra ...string) *gateProc {
	t.Helper()
	g := startGateLoading(t, dir, extra...)
	// Plugins load in the background after the port is bound; most tests
	// want them all loaded (TestE2EStartOnEmptyCache checks the start).
	g.waitPluginsReady(t)
	return g
}

// startGateLoading is startGate without waiting for the plugins.
func startGateLoading(t *testing.T, dir string, extra ...string) *gateProc {
	t.Helper()
	ensureGate(t)
	args := append([]string{"serve", "--data", dir, "--listen", "127.0.0.1:0", "--expiry-jitter", "0", "--sweep-interval", "100ms",
		"--wasm-cache", wasmCache}, extra...)
	cmd := exec.Command(gateBin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	g := &gateProc{t: t, cmd: cmd, dir: dir, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			g.mu.Lock()
			g.log.WriteString(line + "\n")
			g.mu.Unlock()
			if strings.Contains(line, "msg=listening") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						addrc <- a
					}
				}
			}
		}
		g.err = cmd.Wait()
		close(g.done)
	}()
	select {
	case addr := <-addrc:
		g.URL = "http://" + addr
	case <-g.done:
		t.Fatalf("gate exited before listening: %v\n%s", g.err, g.Log())
	case <-time.After(120 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("gate did not start:\n%s", g.Log())
	}
	key, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatalf("admin.key: %v", err)
	}
	g.Admin = strings.TrimSpace(string(key))
	if strings.Contains(g.Log(), undocumentedRoutesMsg) {
		t.Errorf("the gate serves routes the OpenAPI document lacks (or the reverse); add them with openapi.Add:\n%s", g.Log())
	}
	t.Cleanup(func() {
		g.Stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("gate log:\n%s", g.Log())
		}
	})
	return g
}

// waitPluginsReady waits, as gate bench does, until the gate reports every
// plugin loaded, failing the test after five minutes (compiling six plugins
// into an empty cache took over two on a busy 2-core machine).
func (g *gateProc) waitPluginsReady(t *testing.T) {
	t.Helper()
	if _, err := waitPluginsReady(newBenchClient(g.URL, 1), g.Admin, 5*time.Minute, nil); err != nil {
		t.Fatalf("%v\n%s", err, g.Log())
	}
}

// Log returns what the gate logged so far.
func (g *gateProc) Log() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log.String()
}

// Stop sends sig and waits for the process to exit; it returns the exit error.
func (g *gateProc) Stop(sig syscall.Signal) error {
	select {
	case <-g.done:
		return g.err
	default:
	}
	_ = g.cmd.Process.Signal(sig)
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
		g.t.Errorf("gate did not exit after %v", sig)
	}
	return g.err
}

var httpc = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// resp is an HTTP answer.
type resp struct {
	Status int
	Body   []byte
	Header http.Header
}

// JSON decodes the body into a map.
func (r resp) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v: %q", r.Status, err, r.Body)
	}
	return m
}

// Into decodes the body into v.
func (r resp) Into(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("answer %d: %v: %q", r.Status, err, r.Body)
	}
}

// call sends a request; body is JSON-encoded unless it is a string or []byte.
func call(t *testing.T, method, url, key string, body any) resp {
	t.Helper()
	r, err := tryCall(method, url, key, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	checkContract(t, method, url, key, bodyBytes(t, body), r)
	return r
}

// bodyBytes is the request body call sends for body (nil for none).
func bodyBytes(t *testing.T, body any) []byte {
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		return []byte(b)
	case []byte:
		return b
	}
	j, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// jsonUnmarshal is json.Unmarshal (for files that do not import encoding/json).
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func tryCall(method, url, key string, body any) (resp, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return resp{}, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return resp{}, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := httpc.Do(req)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return resp{Status: res.StatusCode, Body: b, Header: res.Header}, err
}

// want checks an answer's status and, for errors, its code.
func want(t *testing.T, r resp, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if code != "" {
		m := r.JSON(t)
		if m["error"] != code {
			t.Fatalf("error %v, want %q: %s", m["error"], code, r.Body)
		}
		if d, _ := m["detail"].(string); d == "" {
			t.Fatalf("error %q has no detail: %s", code, r.Body)
		}
	}
}

// newKey creates a key over the admin API and returns the secret.
func (g *gateProc) newKey(t *testing.T, role, principal, tenant string) string {
	t.Helper()
	r := call(t, "POST", g.URL+"/v1/admin/keys"+tenantQuery(tenant), g.Admin, map[string]string{"role": role, "principal": principal, "tenant": tenant})
	want(t, r, 201, "")
	k, _ := r.JSON(t)["api_key"].(string)
	if !strings.HasPrefix(k, "agw_") {
		t.Fatalf("api_key %q", k)
	}
	return k
}

// tenantQuery is "?tenant=" and tenant, or "" for none: an admin route acts
// on the tenant ?tenant= names (a body tenant may only repeat it).
func tenantQuery(tenant string) string {
	if tenant == "" {
		return ""
	}
	return "?tenant=" + url.QueryEscape(tenant)
}

// putType registers a task type in the admin's tenant (or ?tenant=).
func (g *gateProc) putType(t *testing.T, name string, fields map[string]any, tenant string) {
	t.Helper()
	u := g.URL + "/v1/admin/task-types/" + name
	if tenant != "" {
		u += "?tenant=" + tenant
	}
	want(t, call(t, "PUT", u, g.Admin, fields), 200, "")
}

// enqueue queues a task and returns its id.
func (g *gateProc) enqueue(t *testing.T, key, taskType string, params map[string]any) string {
	t.Helper()
	r := call(t, "POST", g.URL+"/v1/tasks", key, map[string]any{"task_type": taskType, "params": params})
	want(t, r, 201, "")
	return r.JSON(t)["task_id"].(string)
}

// offer is the part of a canonical offer the tests read.
type offer struct {
	LeaseID        string    `json:"lease_id"`
	RunID          string    `json:"run_id"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	ServerTime     time.Time `json:"server_time"` // the gate's clock at the grant
	Attempt        int       `json:"attempt"`
	Task           struct {
		ID     string          `json:"task_id"`
		Type   string          `json:"task_type"`
		Params json.RawMessage `json:"params"`
		Status string          `json:"status"`
	} `json:"task"`
}

// lease leases up to n tasks for worker (204 gives none).
func (g *gateProc) lease(t *testing.T, key, worker string, body map[string]any) []offer {
	t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	body["worker_id"] = worker
	r := call(t, "POST", g.URL+"/v1/leases", key, body)
	if r.Status == 204 {
		if len(r.Body) != 0 {
			t.Fatalf("204 with a body: %q", r.Body)
		}
		return nil
	}
	want(t, r, 200, "")
	var out struct {
		Leases []offer `json:"leases"`
	}
	r.Into(t, &out)
	return out.Leases
}

// gateCLI runs the gate binary with args and returns stdout, stderr and the exit code.
func gateCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ensureGate(t)
	cmd := exec.Command(gateBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("gate %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}
