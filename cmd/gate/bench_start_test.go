package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkStartFresh measures a first start of the real binary on a fresh
// data folder (issue 16 item 3): from exec to the first 200 of /healthz, and
// to the first lease served (admin key read, task type registered, agent and
// worker keys made, one task queued and leased, all over HTTP). cache=cold
// compiles the built-in plugins into the new folder's own cache, as a real
// first start does; cache=warm shares a compilation cache already filled.
//
//	go test -run '^$' -bench StartFresh -benchtime 5x ./cmd/gate
func BenchmarkStartFresh(b *testing.B) {
	warm := filepath.Join(b.TempDir(), "wasm-cache")
	for _, bc := range []struct {
		name  string
		cache string
	}{{"cache=cold", ""}, {"cache=warm", warm}} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.cache != "" {
				startOnce(b, bc.cache) // fill the cache, untimed
			}
			var toHealth, toLease time.Duration
			for i := 0; i < b.N; i++ {
				h, l := startOnce(b, bc.cache)
				toHealth += h
				toLease += l
			}
			b.ReportMetric(float64(toHealth.Milliseconds())/float64(b.N), "ms-to-healthz")
			b.ReportMetric(float64(toLease.Milliseconds())/float64(b.N), "ms-to-lease")
		})
	}
}

// startOnce starts a gate on a new data folder, times its first /healthz and
// its first served lease, and stops it.
func startOnce(b *testing.B, cache string) (toHealth, toLease time.Duration) {
	b.Helper()
	url, data, began, stop := launchGate(b, cache)
	defer stop()
	toHealth = time.Since(began)
	key, err := os.ReadFile(filepath.Join(data, "admin.key"))
	if err != nil {
		b.Fatal(err)
	}
	admin := strings.TrimSpace(string(key))
	must := func(r resp, err error, status int) resp {
		b.Helper()
		if err != nil || r.Status != status {
			b.Fatalf("status %d, want %d: %v %s", r.Status, status, err, r.Body)
		}
		return r
	}
	newKey := func(role, principal string) string {
		r, err := tryCall("POST", url+"/v1/admin/keys", admin, map[string]string{"role": role, "principal": principal})
		var k struct {
			APIKey string `json:"api_key"`
		}
		if err := json.Unmarshal(must(r, err, 201).Body, &k); err != nil || k.APIKey == "" {
			b.Fatalf("new key: %v %s", err, r.Body)
		}
		return k.APIKey
	}
	r, err := tryCall("PUT", url+"/v1/admin/task-types/start", admin, map[string]any{})
	must(r, err, 200)
	agent, worker := newKey("agent", "bench.agent"), newKey("worker", "start.w1")
	r, err = tryCall("POST", url+"/v1/tasks", agent, map[string]any{"task_type": "start", "params": map[string]any{}})
	must(r, err, 201)
	r, err = tryCall("POST", url+"/v1/leases", worker, map[string]any{"worker_id": "start.w1", "task_types": []string{"start"}})
	must(r, err, 200)
	toLease = time.Since(began)
	return toHealth, toLease
}

// launchGate starts `gate serve` on a new data folder (and the compilation
// cache given, or the folder's own when empty) and returns once /healthz
// answers 200, with when the process was started and a func that stops it.
func launchGate(tb testing.TB, cache string) (url, data string, began time.Time, stop func()) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	data = filepath.Join(tb.TempDir(), "data")
	args := []string{"serve", "--data", data, "--listen", addr, "--log-level", "warn"}
	if cache != "" {
		args = append(args, "--wasm-cache", cache)
	}
	cmd := exec.Command(gateBin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	began = time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	url = "http://" + addr
	deadline := began.Add(5 * time.Minute)
	for {
		r, err := tryCall("GET", url+"/healthz", "", nil)
		if err == nil && r.Status == 200 {
			break
		}
		select {
		case err := <-done:
			tb.Fatalf("the gate exited: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			tb.Fatalf("no /healthz after 5 minutes: %v %d", err, r.Status)
		}
		time.Sleep(time.Millisecond)
	}
	return url, data, began, stop
}
