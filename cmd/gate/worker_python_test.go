package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWorkerPython runs the Python worker client's end-to-end tests
// (sdk/python/test_worker.py) against a real gate. Without python3 it skips,
// except under CI (CI set), where that is a failure.
func TestWorkerPython(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 is not installed (CI is set, so this fails instead of skipping): %v", err)
		}
		t.Skip("python3 is not installed")
	}
	g := startGate(t, t.TempDir())
	agent := g.newKey(t, "agent", "agent.py-tests", "")
	const workerID = "worker.py-tests"
	wkey := g.newKey(t, "worker", workerID, "")
	script, err := filepath.Abs("../../sdk/python/test_worker.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script, g.URL, g.Admin, agent, wkey, workerID)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python tests failed: %v\n%s", err, out)
	}
	t.Logf("python tests:\n%s", out)
}

// needPython returns python3's path; without it the test skips, except
// under CI (CI set), where that is a failure.
func needPython(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 is not installed (CI is set, so this fails instead of skipping): %v", err)
		}
		t.Skip("python3 is not installed")
	}
	return py
}

// TestWorkerPythonPackage installs the Python SDK as a package into fresh
// virtual environments, offline (pip install --no-index ./sdk/python, and
// the wheel the in-tree backend writes as make python-wheel does), and runs
// the worker example (sdk/python/examples/worker.py, copied out of the
// repository so only the installed package can be imported) against a real
// gate: it completes a task. Then a worker long-polling an empty queue gets
// SIGTERM and must exit, cleanly, within a second (the poll is 30 s).
func TestWorkerPythonPackage(t *testing.T) {
	py := needPython(t)
	t.Parallel()
	tmp := t.TempDir()
	sdk, err := filepath.Abs("../../sdk/python")
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	// pip install ./sdk/python into a fresh venv.
	venv := filepath.Join(tmp, "venv")
	run(py, "-m", "venv", venv)
	vpy := filepath.Join(venv, "bin", "python")
	run(vpy, "-m", "pip", "install", "--no-index", sdk)
	if out := run(vpy, "-c", "import asyncgate_worker, importlib.metadata as m; print(asyncgate_worker.__file__, m.version('asyncgate-worker'))"); !strings.Contains(out, filepath.Join(venv, "lib")) || !strings.Contains(out, "0.1.0") {
		t.Fatalf("the module imported is not the installed one: %s", out)
	}
	if out := run(vpy, "-c", "import asyncgate_client; print(asyncgate_client.__file__)"); !strings.Contains(out, filepath.Join(venv, "lib")) {
		t.Fatalf("the client module imported is not the installed one: %s", out)
	}
	// The wheel, built without pip, installs into another.
	whl := strings.TrimSpace(run(py, filepath.Join(sdk, "_build", "asyncgate_build.py"), filepath.Join(tmp, "dist")))
	if !strings.HasSuffix(whl, "asyncgate_worker-0.1.0-py3-none-any.whl") {
		t.Fatalf("wheel %q", whl)
	}
	venv2 := filepath.Join(tmp, "venv2")
	run(py, "-m", "venv", venv2)
	run(filepath.Join(venv2, "bin", "python"), "-m", "pip", "install", "--no-index", whl)
	run(filepath.Join(venv2, "bin", "python"), "-c", "import asyncgate_worker, asyncgate_client; asyncgate_worker.Runner; asyncgate_client.Client")

	for _, name := range []string{"worker.py", "agent.py"} {
		b, err := os.ReadFile(filepath.Join(sdk, "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	example := filepath.Join(tmp, "worker.py")
	g := startGate(t, t.TempDir())
	g.putType(t, "image.resize", map[string]any{}, "")
	agent := g.newKey(t, "agent", "agent.py-pkg", "")
	start := func(workerID string) (*exec.Cmd, *syncBuffer, chan error) {
		t.Helper()
		cmd := exec.Command(vpy, example)
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=", "HOME="+tmp,
			"ASYNCGATE_URL="+g.URL, "ASYNCGATE_KEY="+g.newKey(t, "worker", workerID, ""), "ASYNCGATE_WORKER_ID="+workerID)
		logs := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-done
		})
		return cmd, logs, done
	}
	// stop sends SIGTERM and wants a clean exit well before the 30 s poll
	// the worker is in would have ended: the poll is cut off at once (the
	// SDK stops within a second on an idle machine; a loaded one running
	// two -race suites may take the Python process longer to end, so the
	// bound is the poll's, and the time taken is logged).
	stop := func(cmd *exec.Cmd, logs *syncBuffer, done chan error) time.Duration {
		t.Helper()
		sent := time.Now()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			took := time.Since(sent)
			done <- err // for the cleanup
			if err != nil || !strings.Contains(logs.String(), "worker stopped") {
				t.Fatalf("worker after SIGTERM: %v\n%s", err, logs.String())
			}
			return took
		case <-time.After(10 * time.Second):
			t.Fatalf("the worker did not exit within 10 s of SIGTERM: its 30 s poll was not cut off\n%s", logs.String())
		}
		return 0
	}

	// The example completes a task.
	cmd, logs, done := start("image.py1")
	id := g.enqueue(t, agent, "image.resize", map[string]any{"url": "https://example.com/cat.png", "width": 64})
	deadline := time.Now().Add(60 * time.Second)
	for {
		task := call(t, "GET", g.URL+"/v1/tasks/"+id, agent, nil).JSON(t)
		if task["status"] == "succeeded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the example did not complete %s within 60 s: %v\n%s", id, task, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	res := call(t, "GET", g.URL+"/v1/tasks/"+id+"/result", agent, nil).JSON(t)
	if c, _ := res["content"].(map[string]any); c["width"] != 64.0 || c["url"] != "https://example.com/cat.png" || res["checksum_valid"] != true {
		t.Fatalf("result %v", res)
	}
	// The agent example queues a task through the installed client, waits
	// for the worker example to finish it and prints its result.
	agentRun := exec.Command(vpy, filepath.Join(tmp, "agent.py"), "https://example.com/dog.png", "320")
	agentRun.Dir = tmp
	agentRun.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=", "HOME="+tmp,
		"ASYNCGATE_URL="+g.URL, "ASYNCGATE_KEY="+agent)
	out, err := agentRun.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "result: {'url': 'https://example.com/dog.png', 'width': 320") {
		t.Fatalf("the agent example: %v\n%s\nworker:\n%s", err, out, logs.String())
	}
	t.Logf("the agent example:\n%s", out)
	t.Logf("the example stopped %s after SIGTERM", stop(cmd, logs, done))

	// A worker in its first long-poll (the gate has seen it; nothing is
	// queued, so the poll waits 30 s) stops long before the poll ends.
	cmd, logs, done = start("image.py2")
	deadline = time.Now().Add(60 * time.Second)
	for !strings.Contains(string(call(t, "GET", g.URL+"/v1/admin/workers", g.Admin, nil).Body), `"image.py2"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the gate never saw the second worker\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("a worker long-polling stopped %s after SIGTERM", stop(cmd, logs, done))
}
