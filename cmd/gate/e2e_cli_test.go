package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cliRun runs the gate binary with env added to the test's environment and
// returns stdout, stderr and the exit status.
func cliRun(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ensureGate(t)
	cmd := exec.Command(gateBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("gate %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// cli runs a remote command against the gate at url with a key file.
func cli(t *testing.T, url, keyFile string, args ...string) (string, string, int) {
	t.Helper()
	return cliRun(t, nil, append(args, "--url", url, "--key-file", keyFile)...)
}

// cliOK runs a remote command that must succeed and returns its stdout.
func cliOK(t *testing.T, url, keyFile string, args ...string) string {
	t.Helper()
	out, errs, code := cli(t, url, keyFile, args...)
	if code != 0 {
		t.Fatalf("gate %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	return out
}

func mustContain(t *testing.T, what, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Fatalf("%s lacks %q:\n%s", what, p, s)
		}
	}
}

// TestE2ECLIAgainstARunningGate drives every remote command of the CLI (the
// real binary) against a real gate: task types, tasks (list, show, cancel,
// wait with its plain and bar progress), dead letters (one and all), receipts
// (show, chain, verify), workers, stats; tables by default, --json parsed.
// Every request the CLI sends, and its answer, is checked against the
// OpenAPI document on the way.
func TestE2ECLIAgainstARunningGate(t *testing.T) {
	contract(t)
	t.Parallel()
	dir := t.TempDir()
	g := startGate(t, dir)
	// The CLI talks to the gate through a proxy that checks every request
	// and answer against the OpenAPI document.
	u := contractProxy(t, g)
	admin := filepath.Join(dir, "admin.key")
	agent := g.newKey(t, "agent", "agent.cli", "")
	agentFile := filepath.Join(t.TempDir(), "agent.key")
	if err := os.WriteFile(agentFile, []byte(agent+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	worker := g.newKey(t, "worker", "echo.w1", "")

	// Task types.
	out := cliOK(t, u, admin, "types", "put", "echo", "--body", `{"description":"says it back","default_max_retries":0}`)
	mustContain(t, "types put", out, "task type echo saved")
	out = cliOK(t, u, admin, "types", "patch", "echo", "--body", `{"description":"echoes"}`, "--json")
	var tt map[string]any
	if err := json.Unmarshal([]byte(out), &tt); err != nil || tt["description"] != "echoes" || tt["default_max_retries"] != 0.0 {
		t.Fatalf("types patch --json: %v %s", err, out)
	}
	mustContain(t, "types list", cliOK(t, u, admin, "types", "list"), "TYPE", "ENABLED", "echo", "echoes")
	mustContain(t, "types get", cliOK(t, u, admin, "types", "get", "echo"), `"task_type": "echo"`, `"retry_policy"`)
	if _, errs, code := cli(t, u, admin, "types", "put", "echo", "--body", "{nope"); code != 2 || !strings.Contains(errs, "not valid JSON") {
		t.Fatalf("types put with bad JSON: exit %d %s", code, errs)
	}
	if _, errs, code := cli(t, u, admin, "types", "put", "echo", "--body", `{"lease_seconds":"long"}`); code != 1 || !strings.Contains(errs, "bad_request") {
		t.Fatalf("types put refused by the gate: exit %d %s", code, errs)
	}

	// Tasks: list, show, filters.
	t1 := g.enqueue(t, agent, "echo", map[string]any{"n": 1})
	t2 := g.enqueue(t, agent, "echo", map[string]any{"n": 2})
	out = cliOK(t, u, agentFile, "tasks", "list")
	mustContain(t, "tasks list", out, "TASK", "STATUS", t1, t2, "queued")
	var page struct {
		Tasks []map[string]any `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, u, agentFile, "tasks", "list", "--json", "--limit", "1")), &page); err != nil || len(page.Tasks) != 1 {
		t.Fatalf("tasks list --json --limit 1: %v %+v", err, page)
	}
	mustContain(t, "tasks show", cliOK(t, u, agentFile, "tasks", "show", t1), "task:", t1, "status:", "queued", `{"n":1}`)
	if _, errs, code := cli(t, u, agentFile, "tasks", "show", "T-unknown"); code != 1 || !strings.Contains(errs, "not_found") {
		t.Fatalf("tasks show unknown: exit %d %s", code, errs)
	}

	// wait, plain lines: the progress shows, then the end.
	offers := g.lease(t, worker, "echo.w1", map[string]any{"max_tasks": 1})
	if len(offers) != 1 {
		t.Fatalf("offers %+v", offers)
	}
	lu := g.URL + "/v1/leases/" + offers[0].LeaseID
	leased := offers[0].Task.ID
	want(t, call(t, "POST", lu+"/heartbeat", worker, map[string]any{"progress_percent": 40, "progress_message": "four of ten"}), 200, "")
	cmd := exec.Command(gateBin, "tasks", "wait", leased, "--interval", "50ms", "--url", u, "--key-file", agentFile)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var lines []string
	sawProgress := false
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if !sawProgress && strings.Contains(line, "leased 40% four of ten") {
			sawProgress = true
			want(t, call(t, "POST", lu+"/complete", worker, map[string]any{"result": map[string]any{"echo": 1}, "summary": "said it"}), 200, "")
		}
	}
	if err := cmd.Wait(); err != nil || !sawProgress {
		t.Fatalf("tasks wait: %v, progress seen %v:\n%s", err, sawProgress, strings.Join(lines, "\n"))
	}
	if last := lines[len(lines)-1]; last != leased+" succeeded: said it" {
		t.Fatalf("tasks wait last line %q", last)
	}

	// wait with a bar (forced, as on a terminal), bounded by --for: exit 4.
	queued := t1
	if queued == leased {
		queued = t2
	}
	out, errs, code := cli(t, u, agentFile, "tasks", "wait", queued, "--progress", "bar", "--for", "3s", "--interval", "50ms")
	if code != exitWaitTimedOut || !strings.Contains(out, "\r"+queued+" queued") || !strings.Contains(out, "░") || !strings.Contains(errs, "still queued") {
		t.Fatalf("tasks wait --for: exit %d\n%q\n%s", code, out, errs)
	}
	// On a real terminal (a pty from util-linux's script), auto draws the bar;
	// into a pipe it printed lines (above).
	if scriptBin, err := exec.LookPath("script"); err == nil {
		line := strings.Join([]string{gateBin, "tasks", "wait", queued, "--for", "3s", "--interval", "50ms", "--url", u, "--key-file", agentFile}, " ")
		b, err := exec.Command(scriptBin, "-qec", line, "/dev/null").Output()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitWaitTimedOut || !strings.Contains(string(b), "\r"+queued+" queued") || !strings.Contains(string(b), "░") {
			t.Fatalf("tasks wait on a terminal: %v %q", err, b)
		}
	} else {
		t.Log("no script(1) here: the bar was checked with --progress bar only")
	}
	// cancel, then wait ends at once with exit 3.
	mustContain(t, "tasks cancel", cliOK(t, u, agentFile, "tasks", "cancel", queued, "--reason", "not needed"), queued+" canceled")
	if out, _, code := cli(t, u, agentFile, "tasks", "wait", queued); code != exitTaskNotSucceeded || !strings.Contains(out, queued+" canceled") {
		t.Fatalf("tasks wait on a canceled task: exit %d %s", code, out)
	}

	// Dead letters: redrive one, then all.
	dead := func() string {
		id := g.enqueue(t, agent, "echo", map[string]any{"n": 3})
		o := g.lease(t, worker, "echo.w1", map[string]any{"max_tasks": 1})
		if len(o) != 1 || o[0].Task.ID != id {
			t.Fatalf("offers %+v", o)
		}
		want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", worker, map[string]any{"error_message": "boom", "retryable": false}), 200, "")
		return id
	}
	d1 := dead()
	mustContain(t, "dlq list", cliOK(t, u, admin, "dlq", "list"), "TASK", d1, "boom")
	mustContain(t, "dlq redrive", cliOK(t, u, admin, "dlq", "redrive", d1), d1+" redriven: queued")
	o := g.lease(t, worker, "echo.w1", map[string]any{"max_tasks": 1})
	want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", worker, map[string]any{"error_message": "boom", "retryable": false}), 200, "")
	d2 := dead()
	var red struct {
		Redriven []map[string]any `json:"redriven"`
		Failed   int              `json:"failed"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, u, admin, "dlq", "redrive", "--all", "--json")), &red); err != nil || len(red.Redriven) != 2 || red.Failed != 0 {
		t.Fatalf("dlq redrive --all: %v %+v", err, red)
	}
	mustContain(t, "dlq list after", cliOK(t, u, admin, "dlq", "list"), "(no dead letters)")
	if _, errs, code := cli(t, u, admin, "dlq", "redrive", d2, "T-unknown"); code != 1 || !strings.Contains(errs, "T-unknown") {
		t.Fatalf("dlq redrive of a task that is not dead: exit %d %s", code, errs)
	}
	if _, _, code := cli(t, u, admin, "dlq", "redrive"); code != 2 {
		t.Fatalf("dlq redrive without ids: exit %d", code)
	}

	out = cliOK(t, u, agentFile, "tasks", "show", leased)
	mustContain(t, "tasks show of the finished task", out, "status:", "succeeded", "progress (newest first):", "40%", "four of ten", "█", "receipts (ledger order):", "task.assigned", "task.completed")

	// Receipts: show, chain, verify.
	var task map[string]any
	if err := json.Unmarshal([]byte(cliOK(t, u, agentFile, "tasks", "show", leased, "--json")), &task); err != nil {
		t.Fatal(err)
	}
	assign := task["assign_receipt_id"].(string)
	// A receipt whose body holds <, > and &: the gate sends them \u-escaped,
	// and verify still matches the hash.
	want(t, call(t, "POST", g.URL+"/v1/receipts", agent, map[string]any{"receipt_type": "task.progress", "to": "agent.cli",
		"task_id": leased, "parents": []string{assign}, "body": map[string]any{"note": "<b> & c"}}), 201, "")
	mustContain(t, "receipts show", cliOK(t, u, agentFile, "receipts", "show", assign), "task.assigned", "matches its content", "terminated by:")
	mustContain(t, "receipts chain", cliOK(t, u, agentFile, "receipts", "chain", assign), "DEPTH", assign, "ok")
	out = cliOK(t, u, agentFile, "receipts", "verify", leased)
	mustContain(t, "receipts verify", out, "receipts verified")
	var rep verifyReport
	if err := json.Unmarshal([]byte(cliOK(t, u, agentFile, "receipts", "verify", leased, "--json")), &rep); err != nil || !rep.OK || rep.Receipts < 3 {
		t.Fatalf("receipts verify --json: %v %+v", err, rep)
	}

	// Workers and stats.
	mustContain(t, "workers", cliOK(t, u, admin, "workers"), "WORKER", "echo.w1")
	mustContain(t, "stats", cliOK(t, u, admin, "stats"), "STATE", "succeeded", "canceled")
	var st struct {
		ByState map[string]int `json:"by_state"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, u, admin, "stats", "--json")), &st); err != nil || st.ByState["succeeded"] != 1 || st.ByState["canceled"] != 1 {
		t.Fatalf("stats --json: %v %+v", err, st)
	}
	if _, errs, code := cli(t, u, agentFile, "stats"); code != 1 || !strings.Contains(errs, "forbidden") {
		t.Fatalf("stats with an agent key: exit %d %s", code, errs)
	}

	// The environment names the gate and the key; flags win over it.
	if out, errs, code := cliRun(t, []string{"ASYNCGATE_URL=" + g.URL, "ASYNCGATE_KEY=" + g.Admin}, "workers", "--json"); code != 0 || !strings.Contains(out, "echo.w1") {
		t.Fatalf("workers from the environment: exit %d %s %s", code, out, errs)
	}
	if _, errs, code := cliRun(t, []string{"ASYNCGATE_URL=" + g.URL, "ASYNCGATE_KEY="}, "stats"); code != 1 || !strings.Contains(errs, "unauthorized") {
		t.Fatalf("stats without a key: exit %d %s", code, errs)
	}
	if _, errs, code := cliRun(t, []string{"ASYNCGATE_URL=http://127.0.0.1:1"}, "stats", "--key", "agw_x"); code != 1 || !strings.Contains(errs, "cannot reach the gate") {
		t.Fatalf("stats with no gate there: exit %d %s", code, errs)
	}
}

// TestCLIHelpAndCompletion checks that every remote command answers -h with
// the same layout, and the completion scripts and their candidates (bash is
// run for real; zsh and fish are not installed here).
func TestCLIHelpAndCompletion(t *testing.T) {
	t.Parallel()
	for name, g := range remoteGroups {
		for _, s := range g.subs {
			args := []string{name}
			if s.name != "" {
				args = append(args, s.name)
			}
			_, errs, code := cliRun(t, nil, append(args, "-h")...)
			if code != 0 {
				t.Errorf("gate %v -h: exit %d", args, code)
			}
			mustContain(t, strings.Join(args, " ")+" -h", errs, "Usage: gate "+strings.Join(args, " ")+" [flags]", "Flags:", "-url", "-key-file", "-json")
		}
		if !g.single() {
			out, _, code := cliRun(t, nil, name, "--help")
			if code != 0 {
				t.Errorf("gate %s --help: exit %d", name, code)
			}
			mustContain(t, name+" --help", out, "Usage:", "Commands:", "ASYNCGATE_URL")
		}
	}
	if _, _, code := cliRun(t, nil, "tasks", "show"); code != 2 {
		t.Errorf("tasks show without an id: exit %d", code)
	}
	if _, errs, code := cliRun(t, nil, "tasks", "nope"); code != 2 || !strings.Contains(errs, `unknown command "nope"`) {
		t.Errorf("tasks nope: exit %d %s", code, errs)
	}

	out, _, _ := cliRun(t, nil, "__complete")
	mustContain(t, "top-level candidates", out, "tasks\n", "dlq\n", "receipts\n", "types\n", "workers\n", "stats\n", "serve\n", "version\n", "completion\n")
	if strings.Contains(out, "__complete") {
		t.Errorf("the hidden helper is offered: %s", out)
	}
	out, _, _ = cliRun(t, nil, "__complete", "tasks")
	if out != "list\nshow\ncancel\nwait\n" {
		t.Errorf("tasks candidates %q", out)
	}
	out, _, _ = cliRun(t, nil, "__complete", "tasks", "wait")
	mustContain(t, "tasks wait flags", out, "--for\n", "--progress\n", "--url\n", "--json\n")

	out, _, _ = cliRun(t, nil, "__complete", "tasks", "wait", "T-1", "--progress")
	if out != "auto\nbar\nplain\nnone\n" {
		t.Errorf("--progress values %q", out)
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, _, code := cliRun(t, nil, "completion", sh)
		if code != 0 || !strings.Contains(out, "gate __complete") {
			t.Errorf("completion %s: exit %d %s", sh, code, out)
		}
	}
	if _, _, code := cliRun(t, nil, "completion", "tcsh"); code != 2 {
		t.Errorf("completion tcsh: exit %d", code)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Log("no bash here: the script's text was checked only")
		return
	}
	script := `source <(gate completion bash)
COMP_WORDS=(gate tasks w); COMP_CWORD=2; _gate; echo "${COMPREPLY[*]}"
COMP_WORDS=(gate dl); COMP_CWORD=1; _gate; echo "${COMPREPLY[*]}"
COMP_WORDS=(gate dlq redrive --a); COMP_CWORD=3; _gate; echo "${COMPREPLY[*]}"`
	cmd := exec.Command(bash, "--norc", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(gateBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	b, err := cmd.CombinedOutput()
	if err != nil || string(b) != "wait\ndlq\n--all\n" {
		t.Fatalf("bash completion: %v %q", err, b)
	}
}
