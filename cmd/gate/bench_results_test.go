package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkResultFetchRSS measures the gate's peak resident memory while 32
// clients fetch one 30 MB file-channel result at once, each iteration (the
// load of issue 17, item 5). It starts the real binary on a temp data folder
// and reports the peak resident set during the fetches (VmHWM of the process,
// reset after the upload) as peak_rss_MB, and the resident set before them
// as rss_before_MB:
//
//	go test -run '^$' -bench BenchmarkResultFetchRSS -benchtime 3x ./cmd/gate
//
// GATE_RSS_FETCHES and GATE_RSS_MB change the load.
func BenchmarkResultFetchRSS(b *testing.B) {
	fetches, size := envInt("GATE_RSS_FETCHES", 32), envInt("GATE_RSS_MB", 30)<<20
	dir := b.TempDir()
	cmd := exec.Command(gateBin, "serve", "--data", dir, "--listen", "127.0.0.1:0", "--wasm-cache", wasmCache,
		"--body-limit", strconv.Itoa(size*2))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if line := sc.Text(); strings.Contains(line, "msg=listening") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						addr <- a
					}
				}
			}
		}
	}()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
	case <-time.After(180 * time.Second):
		b.Fatal("the gate did not start")
	}
	key, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		b.Fatal(err)
	}
	admin := strings.TrimSpace(string(key))
	// do makes one call; a 503 plugin_not_ready (the file channel still
	// compiling at start) is retried after its Retry-After, as a client does.
	var doAs func(key, method, path string, body any) map[string]any
	doAs = func(key, method, path string, body any) map[string]any {
		var j []byte
		if body != nil {
			j, _ = json.Marshal(body)
		}
		for deadline := time.Now().Add(3 * time.Minute); ; {
			var rd io.Reader
			if j != nil {
				rd = bytes.NewReader(j)
			}
			req, _ := http.NewRequest(method, url+path, rd)
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := httpc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			var m map[string]any
			err = json.NewDecoder(res.Body).Decode(&m)
			res.Body.Close()
			if res.StatusCode == http.StatusServiceUnavailable && m["error"] == "plugin_not_ready" && time.Now().Before(deadline) {
				secs, _ := strconv.Atoi(res.Header.Get("Retry-After"))
				time.Sleep(time.Duration(max(secs, 1)) * time.Second)
				continue
			}
			if err != nil || res.StatusCode >= 300 {
				b.Fatalf("%s %s: %d %v %v", method, path, res.StatusCode, err, m)
			}
			return m
		}
	}
	do := func(method, path string, body any) map[string]any { return doAs(admin, method, path, body) }
	do("PUT", "/v1/admin/task-types/big", map[string]any{"default_result_channel": "file", "max_payload_bytes": size})
	task := do("POST", "/v1/tasks", map[string]any{"task_type": "big"})["task_id"].(string)
	// An admin is no worker: the lease and completion take a worker key.
	worker := do("POST", "/v1/admin/keys", map[string]any{"role": "worker", "principal": "big.1"})["api_key"].(string)
	lease := doAs(worker, "POST", "/v1/leases", map[string]any{"worker_id": "big.1", "task_types": []string{"big"}})
	lid := lease["leases"].([]any)[0].(map[string]any)["lease_id"].(string)
	payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	doAs(worker, "POST", "/v1/leases/"+lid+"/complete", map[string]any{"result_base64": base64.StdEncoding.EncodeToString(payload)})
	payload = nil
	client := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: fetches}}

	// Measure the fetches only: reset the peak the upload left behind.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", cmd.Process.Pid), []byte("5"), 0); err != nil {
		b.Logf("cannot reset the peak RSS (%v): the figure includes the upload", err)
	}
	before := procStatus(b, cmd.Process.Pid, "VmRSS:")
	b.ResetTimer()
	var busy int
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for f := 0; f < fetches; f++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("GET", url+"/v1/tasks/"+task+"/result", nil)
				req.Header.Set("Authorization", "Bearer "+admin)
				res, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				defer res.Body.Close()
				var out struct {
					Content []byte `json:"content_base64"`
					Valid   *bool  `json:"checksum_valid"`
				}
				if res.StatusCode == 503 {
					mu.Lock()
					busy++
					mu.Unlock()
					return
				}
				if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 || len(out.Content) != size || out.Valid == nil || !*out.Valid {
					b.Errorf("fetch: %d %v, %d bytes", res.StatusCode, err, len(out.Content))
				}
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	b.ReportMetric(float64(before)/(1<<20), "rss_before_MB")
	b.ReportMetric(float64(procStatus(b, cmd.Process.Pid, "VmHWM:"))/(1<<20), "peak_rss_MB")
	b.ReportMetric(float64(busy)/float64(b.N), "busy/op")
}

// procStatus reads a size field of /proc/<pid>/status (VmRSS:, VmHWM: for
// the peak resident set), in bytes.
func procStatus(b *testing.B, pid int, field string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
