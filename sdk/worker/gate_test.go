package worker_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// The tests run the SDK against a real `gate serve`, built once by TestMain.

var gateBin string

// wasmCache is the compiled-plugin cache the test gates share.
var wasmCache string

func TestMain(m *testing.M) {
	if path := os.Getenv(spoolHolderEnv); path != "" {
		os.Exit(worker.HoldSpoolUntilStdinCloses(path)) // the second process of TestSpoolLockedAgainstSecondProcess
	}
	dir, err := os.MkdirTemp("", "worker-sdk-gate-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gateBin = filepath.Join(dir, "gate")
	wasmCache = filepath.Join(dir, "wasm-cache") // one compilation cache for every gate started here
	// The gate is the repository's root module, which requires this one
	// through a replace: build it from there.
	build := exec.Command("go", "build", "-o", gateBin, "./cmd/gate")
	build.Dir = "../.."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the gate binary:", err)
		os.Exit(1)
	}
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// gproc is a `gate serve` process (restartable) over one data folder.
type gproc struct {
	dir  string
	mu   sync.Mutex
	log  bytes.Buffer
	cmd  *exec.Cmd
	done chan struct{}
	addr string
	url  string
}

// gate is a test's view of a gate: the process plus admin, agent and worker
// keys made by `gate keys create`.
type gate struct {
	*gproc
	t      *testing.T
	URL    string
	Admin  string
	Agent  string
	Worker string // the key of worker id workerID
}

const workerID = "worker.sdk-test"

var (
	sharedOnce sync.Once
	shared     *gate
	sharedErr  string
)

// sharedGate returns the gate the tests that do not stop it share (a gate
// compiles its built-in plugins when it starts, which takes seconds). Tests
// on it use task types of their own.
func sharedGate(t *testing.T) *gate {
	t.Helper()
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "worker-sdk-shared-")
		if err != nil {
			sharedErr = err.Error()
			return
		}
		g := &gate{gproc: &gproc{dir: dir}, t: t}
		// The first start creates the gate; `gate keys create` then adds
		// keys to it (it never creates a gate itself).
		g.start("127.0.0.1:0")
		g.Admin = g.key("admin", "admin")
		g.Agent = g.key("agent", "agent.tests")
		g.Worker = g.key("worker", workerID)
		shared = g
		cleanups = append(cleanups, func() {
			shared.stopProc()
			os.RemoveAll(dir)
		})
	})
	if shared == nil {
		t.Fatalf("shared gate: %s", sharedErr)
	}
	g := *shared
	g.t = t
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gate log:\n%s", g.logText())
		}
	})
	return &g
}

// cleanups run after all tests (TestMain).
var cleanups []func()

// newGate starts a gate of the test's own (for tests that stop it).
func newGate(t *testing.T) *gate {
	t.Helper()
	g := &gate{gproc: &gproc{dir: t.TempDir()}, t: t}
	g.start("127.0.0.1:0") // creates the gate; keys are added to it below
	t.Cleanup(func() {
		g.stop()
		if t.Failed() {
			t.Logf("gate log:\n%s", g.logText())
		}
	})
	g.Admin = g.key("admin", "admin")
	g.Agent = g.key("agent", "agent.tests")
	g.Worker = g.key("worker", workerID)
	return g
}

func (g *gate) key(role, principal string) string {
	g.t.Helper()
	out, err := exec.Command(gateBin, "keys", "create", "--data", g.dir, "--role", role, "--principal", principal).Output()
	if err != nil {
		g.t.Fatalf("gate keys create %s: %v", role, err)
	}
	return strings.TrimSpace(string(out))
}

func (g *gproc) logText() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log.String()
}

