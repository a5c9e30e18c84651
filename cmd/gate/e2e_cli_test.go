package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	mustContain(t, "types list", cliOK(t, u, admin, "types", "list"), "TYPE", "ENABLED", "PAUSED", "echo", "echoes")
	cliOK(t, u, admin, "types", "put", "paws", "--body", `{}`)
	paws := g.enqueue(t, agent, "paws", map[string]any{})
	mustContain(t, "types pause", cliOK(t, u, admin, "types", "pause", "paws", "--reason", "maintenance"), "task type paws paused by admin")
	if offers := g.lease(t, worker, "echo.w1", map[string]any{"max_tasks": 1, "task_types": []string{"paws"}}); len(offers) != 0 {
		t.Fatalf("a worker leased %d tasks of a paused type", len(offers))
	}
	if out := cliOK(t, u, admin, "types", "list"); !regexp.MustCompile(`paws\s+yes\s+yes`).MatchString(out) {
		t.Fatalf("types list does not show paws paused:\n%s", out)
	}
	if _, errs, code := cli(t, u, agentFile, "types", "pause", "paws"); code != 1 || !strings.Contains(errs, "forbidden") {
		t.Fatalf("types pause by an agent: exit %d %s", code, errs)
	}
	mustContain(t, "types resume", cliOK(t, u, admin, "types", "resume", "paws"), "task type paws resumed")
	if offers := g.lease(t, worker, "echo.w1", map[string]any{"max_tasks": 1, "task_types": []string{"paws"}}); len(offers) != 1 || offers[0].Task.ID != paws {
		t.Fatalf("after resume: %+v, want the paws task", offers)
	} else {
		want(t, call(t, "POST", g.URL+"/v1/tasks/"+paws+"/cancel", agent, map[string]any{}), 200, "")
		want(t, call(t, "POST", g.URL+"/v1/leases/"+offers[0].LeaseID+"/release", worker, map[string]any{}), 200, "")
	}
	mustContain(t, "types resume again", cliOK(t, u, admin, "types", "resume", "paws"), "was not paused")
	mustContain(t, "types get", cliOK(t, u, admin, "types", "get", "echo"), `"task_type": "echo"`, `"retry_policy"`)
	// get prints what put takes back, in another tenant too: --tenant is
	// sent as ?tenant=, which the body's tenant may only repeat.
	cliOK(t, u, admin, "types", "put", "tx", "--tenant", "acme", "--body", `{"description":"acme's"}`)
	got := cliOK(t, u, admin, "types", "get", "tx", "--tenant", "acme")
	mustContain(t, "types get --tenant acme", got, `"tenant": "acme"`)
	mustContain(t, "types put of a get", cliOK(t, u, admin, "types", "put", "tx", "--tenant", "acme", "--body", got), "task type tx saved")
	// The put changed updated_at: a patch sends the answer of a new get.
	if _, errs, code := cli(t, u, admin, "types", "patch", "tx", "--tenant", "acme", "--body", got); code != 1 || !strings.Contains(errs, "read_only_field") {
		t.Fatalf("types patch with a stale updated_at: exit %d %s", code, errs)
	}
	got = cliOK(t, u, admin, "types", "get", "tx", "--tenant", "acme")
	mustContain(t, "types patch of a get", cliOK(t, u, admin, "types", "patch", "tx", "--tenant", "acme", "--body", got), "task type tx saved")
	if _, errs, code := cli(t, u, admin, "types", "put", "tx", "--body", got); code != 1 || !strings.Contains(errs, "tenant_mismatch") {
		t.Fatalf("types put of acme's type without --tenant: exit %d %s", code, errs)
	}
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
	// The finished task reads 100%, not the 40% its worker last reported.
	if all := strings.Join(lines, "\n"); !strings.Contains(all, leased+" succeeded 100%") || strings.Contains(all, "succeeded 40%") {
		t.Fatalf("tasks wait drew the finished task's progress wrong:\n%s", all)
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
	mustContain(t, "tasks show of the finished task", out, "status:", "succeeded", "attempts (oldest first):", "echo.w1", "succeeded",
		"timeline (oldest first):", "lease.granted", "progress", "40% four of ten", "task.assigned", "task.completed")

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
	mustContain(t, "stats", cliOK(t, u, admin, "stats"), "STATE", "waiting", "succeeded", "canceled")
	var st struct {
		ByState map[string]int `json:"by_state"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, u, admin, "stats", "--json")), &st); err != nil || st.ByState["succeeded"] != 1 || st.ByState["canceled"] != 2 { // canceled: one here, and the paws task
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
	// gate keys (offline) answers -h alike, without a data folder.
	if out, _, code := cliRun(t, nil, "keys", "-h"); code != 0 || !strings.Contains(out, "gate keys create") {
		t.Errorf("gate keys -h: exit %d, %q", code, out)
	}
	for _, sub := range []string{"create", "list", "revoke"} {
		_, errs, code := cliRun(t, nil, "keys", sub, "-h")
		if code != 0 {
			t.Errorf("gate keys %s -h: exit %d", sub, code)
		}
		mustContain(t, "keys "+sub+" -h", errs, "Usage: gate keys "+sub, "Flags:", "-data")
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
	if out != "create\nresult\nlist\nshow\ncancel\nwait\n" {
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

// TestE2ECLICreateAndResult drives gate tasks create and gate tasks result
// (the real binary) against a real gate on each store: params inline, from
// a file and from stdin; --wait following a worker's progress to the end,
// where a succeeded task reads 100%, not its last report; the gate's
// refusals shown with exit 1; a JSON result printed, a 3 MiB binary one
// streamed to --out with its checksum verified here, and an altered one
// refused with exit 1 and no file left behind; a result with no payload at
// the gate says where it is. The key comes from ASYNCGATE_KEY, as the docs
// show it; the CLI's requests and answers are checked against the OpenAPI
// document.
func TestE2ECLICreateAndResult(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			contract(t)
			t.Parallel()
			dir := t.TempDir()
			extra := []string{"--body-limit", "8388608"}
			if store == "postgres" {
				extra = append(extra, "--db", postgresSchema(t))
			}
			g := startGate(t, dir, extra...)
			g.putType(t, "echo", map[string]any{"default_max_retries": 0}, "")
			g.putType(t, "big", map[string]any{"default_result_channel": "file"}, "")
			agent := g.newKey(t, "agent", "agent.cli", "")
			worker := g.newKey(t, "worker", "echo.w1", "")
			// Every request of the CLI, and its answer, is checked against
			// the OpenAPI document on the way.
			env := []string{"ASYNCGATE_URL=" + contractProxy(t, g), "ASYNCGATE_KEY=" + agent}
			run := func(stdin string, args ...string) (string, string, int) {
				t.Helper()
				cmd := exec.Command(gateBin, args...)
				cmd.Env = append(os.Environ(), env...)
				cmd.Stdin = strings.NewReader(stdin)
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
			ok := func(stdin string, args ...string) string {
				t.Helper()
				out, errs, code := run(stdin, args...)
				if code != 0 {
					t.Fatalf("gate %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
				}
				return out
			}
			paramsOf := func(id string) string {
				t.Helper()
				var task struct {
					Params json.RawMessage `json:"params"`
				}
				if err := json.Unmarshal([]byte(ok("", "tasks", "show", id, "--json")), &task); err != nil {
					t.Fatal(err)
				}
				var b bytes.Buffer
				if err := json.Compact(&b, task.Params); err != nil {
					t.Fatal(err)
				}
				return b.String()
			}

			// Params inline (--json: the gate's answer), from a file, from stdin.
			var ack struct {
				TaskID string `json:"task_id"`
				Status string `json:"status"`
			}
			if err := json.Unmarshal([]byte(ok("", "tasks", "create", "echo", "--params", `{"n":1}`, "--priority", "9", "--json")), &ack); err != nil || ack.Status != "queued" || !strings.HasPrefix(ack.TaskID, "T-") {
				t.Fatalf("create --json: %v %+v", err, ack)
			}
			if p := paramsOf(ack.TaskID); p != `{"n":1}` {
				t.Fatalf("inline params stored as %s", p)
			}
			file := filepath.Join(t.TempDir(), "params.json")
			if err := os.WriteFile(file, []byte(`{"from":"file"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			out := ok("", "tasks", "create", "echo", "--params", "@"+file)
			id, status, _ := strings.Cut(strings.TrimSpace(out), " ")
			if status != "queued" || paramsOf(id) != `{"from":"file"}` {
				t.Fatalf("create --params @file: %q, params %s", out, paramsOf(id))
			}
			id, _, _ = strings.Cut(strings.TrimSpace(ok(`{"from":"stdin"}`, "tasks", "create", "echo", "--params", "-")), " ")
			if p := paramsOf(id); p != `{"from":"stdin"}` {
				t.Fatalf("create --params -: params %s", p)
			}
			// Bad usage and the gate's refusals.
			if _, errs, code := run("", "tasks", "create", "echo", "--params", "{nope"); code != 2 || !strings.Contains(errs, "not valid JSON") {
				t.Fatalf("create with bad JSON: exit %d %s", code, errs)
			}
			if _, errs, code := run("", "tasks", "create", "no.such.type"); code != 1 || !strings.Contains(errs, "gate tasks create: unknown_task_type (4") {
				t.Fatalf("create of an unknown type: exit %d %s", code, errs)
			}
			if _, errs, code := run("", "tasks", "result", ack.TaskID); code != 1 || !strings.Contains(errs, "gate tasks result: conflict (409)") {
				t.Fatalf("result of a queued task: exit %d %s", code, errs)
			}
			if _, errs, code := run("", "tasks", "result", "T-unknown"); code != 1 || !strings.Contains(errs, "not_found (404)") {
				t.Fatalf("result of an unknown task: exit %d %s", code, errs)
			}
			// Drain the queued ones so the next lease gets the waited task.
			for range 3 {
				o := g.lease(t, worker, "echo.w1", map[string]any{"max_tasks": 1})
				want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, map[string]any{"result": map[string]any{"ok": true}}), 200, "")
			}

			// --wait: one line per change (stdout is a pipe); the worker
			// reports 25%, then completes.
			cmd := exec.Command(gateBin, "tasks", "create", "echo", "--params", `{"text":"hi"}`, "--wait", "--interval", "50ms", "--for", "60s")
			cmd.Env = append(os.Environ(), env...)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			var lines []string
			var waited, lease string
			for sc.Scan() {
				line := sc.Text()
				lines = append(lines, line)
				switch {
				case waited == "":
					waited, _, _ = strings.Cut(line, " ")
					o := g.lease(t, worker, "echo.w1", map[string]any{"max_tasks": 1})
					if len(o) != 1 || o[0].Task.ID != waited {
						t.Fatalf("first line %q; offers %+v", line, o)
					}
					lease = g.URL + "/v1/leases/" + o[0].LeaseID
					want(t, call(t, "POST", lease+"/heartbeat", worker, map[string]any{"progress_percent": 25, "progress_message": "a quarter"}), 200, "")
				case lease != "" && strings.HasSuffix(line, waited+" leased 25% a quarter"):
					want(t, call(t, "POST", lease+"/complete", worker, map[string]any{"result": map[string]any{"said": "hi <&>"}, "summary": "said hi"}), 200, "")
					lease = ""
				}
			}
			if err := cmd.Wait(); err != nil || lease != "" || waited == "" {
				t.Fatalf("create --wait: %v (completed: %v):\n%s", err, lease == "", strings.Join(lines, "\n"))
			}
			all := strings.Join(lines, "\n")
			if lines[0] != waited+" queued" || !strings.HasSuffix(lines[len(lines)-2], waited+" succeeded 100%") || lines[len(lines)-1] != waited+" succeeded: said hi" || strings.Contains(all, "succeeded 25%") {
				t.Fatalf("create --wait lines:\n%s", all)
			}
			mustContain(t, "show of the finished task", ok("", "tasks", "show", waited), "progress:", "100%", "25%", "a quarter")
			if strings.Contains(ok("", "tasks", "show", waited), "progress:         25%") {
				t.Fatal("show reads the last report as the finished task's progress")
			}

			// A JSON result: printed as JSON; the checksum is the gate's check.
			out, errs, code := run("", "tasks", "result", waited)
			var said map[string]string
			if code != 0 || json.Unmarshal([]byte(out), &said) != nil || said["said"] != "hi <&>" || !strings.Contains(errs, "verified by the gate") {
				t.Fatalf("result (JSON): exit %d %q %s", code, out, errs)
			}

			// Results the worker stored itself: the gate says where (409 for a
			// pointer of its own making, 200 without a payload for artifacts).
			extID := g.enqueue(t, agent, "echo", nil)
			g.completeOne(t, worker, "echo.w1", extID, map[string]any{"result_pointer": "s3://bucket/out.json"})
			if _, errs, code := run("", "tasks", "result", extID); code != 1 || !strings.Contains(errs, "conflict (409)") || !strings.Contains(errs, "s3://bucket/out.json") {
				t.Fatalf("result at a pointer of the worker's: exit %d %s", code, errs)
			}
			artID := g.enqueue(t, agent, "echo", nil)
			g.completeOne(t, worker, "echo.w1", artID, map[string]any{"summary": "stored it", "artifacts": []map[string]any{{"type": "s3", "url": "s3://bucket/out.json"}}})
			out, errs, code = run("", "tasks", "result", artID)
			if code != 0 || !strings.Contains(out, artID+" has no payload at the gate") || !strings.Contains(out, "artifact: s3 s3://bucket/out.json") || !strings.Contains(out, "summary: stored it") {
				t.Fatalf("result without a payload: exit %d %q %s", code, out, errs)
			}

			// A 3 MiB binary result through the file channel: streamed,
			// decoded and hashed here, written to --out.
			payload := make([]byte, 3<<20)
			for i := range payload {
				payload[i] = byte(i*7 + i>>9)
			}
			bigID := g.enqueue(t, agent, "big", nil)
			ptr, _ := g.completeOne(t, worker, "echo.w1", bigID, map[string]any{"result_base64": base64.StdEncoding.EncodeToString(payload)})["result_pointer"].(string)
			outDir := t.TempDir()
			dest := filepath.Join(outDir, "big.bin")
			_, errs, code = run("", "tasks", "result", bigID, "--out", dest)
			got, _ := os.ReadFile(dest)
			if code != 0 || !bytes.Equal(got, payload) || !strings.Contains(errs, "3145728 bytes from channel file to "+dest) || !strings.Contains(errs, "verified here and by the gate") {
				t.Fatalf("result --out: exit %d, %d bytes written, %s", code, len(got), errs)
			}
			if out, _, code := run("", "tasks", "result", bigID); code != 0 || out != string(payload) {
				t.Fatalf("result to stdout: exit %d, %d bytes", code, len(out))
			}
			var raw struct {
				Content       []byte `json:"content_base64"`
				ChecksumValid bool   `json:"checksum_valid"`
			}
			if err := json.Unmarshal([]byte(ok("", "tasks", "result", bigID, "--json")), &raw); err != nil || !bytes.Equal(raw.Content, payload) || !raw.ChecksumValid {
				t.Fatalf("result --json: %v, %d bytes, checksum_valid %v", err, len(raw.Content), raw.ChecksumValid)
			}
			if _, errs, code := run("", "tasks", "result", bigID, "--json", "--out", dest); code != 2 || !strings.Contains(errs, "not both") {
				t.Fatalf("result --json --out: exit %d %s", code, errs)
			}
			// Altered where it is stored: exit 1, nothing written.
			task, sum, _ := strings.Cut(strings.TrimPrefix(ptr, "file:"), "/")
			stored := filepath.Join(dir, "results", task[len(task)-2:], task, sum)
			altered := bytes.Clone(payload)
			altered[len(altered)/2] ^= 0xff
			if err := os.WriteFile(stored, altered, 0o644); err != nil {
				t.Fatal(err)
			}
			dest2 := filepath.Join(outDir, "altered.bin")
			if _, errs, code := run("", "tasks", "result", bigID, "--out", dest2); code != 1 || !strings.Contains(errs, "does not match its checksum") {
				t.Fatalf("altered result: exit %d %s", code, errs)
			}
			if ents, _ := os.ReadDir(outDir); len(ents) != 1 {
				t.Fatalf("an altered result left files behind: %v", ents)
			}
			if _, errs, code := run("", "tasks", "result", bigID, "--json"); code != 1 || !strings.Contains(errs, "does not match its checksum") {
				t.Fatalf("altered result --json: exit %d %s", code, errs)
			}
		})
	}
}

