package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
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

const spoolHolderEnv = "ASYNCGATE_TEST_SPOOL_HOLD"

// TestDefaultSpoolPerWorker: workers without an explicit id get one spool
// per key (a worker key is its own worker id), never a shared default file.
func TestDefaultSpoolPerWorker(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	path := func(key, id string) string {
		return worker.NewRunner(worker.NewClient("http://127.0.0.1:1", key), worker.Config{WorkerID: id}).SpoolPath()
	}
	a, b := path("agw_keyA", ""), path("agw_keyB", "")
	if a == b {
		t.Fatalf("two keys without a worker id share the spool %s", a)
	}
	if a != path("agw_keyA", "") {
		t.Fatalf("the same key gets another spool on restart: %s vs %s", a, path("agw_keyA", ""))
	}
	if strings.Contains(a, "agw_keyA") {
		t.Fatalf("the spool name shows the key: %s", a)
	}
	if got := path("agw_keyA", "codegen.i-1"); filepath.Base(got) != "spool-codegen.i-1.jsonl" {
		t.Fatalf("explicit worker id: %s", got)
	}
	for _, p := range []string{a, b} {
		if !strings.HasPrefix(p, cache) {
			t.Fatalf("spool %s is not in the user cache folder %s", p, cache)
		}
	}
}

// TestSpoolLockedAgainstSecondProcess: while another process holds a spool,
// a Runner with the same spool refuses to run (and to replay it) with
// ErrSpoolLocked; so does a second Runner in this process; once the holder
// is gone the spool can be used.
func TestSpoolLockedAgainstSecondProcess(t *testing.T) {
	spoolPath := filepath.Join(t.TempDir(), "spool.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), spoolHolderEnv+"="+spoolPath)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		t.Fatalf("the holder process did not lock: %q %v", line, err)
	}

	newRunner := func() *worker.Runner {
		r := worker.NewRunner(worker.NewClient("http://127.0.0.1:1", "agw_x"), worker.Config{WorkerID: "w.1", SpoolPath: spoolPath, Logger: testLogger(t)})
		r.Handle("t", func(ctx context.Context, task *worker.Task) (any, error) { return nil, nil })
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = newRunner().Run(ctx)
	if !errors.Is(err, worker.ErrSpoolLocked) || !strings.Contains(err.Error(), spoolPath) {
		t.Fatalf("Run with a spool another process holds = %v, want ErrSpoolLocked naming %s", err, spoolPath)
	}
	if _, _, err := newRunner().FlushSpool(ctx); !errors.Is(err, worker.ErrSpoolLocked) {
		t.Fatalf("FlushSpool with a spool another process holds = %v", err)
	}

	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	// Free now: one Runner runs, a second one in this process is refused.
	logs := &syncBuffer{}
	first := worker.NewRunner(worker.NewClient("http://127.0.0.1:1", "agw_x"), worker.Config{WorkerID: "w.1", SpoolPath: spoolPath,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	first.Handle("t", func(ctx context.Context, task *worker.Task) (any, error) { return nil, nil })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- first.Run(runCtx) }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(logs.String(), "worker starting") {
		select {
		case err := <-done:
			t.Fatalf("the first Runner stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first Runner did not start: %s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, _, err := newRunner().FlushSpool(ctx); !errors.Is(err, worker.ErrSpoolLocked) {
		t.Fatalf("a second Runner could use the spool while the first runs: %v", err)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("first Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the first Runner did not stop")
	}
	if _, _, err := newRunner().FlushSpool(ctx); err != nil {
		t.Fatalf("FlushSpool after the holder stopped: %v", err)
	}
}
