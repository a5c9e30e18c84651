package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/mark3labs/mcp-go/mcp"
)

func init() {
	register(command{name: "mcp", summary: "serve the MCP tools on stdio (for agents that launch the gate)", run: runMCP})
}

const mcpUsage = `Usage:
  gate mcp --data DIR --principal NAME [--tenant T] [--role agent|worker] [--wasm-cache DIR]
  gate mcp --data DIR --key KEY [--wasm-cache DIR]
  gate mcp --url http://127.0.0.1:8080 --key KEY

Serves AsyncGate's MCP tools on stdin/stdout for an agent (Claude Desktop,
Cursor, …) that starts the gate as a subprocess.

With --data the gate opens the store itself, as the principal given (trusted:
whoever can read the data folder owns it) or as the key's principal (read
again every few seconds: once the key is revoked, every request is refused
until the client closes the session). SQLite
allows one writer at a time: when a gate serve already runs on the same
folder, prefer --url, which forwards the session to that server's /mcp
endpoint with the key (a stdio-to-HTTP bridge). Logs go to stderr.
`

func runMCP(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gate mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, mcpUsage); fs.PrintDefaults() }
	data := fs.String("data", "", "data folder (SQLite database) to open")
	db := fs.String("db", "", "database URL (empty: SQLite in the data folder; postgres://… for PostgreSQL)")
	principal := fs.String("principal", "", "act as this principal (agent name, or worker id with --role worker)")
	tenant := fs.String("tenant", auth.DefaultTenant, "tenant of --principal")
	role := fs.String("role", engine.RoleAgent, "role of --principal: agent or worker")
	key := fs.String("key", "", "API key: act as its principal (with --data), or authenticate to --url")
	serverURL := fs.String("url", "", "forward to a running gate serve at this URL instead of opening the store")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error (logs go to stderr)")
	wasmCache := fs.String("wasm-cache", "", "compiled-plugin cache folder, shareable with gate serve (default <data>/wasm-cache)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprint(stderr, mcpUsage)
		return 2
	}
	log, err := newLogger(stderr, *logLevel, "text")
	if err != nil {
		fmt.Fprintln(stderr, "gate mcp:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *serverURL != "" {
		if *key == "" || *data != "" || *principal != "" {
			fmt.Fprintln(stderr, "gate mcp: --url needs --key and takes neither --data nor --principal")
			return 2
		}
		if err := mcpBridge(ctx, *serverURL, *key, os.Stdin, stdout, log); err != nil {
			log.Error("mcp bridge stopped", "err", err)
			return 1
		}
		return 0
	}
	if *data == "" && *db == "" {
		fmt.Fprintln(stderr, "gate mcp: give --data DIR (or --url URL --key KEY)")
		return 2
	}
	if (*key == "") == (*principal == "") {
		fmt.Fprintln(stderr, "gate mcp: give exactly one of --principal and --key")
		return 2
	}
	if err := serveMCPStdio(ctx, *data, *db, *wasmCache, *key, engine.Actor{Tenant: *tenant, Principal: *principal, Role: *role}, stdout, log); err != nil {
		log.Error("gate mcp stopped", "err", err)
		return 1
	}
	return 0
}

