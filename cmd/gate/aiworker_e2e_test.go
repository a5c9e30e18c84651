package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/worker/ai/aitest"
)

// The AI worker's end-to-end tests: the real gate, `gate ai-worker` as a
// process, the gate's own /mcp and a stdio MCP server (this test binary,
// re-run with aitest.StdioEnv=1), and an OpenAI-compatible server in the
// test that replays scripted answers.

func init() {
	if os.Getenv(aitest.StdioEnv) == "1" {
		if err := aitest.ServeStdio(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// aiBundle is a gate with an AI task type, keys and a worker config.
type aiBundle struct {
	g      *gateProc
	prov   *aitest.Server
	agent  string // queues tasks; also the key the worker's gate MCP session uses
	config string
}

// newAIBundle starts a gate, registers task type ai.chat (lease leaseSeconds,
// short retry and requeue delays) and writes a config and a profile that
// allow gate/list_active_tasks, calc/add and calc/fail.
func newAIBundle(t *testing.T, leaseSeconds int, script func(aitest.Request) aitest.Reply) *aiBundle {
	t.Helper()
	prov := aitest.NewServer(script)
	t.Cleanup(prov.Close)
	g := startGate(t, t.TempDir())
	b := &aiBundle{g: g, prov: prov, agent: g.newKey(t, "agent", "agent.ai-e2e", "")}
	g.putType(t, "ai.chat", map[string]any{"lease_seconds": leaseSeconds, "requeue_delay_seconds": 1, "default_max_retries": 5,
		"policy": map[string]any{"name": "backoff", "config": map[string]any{"base_seconds": 1, "jitter": 0, "requeue_delay_seconds": 0.2}}}, "")

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	profile := map[string]any{"name": "assistant", "system_prompt": "You are a careful assistant.",
		"tools": []string{"gate/list_active_tasks", "calc/add", "calc/fail"}, "allowed_models": []string{"model-*"}}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"provider": map[string]any{"base_url": prov.URL, "model": "scripted-1", "api_key_env": "AI_E2E_PROVIDER_KEY",
			"max_attempts": 2, "backoff_initial_seconds": 0.05, "backoff_max_seconds": 0.1, "timeout_seconds": 20},
		"profiles_dir": "profiles",
		"mcp_servers": []any{
			map[string]any{"name": "gate", "url": g.URL + "/mcp", "headers": map[string]string{"Authorization": "Bearer ${AI_E2E_GATE_KEY}"}},
			map[string]any{"name": "calc", "command": exe, "env": []string{aitest.StdioEnv + "=1"}},
		},
		"task_types": map[string]any{"ai.chat": map[string]any{"profile": "assistant", "max_iterations": 6},
			"ai.summary": map[string]any{"profile": "assistant", "lease_seconds": 45}},
	}
	writeJSON(t, filepath.Join(dir, "profiles", "assistant.json"), profile)
	b.config = filepath.Join(dir, "ai.json")
	writeJSON(t, b.config, cfg)
	return b
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, _ := json.MarshalIndent(v, "", "  ")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// aiProc is a running `gate ai-worker`.
type aiProc struct {
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan error
}

// startAIWorker runs `gate ai-worker` with a new worker key for workerID
// (and extra flags).
func (b *aiBundle) startAIWorker(t *testing.T, workerID string, extra ...string) *aiProc {
	t.Helper()
	key := b.g.newKey(t, "worker", workerID, "")
	p := &aiProc{logs: &syncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(gateBin, append([]string{"ai-worker", "--config", b.config, "--url", b.g.URL, "--key", key,
		"--spool", filepath.Join(t.TempDir(), "spool.jsonl"), "--shutdown-timeout", "5s", "--concurrency", "2"}, extra...)...)
	p.cmd.Env = append(os.Environ(), "AI_E2E_GATE_KEY="+b.agent, "AI_E2E_PROVIDER_KEY=sk-e2e")
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", workerID, p.logs.String())
		}
	})
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *aiProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("gate ai-worker exited with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("gate ai-worker did not stop after SIGTERM")
	}
}

// aiTask is the part of a task the tests read.
type aiTask struct {
	Status        string `json:"status"`
	Attempts      int    `json:"attempts"`
	LeaseExpiries int    `json:"lease_expiries"`
	WorkerID      string `json:"worker_id"`
	Error         string `json:"error_message"`
	DeadReason    string `json:"dead_reason"`
	Result        *struct {
		Channel  string          `json:"result_channel"`
		Pointer  string          `json:"result_pointer"`
		Summary  string          `json:"summary"`
		Metadata json.RawMessage `json:"metadata"`
	} `json:"result"`
}

func (b *aiBundle) task(t *testing.T, id string) aiTask {
	t.Helper()
	var out aiTask
	call(t, "GET", b.g.URL+"/v1/tasks/"+id, b.agent, nil).Into(t, &out)
	return out
}

// waitStatus waits until the task is in status (failing at once on another
// final status).
func (b *aiBundle) waitStatus(t *testing.T, id, status string) aiTask {
	t.Helper()
	var last aiTask
	waitFor(t, 90*time.Second, "task "+id+" to be "+status, func() bool {
		last = b.task(t, id)
		if last.Status != status && (last.Status == "succeeded" || last.Status == "dead_letter" || last.Status == "canceled") {
			t.Fatalf("task %s ended %s (%s %s), want %s", id, last.Status, last.DeadReason, last.Error, status)
		}
		return last.Status == status
	})
	return last
}

// TestAIWorkerToolLoopOnTheGate: the model lists its tasks through the
// gate's own /mcp, adds on the stdio server, meets a failing tool, and
// answers; the answer is the task's result with the usage in its metadata,
// progress was reported per step, a large answer lands in the file channel,
// and a fan-out returns every model's answer.
func TestAIWorkerToolLoopOnTheGate(t *testing.T) {
	t.Parallel()
	b := newAIBundle(t, 30, func(r aitest.Request) aitest.Reply {
		prompt := r.Messages[1].Text()
		switch {
		case prompt == "big":
			return aitest.Answer(strings.Repeat("long answer ", 1000))
		case strings.HasPrefix(prompt, "fan"):
			return aitest.Answer("answer of " + r.Model)
		case r.Step() == 1:
			return aitest.Calls(
				aitest.Call{ID: "list", Name: "gate__list_active_tasks", Args: `{}`},
				aitest.Call{ID: "add", Name: "calc__add", Args: `{"a":20,"b":22}`},
				aitest.Call{ID: "fail", Name: "calc__fail", Args: `{}`},
			)
		default:
			return aitest.Answer("The answer is 42.")
		}
	})
	w := b.startAIWorker(t, "worker.ai-1", "--admin-key", b.g.Admin)
	// With --admin-key the worker registers the task types that are missing
	// (ai.summary) and leaves the existing one (ai.chat) alone.
	var types struct {
		Chat, Summary struct {
			LeaseSeconds int `json:"lease_seconds"`
		}
	}
	waitFor(t, 60*time.Second, "the worker to register ai.summary", func() bool {
		r := call(t, "GET", b.g.URL+"/v1/admin/task-types/ai.summary", b.g.Admin, nil)
		if r.Status == 200 {
			r.Into(t, &types.Summary)
		}
		return r.Status == 200
	})
	call(t, "GET", b.g.URL+"/v1/admin/task-types/ai.chat", b.g.Admin, nil).Into(t, &types.Chat)
	if types.Summary.LeaseSeconds != 45 || types.Chat.LeaseSeconds != 30 {
		t.Fatalf("task types after registration: %+v", types)
	}

	id := b.g.enqueue(t, b.agent, "ai.chat", map[string]any{"prompt": "What is 20+22? Check your tasks first."})
	done := b.waitStatus(t, id, "succeeded")

	var steps []aitest.Request
	for _, r := range b.prov.Requests() {
		if r.Messages[1].Text() == "What is 20+22? Check your tasks first." {
			steps = append(steps, r)
		}
	}
	if len(steps) != 2 {
		t.Fatalf("%d model requests for the task, want 2", len(steps))
	}
	tools := steps[0].ToolNames()
	slices.Sort(tools)
	if !slices.Equal(tools, []string{"calc__add", "calc__fail", "gate__list_active_tasks"}) {
		t.Fatalf("offered tools %v", tools)
	}
	if steps[0].Auth != "Bearer sk-e2e" || steps[0].Model != "scripted-1" {
		t.Fatalf("request auth %q model %q", steps[0].Auth, steps[0].Model)
	}
	res := steps[1].ToolResults()
	if !strings.Contains(res["list"], id) || res["add"] != "42" || !strings.Contains(res["fail"], "boom") {
		t.Fatalf("tool results the model got: %v", res)
	}

	var content struct {
		Content struct {
			Answer    string `json:"answer"`
			Model     string `json:"model"`
			Steps     int    `json:"steps"`
			ToolCalls int    `json:"tool_calls"`
		} `json:"content"`
	}
	call(t, "GET", b.g.URL+"/v1/tasks/"+id+"/result", b.agent, nil).Into(t, &content)
	if c := content.Content; c.Answer != "The answer is 42." || c.Model != "scripted-1" || c.Steps != 2 || c.ToolCalls != 3 {
		t.Fatalf("result %+v", c)
	}
	var meta struct {
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
		Steps     int `json:"steps"`
		ToolCalls int `json:"tool_calls"`
	}
	if err := json.Unmarshal(done.Result.Metadata, &meta); err != nil || meta.Usage.TotalTokens != 30 || meta.Steps != 2 || meta.ToolCalls != 3 {
		t.Fatalf("metadata %s (%v)", done.Result.Metadata, err)
	}
	if done.Result.Summary != "The answer is 42." {
		t.Fatalf("summary %q", done.Result.Summary)
	}
	var prog struct {
		Progress []struct {
			Message string `json:"message"`
		} `json:"progress"`
	}
	call(t, "GET", b.g.URL+"/v1/tasks/"+id+"/progress", b.agent, nil).Into(t, &prog)
	seen := false
	for _, p := range prog.Progress {
		if strings.HasPrefix(p.Message, "RUNNING, step ") && strings.HasSuffix(p.Message, " of 6") {
			seen = true
		}
	}
	if !seen {
		t.Fatalf("no step progress in %+v", prog.Progress)
	}

	big := b.g.enqueue(t, b.agent, "ai.chat", map[string]any{"prompt": "big"})
	if bt := b.waitStatus(t, big, "succeeded"); bt.Result.Channel != "file" || !strings.HasPrefix(bt.Result.Pointer, "file:") {
		t.Fatalf("large answer stored as %q %q", bt.Result.Channel, bt.Result.Pointer)
	}

	fan := b.g.enqueue(t, b.agent, "ai.chat", map[string]any{"prompt": "fan out", "models": []string{"model-a", "model-b", "model-c"}})
	b.waitStatus(t, fan, "succeeded")
	var fr struct {
		Content struct {
			Answers []struct {
				Model     string `json:"model"`
				Answer    string `json:"answer"`
				LatencyMS *int64 `json:"latency_ms"`
			} `json:"answers"`
		} `json:"content"`
	}
	call(t, "GET", b.g.URL+"/v1/tasks/"+fan+"/result", b.agent, nil).Into(t, &fr)
	if len(fr.Content.Answers) != 3 {
		t.Fatalf("fan-out result %+v", fr.Content)
	}
	for i, m := range []string{"model-a", "model-b", "model-c"} {
		if a := fr.Content.Answers[i]; a.Model != m || a.Answer != "answer of "+m || a.LatencyMS == nil {
			t.Fatalf("answer %d: %+v", i, a)
		}
	}
	w.stop(t)
}

// TestAIWorkerCancelMidLoop: a task canceled while the model works on step
// 2 stops there: that request is abandoned, no step 3 is asked for, and the
// task ends canceled.
func TestAIWorkerCancelMidLoop(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	defer close(hold)
	// A 6 s lease: heartbeats every 2 s, each with seconds to spare on a
	// busy machine (a lost lease would ask the model again).
	b := newAIBundle(t, 6, func(r aitest.Request) aitest.Reply {
		if r.Step() == 1 {
			return aitest.Calls(aitest.Call{Name: "calc__add", Args: `{"a":1,"b":2}`})
		}
		return aitest.Reply{Hold: hold}
	})
	b.startAIWorker(t, "worker.ai-1")
	id := b.g.enqueue(t, b.agent, "ai.chat", map[string]any{"prompt": "slow"})
	waitFor(t, 60*time.Second, "step 2 to reach the model", func() bool { return len(b.prov.Requests()) == 2 })
	want(t, call(t, "POST", b.g.URL+"/v1/tasks/"+id+"/cancel", b.agent, map[string]any{"reason": "changed my mind"}), 200, "")
	b.waitStatus(t, id, "canceled")
	waitFor(t, 30*time.Second, "the held request to be abandoned", func() bool { return b.prov.Aborted() == 1 })
	if n := len(b.prov.Requests()); n != 2 {
		t.Fatalf("%d model requests, want 2 (no step after the cancel)", n)
	}
}

// TestAIWorkerKilledMidLoop: a worker killed while the model works on step
// 2 stops heartbeating; the lease expires (not counted as a failure) and a
// second worker redoes the task from the start.
func TestAIWorkerKilledMidLoop(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	defer close(hold)
	var killed atomic.Bool
	b := newAIBundle(t, 6, func(r aitest.Request) aitest.Reply {
		switch {
		case r.Step() == 1:
			return aitest.Calls(aitest.Call{Name: "calc__add", Args: `{"a":1,"b":2}`})
		case !killed.Load():
			return aitest.Reply{Hold: hold}
		}
		return aitest.Answer("redone")
	})
	first := b.startAIWorker(t, "worker.ai-1")
	id := b.g.enqueue(t, b.agent, "ai.chat", map[string]any{"prompt": "work"})
	waitFor(t, 60*time.Second, "step 2 to reach the model", func() bool { return len(b.prov.Requests()) == 2 })
	killed.Store(true)
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	// The second worker starts once the lease has expired and the task is
	// back in the queue. (Started earlier, its long-poll would hand it the
	// task with a local lease deadline counted from when the poll was sent,
	// which a short lease does not survive: see the report on sdk/worker.)
	waitFor(t, 60*time.Second, "the killed worker's lease to expire", func() bool {
		tk := b.task(t, id)
		// queued, or scheduled while the type's requeue delay runs
		return (tk.Status == "queued" || tk.Status == "scheduled") && tk.LeaseExpiries == 1
	})
	b.startAIWorker(t, "worker.ai-2")
	done := b.waitStatus(t, id, "succeeded")
	if done.WorkerID != "worker.ai-2" || done.LeaseExpiries != 1 || done.Attempts != 0 {
		t.Fatalf("task after the kill: worker %s, %d lease expiries, %d attempts; want worker.ai-2, 1, 0", done.WorkerID, done.LeaseExpiries, done.Attempts)
	}
	if n := len(b.prov.Requests()); n != 4 {
		t.Fatalf("%d model requests, want 4 (2 by the killed worker, 2 redone)", n)
	}
}

// TestAIWorkerProviderOutage: while the provider answers 503 the attempt
// fails retryable after the worker's retry budget; after the provider
// recovers the retry succeeds.
func TestAIWorkerProviderOutage(t *testing.T) {
	t.Parallel()
	b := newAIBundle(t, 30, func(aitest.Request) aitest.Reply { return aitest.Reply{Status: 503} })
	b.startAIWorker(t, "worker.ai-1")
	id := b.g.enqueue(t, b.agent, "ai.chat", map[string]any{"prompt": "are you there?"})
	var failed aiTask
	waitFor(t, 60*time.Second, "the first attempt to fail", func() bool {
		failed = b.task(t, id)
		return failed.Attempts >= 1
	})
	if failed.Status == "dead_letter" || !strings.Contains(failed.Error, "503") || !strings.Contains(failed.Error, "after 2 attempts") {
		t.Fatalf("after the outage: %+v", failed)
	}
	b.prov.SetScript(func(aitest.Request) aitest.Reply { return aitest.Answer("back") })
	done := b.waitStatus(t, id, "succeeded")
	if done.Attempts < 1 || done.Result.Summary != "back" {
		t.Fatalf("after recovery: %+v", done)
	}
}

// TestAIWorkerCheck: --check validates the config and the profiles; a bad
// profile stops the worker with exit status 2 and names the file.
func TestAIWorkerCheck(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(dir, "profiles", "a.json"), map[string]any{"name": "a", "system_prompt": "s"})
	writeJSON(t, filepath.Join(dir, "ai.json"), map[string]any{"profiles_dir": "profiles",
		"task_types": map[string]any{"ai.chat": map[string]any{"profile": "a"}}})
	out, errOut, code := gateCLI(t, "ai-worker", "--config", filepath.Join(dir, "ai.json"), "--check")
	if code != 0 || !strings.Contains(out, "ok: 1 task types (ai.chat)") {
		t.Fatalf("--check: %d %q %q", code, out, errOut)
	}
	writeJSON(t, filepath.Join(dir, "profiles", "b.json"), map[string]any{"name": "b", "system_prompt": "s", "tools": []string{"nowhere"}})
	_, errOut, code = gateCLI(t, "ai-worker", "--config", filepath.Join(dir, "ai.json"), "--check")
	if code != 2 || !strings.Contains(errOut, "b.json") || !strings.Contains(errOut, "/tools/0") {
		t.Fatalf("bad profile: %d %q", code, errOut)
	}
	_, errOut, code = gateCLI(t, "ai-worker", "--config", filepath.Join(dir, "missing.json"), "--check")
	if code != 2 || !strings.Contains(errOut, "missing.json") {
		t.Fatalf("missing config: %d %q", code, errOut)
	}
}