// TestCLIEmptyKeyFile: a key file that holds no key is refused before
// anything is sent (the gate would answer 401 to a request without a key,
// which says nothing of the file).
func TestCLIEmptyKeyFile(t *testing.T) {
	t.Parallel()
	empty := filepath.Join(t.TempDir(), "empty.key")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := gateCLI(t, "stats", "--url", "http://127.0.0.1:1", "--key-file", empty)
	if code == 0 || !strings.Contains(stderr, "holds no key") {
		t.Fatalf("gate stats with an empty key file: exit %d, %s", code, stderr)
	}
}

// TestCLIShowsControlCharactersInert: text agents and workers wrote (a
// summary, an error message) reaches the operator's terminal with its
// control characters made visible, never as escape sequences the terminal
// would act on (clearing the screen, retitling the window, planting a
// link); a result's payload is still written as it is.
func TestCLIShowsControlCharactersInert(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	g.putType(t, "echo", map[string]any{}, "")
	agent := g.newKey(t, "agent", "agent.cli", "")
	agentFile := filepath.Join(t.TempDir(), "agent.key")
	if err := os.WriteFile(agentFile, []byte(agent), 0o600); err != nil {
		t.Fatal(err)
	}
	hostile := "ansi\x1b[2J\x1b]0;pwned\x07\x1b[31mRED\rOVER\u009b31m"
	r := call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "echo", "task_summary": hostile})
	want(t, r, 201, "")
	id := r.JSON(t)["task_id"].(string)
	for _, args := range [][]string{{"tasks", "show", id}, {"tasks", "list"}, {"tasks", "show", id, "--json"}} {
		out := cliOK(t, g.URL, agentFile, args...)
		if strings.ContainsAny(out, "\x1b\x07\r\u009b") {
			t.Fatalf("gate %v wrote control characters to the terminal: %q", args, out)
		}
		if !strings.Contains(out, "ansi") {
			t.Fatalf("gate %v lost the summary: %q", args, out)
		}
	}
	if out := cliOK(t, g.URL, agentFile, "tasks", "show", id); !strings.Contains(out, `ansi\x1b[2J\x1b]0;pwned\x07`) {
		t.Fatalf("the summary's controls are not shown as \\x escapes: %q", out)
	}

	// A newline or a tab in a summary does not print a line or a column
	// of its own, and a bidi override does not reverse what follows it.
	forged := "ok\nstatus:            succeeded\tX \u202efdp.exe"
	r = call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "echo", "task_summary": forged})
	want(t, r, 201, "")
	id2 := r.JSON(t)["task_id"].(string)
	show := cliOK(t, g.URL, agentFile, "tasks", "show", id2)
	if n := strings.Count(show, "\nstatus:"); n != 1 || !strings.Contains(show, `ok\nstatus:            succeeded\tX \u202efdp.exe`) {
		t.Fatalf("tasks show printed the summary's newline, tab or override as they are (%d status lines): %q", n, show)
	}
	list := cliOK(t, g.URL, agentFile, "tasks", "list")
	if strings.Contains(list, "\u202e") || strings.Count(list, "\n") != 3 || !strings.Contains(list, `\u202efdp.`) {
		t.Fatalf("tasks list: a summary added a line or kept its override: %q", list)
	}

	// A worker's artifact and pointer cannot print a line of their own in
	// gate tasks result.
	worker := g.newKey(t, "worker", "echo.cli1", "")
	offers := g.lease(t, worker, "echo.cli1", map[string]any{"max_tasks": 1})
	if len(offers) != 1 {
		t.Fatalf("leased %d", len(offers))
	}
	want(t, call(t, "POST", g.URL+"/v1/leases/"+offers[0].LeaseID+"/complete", worker, map[string]any{
		"artifacts": []map[string]any{{"type": "s3\nsummary: forged", "url": "s3://b/k\nsummary: forged"}}}), 200, "")
	res := cliOK(t, g.URL, agentFile, "tasks", "result", offers[0].Task.ID)
	if strings.Contains(res, "\nsummary:") || !strings.Contains(res, `s3\nsummary: forged`) {
		t.Fatalf("tasks result printed an artifact's newline as it is: %q", res)
	}
}
