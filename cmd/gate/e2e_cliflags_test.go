package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestE2ECLIRefusesWhatHTTPRefuses: the real binary against a real gate.
// A flag value of gate tasks create, gate schedules create/update or gate
// workflows submit that the gate would refuse, or that the CLI would send
// as something else (a negative --delay as no delay, a fraction of a
// second rounded, a negative or zero --every as no interval, a --max-retries or --grace below -1 as the default, a
// second idempotency key in place of the JSON's), is refused with exit
// status 2 and a message naming the flag and what it takes; nothing is
// queued, scheduled or submitted.
func TestE2ECLIRefusesWhatHTTPRefuses(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	g.putType(t, "echo", map[string]any{}, "")
	agent := g.newKey(t, "agent", "agent.cli", "")
	env := []string{"ASYNCGATE_URL=" + g.URL, "ASYNCGATE_KEY=" + agent}
	// A refusal is at once: a command let through (a task created and
	// waited on) is stopped after a while and counts as not refused.
	run := func(args ...string) (string, string, int) {
		t.Helper()
		ensureGate(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, gateBin, args...)
		cmd.Env = append(os.Environ(), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return out.String(), errb.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatalf("gate %v: %v", args, err)
		}
		return out.String(), errb.String(), 0
	}
	refused := func(want []string, args ...string) {
		t.Helper()
		out, errs, code := run(args...)
		if code != exitUsage {
			t.Errorf("gate %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, exitUsage, out, errs)
			return
		}
		for _, w := range want {
			if !strings.Contains(errs, w) {
				t.Errorf("gate %v: stderr %q lacks %q", args, errs, w)
			}
		}
	}
	const delay = "from 0s to 31622400s"
	refused([]string{"--delay", delay, "-5s"}, "tasks", "create", "echo", "--delay", "-5s")
	refused([]string{"--delay", delay, "1.5s"}, "tasks", "create", "echo", "--delay", "1.5s")
	refused([]string{"--delay", delay}, "tasks", "create", "echo", "--delay", "400ms")
	refused([]string{"--delay", delay}, "tasks", "create", "echo", "--delay", "8785h")
	refused([]string{"--max-retries", "-5"}, "tasks", "create", "echo", "--max-retries", "-5")
	refused([]string{"--for", "-1s"}, "tasks", "create", "echo", "--wait", "--for", "-1s")
	refused([]string{"--interval"}, "tasks", "create", "echo", "--wait", "--interval", "0s")

	const every = "from 1s to 31622400s"
	refused([]string{"--every", every, "-5s"}, "schedules", "create", "s", "echo", "--every", "-5s")
	refused([]string{"--every", every}, "schedules", "create", "s", "echo", "--every", "1.5s")
	refused([]string{"--every", every}, "schedules", "create", "s", "echo", "--every", "8785h")
	refused([]string{"--every", every, "0s"}, "schedules", "create", "s", "echo", "--every", "0s")
	refused([]string{"--every", every, "0s"}, "schedules", "update", "S-00000000000000000000000000", "--every", "0s")
	refused([]string{"--grace", "-5"}, "schedules", "create", "s", "echo", "--every", "60s", "--grace", "-5")
	refused([]string{"--max-retries", "-3"}, "schedules", "create", "s", "echo", "--every", "60s", "--max-retries", "-3")
	refused([]string{"--missed-cap", "1..100"}, "schedules", "create", "s", "echo", "--every", "60s", "--missed", "run_all", "--missed-cap", "-2")
	refused([]string{"--every", every}, "schedules", "update", "S-00000000000000000000000000", "--every", "-5s")

	wf := func(extra string) string {
		return `{"name":"cli"` + extra + `,"steps":[{"name":"a","task_type":"echo"},{"name":"b","task_type":"echo","after":["a"]}]}`
	}
	refused([]string{"--idempotency-key", `"ck2"`, `"other"`}, "workflows", "submit", wf(`,"idempotency_key":"other"`), "--idempotency-key", "ck2")
	refused([]string{"--final-step", `"a"`, `"b"`}, "workflows", "submit", wf(`,"final_step":"b"`), "--final-step", "a")

	// Nothing was queued, scheduled or submitted.
	for _, path := range []string{"/v1/tasks", "/v1/schedules", "/v1/workflows"} {
		r := call(t, "GET", g.URL+path, agent, nil)
		want(t, r, 200, "")
		for _, list := range []string{"tasks", "schedules", "workflows"} {
			if items, ok := r.JSON(t)[list].([]any); ok && len(items) != 0 {
				t.Fatalf("GET %s after the refusals: %s", path, r.Body)
			}
		}
	}

	// The same key in both, or a flag the JSON leaves out, is taken.
	out, errs, code := cliRun(t, env, "workflows", "submit", wf(`,"idempotency_key":"same"`), "--idempotency-key", "same")
	if code != 0 {
		t.Fatalf("the same key twice: exit %d\n%s\n%s", code, out, errs)
	}
	out, errs, code = cliRun(t, env, "workflows", "submit", wf(`,"idempotency_key":"same"`))
	if code != 0 || !strings.Contains(out, `idempotency key "same"`) {
		t.Fatalf("a repeat under the JSON's key: exit %d, stdout %q (want it to name the key)\n%s", code, out, errs)
	}
}
