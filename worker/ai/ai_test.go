package ai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/asyncgate/asyncgate/sdk/worker"
	"github.com/asyncgate/asyncgate/worker/ai"
	"github.com/asyncgate/asyncgate/worker/ai/aitest"
)

func TestMain(m *testing.M) {
	if os.Getenv(aitest.StdioEnv) == "1" {
		if err := aitest.ServeStdio(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// stdioServer is the test binary itself serving aitest's MCP server on stdio.
func stdioServer(name string) ai.MCPServer {
	exe, _ := os.Executable()
	return ai.MCPServer{Name: name, Command: exe, Env: []string{aitest.StdioEnv + "=1"}}
}

// httpServer is aitest's MCP server over streamable HTTP.
func httpServer(t testing.TB, name string) ai.MCPServer {
	ts := httptest.NewServer(server.NewStreamableHTTPServer(aitest.NewMCPServer()))
	t.Cleanup(ts.Close)
	return ai.MCPServer{Name: name, URL: ts.URL + "/mcp"}
}

func intp(n int) *int { return &n }

// newWorker builds a Worker for task type "ai.test" with profile p.
func newWorker(t *testing.T, prov ai.ProviderConfig, p ai.Profile, servers []ai.MCPServer, tt ai.TaskTypeConfig) *ai.Worker {
	t.Helper()
	if prov.BackoffInitialSeconds == 0 {
		prov.BackoffInitialSeconds, prov.BackoffMaxSeconds = 0.01, 0.05
	}
	if prov.Model == "" {
		prov.Model = "test-model"
	}
	tt.Profile = p.Name
	w, err := ai.New(ai.Config{Provider: prov, MCPServers: servers, TaskTypes: map[string]ai.TaskTypeConfig{"ai.test": tt}},
		map[string]*ai.Profile{p.Name: &p}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func run(w *ai.Worker, ctx context.Context, params any) (worker.Completion, error) {
	b, _ := json.Marshal(params)
	v, err := w.Handler("ai.test")(ctx, &worker.Task{ID: "T-1", Type: "ai.test", Params: b})
	if err != nil {
		return worker.Completion{}, err
	}
	return v.(worker.Completion), nil
}

// TestLoopRunsToolsOverStdioAndHTTP runs a conversation whose model calls
// tools on a stdio and a streamable HTTP MCP server, a tool that fails, a
// tool it was not offered, and then answers: every result goes back to the
// model, and the usage adds up.
func TestLoopRunsToolsOverStdioAndHTTP(t *testing.T) {
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		switch r.Step() {
		case 1:
			return aitest.Calls(
				aitest.Call{ID: "c1", Name: "calc__add", Args: `{"a":2,"b":3}`},
				aitest.Call{ID: "c2", Name: "web__echo", Args: `{"text":"over http"}`},
				aitest.Call{ID: "c3", Name: "calc__fail", Args: `{}`},
				aitest.Call{ID: "c4", Name: "calc__big", Args: `{"n":5}`}, // not allowed
				aitest.Call{ID: "c6", Name: "web__status", Args: `{}`},
			)
		case 2:
			return aitest.Calls(aitest.Call{ID: "c5", Name: "calc__add", Args: `not json`})
		default:
			return aitest.Answer("the sum is 5")
		}
	})
	defer prov.Close()
	p := ai.Profile{Name: "calc", SystemPrompt: "You add.", Tools: []string{"calc/add", "calc/fail", "web/e*", "web/status"}}
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, p, []ai.MCPServer{stdioServer("calc"), httpServer(t, "web")}, ai.TaskTypeConfig{})

	comp, err := run(w, context.Background(), map[string]any{"prompt": "add 2 and 3"})
	if err != nil {
		t.Fatal(err)
	}
	reqs := prov.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	tools := reqs[0].ToolNames()
	slices.Sort(tools)
	if !slices.Equal(tools, []string{"calc__add", "calc__fail", "web__echo", "web__status"}) {
		t.Fatalf("offered tools %v", tools)
	}
	if m := reqs[0].Messages; m[0].Role != "system" || m[0].Text() != "You add." || m[1].Role != "user" || m[1].Text() != "add 2 and 3" {
		t.Fatalf("first messages %+v", m)
	}
	got := reqs[1].ToolResults()
	if got["c1"] != "5" || got["c2"] != "over http" || !strings.Contains(got["c3"], "boom") || !strings.HasPrefix(got["c3"], "error: ") ||
		!strings.Contains(got["c4"], `no tool named "calc__big"`) || got["c6"] != "2 tasks\n"+`{"tasks":["T-1","T-2"]}` {
		t.Fatalf("tool results %v", got)
	}
	if r := reqs[2].ToolResults()["c5"]; !strings.Contains(r, "not a JSON object") {
		t.Fatalf("bad arguments answered %q", r)
	}
	var res ai.Answer
	if err := json.Unmarshal(comp.Result, &res); err != nil {
		t.Fatal(err)
	}
	if res.Answer != "the sum is 5" || res.Steps != 3 || res.ToolCalls != 5 || res.Model != "test-model" || res.Usage.TotalTokens != 45 {
		t.Fatalf("result %+v", res)
	}
	var meta struct {
		Usage     ai.Usage `json:"usage"`
		Steps     int      `json:"steps"`
		ToolCalls int      `json:"tool_calls"`
		Profile   string   `json:"profile"`
	}
	if err := json.Unmarshal(comp.Metadata, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Usage.PromptTokens != 30 || meta.Usage.CompletionTokens != 15 || meta.Steps != 3 || meta.ToolCalls != 5 || meta.Profile != "calc" {
		t.Fatalf("metadata %s", comp.Metadata)
	}
}

// TestProviderRetriesThenSucceeds: a 429, a 500, malformed JSON and an
// answer that does not come in time are retried; the fifth attempt answers.
func TestProviderRetriesThenSucceeds(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	n := 0
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		n++
		switch n {
		case 1:
			return aitest.Reply{Status: 429, RetryAfter: "0"}
		case 2:
			return aitest.Reply{Status: 500}
		case 3:
			return aitest.Reply{Raw: `{"id": "x", "choices": [`}
		case 4:
			return aitest.Reply{Hold: release}
		}
		return aitest.Answer("ok")
	})
	defer prov.Close()
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL, MaxAttempts: 5, TimeoutSeconds: 1}, ai.Profile{Name: "p", SystemPrompt: "s"}, nil, ai.TaskTypeConfig{})
	if _, err := run(w, context.Background(), map[string]any{"prompt": "hi"}); err != nil {
		t.Fatal(err)
	}
	if len(prov.Requests()) != 5 || prov.Aborted() != 1 {
		t.Fatalf("%d requests, %d aborted; want 5 and 1", len(prov.Requests()), prov.Aborted())
	}
}