// start runs `gate serve` on addr and waits until it listens.
func (g *gate) start(addr string) {
	g.t.Helper()
	cmd := exec.Command(gateBin, "serve", "--data", g.dir, "--listen", addr, "--expiry-jitter", "0", "--sweep-interval", "100ms", "--auth-cache", "0", "--wasm-cache", wasmCache)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		g.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	done := make(chan struct{})
	addrc := make(chan string, 1)
	readyc := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			g.mu.Lock()
			g.log.WriteString(line + "\n")
			g.mu.Unlock()
			// Plugins load in the background after the gate listens; a
			// call that needs one still loading would be a 503.
			if strings.Contains(line, `msg="plugins loaded in the background"`) {
				select {
				case readyc <- struct{}{}:
				default:
				}
			}
			if strings.Contains(line, "msg=listening") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						addrc <- a
					}
				}
			}
		}
		cmd.Wait()
		close(done)
	}()
	deadline := time.After(5 * time.Minute) // generous: a busy machine compiles slowly
	select {
	case a := <-addrc:
		g.mu.Lock()
		g.cmd, g.done, g.addr, g.url = cmd, done, a, "http://"+a
		g.mu.Unlock()
		g.URL = g.url
	case <-done:
		g.t.Fatalf("gate exited before listening:\n%s", g.logText())
	case <-deadline:
		cmd.Process.Kill()
		g.t.Fatalf("gate did not listen within 5 minutes:\n%s", g.logText())
	}
	select {
	case <-readyc:
	case <-done:
		g.t.Fatalf("gate exited before its plugins were ready:\n%s", g.logText())
	case <-deadline:
		cmd.Process.Kill()
		g.t.Fatalf("gate's plugins not ready within 5 minutes:\n%s", g.logText())
	}
}

// stop stops the gate (SIGTERM) and waits for it.
func (g *gate) stop() { g.stopProc() }

func (g *gproc) stopProc() {
	g.mu.Lock()
	cmd, done := g.cmd, g.done
	g.cmd = nil
	g.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// restart starts the gate again on the same address (Go listeners set
// SO_REUSEADDR, so the port is free once the old process exited).
func (g *gate) restart() {
	g.t.Helper()
	g.start(g.addr)
}

var hc = &http.Client{Timeout: 60 * time.Second}

// call sends a JSON request and decodes a JSON answer into out (when set).
func (g *gate) call(method, path, key string, body, out any) int {
	g.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, g.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := hc.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			g.t.Fatalf("%s %s: %d %q: %v", method, path, res.StatusCode, raw, err)
		}
	}
	return res.StatusCode
}

// putType registers a task type with a short lease and no requeue delay.
func (g *gate) putType(name string, leaseSeconds int, extra map[string]any) {
	g.t.Helper()
	body := map[string]any{"task_type": name, "lease_seconds": leaseSeconds, "requeue_delay_seconds": 0}
	for k, v := range extra {
		body[k] = v
	}
	var out map[string]any
	if st := g.call("PUT", "/v1/admin/task-types/"+name, g.Admin, body, &out); st != 200 {
		g.t.Fatalf("put task type %s: %d %v", name, st, out)
	}
}

// enqueue queues a task as the agent and returns its id.
func (g *gate) enqueue(taskType string, params any, extra map[string]any) string {
	g.t.Helper()
	body := map[string]any{"task_type": taskType, "params": params}
	for k, v := range extra {
		body[k] = v
	}
	var out map[string]any
	if st := g.call("POST", "/v1/tasks", g.Agent, body, &out); st != 201 {
		g.t.Fatalf("enqueue %s: %d %v", taskType, st, out)
	}
	return out["task_id"].(string)
}

// taskView is what the tests read of a task.
type taskView struct {
	ID              string   `json:"task_id"`
	Status          string   `json:"status"`
	Attempts        int      `json:"attempts"`
	LeaseCount      int      `json:"lease_count"`
	LeaseExpiries   int      `json:"lease_expiries"`
	LeaseID         string   `json:"lease_id"`
	ErrorMessage    string   `json:"error_message"`
	DeadReason      string   `json:"dead_reason"`
	ProgressPercent *float64 `json:"progress_percent"`
	ProgressMessage string   `json:"progress_message"`
	Result          *struct {
		Channel  string          `json:"result_channel"`
		Pointer  string          `json:"result_pointer"`
		Checksum string          `json:"result_checksum"`
		Summary  string          `json:"summary"`
		Metadata json.RawMessage `json:"metadata"`
	} `json:"result"`
}

func (g *gate) task(id string) taskView {
	g.t.Helper()
	var tv taskView
	if st := g.call("GET", "/v1/tasks/"+id, g.Agent, nil, &tv); st != 200 {
		g.t.Fatalf("get task %s: %d", id, st)
	}
	return tv
}

// waitTask polls until cond holds for the task (generous timeout, no timing
// assertions).
func (g *gate) waitTask(id string, what string, cond func(taskView) bool) taskView {
	g.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var tv taskView
	for time.Now().Before(deadline) {
		tv = g.task(id)
		if cond(tv) {
			return tv
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.t.Fatalf("task %s: gave up waiting for %s; last seen %+v", id, what, tv)
	return tv
}

func status(s string) func(taskView) bool { return func(tv taskView) bool { return tv.Status == s } }

// eventually polls cond until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

// testLogger writes the Runner's logs to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	defer func() { recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
