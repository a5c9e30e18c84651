// Command readyz-full-disk measures /readyz on a full disk (issue 38 item 4).
// It starts `gate serve` on a data folder that lives on a small filesystem,
// enqueues 8 KB tasks until one is refused, and meanwhile polls /readyz every
// 20 ms: it prints how long after the first refused enqueue /readyz answered
// 503, and how many of its answers were 200 over the next 15 s of refused
// enqueues. Given the mount point, it then grows the filesystem (mount -o
// remount,size=64m: run as root on a tmpfs) and prints how long until
// /readyz is 200 and an enqueue commits.
//
//	mount -t tmpfs -o size=16m tmpfs /mnt/full
//	go run ./scripts/readyz-full-disk bin/gate /mnt/full/data /mnt/full
//	umount /mnt/full
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: readyz-full-disk GATE-BINARY DATA-FOLDER [MOUNT-POINT]")
		os.Exit(2)
	}
	bin, dir := os.Args[1], os.Args[2]
	cmd := exec.Command(bin, "serve", "--data", dir, "--listen", "127.0.0.1:0", "--wasm-cache", os.TempDir()+"/readyz-full-disk-wasm")
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	defer cmd.Process.Kill()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			for _, f := range strings.Fields(sc.Text()) {
				if a, ok := strings.CutPrefix(f, "addr="); ok {
					select {
					case addr <- a: // the first: the listening line
					default:
					}
				}
			}
		}
	}()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
	case <-time.After(120 * time.Second):
		panic("no start")
	}
	key, _ := os.ReadFile(dir + "/admin.key")
	admin := strings.TrimSpace(string(key))
	do := func(method, path, k string, body any) (int, []byte) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, url+path, rd)
		if k != "" {
			req.Header.Set("Authorization", "Bearer "+k)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	_, b := do("POST", "/v1/admin/keys", admin, map[string]string{"role": "agent", "principal": "filler", "tenant": "default"})
	var k struct {
		Key string `json:"api_key"`
	}
	if err := json.Unmarshal(b, &k); err != nil || k.Key == "" {
		panic(fmt.Sprint("agent key: ", err, string(b)))
	}
	do("PUT", "/v1/admin/task-types/fill", admin, map[string]any{})
	if s, _ := do("GET", "/readyz", "", nil); s != 200 {
		panic(fmt.Sprint("readyz ", s))
	}
	var firstFail atomic.Int64 // unix nanos
	var mu sync.Mutex
	var readyTurned time.Time
	okAfterFail, pollsAfterFail := 0, 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s, _ := do("GET", "/readyz", "", nil)
			now := time.Now()
			mu.Lock()
			if ff := firstFail.Load(); ff != 0 {
				pollsAfterFail++
				if s == 200 {
					okAfterFail++
				} else if readyTurned.IsZero() {
					readyTurned = now
				}
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	pad := strings.Repeat("x", 8000)
	fails := 0
	for i := 0; ; i++ {
		s, body := do("POST", "/v1/tasks", k.Key, map[string]any{"task_type": "fill", "params": map[string]any{"pad": pad, "i": i}})
		if s != 201 {
			if firstFail.Load() == 0 {
				firstFail.Store(time.Now().UnixNano())
				fmt.Printf("first refused enqueue after %d tasks: %d %s\n", i, s, strings.TrimSpace(string(body)))
			}
			fails++
			if time.Since(time.Unix(0, firstFail.Load())) > 15*time.Second {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	ff := time.Unix(0, firstFail.Load())
	lag := "never"
	if !readyTurned.IsZero() {
		lag = readyTurned.Sub(ff).String()
	}
	fmt.Printf("readyz 503 after the first refused enqueue: %s; over the next 15 s, enqueues refused %d, readyz polls %d of which 200: %d\n", lag, fails, pollsAfterFail, okAfterFail)
	if len(os.Args) > 3 {
		// Room again: how long until /readyz is 200 and an enqueue commits.
		if out, err := exec.Command("mount", "-o", "remount,size=64m", os.Args[3]).CombinedOutput(); err != nil {
			panic(fmt.Sprint(err, string(out)))
		}
		grown := time.Now()
		var ready, enq time.Duration
		for time.Since(grown) < 30*time.Second && (ready == 0 || enq == 0) {
			if s, _ := do("GET", "/readyz", "", nil); s == 200 && ready == 0 {
				ready = time.Since(grown)
			}
			if s, _ := do("POST", "/v1/tasks", k.Key, map[string]any{"task_type": "fill"}); s == 201 && enq == 0 {
				enq = time.Since(grown)
			}
			time.Sleep(20 * time.Millisecond)
		}
		fmt.Printf("after the filesystem grew: readyz 200 after %v, first enqueue committed after %v\n", ready, enq)
	}
}
