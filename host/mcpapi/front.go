package mcpapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/jsonkeys"
)

// maxMessage bounds one JSON-RPC message on /mcp.
const maxMessage = 16 << 20

// headerSessionID is the streamable HTTP transport's session header.
const headerSessionID = "Mcp-Session-Id"

// serveHTTP is the streamable HTTP endpoint: it answers the methods served
// here (handle) and hands everything else to mcp-go. It also keeps track of
// sessions, so notifications reach them, and ends open event streams when the
// gate shuts down.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.AllowAnyHost && rebinding(r) {
		s.http.ServeHTTP(w, r) // mcp-go refuses it (403)
		return
	}
	a, ok := auth.ActorFromContext(r.Context())
	keyHash, _ := auth.KeyHashFromContext(r.Context())
	sid := r.Header.Get(headerSessionID)
	switch r.Method {
	case http.MethodGet:
		if mcp.IsModernProtocol(r.Header.Get(mcp.HeaderProtocolVersion)) {
			s.http.ServeHTTP(w, r) // mcp-go: 405, protocol 2026-07-28 has no GET stream
			return
		}
		if sid == "" {
			// A GET stream carries what the gate sends a session; without
			// a session nothing would ever be sent on it. The transport
			// spec: a server MUST answer a GET with an event stream or 405
			// (no stream offered). A 405 is what clients that probe for a
			// stream take as "none" and go on (the TypeScript SDK, Cursor).
			w.Header().Set("Allow", "GET, POST, DELETE")
			writeRPC(w, http.StatusMethodNotAllowed, rpcFail(nil, &rpcError{Code: rpcServerError,
				Message: "Method Not Allowed: GET " + Path + " opens the event stream of a session and needs its Mcp-Session-Id header: send initialize (POST) first and repeat the Mcp-Session-Id header it answers with"}))
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(s.drain, cancel) // a parked stream must not hold shutdown
		defer stop()
		// A stream opened with an access token ends at its exp, as a
		// response ends: the client opens it again with its fresh token,
		// or is refused (invalid_token) and signs in again.
		if exp, ok := auth.ExpiryFromContext(r.Context()); ok {
			expire := time.AfterFunc(time.Until(exp), cancel)
			defer expire.Stop()
		}
		if ok {
			sess, err := s.touchSession(sid, a, keyHash)
			if err != nil {
				s.writeRefusedSession(w, r, nil, err)
				return
			}
			// A session dropped (its key revoked, or ended) ends its stream.
			stopGone := context.AfterFunc(sess.gone, cancel)
			defer stopGone()
			s.sessMu.Lock()
			sess.streams++
			s.sessMu.Unlock()
			defer func() {
				s.sessMu.Lock()
				sess.streams--
				s.sessMu.Unlock()
			}()
		}
		s.http.ServeHTTP(w, r.WithContext(ctx))
		return
	case http.MethodDelete:
		if sid != "" {
			// Only its own principal may end a session: another would
			// lock its owner out. An id the gate never issued, or one
			// already ended, is 404 too, as the transport spec has it.
			if !ok || !s.dropSessionOf(sid, a) {
				writeForeignSession(w, nil)
				return
			}
		}
		s.http.ServeHTTP(w, r)
		return
	case http.MethodPost:
	default:
		// The transport has POST, GET and DELETE; any other method is a
		// JSON-RPC answer too, not the router's plain-text 404.
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeRPC(w, http.StatusMethodNotAllowed, rpcFail(nil, &rpcError{Code: rpcInvalidRequest,
			Message: "method " + clipMethod(r.Method) + " is not allowed on " + Path + ": the transport has POST, GET and DELETE"}))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMessage))
	if err != nil {
		writeRPC(w, http.StatusRequestEntityTooLarge, rpcFail(nil, &rpcError{Code: rpcInvalidRequest, Message: "the message is larger than 16 MiB"}))
		return
	}
	// A lone surrogate escape reads as U+FFFD in a decoded field; in a raw
	// value (a task's params) it would be kept and handed back unreadable.
	body = jsonkeys.FixLoneSurrogates(body)
	var head rpcMessage
	herr := json.Unmarshal(body, &head)
	if msg, to := refuseKeys(body, herr, head); msg != nil {
		status := http.StatusOK // a JSON-RPC error answers the request
		if to != toRequest {
			status = http.StatusBadRequest
		}
		writeRPC(w, status, msg)
		return
	}
	// Protocol 2026-07-28 has no sessions: each request names its version.
	modern := eraOf(r.Header, body).modern
	// The transport spec: a server that requires a session ID answers a
	// request without one (other than initialize) with 400 Bad Request.
	// mcp-go answers 404 in plain text, which clients read as "session
	// expired"; answer JSON-RPC instead.
	if sid == "" && !modern && head.Method != "" && head.Method != "initialize" {
		writeRPC(w, http.StatusBadRequest, rpcFail(head.ID, &rpcError{Code: rpcServerError,
			Message: "Bad Request: Mcp-Session-Id header is required: send initialize first and repeat the Mcp-Session-Id header it answers with on every later request"}))
		return
	}
	// A request mcp-go refuses before serving it (its content type, its
	// protocol version headers) goes to mcp-go, which answers the refusal,
	// however the gate would have answered it (checks.go).
	refused := s.transportRefuses(r, body, head.Method)
	if ok && !modern && head.Method == "initialize" && !refused {
		// The session mcp-go opens is bound to the caller before its id
		// leaves the gate (its Mcp-Session-Id header is ignored).
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		bw := &bindWriter{ResponseWriter: w, bind: func(id string) {
			s.openSession(id, a, keyHash, s.httpSender(id))
		}}
		s.http.ServeHTTP(bw, r)
		if bw.bound {
			s.sessionStarted(a)
		}
		return
	}
	// Every other request on a session must name a live session the gate
	// issued to this principal: any other id is 404, as the transport spec
	// answers an unknown session, and mcp-go never sees (or registers) it.
	var sess *session
	if ok && sid != "" && !modern && !refused {
		var err error
		if sess, err = s.touchSession(sid, a, keyHash); err != nil {
			s.writeRefusedSession(w, r, head.ID, err)
			return
		}
	}
	if ok && head.Method != "" && (sid != "" || modern) && !refused {
		// A modern request: a session of its own, never notified. Its
		// Mcp-Session-Id header, if any, is ignored, as mcp-go ignores it.
		if modern {
			sess = &session{actor: a, keyHash: keyHash}
		}
		if out, handled := s.handle(r.Context(), sess, body); handled {
			status := http.StatusOK
			if modern {
				status = modernStatus(out) // as mcp-go answers 2026-07-28
			}
			writeRPC(w, status, out)
			return
		}
		r = r.WithContext(withSession(r.Context(), sess))
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	s.http.ServeHTTP(w, r)
}

