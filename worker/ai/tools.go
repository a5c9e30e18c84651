package ai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// MCPServer is one MCP server the worker is a client of: streamable HTTP
// (URL) or a program spoken to over stdio (Command).
type MCPServer struct {
	// Name is how profiles name the server's tools ("name/tool").
	Name string `json:"name"`
	// URL of a streamable HTTP server, for example the gate's own
	// http://127.0.0.1:8080/mcp.
	URL string `json:"url,omitempty"`
	// Headers sent to an HTTP server; values may name environment variables
	// as ${NAME} (for example "Authorization": "Bearer ${ASYNCGATE_AGENT_KEY}").
	Headers map[string]string `json:"headers,omitempty"`
	// Command and Args start a stdio server; its environment is the
	// worker's PATH, HOME, locale and a few more (stdioEnvKept), never the
	// worker's keys, plus Env's KEY=VALUE entries (values may use ${NAME}).
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	Env     []string `json:"env,omitempty"`
	// TimeoutSeconds bounds one tool call (default 60).
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

var serverName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

func (s MCPServer) validate() error {
	if !serverName.MatchString(s.Name) {
		return fmt.Errorf("mcp server name %q: letters, digits, _ and - only, at most 32", s.Name)
	}
	if (s.URL == "") == (s.Command == "") {
		return fmt.Errorf("mcp server %s: give exactly one of url and command", s.Name)
	}
	return nil
}

// Tool is an MCP tool as offered to the model.
type Tool struct {
	Server      string
	Name        string
	Description string
	// InputSchema is the tool's JSON Schema for its arguments.
	InputSchema map[string]any
}

// Toolbox holds the worker's MCP client sessions, one per configured server,
// opened on first use and replaced after a transport error. It is safe for
// concurrent use.
//
// Every session is a generation of its server's: a call uses the current
// generation and holds it until it returns. A call that fails with a
// transport error retires its generation if it is still the current one,
// so the next call opens a new one; the calls still in flight on the
// retired generation finish or fail on their own, and the last of them
// closes it.
type Toolbox struct {
	log     *slog.Logger
	servers map[string]MCPServer
	mu      sync.Mutex
	conns   map[string]*mcpConn
	// gens counts each server's sessions opened.
	gens map[string]uint64
	// closed is set by Close: no session opens after it.
	closed bool
	// dialing serializes the opening of each server's session, so a slow
	// server does not hold up calls to the others.
	dialing map[string]*sync.Mutex
}

// mcpConn is one generation of a server's session.
type mcpConn struct {
	c     *client.Client
	tools []Tool
	gen   uint64
	// users counts the calls holding the session, and retired is set once
	// it is no longer its server's current session; the session is closed
	// when both say it is unused. Both are guarded by Toolbox.mu.
	users   int
	retired bool
	closing sync.Once
}

// close ends the session once.
func (c *mcpConn) close() (err error) {
	c.closing.Do(func() { err = c.c.Close() })
	return err
}

// NewToolbox checks the servers' settings; it connects to none yet.
func NewToolbox(servers []MCPServer, log *slog.Logger) (*Toolbox, error) {
	if log == nil {
		log = slog.Default()
	}
	tb := &Toolbox{log: log, servers: map[string]MCPServer{}, conns: map[string]*mcpConn{}, gens: map[string]uint64{},
		dialing: map[string]*sync.Mutex{}}
	for _, s := range servers {
		if err := s.validate(); err != nil {
			return nil, err
		}
		if _, dup := tb.servers[s.Name]; dup {
			return nil, fmt.Errorf("mcp server %q is configured twice", s.Name)
		}
		tb.servers[s.Name] = s
		tb.dialing[s.Name] = &sync.Mutex{}
	}
	return tb, nil
}

// Servers returns the configured server names, sorted.
func (tb *Toolbox) Servers() []string {
	out := make([]string, 0, len(tb.servers))
	for n := range tb.servers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// acquire returns the current session of server, opening it when needed,
// and holds it for the caller, who must release it.
func (tb *Toolbox) acquire(ctx context.Context, name string) (*mcpConn, error) {
	s, ok := tb.servers[name]
	if !ok {
		return nil, fmt.Errorf("no mcp server named %q is configured", name)
	}
	if c := tb.current(name); c != nil {
		return c, nil
	}
	dial := tb.dialing[name]
	dial.Lock()
	defer dial.Unlock()
	if c := tb.current(name); c != nil {
		return c, nil
	}
	if tb.isClosed() {
		return nil, errToolboxClosed
	}
	var c *client.Client
	var err error
	if s.Command != "" {
		env := make([]string, len(s.Env))
		for i, e := range s.Env {
			env[i] = expandEnv(e)
		}
		c, err = client.NewStdioMCPClientWithOptions(s.Command, env, s.Args, transport.WithCommandFunc(stdioCommand))
	} else {
		h := map[string]string{}
		for k, v := range s.Headers {
			h[k] = expandEnv(v)
		}
		c, err = client.NewStreamableHttpClient(s.URL, transport.WithHTTPHeaders(h))
		if err == nil {
			// The session outlives the task that opened it.
			err = c.Start(context.WithoutCancel(ctx))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("mcp server %s: %w", name, err)
	}
	ok = false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	req.Params.ClientInfo = mcp.Implementation{Name: "asyncgate-ai-worker", Version: "1"}
	if _, err := c.Initialize(ictx, req); err != nil {
		return nil, fmt.Errorf("mcp server %s: initialize: %w", name, err)
	}
	lt, err := c.ListTools(ictx, mcp.ListToolsRequest{})
	if err != nil {
		return nil, fmt.Errorf("mcp server %s: tools/list: %w", name, err)
	}
	conn := &mcpConn{c: c, users: 1}
	for _, t := range lt.Tools {
		conn.tools = append(conn.tools, Tool{Server: name, Name: t.Name, Description: t.Description, InputSchema: inputSchema(t)})
	}
	tb.mu.Lock()
	if tb.closed {
		// Closed while this session was opening: nobody would close it.
		tb.mu.Unlock()
		return nil, errToolboxClosed
	}
	ok = true
	tb.gens[name]++
	conn.gen = tb.gens[name]
	tb.conns[name] = conn
	tb.mu.Unlock()
	tb.log.Info("mcp server connected", "server", name, "generation", conn.gen, "tools", len(conn.tools))
	return conn, nil
}

// errToolboxClosed answers a call made after Close.
var errToolboxClosed = errors.New("the toolbox is closed (the worker is stopping)")

// isClosed reports whether Close was called.
func (tb *Toolbox) isClosed() bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.closed
}

// current holds and returns server's current session, or nil.
func (tb *Toolbox) current(name string) *mcpConn {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	c := tb.conns[name]
	if c != nil {
		c.users++
	}
	return c
}

// release lets go of a session acquire returned; the last user of a
// retired session closes it.
func (tb *Toolbox) release(c *mcpConn) {
	tb.mu.Lock()
	c.users--
	unused := c.users == 0 && c.retired
	tb.mu.Unlock()
	if unused {
		c.close()
	}
}

// inputSchema returns a tool's argument schema as a JSON object.
func inputSchema(t mcp.Tool) map[string]any {
	b, err := json.Marshal(t)
	if err == nil {
		var m struct {
			InputSchema map[string]any `json:"inputSchema"`
		}
		if json.Unmarshal(b, &m) == nil && m.InputSchema != nil {
			if _, ok := m.InputSchema["properties"]; !ok {
				m.InputSchema["properties"] = map[string]any{}
			}
			return m.InputSchema
		}
	}
	return map[string]any{"type": "object", "properties": map[string]any{}}
}

// retire makes c, a session the caller holds, no longer server's current
// one after a transport error, so the next call opens a new one. A session
// already replaced is left be. The session is closed when its last user
// releases it.
func (tb *Toolbox) retire(name string, c *mcpConn) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.conns[name] == c {
		delete(tb.conns, name)
		c.retired = true
		tb.log.Info("mcp session retired", "server", name, "generation", c.gen, "in_use", c.users)
	}
}

// Allowed lists the tools of p's allowlist on the configured servers. A
// server the allowlist names that cannot be reached is an error: the task
// should not run with tools silently missing.
func (tb *Toolbox) Allowed(ctx context.Context, p *Profile) ([]Tool, error) {
	for _, e := range p.Tools {
		if s, _, _ := strings.Cut(e, "/"); tb.servers[s].Name == "" {
			return nil, fmt.Errorf("profile %s allows %q but no mcp server %q is configured", p.Name, e, s)
		}
	}
	var out []Tool
	for _, name := range tb.Servers() {
		named := false
		for _, e := range p.Tools {
			if s, _, _ := strings.Cut(e, "/"); s == name {
				named = true
			}
		}
		if !named {
			continue
		}
		c, err := tb.acquire(ctx, name)
		if err != nil {
			return nil, err
		}
		for _, t := range c.tools {
			if p.Allows(name, t.Name) {
				out = append(out, t)
			}
		}
		tb.release(c)
	}
	return out, nil
}

// Call runs a tool and returns its result as text for the model. isError is
// true for a tool error (the server's isError, or a call that failed); err
// is only for a cancelled ctx. Tool errors go back to the model, never up.
func (tb *Toolbox) Call(ctx context.Context, server, tool string, args json.RawMessage) (text string, isError bool, err error) {
	c, cerr := tb.acquire(ctx, server)
	if cerr != nil {
		if ctx.Err() != nil {
			return "", true, context.Cause(ctx)
		}
		return "error: " + cerr.Error(), true, nil
	}
	defer func() { tb.release(c) }()
	var m map[string]any
	if len(args) > 0 && string(args) != "null" {
		if jerr := json.Unmarshal(args, &m); jerr != nil {
			return fmt.Sprintf("error: the arguments are not a JSON object: %v", jerr), true, nil
		}
	}
	timeout := 60 * time.Second
	if s := tb.servers[server].TimeoutSeconds; s > 0 {
		timeout = seconds(s)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = m
	res, cerr := c.c.CallTool(cctx, req)
	if errors.Is(cerr, transport.ErrSessionTerminated) && ctx.Err() == nil {
		// The server forgot the session (it restarted) and refused the call
		// before running it: open a new session and call once more.
		tb.log.Info("mcp session ended by the server; reconnecting", "server", server)
		tb.retire(server, c)
		c2, err2 := tb.acquire(ctx, server)
		if err2 != nil {
			if ctx.Err() != nil {
				return "", true, context.Cause(ctx)
			}
			return "error: " + err2.Error(), true, nil
		}
		tb.release(c)
		c = c2
		res, cerr = c.c.CallTool(cctx, req)
	}
	if ctx.Err() != nil {
		return "", true, context.Cause(ctx)
	}
	if cerr != nil {
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			return fmt.Sprintf("error: the tool did not answer within %s", timeout), true, nil
		}
		var te *transport.Error
		if errors.As(cerr, &te) {
			// A transport failure: the next call opens a new session.
			tb.retire(server, c)
		}
		return "error: " + cerr.Error(), true, nil
	}
	return resultText(res), res.IsError, nil
}

// resultText renders a tool result for the model: text parts as they are,
// other parts as JSON, and the structured content as JSON unless a text
// part already carries it (a server's text is often only a summary).
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
			continue
		}
		if b, err := json.Marshal(c); err == nil {
			parts = append(parts, string(b))
		}
	}
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil && !carries(parts, b) {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}