// serveMCPStdio opens the store and serves one MCP session on stdin/stdout as
// actor (or as the key's principal when key is set).
func serveMCPStdio(ctx context.Context, data, dbURL, wasmCache, key string, actor engine.Actor, stdout io.Writer, log *slog.Logger) error {
	// Each store call of a tool call waits for the database at most as
	// long as gate serve's default (store.WithTimeout), as on the HTTP door.
	ctx = store.WithTimeout(ctx, store.DefaultTimeout)
	st, _, err := openStore(ctx, data, dbURL, openExisting) // never creates a gate
	if err != nil {
		return err
	}
	defer st.Close()
	if key != "" {
		if actor, err = auth.Authenticate(ctx, st, key); err != nil {
			return err
		}
	} else {
		switch actor.Role {
		case engine.RoleAgent:
			// As for a key's principal: a name with '/' (a workflow's
			// address), spaces or control characters is no principal.
			if !host.ValidPrincipal(actor.Principal) {
				return fmt.Errorf("--principal %q is not a principal name (letters, digits and _.:@- , at most 200, starting with a letter or digit)", actor.Principal)
			}
			if strings.EqualFold(actor.Principal, engine.GatePrincipal) {
				// As keys refuse it: the gate's own name issues its receipts.
				return fmt.Errorf("--principal %q is the gate's own name; choose another", actor.Principal)
			}
		case engine.RoleWorker:
			if !host.ValidWorkerID(actor.Principal) {
				return errors.New("--role worker needs a worker id ({type}.{instance}) as --principal")
			}
		default:
			return fmt.Errorf("--role must be agent or worker, got %q (admins connect with --key)", actor.Role)
		}
	}
	cfg := defaultServeConfig()
	cfg.Data, cfg.DB, cfg.WasmCacheDir = data, dbURL, wasmCache
	ecfg := engine.Config{Store: st, Logger: log}
	plugins, err := startPlugins(cfg, log)
	if err != nil {
		return fmt.Errorf("plugins: %w", err)
	}
	defer plugins.Close()
	ecfg.Plugins = plugins.Plugins
	eng, err := engine.New(ecfg)
	if err != nil {
		return err
	}
	eng.Start()
	defer eng.Close()
	srv, err := mcpapi.New(mcpapi.Config{Engine: eng, Logger: log, Version: buildVersion()})
	if err != nil {
		return err
	}
	defer srv.Close()
	log.Info("serving MCP on stdio", "tenant", actor.Tenant, "principal", actor.Principal, "role", actor.Role, "store", st.Driver())
	if key != "" {
		// The key is read again while the session lasts: a revoked key's
		// requests are refused from then on.
		return srv.ServeStdioKey(ctx, key, os.Stdin, stdout)
	}
	return srv.ServeStdio(ctx, actor, os.Stdin, stdout)
}

// mcpBridge forwards newline-delimited JSON-RPC messages from in to the
// streamable HTTP endpoint of a running gate, with the key as bearer token,
// and writes every answer (JSON or server-sent events) to out, one message a
// line. A request the server refuses at the HTTP level (401, 403, …) is
// answered with a JSON-RPC error so the client does not wait forever.
func mcpBridge(ctx context.Context, base, key string, in io.Reader, out io.Writer, log *slog.Logger) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q: want http://host:port", base)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = mcpapi.Path
	}
	b := &bridge{url: u.String(), key: key, out: out, log: log, hc: &http.Client{Timeout: 5 * time.Minute}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var wg sync.WaitGroup
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		msg := append([]byte(nil), line...)
		// A line that is no JSON-RPC message at all is answered here, as
		// JSON-RPC has it (id null), not sent to the gate and lost in the
		// log: a client waiting on stdout hears why.
		if !json.Valid(msg) {
			b.parseFail(-32700, "Parse error: the line is not valid JSON")
			continue
		}
		var batch []json.RawMessage
		if msg[0] != '{' && msg[0] != '[' || msg[0] == '[' && (json.Unmarshal(msg, &batch) != nil || len(batch) == 0) {
			b.parseFail(-32600, "Invalid Request: a message is a JSON object (or a non-empty array of them)")
			continue
		}
		var head struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.Unmarshal(msg, &head)
		if head.Method == "initialize" {
			b.forward(ctx, msg, head.ID) // the session id must be known before anything else goes
			if b.sessionID() != "" {
				// The stream's context is the bridge's before the
				// goroutine runs: an input that ends at once (stop)
				// ends it too, instead of leaving it open forever.
				lctx := b.listenContext(ctx)
				wg.Add(1)
				go func() {
					defer wg.Done()
					b.listen(lctx)
				}()
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.forward(ctx, msg, head.ID)
		}()
	}
	b.stop()
	wg.Wait()
	return sc.Err()
}

