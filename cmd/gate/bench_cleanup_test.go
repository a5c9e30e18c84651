package main

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchLeavesAGateInUseAsItWas: gate bench --url loads a gate somebody
// uses, so it must not replace a task type of theirs (one called "bench"
// included) nor leave keys or a type of its own behind.
func TestBenchLeavesAGateInUseAsItWas(t *testing.T) {
	url, admin := benchTarget(t, filepath.Join(t.TempDir(), "cache"))
	c := newBenchClient(url, 4)
	theirs := `{"lease_seconds":77,"description":"the users' own bench type"}`
	if _, err := c.do("PUT", "/v1/admin/task-types/bench", admin, []byte(theirs), nil); err != nil {
		t.Fatal(err)
	}
	type key struct {
		ID        string     `json:"key_id"`
		Principal string     `json:"principal"`
		RevokedAt *time.Time `json:"revoked_at"`
	}
	var before struct{ Keys []key }
	if _, err := c.do("GET", "/v1/admin/keys", admin, nil, &before); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	o := benchOpts{url: url, key: admin, producers: 2, workers: 2, batch: 8, completeWorkers: 2, wait: 1, tasks: 40}
	if err := bench(o, &out, io.Discard); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "completed 40") {
		t.Fatalf("bench did not complete its 40 tasks:\n%s", out.String())
	}

	var tt struct {
		LeaseSeconds int    `json:"lease_seconds"`
		Description  string `json:"description"`
	}
	if _, err := c.do("GET", "/v1/admin/task-types/bench", admin, nil, &tt); err != nil {
		t.Fatal(err)
	}
	if tt.LeaseSeconds != 77 || tt.Description != "the users' own bench type" {
		t.Fatalf("the users' bench type after a run: %+v", tt)
	}
	var types struct {
		TaskTypes []struct {
			Name string `json:"task_type"`
		} `json:"task_types"`
	}
	if _, err := c.do("GET", "/v1/admin/task-types", admin, nil, &types); err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, ty := range types.TaskTypes {
		listed = listed || ty.Name == "bench"
		if ty.Name == benchTaskType {
			t.Errorf("the run left its task type %s", ty.Name)
		}
	}
	if !listed {
		t.Fatalf("the users' bench type is not listed: %+v", types.TaskTypes)
	}
	var after struct{ Keys []key }
	if _, err := c.do("GET", "/v1/admin/keys", admin, nil, &after); err != nil {
		t.Fatal(err)
	}
	old := map[string]bool{}
	for _, k := range before.Keys {
		old[k.ID] = true
	}
	made := 0
	for _, k := range after.Keys {
		if old[k.ID] {
			continue
		}
		made++
		if k.RevokedAt == nil {
			t.Errorf("the run left key %s (%s) active", k.ID, k.Principal)
		}
	}
	if made != 3 {
		t.Fatalf("the run made %d keys, want 3 (an agent's and two workers')", made)
	}
}

// TestBenchRefusesAGateWithItsTaskType: a gate that already has a task type
// of bench's name (a user's, or a run's that was killed) is left untouched.
func TestBenchRefusesAGateWithItsTaskType(t *testing.T) {
	url, admin := benchTarget(t, filepath.Join(t.TempDir(), "cache"))
	c := newBenchClient(url, 2)
	if _, err := c.do("PUT", "/v1/admin/task-types/"+benchTaskType, admin, []byte(`{"lease_seconds":77}`), nil); err != nil {
		t.Fatal(err)
	}
	o := benchOpts{url: url, key: admin, producers: 1, workers: 1, batch: 1, completeWorkers: 1, wait: 1, tasks: 1}
	err := bench(o, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "already has a task type "+benchTaskType) {
		t.Fatalf("bench on a gate with a %s type: %v", benchTaskType, err)
	}
	var tt struct {
		LeaseSeconds int `json:"lease_seconds"`
	}
	if _, err := c.do("GET", "/v1/admin/task-types/"+benchTaskType, admin, nil, &tt); err != nil || tt.LeaseSeconds != 77 {
		t.Fatalf("the existing type after a refused run: %+v, %v", tt, err)
	}
}

// TestBenchInterruptedLeavesNothing: a run stopped with Ctrl-C (SIGINT)
// while its queue is deep still cancels its open tasks, revokes its keys
// and deletes its task type.
func TestBenchInterruptedLeavesNothing(t *testing.T) {
	for _, mode := range [][]string{{"--duration", "10m"}, {"--tasks", "100000000"}} {
		t.Run(mode[0][2:], func(t *testing.T) { benchInterrupted(t, mode) })
	}
}

// benchInterrupted runs TestBenchInterruptedLeavesNothing with a run that
// would last long in mode (its --duration or its --tasks).
func benchInterrupted(t *testing.T, mode []string) {
	url, admin := benchTarget(t, filepath.Join(t.TempDir(), "cache"))
	c := newBenchClient(url, 2)
	var before struct {
		Keys []struct {
			ID string `json:"key_id"`
		}
	}
	if _, err := c.do("GET", "/v1/admin/keys", admin, nil, &before); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gateBin, append([]string{"bench", "--url", url, "--key", admin, "--producers", "4",
		"--workers", "1", "--batch", "1", "--completers", "1", "--wait", "1", "--progress=false"}, mode...)...)
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	started := time.After(60 * time.Second)
	for waiting := true; waiting; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("gate bench ended before its run started")
			}
			waiting = !strings.HasPrefix(l, "gate bench: external gate")
		case <-started:
			t.Fatal("gate bench's run did not start within 60 s")
		}
	}
	go func() {
		for range lines { // keep the pipe drained
		}
	}()
	// Four producers against one worker completing one task at a time: the
	// queue grows; wait until it holds tasks for the cleanup to cancel.
	open := func() int {
		var page struct {
			Tasks []struct{} `json:"tasks"`
		}
		if _, err := c.do("GET", "/v1/tasks?status=queued,leased&limit=50&task_type="+benchTaskType, admin, nil, &page); err != nil {
			t.Fatal(err)
		}
		return len(page.Tasks)
	}
	for deadline := time.Now().Add(60 * time.Second); open() < 10; {
		if time.Now().After(deadline) {
			t.Fatal("the run's queue never held 10 open tasks")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("an interrupted run exited with %v, want a failure status", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("gate bench did not end within 60 s of its interrupt")
	}
	if n := open(); n != 0 {
		t.Errorf("the interrupted run left %d open tasks", n)
	}
	if code, _ := c.do("GET", "/v1/admin/task-types/"+benchTaskType, admin, nil, nil); code != http.StatusNotFound {
		t.Errorf("the interrupted run's task type: %d, want 404", code)
	}
	var after struct {
		Keys []struct {
			ID        string     `json:"key_id"`
			Principal string     `json:"principal"`
			RevokedAt *time.Time `json:"revoked_at"`
		}
	}
	if _, err := c.do("GET", "/v1/admin/keys", admin, nil, &after); err != nil {
		t.Fatal(err)
	}
	if len(after.Keys) != len(before.Keys)+2 {
		t.Fatalf("%d keys after the run, %d before: want an agent's and a worker's more", len(after.Keys), len(before.Keys))
	}
	for _, k := range after.Keys {
		if strings.HasPrefix(k.Principal, "bench.") && k.RevokedAt == nil {
			t.Errorf("the interrupted run left key %s (%s) active", k.ID, k.Principal)
		}
	}
}
