package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a process writer and a test reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitTaskState polls a task until it reaches one of the final states.
func waitTaskState(t *testing.T, g *gateProc, key, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var m map[string]any
	for time.Now().Before(deadline) {
		m = call(t, "GET", g.URL+"/v1/tasks/"+id, key, nil).JSON(t)
		switch m["status"] {
		case "succeeded", "dead_letter", "canceled":
			return m
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("task %s did not finish: %v", id, m)
	return nil
}

func TestWorkerCommand(t *testing.T) {
	g := startGate(t, t.TempDir())
	agent := g.newKey(t, "agent", "agent.ref-tests", "")
	wkey := g.newKey(t, "worker", "worker.ref-1", "")
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, strings.Repeat("x", 100))
	}))
	defer site.Close()

	var logs syncBuffer
	cmd := exec.Command(gateBin, "worker", "--url", g.URL, "--key", wkey, "--worker-id", "worker.ref-1",
		"--admin-key", g.Admin, "--enable-shell", "--fetch-allow-private", "--concurrency", "2",
		"--fetch-max-bytes", "10", "--spool", t.TempDir()+"/spool.jsonl", "--shutdown-timeout", "5s")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("worker log:\n%s", logs.String())
		}
	}()

	// The worker registers its task types; enqueue once they exist.
	enqueue := func(taskType string, params any) string {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			r := call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": taskType, "params": params})
			if r.Status == 201 {
				return r.JSON(t)["task_id"].(string)
			}
			if time.Now().After(deadline) {
				t.Fatalf("enqueue %s: %d %s", taskType, r.Status, r.Body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	result := func(id string) map[string]any {
		t.Helper()
		m := waitTaskState(t, g, agent, id)
		if m["status"] != "succeeded" {
			t.Fatalf("task %s: %v", id, m)
		}
		var out struct {
			Content map[string]any `json:"content"`
		}
		call(t, "GET", g.URL+"/v1/tasks/"+id+"/result", agent, nil).Into(t, &out)
		return out.Content
	}

	echo := enqueue("echo", map[string]any{"hello": "world"})
	if c := result(echo); c["hello"] != "world" {
		t.Fatalf("echo: %v", c)
	}
	fetch := enqueue("http.fetch", map[string]any{"url": site.URL})
	if c := result(fetch); c["status"] != float64(200) || c["body"] != "xxxxxxxxxx" || c["truncated"] != true {
		t.Fatalf("http.fetch: %v", c)
	}
	sh := enqueue("shell.exec", map[string]any{"argv": []string{"sh", "-c", "echo $0; exit 3", "not $HOME"}})
	if c := result(sh); c["exit_code"] != float64(3) || c["stdout"] != "not $HOME\n" {
		t.Fatalf("shell.exec: %v", c)
	}
	// Refused schemes and missing programs are fatal: dead letter at once.
	for _, tc := range []struct {
		typ    string
		params any
	}{
		{"http.fetch", map[string]any{"url": "file:///etc/passwd"}},
		{"shell.exec", map[string]any{"argv": []string{"/no/such/program"}}},
	} {
		id := enqueue(tc.typ, tc.params)
		m := waitTaskState(t, g, agent, id)
		if m["status"] != "dead_letter" || m["dead_reason"] != "fatal_error" {
			b, _ := json.Marshal(m)
			t.Fatalf("%s %v: %s", tc.typ, tc.params, b)
		}
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("gate worker exited with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("gate worker did not stop after SIGTERM")
	}
	if !strings.Contains(logs.String(), "task_id=") || !strings.Contains(logs.String(), "lease_id=") {
		t.Fatalf("logs lack task_id/lease_id:\n%s", logs.String())
	}
}