// TestAIWorkerHeartbeatsThroughASlowModel: a model that takes longer than
// the 6 s lease to answer does not lose the task: the worker heartbeats for
// the whole run, and the one lease it was granted completes it.
func TestAIWorkerHeartbeatsThroughASlowModel(t *testing.T) {
	t.Parallel()
	b := newAIBundle(t, 6, func(r aitest.Request) aitest.Reply {
		if r.Step() == 1 {
			// The scripted model thinks for 9 s: longer than the lease.
			hold := make(chan struct{})
			time.AfterFunc(9*time.Second, func() { close(hold) })
			return aitest.Reply{Hold: hold, Content: "slow but sure"}
		}
		return aitest.Answer("unexpected step")
	})
	b.startAIWorker(t, "worker.ai-1")
	id := b.g.enqueue(t, b.agent, "ai.chat", map[string]any{"prompt": "take your time"})
	done := b.waitStatus(t, id, "succeeded")
	var tk struct {
		LeaseCount    int `json:"lease_count"`
		LeaseExpiries int `json:"lease_expiries"`
	}
	call(t, "GET", b.g.URL+"/v1/tasks/"+id, b.agent, nil).Into(t, &tk)
	if tk.LeaseCount != 1 || tk.LeaseExpiries != 0 || done.Result.Summary != "slow but sure" {
		t.Fatalf("lease_count %d, lease_expiries %d, summary %q; want 1, 0, the answer", tk.LeaseCount, tk.LeaseExpiries, done.Result.Summary)
	}
}
