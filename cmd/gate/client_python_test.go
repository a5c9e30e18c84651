package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestClientPython runs the Python agent client's end-to-end tests
// (sdk/python/test_client.py) against a real gate on each store: enqueue
// (one and a batch, idempotent repeats), wait while a Python worker
// completes, results, cancel, the inbox and its marks, open obligations,
// receipts and timeline, workflows, schedules and the typed errors. Without
// python3 it skips, except under CI (CI set), where that is a failure.
func TestClientPython(t *testing.T) {
	py := needPython(t)
	script, err := filepath.Abs("../../sdk/python/test_client.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			g := startGateOnStore(t, driver)
			agent := g.newKey(t, "agent", "agent.pyclient", "")
			const workerID = "worker.pyclient"
			wkey := g.newKey(t, "worker", workerID, "")
			cmd := exec.Command(py, script, g.URL, g.Admin, agent, wkey, workerID)
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("python tests failed: %v\n%s", err, out)
			}
			t.Logf("python tests:\n%s", out)
		})
	}
}