type bridge struct {
	url, key string
	hc       *http.Client
	log      *slog.Logger
	mu       sync.Mutex // guards session, version, listening and writes to out
	session  string
	version  string // the protocol version initialize agreed on
	out      io.Writer
	cancel   context.CancelFunc // ends the event stream
	stopped  bool               // the input ended: no stream opens
	// init is the client's initialize, sent again to open a new session
	// when the gate no longer knows the bridge's (it restarted, or the
	// session ended): the gate answers such a session 404.
	init     []byte
	reopenMu sync.Mutex // one reopen at a time
}

func (b *bridge) sessionID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.session
}

func (b *bridge) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	if b.cancel != nil {
		b.cancel()
	}
}

// listenContext is the context of a new event stream: it ends with ctx,
// with stop (already done when the input has ended), and when a later
// initialize opens another stream (the session changed).
func (b *bridge) listenContext(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancel != nil {
		b.cancel()
	}
	b.cancel = cancel
	if b.stopped {
		cancel()
	}
	return ctx
}

// listen holds the session's event stream (GET) open and writes what the
// gate sends on it (task status, resource and tool-list notifications) to
// out, reconnecting after a pause until the input ends or ctx is done.
func (b *bridge) listen(ctx context.Context) {
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url, nil)
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+b.key)
		req.Header.Set("Accept", "text/event-stream")
		b.mu.Lock()
		sid := b.session
		req.Header.Set("Mcp-Session-Id", sid)
		if b.version != "" {
			req.Header.Set("Mcp-Protocol-Version", b.version)
		}
		b.mu.Unlock()
		resp, err := (&http.Client{}).Do(req) // no timeout: the stream stays open
		if err == nil {
			switch resp.StatusCode {
			case http.StatusOK:
				b.readEvents(resp.Body)
			case http.StatusMethodNotAllowed:
				resp.Body.Close()
				return // the server offers no stream
			case http.StatusNotFound:
				// A new session, then the usual pause before the
				// stream is asked again: a gate that keeps answering
				// 404 (another host) is not asked in a tight loop.
				b.reopen(ctx, sid)
			}
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (b *bridge) write(msg []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var buf bytes.Buffer
	if err := json.Compact(&buf, msg); err != nil {
		b.log.Warn("dropping a malformed message from the server", "err", err)
		return
	}
	buf.WriteByte('\n')
	_, _ = b.out.Write(buf.Bytes())
}

// fail answers request id (if it is a request) with a JSON-RPC error.
// parseFail answers a line that is no request with JSON-RPC error code
// and id null.
func (b *bridge) parseFail(code int, msg string) {
	b.log.Warn("mcp bridge", "err", msg)
	e, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": code, "message": msg}})
	b.write(e)
}

func (b *bridge) fail(id json.RawMessage, msg string) {
	b.log.Warn("mcp bridge", "err", msg)
	if len(id) == 0 || string(id) == "null" {
		return
	}
	e, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32000, "message": msg}})
	b.write(e)
}

