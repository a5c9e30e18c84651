// Package aitest holds the real parts the AI worker's tests run against: an
// OpenAI-compatible chat-completions server that answers what the test
// scripts (final answers, tool calls, 429s, 5xx, answers that never come,
// malformed JSON), and a small MCP server spoken to over stdio.
package aitest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Message is one message of a chat-completion request as the server saw it.
type Message struct {
	Role       string `json:"role"`
	Content    any    `json:"content"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls,omitempty"`
}

// Text returns the message's content as text (string content, or the text
// parts of an array).
func (m Message) Text() string {
	switch c := m.Content.(type) {
	case string:
		return c
	case []any:
		var sb strings.Builder
		for _, p := range c {
			if pm, ok := p.(map[string]any); ok {
				if s, ok := pm["text"].(string); ok {
					sb.WriteString(s)
				}
			}
		}
		return sb.String()
	}
	return ""
}

// Request is one chat-completion request the server received.
type Request struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	Tools    []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	// Auth is the Authorization header.
	Auth string `json:"-"`
	// Ctx is done when the client gives up on the request.
	Ctx context.Context `json:"-"`
}

// ToolNames lists the functions offered.
func (r Request) ToolNames() []string {
	out := make([]string, len(r.Tools))
	for i, t := range r.Tools {
		out[i] = t.Function.Name
	}
	return out
}

// ToolResults returns the tool messages of the request, by tool call id.
func (r Request) ToolResults() map[string]string {
	out := map[string]string{}
	for _, m := range r.Messages {
		if m.Role == "tool" {
			out[m.ToolCallID] = m.Text()
		}
	}
	return out
}

// Step is the number of assistant messages in the request plus one: the
// step of the loop that sent it.
func (r Request) Step() int {
	n := 1
	for _, m := range r.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

// Call is a tool call the scripted model makes.
type Call struct {
	ID   string
	Name string
	Args string
}

// Reply is what the server answers to one request.
type Reply struct {
	// Status, when not 0 or 200, answers an error with an OpenAI-style body.
	Status     int
	RetryAfter string
	// Header is added to the answer's headers (a Date of the test's
	// choosing, Retry-After-Ms); a Date given here replaces the server's.
	Header http.Header
	// Raw, when set, is the 200 body as given (malformed JSON, for example).
	Raw string
	// Content is the final answer; Calls are tool calls instead.
	Content string
	Calls   []Call
	// Hold keeps the request open until the client gives up on it (a
	// timeout, a canceled task) or the channel is closed.
	Hold <-chan struct{}
	// Tokens is the usage reported (prompt, completion); default 10, 5.
	Tokens [2]int64
}

// Answer is a final answer.
func Answer(text string) Reply { return Reply{Content: text} }

// Calls is an answer with tool calls.
func Calls(calls ...Call) Reply { return Reply{Calls: calls} }

// Server is an OpenAI-compatible chat-completions server that asks a script
// for every answer.
type Server struct {
	// URL is the API root to give the client (…/v1).
	URL string
	ts  *httptest.Server

	mu      sync.Mutex
	script  func(Request) Reply
	reqs    []Request
	aborted int
}

// NewServer starts a server that answers with script; Close stops it.
func NewServer(script func(Request) Reply) *Server {
	s := &Server{script: script}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.ts.URL + "/v1"
	return s
}

// SetScript replaces the script (a provider that recovers, for example).
func (s *Server) SetScript(script func(Request) Reply) {
	s.mu.Lock()
	s.script = script
	s.mu.Unlock()
}

// Close stops the server.
func (s *Server) Close() { s.ts.Close() }

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Aborted counts held requests the client gave up on.
func (s *Server) Aborted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborted
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var req Request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error"}}`, err.Error())
		return
	}
	req.Auth, req.Ctx = r.Header.Get("Authorization"), r.Context()
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, req)
	script := s.script
	s.mu.Unlock()
	rep := script(req)
	if rep.Hold != nil {
		select {
		case <-r.Context().Done():
			s.mu.Lock()
			s.aborted++
			s.mu.Unlock()
			return
		case <-rep.Hold:
		case <-time.After(2 * time.Minute):
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if rep.RetryAfter != "" {
		w.Header().Set("Retry-After", rep.RetryAfter)
	}
	for k, vs := range rep.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if rep.Status != 0 && rep.Status != http.StatusOK {
		w.WriteHeader(rep.Status)
		fmt.Fprintf(w, `{"error":{"message":"scripted %d","type":"server_error","code":null}}`, rep.Status)
		return
	}
	if rep.Raw != "" {
		fmt.Fprint(w, rep.Raw)
		return
	}
	pt, ct := rep.Tokens[0], rep.Tokens[1]
	if pt == 0 && ct == 0 {
		pt, ct = 10, 5
	}
	msg := map[string]any{"role": "assistant", "content": rep.Content}
	finish := "stop"
	if len(rep.Calls) > 0 {
		var calls []map[string]any
		for i, c := range rep.Calls {
			id := c.ID
			if id == "" {
				id = fmt.Sprintf("call_%d_%d", n, i)
			}
			calls = append(calls, map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Args}})
		}
		msg["content"], msg["tool_calls"], finish = nil, calls, "tool_calls"
	}
	json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
	})
}

// StdioEnv is the environment variable a test binary checks in its TestMain
// (or an init function) to become the stdio MCP server: when it is "1",
// call ServeStdio and exit.
const StdioEnv = "AITEST_STDIO_MCP"

// NewMCPServer returns the small MCP server of the tests, with tools add
// (a+b), fail (always a tool error), echo (text), big (n bytes of x) and
// status (a text summary plus structured content).
func NewMCPServer() *server.MCPServer {
	s := server.NewMCPServer("aitest", "1", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("add", mcp.WithDescription("Add two numbers."),
		mcp.WithNumber("a", mcp.Required()), mcp.WithNumber("b", mcp.Required())),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			a, err := r.RequireFloat("a")
			if err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			b, err := r.RequireFloat("b")
			if err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			return mcp.NewToolResultText(fmt.Sprint(a + b)), nil
		})
	s.AddTool(mcp.NewTool("fail", mcp.WithDescription("Always fails.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultError("boom: this tool always fails"), nil
		})
	s.AddTool(mcp.NewTool("echo", mcp.WithDescription("Echo text."), mcp.WithString("text")),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(r.GetString("text", "")), nil
		})
	s.AddTool(mcp.NewTool("big", mcp.WithDescription("n bytes of x."), mcp.WithNumber("n")),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(strings.Repeat("x", int(r.GetFloat("n", 10)))), nil
		})
	s.AddTool(mcp.NewTool("status", mcp.WithDescription("A summary in text, the details as structured content.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultStructured(map[string]any{"tasks": []string{"T-1", "T-2"}}, "2 tasks"), nil
		})
	return s
}

// ServeStdio serves NewMCPServer on stdin and stdout until stdin closes.
func ServeStdio() error { return server.ServeStdio(NewMCPServer()) }