// bindWriter passes an initialize answer on, calling bind with the session
// id mcp-go issued before its header is written.
type bindWriter struct {
	http.ResponseWriter
	bind  func(id string)
	wrote bool
	bound bool
}

func (b *bindWriter) WriteHeader(status int) {
	if !b.wrote {
		b.wrote = true
		if id := b.Header().Get(headerSessionID); id != "" && status < 300 {
			b.bind(id)
			b.bound = true
		}
	}
	b.ResponseWriter.WriteHeader(status)
}

func (b *bindWriter) Write(p []byte) (int, error) {
	if !b.wrote {
		b.WriteHeader(http.StatusOK)
	}
	return b.ResponseWriter.Write(p)
}

func (b *bindWriter) Flush() {
	if !b.wrote {
		b.WriteHeader(http.StatusOK)
	}
	if f, ok := b.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (b *bindWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// httpSender sends a notification to an HTTP session's open event stream
// (through mcp-go, which owns the streams).
func (s *Server) httpSender(sid string) func(string, map[string]any) error {
	return func(method string, params map[string]any) error {
		return s.mcp.SendNotificationToSpecificClient(sid, method, params)
	}
}

// writeRefusedSession answers r, a request touchSession refused: a revoked
// key is 401 (as the auth middleware answers it once its cache expires),
// with Config.Challenge's WWW-Authenticate; another key's session 404.
func (s *Server) writeRefusedSession(w http.ResponseWriter, r *http.Request, id json.RawMessage, err error) {
	if errors.Is(err, errKeyRevoked) {
		ch := `Bearer realm="asyncgate"`
		if s.cfg.Challenge != nil {
			if c := s.cfg.Challenge(r, host.Errorf(host.CodeUnauthorized, "the key this credential acts through was revoked")); c != "" {
				ch = c
			}
		}
		w.Header().Set("WWW-Authenticate", ch)
		writeRPC(w, http.StatusUnauthorized, rpcFail(id, revokedError()))
		return
	}
	writeForeignSession(w, id)
}

// writeForeignSession answers a request that names another principal's
// session, one that ended, or an id the gate never issued, as the transport
// spec answers an unknown session: 404, in words that do not tell which
// (another principal's session exists).
func writeForeignSession(w http.ResponseWriter, id json.RawMessage) {
	writeRPC(w, http.StatusNotFound, rpcFail(id, &rpcError{Code: -32001,
		Message: "Session not found: this Mcp-Session-Id is not a live session of your key; send initialize to start one"}))
}

// revokedError answers a request of a session whose key was revoked, on
// either transport.
func revokedError() *rpcError {
	return &rpcError{Code: rpcServerError, Message: "unauthorized: the API key is not valid or was revoked"}
}

func writeRPC(w http.ResponseWriter, status int, msg []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(msg)
}

// lockedWriter writes whole messages to w one at a time: mcp-go's stdio
// server and the methods answered here share stdout.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) message(msg []byte) {
	_, _ = l.Write(append(msg, '\n'))
}

// ServeStdio serves one MCP session on in and out as actor until ctx is done
// or in reaches EOF. Nothing else may write to out. The caller vouches for
// actor for as long as the session lasts; a session opened with an API key
// is served by ServeStdioKey.
func (s *Server) ServeStdio(ctx context.Context, actor engine.Actor, in io.Reader, out io.Writer) error {
	return s.serveStdio(ctx, actor, "", in, out)
}

// ServeStdioKey serves one MCP session on in and out as the principal of
// key, as ServeStdio does. The key is read again while the session lasts,
// as the streamable HTTP door reads a session's key (at most once per
// KeyCheckInterval): once it is revoked, every request is answered with the
// error the HTTP door answers a revoked key's session with, and nothing is
// notified; the session stays open until the client closes in, which is
// how a stdio client ends a session. An unknown or revoked key is an
// unauthorized error before anything is served.
func (s *Server) ServeStdioKey(ctx context.Context, key string, in io.Reader, out io.Writer) error {
	// As the HTTP door reads a key: with or without "Bearer ".
	actor, err := auth.Authenticate(ctx, s.eng.Store(), key)
	if err != nil {
		return err
	}
	return s.serveStdio(ctx, actor, auth.HashKey(auth.BearerKey(key)), in, out)
}

// serveStdio serves a stdio session as actor, who came with the key of
// hash keyHash (empty: no key to read again).
func (s *Server) serveStdio(ctx context.Context, actor engine.Actor, keyHash string, in io.Reader, out io.Writer) error {
	ctx = auth.WithActor(ctx, actor)
	lw := &lockedWriter{w: out}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	if !s.keyValid(keyHash) {
		return host.Errorf(host.CodeUnauthorized, "the API key is not valid or was revoked")
	}
	sess := s.openSession("stdio-"+hex.EncodeToString(rnd[:]), actor, keyHash, func(method string, params map[string]any) error {
		msg := map[string]any{"jsonrpc": "2.0", "method": method}
		if params != nil {
			msg["params"] = params
		}
		b, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		lw.message(b)
		return nil
	})
	s.sessionStarted(actor)
	defer s.dropSession(sess.id)

	st := server.NewStdioServer(s.mcp)
	st.SetErrorLogger(slog.NewLogLogger(s.log.Handler(), slog.LevelWarn))
	pr, pw := io.Pipe()
	listened := make(chan error, 1)
	ctx = withSession(ctx, sess) // the tools' calls end once the session is dropped
	go func() { listened <- st.Listen(ctx, pr, lw) }()

	var wg sync.WaitGroup
	defer wg.Wait()
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		rd := bufio.NewReaderSize(in, 64<<10)
		for {
			line, err := rd.ReadBytes('\n')
			line = jsonkeys.FixLoneSurrogates(line) // as the HTTP front does
			if len(bytes.TrimSpace(line)) > 0 {
				select {
				case lines <- line:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			pw.Close()
			<-listened
			return nil
		case err := <-readErr:
			wg.Wait() // a declined call still goes to mcp-go
			pw.Close()
			lerr := <-listened
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			if lerr == nil || errors.Is(lerr, context.Canceled) || errors.Is(lerr, io.EOF) {
				return nil
			}
			return lerr
		case line := <-lines:
			var head rpcMessage
			perr := json.Unmarshal(line, &head)
			if !s.keyValid(keyHash) {
				// As the HTTP door: the session ends (no more notifications)
				// and every request is refused; a notification is dropped.
				s.endSession(sess)
				switch {
				case perr != nil:
					lw.message(rpcFail(nil, revokedError()))
				case head.Method != "" && len(head.ID) > 0:
					lw.message(rpcFail(head.ID, revokedError()))
				}
				// A notification, or a response to a request of the
				// gate's, gets no answer: an error with a response's id
				// would read as the answer to the client's own request.
				continue
			}
			if msg, to := refuseKeys(line, perr, head); msg != nil {
				if to == toNobody {
					s.log.Warn("mcp: dropped a message that asks for no answer", "method", head.Method, "why", string(msg))
				} else {
					lw.message(msg)
				}
				continue
			}
			if perr == nil && head.Method != "" && len(head.ID) > 0 && handledHere(head.Method) {
				wg.Add(1)
				go func() { // tasks/result may wait: never hold the input
					defer wg.Done()
					if msg, ok := s.handle(ctx, sess, line); ok {
						lw.message(msg)
						return
					}
					_, _ = pw.Write(line)
				}()
				continue
			}
			if _, err := pw.Write(line); err != nil {
				return <-listened
			}
		}
	}
}

// Whom refuseKeys's answer is for.
const (
	toRequest = iota // the request of the message's id
	toUnknown        // a request whose id is unknown (a batch, a duplicated id): id null
	toNobody         // a notification or a response, which get no answer
)

// refuseKeys answers msg, one JSON-RPC message (or a batch) that decoded
// with err into head, when an object in it has a duplicate key
// (jsonkeys.CheckNamed). Readers disagree on which value counts:
// encoding/json, which mcp-go and the tools read with, keeps the last, other
// readers the first or both, and a task type's params are checked against
// its schema and stored as sent. (Keys equal but for case are two keys of a
// task's free-form params; a tool's arguments, which are decoded into a
// struct, must name its fields exactly: bind.) The answer is a JSON-RPC
// error naming the key, invalid params (-32602) when it is in params and
// invalid request (-32600) elsewhere. It is nil for a message without such
// keys, and for one that is not JSON (mcp-go answers that).
func refuseKeys(msg []byte, err error, head rpcMessage) (answer []byte, to int) {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return nil, 0
	}
	kerr := jsonkeys.CheckNamed(msg, nil, "the message")
	if kerr == nil {
		return nil, 0
	}
	id, to := head.ID, toRequest
	switch {
	case err != nil:
		id, to = nil, toUnknown
	case len(id) == 0 || head.Method == "":
		to = toNobody
	}
	code, detail := rpcInvalidRequest, kerr.Error()
	var ke *jsonkeys.Error
	if errors.As(kerr, &ke) {
		if ke.Where == "params" || strings.HasPrefix(ke.Where, "params.") || strings.HasPrefix(ke.Where, "params[") {
			code = rpcInvalidParams
		}
		if ke.Where == "the message" && ke.Key == "id" && to == toRequest {
			id, to = nil, toUnknown
		}
	}
	return rpcFail(id, &rpcError{Code: code, Message: host.CodeBadRequest + ": " + detail,
		Data: ErrorBody{Error: host.CodeBadRequest, Detail: detail}}), to
}

// handledHere says whether handle may answer method (it may still decline).
func handledHere(method string) bool {
	switch method {
	case "tools/call", "tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "resources/read", "resources/subscribe", "resources/unsubscribe":
		return true
	}
	return false
}

// rebinding says whether r arrived on a loopback address with a Host header
// that is not a loopback name: mcp-go's DNS-rebinding protection refuses it,
// and nothing here may answer it first.
func rebinding(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && local != nil && isLoopback(local.String()) && !isLoopback(r.Host)
}

func isLoopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		h = strings.Trim(addr, "[]")
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}

// clipMethod is an HTTP method as an answer quotes it: at most 16 bytes.
func clipMethod(m string) string {
	if len(m) > 16 {
		return m[:16] + "…"
	}
	return m
}