// TestProviderFailuresAreClassified: a budget used up on 503s is retryable;
// a 400 is fatal at once; a refused key is retryable without retrying.
func TestProviderFailuresAreClassified(t *testing.T) {
	for _, tc := range []struct {
		status    int
		requests  int
		retryable bool
	}{
		{503, 3, true},
		{429, 3, true},
		{400, 1, false},
		{404, 1, false},
		{401, 1, true},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			prov := aitest.NewServer(func(aitest.Request) aitest.Reply { return aitest.Reply{Status: tc.status} })
			defer prov.Close()
			w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL, MaxAttempts: 3}, ai.Profile{Name: "p", SystemPrompt: "s"}, nil, ai.TaskTypeConfig{})
			_, err := run(w, context.Background(), map[string]any{"prompt": "hi"})
			if err == nil {
				t.Fatal("no error")
			}
			if worker.IsRetryable(err) != tc.retryable || len(prov.Requests()) != tc.requests {
				t.Fatalf("err %v (retryable %v), %d requests; want retryable %v, %d requests", err, worker.IsRetryable(err), len(prov.Requests()), tc.retryable, tc.requests)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(tc.status)) {
				t.Fatalf("error %q does not name the status", err)
			}
		})
	}
}

// TestLimits: calls over max_tool_calls are answered with an error the
// model sees; no final answer within max_iterations is fatal.
func TestLimits(t *testing.T) {
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		return aitest.Calls(aitest.Call{Name: "calc__add", Args: `{"a":1,"b":1}`}, aitest.Call{Name: "calc__add", Args: `{"a":1,"b":2}`})
	})
	defer prov.Close()
	p := ai.Profile{Name: "p", SystemPrompt: "s", Tools: []string{"calc/*"}, MaxToolCalls: intp(3)}
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, p, []ai.MCPServer{stdioServer("calc")}, ai.TaskTypeConfig{MaxIterations: 2})
	_, err := run(w, context.Background(), map[string]any{"prompt": "loop"})
	if err == nil || worker.IsRetryable(err) || !strings.Contains(err.Error(), "no final answer after 2 steps") {
		t.Fatalf("err %v", err)
	}
	reqs := prov.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	var results []string
	for _, m := range reqs[1].Messages {
		if m.Role == "tool" {
			results = append(results, m.Text())
		}
	}
	if len(results) != 2 || results[0] != "2" || results[1] != "3" {
		t.Fatalf("step 1 results %q", results)
	}
	// Step 2's two calls were answered too (the loop ended after them): the
	// budget of 3 left one of them unexecuted. Ask the worker directly.
	prov.SetScript(func(r aitest.Request) aitest.Reply {
		if r.Step() < 3 {
			return aitest.Calls(aitest.Call{Name: "calc__add", Args: `{"a":1,"b":1}`}, aitest.Call{Name: "calc__add", Args: `{"a":1,"b":1}`})
		}
		return aitest.Answer("done")
	})
	w2 := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, p, []ai.MCPServer{stdioServer("calc")}, ai.TaskTypeConfig{})
	before := len(prov.Requests())
	comp, err := run(w2, context.Background(), map[string]any{"prompt": "loop"})
	if err != nil {
		t.Fatal(err)
	}
	last := prov.Requests()[before+2]
	var budget int
	for _, m := range last.Messages {
		if m.Role == "tool" && strings.Contains(m.Text(), "tool-call budget (3) is used up") {
			budget++
		}
	}
	var res ai.Answer
	json.Unmarshal(comp.Result, &res)
	if budget != 1 || res.ToolCalls != 3 {
		t.Fatalf("%d budget errors, %d tool calls; want 1 and 3", budget, res.ToolCalls)
	}
}

