package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// The tests run the client against a real `gate serve`, built once by TestMain.

var gateBin, wasmCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "client-sdk-gate-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gateBin = filepath.Join(dir, "gate")
	wasmCache = filepath.Join(dir, "wasm-cache")
	if c := os.Getenv("ASYNCGATE_TEST_WASM_CACHE"); c != "" {
		wasmCache = c
	}
	// The gate is the repository's root module: build it from there.
	build := exec.Command("go", "build", "-o", gateBin, "./cmd/gate")
	build.Dir = "../.."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the gate binary:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type gate struct {
	URL, Admin string
	mu         sync.Mutex
	log        bytes.Buffer
}

// startGate runs `gate serve` on a fresh data folder, with extra flags,
// and waits until its plugins are loaded.
func startGate(t *testing.T, extra ...string) *gate {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	args := append([]string{"serve", "--data", dir, "--listen", "127.0.0.1:0", "--wasm-cache", wasmCache, "--sweep-interval", "100ms"}, extra...)
	cmd := exec.Command(gateBin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gate{}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			g.mu.Lock()
			g.log.WriteString(line + "\n")
			g.mu.Unlock()
			if strings.Contains(line, "msg=listening") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						addr <- a
					}
				}
			}
		}
	}()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
		}
		if t.Failed() {
			g.mu.Lock()
			t.Logf("gate log:\n%s", g.log.String())
			g.mu.Unlock()
		}
	})
	select {
	case a := <-addr:
		g.URL = "http://" + a
	case <-done:
		t.Fatal("the gate exited before listening")
	case <-time.After(2 * time.Minute):
		t.Fatal("the gate did not start")
	}
	k, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	g.Admin = strings.TrimSpace(string(k))
	admin := client.New(g.URL, g.Admin)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var p struct {
			Ready bool `json:"ready"`
		}
		if _, err := admin.Do(context.Background(), "GET", "/v1/admin/plugins", nil, &p); err == nil && p.Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("plugins not ready after 5 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return g
}

// key creates a key over the admin API.
func (g *gate) key(t *testing.T, role, principal string) string {
	t.Helper()
	var k struct {
		APIKey string `json:"api_key"`
	}
	if _, err := client.New(g.URL, g.Admin).Do(context.Background(), "POST", "/v1/admin/keys",
		map[string]string{"role": role, "principal": principal}, &k); err != nil {
		t.Fatal(err)
	}
	return k.APIKey
}

type resizeParams struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
}

type resizeResult struct {
	Thumb string `json:"thumb"`
}

