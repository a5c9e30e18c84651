package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestWorkerPython runs the Python worker client's end-to-end tests
// (sdk/python/test_worker.py) against a real gate. Without python3 it skips,
// except under CI (CI set), where that is a failure.
func TestWorkerPython(t *testing.T) {
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
