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

// removeChannel takes the channel name out of the plugins folder and waits
// until the gate unloads it.
func (g *gateProc) removeChannel(t *testing.T, name string) {
	t.Helper()
	for _, f := range []string{name + ".wasm", name + ".manifest.json"} {
		if err := os.Remove(filepath.Join(g.dir, "plugins", f)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for g.pluginStates(t)[name] == "channel/ready" {
		if time.Now().After(deadline) {
			t.Fatalf("channel %s still serving: %v", name, g.pluginStates(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestE2ECompleteIntoAChannelThatIsGone: a task type's default result
// channel is a drop-in plugin (testdata/plugins/pocket) that left the
// plugins folder. A completion
// that would store its payload there answers 503 plugin_unavailable with
// Retry-After (it was 400 bad_request, which workers take as permanent and
// dead-letter the finished work): nothing is written and the lease stays.
// Naming that channel outright is the same; a channel name the gate never
// had stays 400. The reference worker (`gate worker`) keeps retrying such a
// completion instead of failing the task, and once the plugin is back the
// completion goes through. Both stores.
func TestE2ECompleteIntoAChannelThatIsGone(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.dropIn(t, "pocket", "channel")
			g.putType(t, "report", map[string]any{"default_result_channel": "pocket"}, "")
			g.putType(t, "echo", map[string]any{"default_result_channel": "pocket", "lease_seconds": 300}, "")
			agent := g.newKey(t, "agent", "agent.a", "")
			wk := g.newKey(t, "worker", "report.w", "")
			g.removeChannel(t, "pocket")

			status := func(id string) string {
				t.Helper()
				s, _ := call(t, "GET", g.URL+"/v1/tasks/"+id, agent, nil).JSON(t)["status"].(string)
				return s
			}
			id := g.enqueue(t, agent, "report", nil)
			o := g.lease(t, wk, "report.w", nil)
			if len(o) != 1 || o[0].Task.ID != id {
				t.Fatalf("lease: %+v", o)
			}
			complete := func(body map[string]any) resp {
				return call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", wk, body)
			}
			for _, body := range []map[string]any{
				{"result": map[string]any{"n": 1}},
				{"result": map[string]any{"n": 1}, "result_channel": "pocket"},
			} {
				r := complete(body)
				want(t, r, 503, "plugin_unavailable")
				if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(d, "pocket") {
					t.Fatalf("the detail does not name the channel: %s", r.Body)
				}
				if r.Header.Get("Retry-After") == "" {
					t.Fatalf("a 503 without Retry-After: %v", r.Header)
				}
				if s := status(id); s != "leased" {
					t.Fatalf("after a refused completion the task is %q, want still leased", s)
				}
			}
			// A channel this gate never had is the worker's mistake.
			want(t, complete(map[string]any{"result": map[string]any{"n": 1}, "result_channel": "nosuchchan"}), 400, "bad_request")
			// Back in the folder, the same lease completes.
			g.dropIn(t, "pocket", "channel")
			want(t, complete(map[string]any{"result": map[string]any{"n": 1}}), 200, "")
			if s := status(id); s != "succeeded" {
				t.Fatalf("after the channel came back the task is %q", s)
			}

			// The reference worker, on the SDK, keeps the result and
			// retries instead of failing the task.
			g.removeChannel(t, "pocket")
			var logs syncBuffer
			cmd := exec.Command(gateBin, "worker", "--url", g.URL, "--key", g.newKey(t, "worker", "worker.ref-1", ""),
				"--worker-id", "worker.ref-1", "--admin-key", g.Admin, "--concurrency", "1",
				"--spool", filepath.Join(t.TempDir(), "spool.jsonl"), "--shutdown-timeout", "5s")
			cmd.Stdout, cmd.Stderr = &logs, &logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				_ = cmd.Wait()
				if t.Failed() {
					t.Logf("worker log:\n%s", logs.String())
				}
			}()
			eid := g.enqueue(t, agent, "echo", map[string]any{"hello": "world"})
			deadline := time.Now().Add(time.Minute)
			for !strings.Contains(logs.String(), "plugin_unavailable") {
				if s := status(eid); s == "dead_letter" || s == "succeeded" {
					t.Fatalf("the echo task is %q before its channel came back", s)
				}
				if time.Now().After(deadline) {
					t.Fatalf("the worker never heard plugin_unavailable; task %s is %q", eid, status(eid))
				}
				time.Sleep(100 * time.Millisecond)
			}
			if s := status(eid); s != "leased" {
				t.Fatalf("after the worker's refused completion the task is %q, want leased", s)
			}
			g.dropIn(t, "pocket", "channel")
			m := waitTaskState(t, g, agent, eid)
			if m["status"] != "succeeded" {
				t.Fatalf("echo task: %v", m)
			}
			if r, _ := m["result"].(map[string]any); r["result_channel"] != "pocket" {
				t.Fatalf("the result is not in pocket: %v", m["result"])
			}
		})
	}
}