// TestCancelStopsWithinOneStep: a context cancelled while step 2 waits for
// the model aborts that request, and no step 3 is asked for.
func TestCancelStopsWithinOneStep(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	step2 := make(chan struct{}, 1)
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		if r.Step() == 1 {
			return aitest.Calls(aitest.Call{Name: "calc__add", Args: `{"a":1,"b":1}`})
		}
		step2 <- struct{}{}
		return aitest.Reply{Hold: hold}
	})
	defer prov.Close()
	p := ai.Profile{Name: "p", SystemPrompt: "s", Tools: []string{"calc/add"}}
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, p, []ai.MCPServer{stdioServer("calc")}, ai.TaskTypeConfig{})
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("canceled by the test")
	go func() {
		<-step2
		cancel(cause)
	}()
	_, err := run(w, ctx, map[string]any{"prompt": "x"})
	if !errors.Is(err, cause) {
		t.Fatalf("err %v, want the cancel cause", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for prov.Aborted() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if prov.Aborted() != 1 || len(prov.Requests()) != 2 {
		t.Fatalf("%d aborted, %d requests; want 1 and 2", prov.Aborted(), len(prov.Requests()))
	}
}

// TestFanOut asks three models at once; one refuses the request. The
// result has every answer, in order, with its model and latency.
func TestFanOut(t *testing.T) {
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		if r.Model == "bad" {
			return aitest.Reply{Status: 400}
		}
		return aitest.Answer("answer of " + r.Model)
	})
	defer prov.Close()
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, ai.Profile{Name: "p", SystemPrompt: "s", AllowedModels: []string{"m*", "bad"}}, nil, ai.TaskTypeConfig{})
	comp, err := run(w, context.Background(), map[string]any{"prompt": "x", "models": []string{"m1", "bad", "m2"}})
	if err != nil {
		t.Fatal(err)
	}
	var res ai.FanOut
	if err := json.Unmarshal(comp.Result, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Answers) != 3 || res.Answers[0].Answer != "answer of m1" || res.Answers[2].Answer != "answer of m2" ||
		res.Answers[1].Model != "bad" || res.Answers[1].Error == "" || *res.Answers[1].Retryable || res.Usage.TotalTokens != 30 {
		t.Fatalf("result %s", comp.Result)
	}
	for _, a := range res.Answers {
		if a.LatencyMS < 0 || (a.Error == "" && a.Steps != 1) {
			t.Fatalf("answer %+v", a)
		}
	}
	// Every model failing fatally fails the task fatally.
	_, err = run(w, context.Background(), map[string]any{"prompt": "x", "models": []string{"bad", "bad"}})
	if err == nil || worker.IsRetryable(err) {
		t.Fatalf("err %v", err)
	}
}