func (b *bridge) forward(ctx context.Context, msg []byte, id json.RawMessage) {
	resp, sent, err := b.post(ctx, msg)
	if err == nil && resp.StatusCode == http.StatusNotFound && sent != "" && b.reopen(ctx, sent) {
		// The gate no longer knows the session (the transport spec: a
		// 404 means start a new one): sent again on the new session.
		resp.Body.Close()
		resp, _, err = b.post(ctx, msg)
	}
	if err != nil {
		b.fail(id, err.Error())
		return
	}
	defer resp.Body.Close()
	if v := protocolVersion(msg); v != "" {
		b.mu.Lock()
		b.version = v
		if resp.StatusCode == http.StatusOK {
			b.init = msg
		}
		b.mu.Unlock()
	}
	if resp.StatusCode >= 300 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		b.fail(id, fmt.Sprintf("the gate answered HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body))))
		return
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b.readEvents(resp.Body)
		return
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.fail(id, err.Error())
		return
	}
	if len(bytes.TrimSpace(body)) > 0 {
		b.write(body)
	}
}

// post sends msg on the bridge's session and returns the answer and the
// session id it was sent on; a session id in the answer (initialize's)
// becomes the bridge's session.
func (b *bridge) post(ctx context.Context, msg []byte) (*http.Response, string, error) {
	b.mu.Lock()
	sid := b.session
	b.mu.Unlock()
	return b.postOn(ctx, msg, sid)
}

// postOn is post on session sid ("": none, as an initialize is sent).
func (b *bridge) postOn(ctx context.Context, msg []byte, sid string) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url, bytes.NewReader(msg))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+b.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	for k, v := range modernHeaders(msg) {
		req.Header.Set(k, v)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return nil, sid, errors.New("the gate is not reachable: " + err.Error())
	}
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
		b.mu.Lock()
		b.session = s
		b.mu.Unlock()
	}
	return resp, sid, nil
}

// reopen opens a new session in place of stale, which the gate answered
// 404, by sending the client's initialize (and notifications/initialized)
// again; the client's tasks are its principal's, so it finds them all in
// the new session. It reports whether the bridge has a new session.
func (b *bridge) reopen(ctx context.Context, stale string) bool {
	b.reopenMu.Lock()
	defer b.reopenMu.Unlock()
	b.mu.Lock()
	cur, init := b.session, b.init
	b.mu.Unlock()
	if cur != stale {
		return cur != "" // another request opened a new one already
	}
	if init == nil {
		return false
	}
	// The initialize goes on no session; b.session keeps the stale id
	// until the answer names the new one (postOn sets it), so a request
	// sent meanwhile is answered 404 and waits here for the new session,
	// rather than going out on none.
	resp, _, err := b.postOn(ctx, init, "")
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // the client had its answer the first time
		resp.Body.Close()
	}
	if err != nil || resp.StatusCode != http.StatusOK || b.sessionID() == stale {
		return false
	}
	if resp, _, err := b.post(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	b.log.Info("the gate no longer knew the MCP session (a restart?); opened a new one")
	return true
}

// readEvents writes the data of each server-sent event as one message.
func (b *bridge) readEvents(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 {
				b.write(data.Bytes())
				data.Reset()
			}
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if data.Len() > 0 {
		b.write(data.Bytes())
	}
}

// modernHeaders are the HTTP headers a message of protocol 2026-07-28 or
// later must travel with (no session, no handshake: each request names its
// version in params._meta, and the transport refuses a POST whose
// Mcp-Protocol-Version, Mcp-Method or Mcp-Name does not match its body);
// nil for a message of an earlier version, whose session carries it.
func modernHeaders(msg []byte) map[string]string {
	var m struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method == "" || len(m.Params) == 0 {
		return nil
	}
	var p struct {
		Meta *mcp.Meta `json:"_meta"`
	}
	if json.Unmarshal(m.Params, &p) != nil || p.Meta == nil {
		return nil
	}
	v := p.Meta.ProtocolVersion()
	if !mcp.IsModernProtocol(v) {
		return nil
	}
	h := mcp.StandardHeaders(v, mcp.MCPMethod(m.Method), m.Params)
	if h == nil {
		h = map[string]string{}
	}
	h[mcp.HeaderProtocolVersion] = v
	return h
}

// protocolVersion is the version an initialize request asks for (the server
// answers with it or the version it supports; either is accepted on GET).
func protocolVersion(msg []byte) string {
	var m struct {
		Method string `json:"method"`
		Params struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method != "initialize" {
		return ""
	}
	return m.Params.ProtocolVersion
}
