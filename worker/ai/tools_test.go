package ai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/asyncgate/asyncgate/worker/ai"
	"github.com/asyncgate/asyncgate/worker/ai/aitest"
)

// namedServer is an MCP server over streamable HTTP whose tools each answer
// "server/tool", so a test sees which tool a call reached.
func namedServer(t testing.TB, name string, tools ...string) ai.MCPServer {
	s := server.NewMCPServer(name, "1", server.WithToolCapabilities(false))
	for _, tool := range tools {
		s.AddTool(mcp.NewTool(tool), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(name + "/" + tool), nil
		})
	}
	ts := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(ts.Close)
	return ai.MCPServer{Name: name, URL: ts.URL + "/mcp"}
}

var apiFunctionName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// TestToolNamesAreInjective: tools whose server__tool names collide (a
// common prefix past 64 characters, a server name holding "__", characters
// the API refuses) are each offered under a name of their own, the
// ordinary names stay server__tool, and a call of each name reaches its
// own tool.
func TestToolNamesAreInjective(t *testing.T) {
	long := strings.Repeat("t", 60)
	servers := []ai.MCPServer{
		namedServer(t, "long", long+"_one", long+"_two"),
		namedServer(t, "a__b", "c"),
		namedServer(t, "a", "b__c", "plain", "x.y", "x_y"),
	}
	want := []string{"a/b__c", "a/plain", "a/x.y", "a/x_y", "a__b/c", "long/" + long + "_one", "long/" + long + "_two"}
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		if r.Step() == 1 {
			var calls []aitest.Call
			for _, n := range r.ToolNames() {
				calls = append(calls, aitest.Call{ID: n, Name: n, Args: `{}`})
			}
			return aitest.Calls(calls...)
		}
		return aitest.Answer("done")
	})
	defer prov.Close()
	p := ai.Profile{Name: "p", SystemPrompt: "s", Tools: []string{"long/*", "a__b/c", "a/*"}}
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, p, servers, ai.TaskTypeConfig{MaxToolCalls: intp(20)})
	var offered []string
	for range 2 {
		if _, err := run(w, context.Background(), map[string]any{"prompt": "x"}); err != nil {
			t.Fatal(err)
		}
		reqs := prov.Requests()
		names := reqs[len(reqs)-2].ToolNames()
		if offered != nil && !slices.Equal(names, offered) {
			t.Fatalf("offered %q, then %q", offered, names)
		}
		offered = names
	}
	if len(offered) != len(want) {
		t.Fatalf("offered %d tools %q, want %d", len(offered), offered, len(want))
	}
	for _, n := range offered {
		if !apiFunctionName.MatchString(n) {
			t.Errorf("offered name %q does not fit the API", n)
		}
	}
	if !slices.Contains(offered, "a__plain") {
		t.Errorf("offered %q: the ordinary name a__plain is missing", offered)
	}
	var reached []string
	for id, text := range prov.Requests()[len(prov.Requests())-1].ToolResults() {
		if strings.HasPrefix(text, "error") {
			t.Errorf("call %q answered %q", id, text)
		}
		reached = append(reached, text)
	}
	slices.Sort(reached)
	if !slices.Equal(reached, want) {
		t.Fatalf("the calls of every offered name reached %q, want each tool once: %q", reached, want)
	}
}

// TestConverseKeepsToTheAllowlist: a Conversation whose Tools list a tool
// its profile does not allow neither offers nor runs it.
func TestConverseKeepsToTheAllowlist(t *testing.T) {
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		if r.Step() == 1 {
			return aitest.Calls(aitest.Call{ID: "ok", Name: "a__plain", Args: `{}`}, aitest.Call{ID: "no", Name: "a__secret", Args: `{}`})
		}
		return aitest.Answer("done")
	})
	defer prov.Close()
	p := ai.Profile{Name: "p", SystemPrompt: "s", Tools: []string{"a/plain"}}
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, p, []ai.MCPServer{namedServer(t, "a", "plain", "secret")}, ai.TaskTypeConfig{})
	tools := []ai.Tool{{Server: "a", Name: "plain"}, {Server: "a", Name: "secret"}}
	if _, err := w.Converse(context.Background(), ai.Conversation{Profile: &p, Model: "m", Prompt: "x", MaxIterations: 2, MaxToolCalls: 4, Tools: tools}); err != nil {
		t.Fatal(err)
	}
	reqs := prov.Requests()
	got := reqs[1].ToolResults()
	if got["ok"] != "a/plain" || !strings.HasPrefix(got["no"], "error: ") {
		t.Fatalf("tool results %q: a/secret is not on the allowlist", got)
	}
	if names := reqs[0].ToolNames(); !slices.Equal(names, []string{"a__plain"}) {
		t.Fatalf("offered %q", names)
	}
}