// TestClientAgainstTheGate drives every method of the client against a real
// gate: typed enqueue (and its idempotent repeat and a schema refusal),
// status, list, wait while a worker reports progress and completes, the
// typed result, progress history, archive, cancel, and bounded waits.
func TestClientAgainstTheGate(t *testing.T) {
	g := startGate(t)
	ctx := context.Background()
	admin := client.New(g.URL, g.Admin)
	if _, err := admin.Do(ctx, "PUT", "/v1/admin/task-types/image.resize", map[string]any{
		"params_schema": map[string]any{"type": "object", "required": []string{"url", "width"},
			"properties": map[string]any{"width": map[string]any{"type": "integer", "minimum": 1}}},
	}, nil); err != nil {
		t.Fatal(err)
	}
	c := client.New(g.URL, g.key(t, "agent", "producer.a"))
	worker := client.New(g.URL, g.key(t, "worker", "resize.w1"))
	resize := client.NewTaskType[resizeParams](c, "image.resize")

	// Enqueue with typed params; a repeated idempotency key is the same task.
	ack, err := resize.Enqueue(ctx, resizeParams{URL: "https://x/cat.png", Width: 64}, &client.EnqueueOptions{IdempotencyKey: "cat-64", Summary: "a cat", Priority: 7})
	if err != nil {
		t.Fatal(err)
	}
	if ack.TaskID == "" || ack.Status != client.StateQueued || ack.IsDuplicate || ack.ReceiptID == "" {
		t.Fatalf("ack %+v", ack)
	}
	again, err := resize.Enqueue(ctx, resizeParams{URL: "https://x/cat.png", Width: 64}, &client.EnqueueOptions{IdempotencyKey: "cat-64"})
	if err != nil || !again.IsDuplicate || again.TaskID != ack.TaskID {
		t.Fatalf("repeat: %+v %v", again, err)
	}
	// Params the type's schema refuses: a 400 invalid_params APIError.
	_, err = resize.Enqueue(ctx, resizeParams{URL: "u", Width: 0}, nil)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_params" || ae.Detail == "" {
		t.Fatalf("bad params: %v", err)
	}

	st, err := c.Status(ctx, ack.TaskID)
	if err != nil || st.Status != client.StateQueued || st.TaskType != "image.resize" || st.Priority != 7 || st.Summary != "a cat" {
		t.Fatalf("status %+v %v", st, err)
	}
	var p resizeParams
	if err := json.Unmarshal(st.Params, &p); err != nil || p.Width != 64 {
		t.Fatalf("params %s", st.Params)
	}
	if _, err := c.Status(ctx, "T-nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
	list, _, err := c.List(ctx, client.ListOptions{Status: []string{"queued"}, TaskTypes: []string{"image.resize"}})
	if err != nil || len(list) != 1 || list[0].TaskID != ack.TaskID {
		t.Fatalf("list %+v %v", list, err)
	}

	// A worker leases it, reports progress and completes with a payload;
	// Wait sees the progress and returns the finished task.
	var leases struct {
		Leases []struct {
			LeaseID string `json:"lease_id"`
		} `json:"leases"`
	}
	if _, err := worker.Do(ctx, "POST", "/v1/leases", map[string]any{"worker_id": "resize.w1", "task_types": []string{"image.resize"}}, &leases); err != nil || len(leases.Leases) != 1 {
		t.Fatalf("lease %+v %v", leases, err)
	}
	lid := leases.Leases[0].LeaseID
	if _, err := worker.Do(ctx, "POST", "/v1/leases/"+lid+"/heartbeat", map[string]any{"progress_percent": 50, "progress_message": "half"}, nil); err != nil {
		t.Fatal(err)
	}
	sawProgress := false
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var polls int
	finished, err := c.Wait(waitCtx, ack.TaskID, &client.WaitOptions{Interval: 20 * time.Millisecond, OnPoll: func(t *client.Task) {
		polls++
		if t.ProgressPercent != nil && *t.ProgressPercent == 50 && t.ProgressMessage == "half" {
			sawProgress = true
		}
		if polls == 2 { // complete once Wait has seen the task running
			worker.Do(ctx, "POST", "/v1/leases/"+lid+"/complete", map[string]any{"result": resizeResult{Thumb: "thumb-64"}, "summary": "resized"}, nil)
		}
	}})
	if err != nil || finished.Status != client.StateSucceeded || !finished.Terminal() {
		t.Fatalf("wait: %+v %v", finished, err)
	}
	if !sawProgress {
		t.Errorf("Wait never showed the progress report")
	}
	out, res, err := client.ResultAs[resizeResult](ctx, c, ack.TaskID)
	if err != nil || out.Thumb != "thumb-64" || res.Summary != "resized" || res.Channel == "" {
		t.Fatalf("result %+v %+v %v", out, res, err)
	}

	hist, err := c.Progress(ctx, ack.TaskID, 0)
	if err != nil || len(hist) != 1 || hist[0].Percent == nil || *hist[0].Percent != 50 || hist[0].Message != "half" || hist[0].At.IsZero() {
		t.Fatalf("progress history %+v %v", hist, err)
	}
	if err := c.Archive(ctx, ack.TaskID); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status(ctx, ack.TaskID); err != nil || st.Result == nil || st.Result.ArchivedAt == nil {
		t.Fatalf("archived task %+v %v", st, err)
	}

	// Cancel a queued task: canceled at once; Wait returns at once.
	other, err := c.Enqueue(ctx, "image.resize", map[string]any{"url": "u", "width": 2}, &client.EnqueueOptions{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ct, err := c.Cancel(ctx, other.TaskID, "not needed")
	if err != nil || ct.Status != client.StateCanceled {
		t.Fatalf("cancel %+v %v", ct, err)
	}
	if w, err := c.Wait(ctx, other.TaskID, nil); err != nil || w.Status != client.StateCanceled {
		t.Fatalf("wait on canceled: %+v %v", w, err)
	}
	if _, err := c.Result(ctx, other.TaskID); err == nil {
		t.Fatalf("a canceled task has a result")
	}
	// A refused key: a 401 unauthorized APIError.
	_, err = client.New(g.URL, "agw_wrong").Status(ctx, ack.TaskID)
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || ae.Code != "unauthorized" {
		t.Fatalf("wrong key: %v", err)
	}

	// A wait bounded by its context ends with the context's error.
	pending, err := c.Enqueue(ctx, "image.resize", map[string]any{"url": "u", "width": 3}, &client.EnqueueOptions{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithCancel(ctx)
	n := 0
	_, err = c.Wait(short, pending.TaskID, &client.WaitOptions{Interval: 10 * time.Millisecond, OnPoll: func(*client.Task) {
		if n++; n == 3 {
			cancelShort()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("bounded wait: %v", err)
	}
}

// TestWaitPollTimeout: with PollTimeout, a gate that accepts a poll and
// never answers fails the wait with the poll's deadline instead of holding it
// for as long as the caller's context allows.
func TestWaitPollTimeout(t *testing.T) {
	stall := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stall)
	c := client.New(srv.URL, "k")
	done := make(chan error, 1)
	go func() {
		_, err := c.Wait(context.Background(), "T-1", &client.WaitOptions{PollTimeout: 200 * time.Millisecond})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait against a stalled gate: %v, want the poll's deadline", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait against a stalled gate did not return within 30 s with a 200 ms poll timeout")
	}
}