// TestBadParamsAreFatal: no prompt, or too many models, dead-letters.
func TestBadParamsAreFatal(t *testing.T) {
	w := newWorker(t, ai.ProviderConfig{BaseURL: "http://127.0.0.1:1/v1"}, ai.Profile{Name: "p", SystemPrompt: "s"}, nil, ai.TaskTypeConfig{})
	for _, params := range []any{map[string]any{}, map[string]any{"prompt": 3},
		map[string]any{"prompt": "x", "models": []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}}} {
		if _, err := run(w, context.Background(), params); err == nil || worker.IsRetryable(err) {
			t.Fatalf("%v: err %v", params, err)
		}
	}
}

// TestLoadProfiles validates profile files against the schema.
func TestLoadProfiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.json", `{"name":"research","system_prompt":"You research.","tools":["gate/check_task_status","files/*"],"max_iterations":5,"max_tool_calls":0}`)
	ps, err := ai.LoadProfiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := ps["research"]
	if p == nil || p.MaxIterations != 5 || *p.MaxToolCalls != 0 || !p.Allows("files", "read") || p.Allows("gate", "queue_task") || !p.Allows("gate", "check_task_status") {
		t.Fatalf("profile %+v", p)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"name":"x","system_prompt":"s","extra":1}`, "additional"},
		{`{"name":"Bad Name","system_prompt":"s"}`, "/name"},
		{`{"name":"x"}`, "system_prompt"},
		{`{"name":"x","system_prompt":"s","tools":["no-slash"]}`, "/tools/0"},
		{`{"name":"x","system_prompt":"s","max_iterations":0}`, "/max_iterations"},
		{`{"name":"research","system_prompt":"s"}`, "already used"},
		{`{"name":"x","system_prompt":"s"} trailing`, "trailing"},
	} {
		write("b.json", tc.body)
		_, err := ai.LoadProfiles(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "b.json") {
			t.Errorf("%s: err %v, want %q naming b.json", tc.body, err, tc.want)
		}
	}
}

// TestNewRefusesBadConfig: a task type naming a missing profile, and a
// profile allowing a server that is not configured.
func TestNewRefusesBadConfig(t *testing.T) {
	p := &ai.Profile{Name: "p", SystemPrompt: "s", Tools: []string{"nowhere/x"}}
	_, err := ai.New(ai.Config{TaskTypes: map[string]ai.TaskTypeConfig{"t": {Profile: "p"}}}, map[string]*ai.Profile{"p": p}, quiet)
	if err == nil || !strings.Contains(err.Error(), `no mcp server "nowhere"`) {
		t.Fatalf("err %v", err)
	}
	_, err = ai.New(ai.Config{TaskTypes: map[string]ai.TaskTypeConfig{"t": {Profile: "q"}}}, map[string]*ai.Profile{"p": p}, quiet)
	if err == nil || !strings.Contains(err.Error(), `profile "q"`) {
		t.Fatalf("err %v", err)
	}
	ok := &ai.Profile{Name: "p", SystemPrompt: "s"}
	for _, tc := range []struct {
		cfg  ai.Config
		want string
	}{
		{ai.Config{Provider: ai.ProviderConfig{BaseURL: "ftp://x"}}, "provider.base_url"},
		{ai.Config{MCPServers: []ai.MCPServer{{Name: "a", URL: "localhost:1"}}}, "mcp server a"},
		{ai.Config{MCPServers: []ai.MCPServer{{Name: "a b", Command: "x"}}}, `name "a b"`},
		{ai.Config{MCPServers: []ai.MCPServer{{Name: "a", Command: "x", URL: "http://h"}}}, "exactly one"},
		{ai.Config{MCPServers: []ai.MCPServer{{Name: "a", Command: "x"}, {Name: "a", Command: "y"}}}, "twice"},
		{ai.Config{Provider: ai.ProviderConfig{MaxAttempts: -1}}, "negative"},
	} {
		tc.cfg.TaskTypes = map[string]ai.TaskTypeConfig{"t": {Profile: "p"}}
		if _, err := ai.New(tc.cfg, map[string]*ai.Profile{"p": ok}, quiet); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestUnreachableServerIsRetryable: a server the profile allows that cannot
// be reached fails the task retryable, before the model is asked.
func TestUnreachableServerIsRetryable(t *testing.T) {
	prov := aitest.NewServer(func(aitest.Request) aitest.Reply { return aitest.Answer("x") })
	defer prov.Close()
	ts := httptest.NewServer(nil)
	url := ts.URL + "/mcp"
	ts.Close() // nothing listens there any more
	p := ai.Profile{Name: "p", SystemPrompt: "s", Tools: []string{"down/*"}}
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, p, []ai.MCPServer{{Name: "down", URL: url}}, ai.TaskTypeConfig{})
	_, err := run(w, context.Background(), map[string]any{"prompt": "x"})
	if err == nil || !worker.IsRetryable(err) || !strings.Contains(err.Error(), "mcp server down") {
		t.Fatalf("err %v", err)
	}
	if n := len(prov.Requests()); n != 0 {
		t.Fatalf("%d model requests, want 0", n)
	}
}

// TestConcurrentConversationsShareSessions runs conversations at once on one
// Worker: they share its MCP sessions, and each gets its own results back.
func TestConcurrentConversationsShareSessions(t *testing.T) {
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		n := r.Messages[1].Text()
		if r.Step() == 1 {
			return aitest.Calls(aitest.Call{Name: "calc__add", Args: `{"a":` + n + `,"b":1000}`},
				aitest.Call{Name: "web__echo", Args: `{"text":"` + n + `"}`})
		}
		var parts []string
		for _, m := range r.Messages {
			if m.Role == "tool" {
				parts = append(parts, m.Text())
			}
		}
		return aitest.Answer(strings.Join(parts, ","))
	})
	defer prov.Close()
	p := ai.Profile{Name: "p", SystemPrompt: "s", Tools: []string{"calc/add", "web/echo"}}
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, p, []ai.MCPServer{stdioServer("calc"), httpServer(t, "web")}, ai.TaskTypeConfig{})
	const n = 12
	errs := make(chan error, n)
	for i := range n {
		go func() {
			comp, err := run(w, context.Background(), map[string]any{"prompt": fmt.Sprint(i)})
			if err == nil {
				var a ai.Answer
				json.Unmarshal(comp.Result, &a)
				if want := fmt.Sprintf("%d,%d", 1000+i, i); a.Answer != want {
					err = fmt.Errorf("conversation %d answered %q, want %q", i, a.Answer, want)
				}
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// FuzzParseProfile: any document is either refused with an error or
// accepted as a profile with a valid name and prompt; never a panic.
func FuzzParseProfile(f *testing.F) {
	f.Add([]byte(`{"name":"a","system_prompt":"s","tools":["gate/*"],"max_iterations":3}`))
	f.Add([]byte(`{"name":"a","system_prompt":"s","tools":["x/[a-"]}`))
	f.Add([]byte(`{"name":"a"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		p, err := ai.ParseProfile(doc)
		if err != nil {
			return
		}
		if p.Name == "" || p.SystemPrompt == "" {
			t.Fatalf("accepted %q as %+v", doc, p)
		}
		for _, e := range p.Tools {
			srv, tool, _ := strings.Cut(e, "/")
			p.Allows(srv, tool)
		}
	})
}

// TestLongToolResultIsCut: a tool result over max_tool_result_bytes reaches
// the model cut, with a note saying how long it was.
func TestLongToolResultIsCut(t *testing.T) {
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		if r.Step() == 1 {
			return aitest.Calls(aitest.Call{ID: "big", Name: "calc__big", Args: `{"n":500}`})
		}
		return aitest.Answer("ok")
	})
	defer prov.Close()
	p := ai.Profile{Name: "p", SystemPrompt: "s", Tools: []string{"calc/big"}}
	w, err := ai.New(ai.Config{Provider: ai.ProviderConfig{BaseURL: prov.URL, Model: "m"}, MCPServers: []ai.MCPServer{stdioServer("calc")},
		MaxToolResultBytes: 100, TaskTypes: map[string]ai.TaskTypeConfig{"ai.test": {Profile: "p"}}}, map[string]*ai.Profile{"p": &p}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := run(w, context.Background(), map[string]any{"prompt": "x"}); err != nil {
		t.Fatal(err)
	}
	got := prov.Requests()[1].ToolResults()["big"]
	if !strings.HasPrefix(got, strings.Repeat("x", 100)+"\n[cut: the result was 500 bytes; 100 shown]") {
		t.Fatalf("tool result %q", got)
	}
}

// swappable serves the current MCP server; swapping it is a server restart
// that forgets every session.
type swappable struct {
	h atomic.Pointer[server.StreamableHTTPServer]
}

func (s *swappable) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.Load().ServeHTTP(w, r) }

// sessionServer is the test MCP server on a protocol version with sessions
// (before 2026-07-28), which a restart forgets.
func sessionServer() *server.StreamableHTTPServer { return sessionServerOf(aitest.NewMCPServer()) }

// sessionServerOf serves s on a protocol version with sessions.
func sessionServerOf(s *server.MCPServer) *server.StreamableHTTPServer {
	return server.NewStreamableHTTPServer(s, server.WithStateful(true),
		server.WithStreamableHTTPProtocolVersions("2025-06-18"))
}

// TestServerRestartReconnects: an HTTP MCP server that restarts between two
// tool calls forgets the session (404); the worker opens a new one and the
// second call succeeds.
func TestServerRestartReconnects(t *testing.T) {
	sw := &swappable{}
	sw.h.Store(sessionServer())
	ts := httptest.NewServer(sw)
	defer ts.Close()
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		switch r.Step() {
		case 1:
			return aitest.Calls(aitest.Call{ID: "before", Name: "web__add", Args: `{"a":1,"b":1}`})
		case 2:
			sw.h.Store(sessionServer()) // the restart
			return aitest.Calls(aitest.Call{ID: "after", Name: "web__add", Args: `{"a":2,"b":2}`})
		}
		return aitest.Answer("done")
	})
	defer prov.Close()
	p := ai.Profile{Name: "p", SystemPrompt: "s", Tools: []string{"web/add"}}
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, p, []ai.MCPServer{{Name: "web", URL: ts.URL + "/mcp"}}, ai.TaskTypeConfig{})
	if _, err := run(w, context.Background(), map[string]any{"prompt": "x"}); err != nil {
		t.Fatal(err)
	}
	reqs := prov.Requests()
	if got := reqs[1].ToolResults()["before"]; got != "2" {
		t.Fatalf("before the restart: %q", got)
	}
	if got := reqs[2].ToolResults()["after"]; got != "4" {
		t.Fatalf("after the restart: %q", got)
	}
}

// TestTaskModelsMustBeAllowed (issue 37 item 8e): a task may name only the
// models its profile's allowed_models lists (exactly or by glob) or the
// config's own; any other, alone or in a fan-out, is fatal before the
// provider is asked anything.
func TestTaskModelsMustBeAllowed(t *testing.T) {
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply { return aitest.Answer(r.Model) })
	defer prov.Close()
	p := ai.Profile{Name: "p", SystemPrompt: "s", Model: "house", AllowedModels: []string{"cheap-1", "openai/*"}}
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL, Model: "prov"}, p, nil, ai.TaskTypeConfig{Model: "typed"})
	for _, params := range []map[string]any{
		{"prompt": "x", "model": "very-expensive"},
		{"prompt": "x", "model": "anthropic/claude-opus"},
		{"prompt": "x", "models": []string{"cheap-1", "very-expensive"}},
		{"prompt": "x", "models": []string{"openai/gpt-4o", "openai-evil"}},
	} {
		_, err := run(w, context.Background(), params)
		if err == nil || worker.IsRetryable(err) || !strings.Contains(err.Error(), "does not allow") {
			t.Fatalf("%v: err %v, want a fatal refusal", params, err)
		}
	}
	if n := len(prov.Requests()); n != 0 {
		t.Fatalf("the provider was asked %d times for refused models", n)
	}
	for _, params := range []map[string]any{
		{"prompt": "x", "model": "cheap-1"}, {"prompt": "x", "model": "openai/gpt-4o"},
		{"prompt": "x", "model": "house"}, {"prompt": "x", "model": "prov"}, {"prompt": "x", "model": "typed"},
		{"prompt": "x", "models": []string{"cheap-1", "openai/o3"}},
	} {
		if _, err := run(w, context.Background(), params); err != nil {
			t.Fatalf("%v: %v", params, err)
		}
	}
}

// TestModelPrecedence: the task's model, then the task type's, the
// profile's and the provider's; none at all is fatal.
func TestModelPrecedence(t *testing.T) {
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply { return aitest.Answer(r.Model) })
	defer prov.Close()
	newW := func(provModel, profModel, typeModel string) *ai.Worker {
		p := &ai.Profile{Name: "p", SystemPrompt: "s", Model: profModel, AllowedModels: []string{"task"}}
		w, err := ai.New(ai.Config{Provider: ai.ProviderConfig{BaseURL: prov.URL, Model: provModel},
			TaskTypes: map[string]ai.TaskTypeConfig{"ai.test": {Profile: "p", Model: typeModel}}}, map[string]*ai.Profile{"p": p}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	}
	for _, tc := range []struct {
		w      *ai.Worker
		params map[string]any
		want   string
	}{
		{newW("prov", "prof", "type"), map[string]any{"prompt": "x", "model": "task"}, "task"},
		{newW("prov", "prof", "type"), map[string]any{"prompt": "x"}, "type"},
		{newW("prov", "prof", ""), map[string]any{"prompt": "x"}, "prof"},
		{newW("prov", "", ""), map[string]any{"prompt": "x"}, "prov"},
	} {
		comp, err := run(tc.w, context.Background(), tc.params)
		if err != nil {
			t.Fatal(err)
		}
		var a ai.Answer
		json.Unmarshal(comp.Result, &a)
		if a.Model != tc.want || a.Answer != tc.want {
			t.Errorf("%v: model %q answered %q, want %q", tc.params, a.Model, a.Answer, tc.want)
		}
	}
	if _, err := run(newW("", "", ""), context.Background(), map[string]any{"prompt": "x"}); err == nil || worker.IsRetryable(err) || !strings.Contains(err.Error(), "no model") {
		t.Fatalf("no model: %v", err)
	}
}

// A stdio MCP server started for a task does not inherit the keys in the
// worker's environment (the provider's, the worker's, an admin's): a tool
// process, or a tool the model drives, could read them back into a result.
func TestStdioServerDoesNotInheritTheWorkersKeys(t *testing.T) {
	t.Setenv("AI_API_KEY", "sk-PROVIDER-SECRET")
	t.Setenv("ASYNCGATE_KEY", "agw_WORKER-SECRET")
	t.Setenv("ASYNCGATE_ADMIN_KEY", "agw_ADMIN-SECRET")
	out := filepath.Join(t.TempDir(), "env")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	srv := ai.MCPServer{Name: "calc", Command: "/bin/sh", Args: []string{"-c", "env > " + out + "; exec " + exe},
		Env: []string{aitest.StdioEnv + "=1"}}
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		if r.Step() == 1 {
			return aitest.Calls(aitest.Call{ID: "c1", Name: "calc__add", Args: `{"a":1,"b":2}`})
		}
		return aitest.Answer("3")
	})
	defer prov.Close()
	p := ai.Profile{Name: "calc", SystemPrompt: "s", Tools: []string{"calc/add"}}
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, p, []ai.MCPServer{srv}, ai.TaskTypeConfig{})
	if _, err := run(w, context.Background(), map[string]any{"prompt": "add"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(b), "PATH=") {
		t.Fatalf("the server's environment as it saw it: %q, %v", b, err)
	}
	for _, s := range []string{"sk-PROVIDER-SECRET", "agw_WORKER-SECRET", "agw_ADMIN-SECRET"} {
		if strings.Contains(string(b), s) {
			t.Errorf("the stdio MCP server's environment holds %s", s)
		}
	}
}