// TestFanOutSharesTheToolBudget: the models of a fan-out run at most
// max_tool_calls tool calls between them, not max_tool_calls each.
func TestFanOutSharesTheToolBudget(t *testing.T) {
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		if r.Step() <= 3 {
			return aitest.Calls(aitest.Call{Name: "a__ping", Args: `{}`}, aitest.Call{Name: "a__ping", Args: `{}`})
		}
		return aitest.Answer("done")
	})
	defer prov.Close()
	p := ai.Profile{Name: "p", SystemPrompt: "s", Tools: []string{"a/ping"}, MaxToolCalls: intp(4), AllowedModels: []string{"m?"}}
	w := newWorker(t, ai.ProviderConfig{BaseURL: prov.URL}, p, []ai.MCPServer{namedServer(t, "a", "ping")}, ai.TaskTypeConfig{})
	comp, err := run(w, context.Background(), map[string]any{"prompt": "x", "models": []string{"m1", "m2", "m3"}})
	if err != nil {
		t.Fatal(err)
	}
	var res ai.FanOut
	if err := json.Unmarshal(comp.Result, &res); err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, a := range res.Answers {
		if a.Error != "" {
			t.Fatalf("model %s: %s", a.Model, a.Error)
		}
		calls += a.ToolCalls
	}
	// Every tool result the models saw: 4 ran, the rest hit the budget.
	ran, refused := 0, 0
	for _, r := range prov.Requests() {
		if r.Step() != 4 {
			continue
		}
		for _, m := range r.Messages {
			switch text := m.Text(); {
			case m.Role != "tool":
			case text == "a/ping":
				ran++
			case strings.Contains(text, "tool-call budget (4"):
				refused++
			default:
				t.Errorf("tool result %q", text)
			}
		}
	}
	if calls != 4 || ran != 4 || refused != 3*6-4 {
		t.Fatalf("the models ran %d tool calls (%d results, %d refused), want 4 (4, 14) under max_tool_calls 4", calls, ran, refused)
	}
}

// TestTransportErrorSparesCallsInFlight: one call's transport error
// replaces the session for the calls that follow, while the calls in
// flight on the old session finish on it; the old session is closed when
// the last of them is done, and a late failure on it leaves the new one be.
func TestTransportErrorSparesCallsInFlight(t *testing.T) {
	const holds = 4
	entered := make(chan string, holds+1)
	release := make(chan struct{})
	var initializes, deletes atomic.Int32
	deleted := make(chan struct{}, 8)
	s := server.NewMCPServer("held", "1", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("hold"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		entered <- "hold"
		select {
		case <-release:
			return mcp.NewToolResultText("held"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	for _, name := range []string{"ping", "crash", "late_crash"} {
		s.AddTool(mcp.NewTool(name), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("pong"), nil
		})
	}
	h := sessionServerOf(s)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			deletes.Add(1)
			defer func() { deleted <- struct{}{} }()
		}
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			switch {
			case bytes.Contains(b, []byte(`"method":"initialize"`)):
				initializes.Add(1)
			case bytes.Contains(b, []byte(`"name":"crash"`)):
				http.Error(w, "crashed", http.StatusInternalServerError)
				return
			case bytes.Contains(b, []byte(`"name":"late_crash"`)):
				entered <- "late_crash"
				select {
				case <-release:
				case <-r.Context().Done():
				}
				http.Error(w, "crashed", http.StatusInternalServerError)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	tb, err := ai.NewToolbox([]ai.MCPServer{{Name: "web", URL: ts.URL + "/mcp"}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	ctx := context.Background()
	call := func(tool string) (string, bool) {
		text, isErr, err := tb.Call(ctx, "web", tool, json.RawMessage(`{}`))
		if err != nil {
			t.Errorf("%s: %v", tool, err)
		}
		return text, isErr
	}
	within := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s within 30 s", what)
		}
	}
	if text, _ := call("ping"); text != "pong" {
		t.Fatalf("ping: %q", text)
	}
	type result struct {
		tool, text string
		isErr      bool
	}
	results := make(chan result, holds+1)
	for _, tool := range append(slices.Repeat([]string{"hold"}, holds), "late_crash") {
		go func() {
			text, isErr := call(tool)
			results <- result{tool, text, isErr}
		}()
	}
	for range holds + 1 {
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the calls did not all reach the server within 30 s")
		}
	}
	if text, isErr := call("crash"); !isErr || !strings.HasPrefix(text, "error: ") {
		t.Fatalf("crash answered %q (isError %v)", text, isErr)
	}
	deletesAtCrash := deletes.Load()
	if text, _ := call("ping"); text != "pong" {
		t.Fatalf("ping after the crash: %q", text)
	}
	close(release)
	for range holds + 1 {
		r := <-results
		switch {
		case r.tool == "hold" && (r.text != "held" || r.isErr):
			t.Errorf("a call in flight when another failed answered %q", r.text)
		case r.tool == "late_crash" && !r.isErr:
			t.Errorf("late_crash answered %q", r.text)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	within("DELETE of the old session", deleted)
	if text, _ := call("ping"); text != "pong" {
		t.Fatalf("ping after the calls in flight: %q", text)
	}
	if deletesAtCrash != 0 || deletes.Load() != 1 || initializes.Load() != 2 {
		t.Fatalf("%d sessions closed at the crash, %d after the calls in flight, %d opened; want 0, 1 and 2",
			deletesAtCrash, deletes.Load(), initializes.Load())
	}
}

// TestNoSessionOpensAfterClose: a call made after the toolbox closed (a
// task still running when the worker stops) is answered with an error and
// opens no session, which nothing would close (a stdio server's process
// would be left running).
func TestNoSessionOpensAfterClose(t *testing.T) {
	s := server.NewMCPServer("a", "1", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("x"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("a/x"), nil
	})
	h := server.NewStreamableHTTPServer(s)
	var hits atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); h.ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	tb, err := ai.NewToolbox([]ai.MCPServer{{Name: "a", URL: ts.URL + "/mcp"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if text, isErr, err := tb.Call(ctx, "a", "x", nil); err != nil || isErr || text != "a/x" {
		t.Fatalf("a call before Close: %q, %v, %v", text, isErr, err)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	before := hits.Load()
	text, isErr, err := tb.Call(ctx, "a", "x", nil)
	if err != nil || !isErr || !strings.Contains(text, "closed") {
		t.Fatalf("a call after Close: %q, %v, %v; want an error naming the closed toolbox", text, isErr, err)
	}
	if n := hits.Load() - before; n != 0 {
		t.Fatalf("a call after Close sent %d requests to the server (a new session)", n)
	}
}