// carries reports whether one of the text parts is the JSON value b.
func carries(parts []string, b []byte) bool {
	var want any
	if json.Unmarshal(b, &want) != nil {
		return false
	}
	wb, _ := json.Marshal(want)
	for _, p := range parts {
		var got any
		if json.Unmarshal([]byte(p), &got) == nil {
			if gb, _ := json.Marshal(got); string(gb) == string(wb) {
				return true
			}
		}
	}
	return false
}

// Close ends the current sessions (stdio servers are stopped); calls in
// flight on them fail. A retired session still in use is closed by its
// last call. No session opens after Close: a later call is answered with
// an error.
func (tb *Toolbox) Close() error {
	tb.mu.Lock()
	tb.closed = true
	var cs []*mcpConn
	for n, c := range tb.conns {
		c.retired = true
		cs = append(cs, c)
		delete(tb.conns, n)
	}
	tb.mu.Unlock()
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.close())
	}
	return errors.Join(errs...)
}

// stdioEnvKept are the variables of the worker's environment a stdio MCP
// server inherits: what a program needs to find its tools and its locale.
// Nothing else passes (the provider's key, the worker's and the gate agent's
// keys are in that environment, and a tool the model drives could read them
// back into a result); a server that needs another variable names it in its
// env entry ("NAME=${NAME}").
var stdioEnvKept = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM"}

// stdioCommand starts a stdio MCP server with stdioEnvKept and LC_* from
// the worker's environment, then the server's own env entries.
func stdioCommand(ctx context.Context, command string, env, args []string) (*exec.Cmd, error) {
	cmd := exec.CommandContext(ctx, command, args...)
	cmd.Env = stdioEnv(os.Environ(), env)
	return cmd, nil
}

func stdioEnv(worker, own []string) []string {
	out := make([]string, 0, len(stdioEnvKept)+len(own))
	for _, kv := range worker {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "LC_") || slices.Contains(stdioEnvKept, name) {
			out = append(out, kv)
		}
	}
	return append(out, own...)
}
