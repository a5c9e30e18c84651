package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkFreshStartToLease starts `gate serve` on a fresh data folder with
// an empty compilation cache (the worst case: six plugins to compile) and
// measures the time from exec to the first successful lease: healthz, a key
// for an agent and a worker, a task type, an enqueue and a lease. It reports
// ms-to-listen, ms-to-lease, and plugins-loading (1 when the lease was served
// while the plugins were still compiling).
//
//	go test -run '^$' -bench FreshStartToLease -benchtime 3x ./cmd/gate
func BenchmarkFreshStartToLease(b *testing.B) {
	var listen, lease time.Duration
	loading := 0
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		start := time.Now()
		cmd := exec.Command(gateBin, "serve", "--data", dir, "--listen", "127.0.0.1:0",
			"--wasm-cache", filepath.Join(dir, "fresh-cache"))
		stderr, err := cmd.StderrPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		addrc := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if line := sc.Text(); strings.Contains(line, "msg=listening") {
					for _, f := range strings.Fields(line) {
						if a, ok := strings.CutPrefix(f, "addr="); ok {
							addrc <- a
						}
					}
				}
			}
		}()
		var url string
		select {
		case a := <-addrc:
			url = "http://" + a
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			b.Fatal("gate did not listen")
		}
		listen += time.Since(start)
		must := func(method, u, key string, body any, status int) resp {
			r, err := tryCall(method, url+u, key, body)
			if err != nil || r.Status != status {
				cmd.Process.Kill()
				b.Fatalf("%s %s: %v %d %s", method, u, err, r.Status, r.Body)
			}
			return r
		}
		must("GET", "/healthz", "", nil, 200)
		keyb, err := os.ReadFile(filepath.Join(dir, "admin.key"))
		if err != nil {
			b.Fatal(err)
		}
		admin := strings.TrimSpace(string(keyb))
		agent := keyOf(b, must("POST", "/v1/admin/keys", admin, map[string]string{"role": "agent", "principal": "agent.a", "tenant": "default"}, 201))
		worker := keyOf(b, must("POST", "/v1/admin/keys", admin, map[string]string{"role": "worker", "principal": "echo.w1", "tenant": "default"}, 201))
		must("PUT", "/v1/admin/task-types/echo", admin, map[string]any{}, 200)
		must("POST", "/v1/tasks", agent, map[string]any{"task_type": "echo", "params": map[string]any{}}, 201)
		must("POST", "/v1/leases", worker, map[string]any{"worker_id": "echo.w1"}, 200)
		lease += time.Since(start)
		if r := must("GET", "/v1/admin/plugins", admin, nil, 200); bytes.Contains(r.Body, []byte(`"ready":false`)) {
			loading++
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	n := float64(b.N)
	b.ReportMetric(float64(listen.Milliseconds())/n, "ms-to-listen")
	b.ReportMetric(float64(lease.Milliseconds())/n, "ms-to-lease")
	b.ReportMetric(float64(loading)/n, "plugins-loading")
}

func keyOf(b *testing.B, r resp) string {
	b.Helper()
	var out struct {
		Key string `json:"api_key"`
	}
	if err := json.Unmarshal(r.Body, &out); err != nil || out.Key == "" {
		b.Fatalf("api_key: %s", r.Body)
	}
	return out.Key
}
