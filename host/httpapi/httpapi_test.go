package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/sqlite/sqlitetest"
)

// testBundle is an in-process gate over a real SQLite store.
type testBundle struct {
	st     *sqlite.Store
	eng    *engine.Engine
	srv    *Server
	ts     *httptest.Server
	admin  string
	agent  string
	worker string
	logs   *bytes.Buffer
}

func setup(t testing.TB, opts ...Option) *testBundle {
	t.Helper()
	return setupClock(t, nil, opts...)
}

// setupClock is setup with the engine on clock (nil: the system's).
func setupClock(t testing.TB, clock host.Clock, opts ...Option) *testBundle {
	t.Helper()
	st, err := sqlite.Open(sqlitetest.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	m := NewMetrics()
	eng, err := engine.New(engine.Config{Store: st, Logger: log, OnEvent: m.OnEvent, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Engine: eng, Logger: log, Metrics: m, BodyLimit: 64 << 10}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); eng.Close(); st.Close() })
	b := &testBundle{st: st, eng: eng, srv: srv, ts: ts, logs: logs}
	ctx := context.Background()
	for _, k := range []struct {
		dst        *string
		role, name string
	}{{&b.admin, engine.RoleAdmin, "root"}, {&b.agent, engine.RoleAgent, "agent.a"}, {&b.worker, engine.RoleWorker, "echo.w1"}} {
		ck, err := auth.CreateKey(ctx, st, auth.NewKeyRequest{Role: k.role, Principal: k.name})
		if err != nil {
			t.Fatal(err)
		}
		*k.dst = ck.APIKey
	}
	if _, err := eng.PutTaskType(ctx, host.NewTaskType("echo")); err != nil {
		t.Fatal(err)
	}
	return b
}

// raw makes one call with key (none when empty) and returns the status and
// the body as sent.
func (b *testBundle) raw(t testing.TB, method, path, key, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, b.ts.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := b.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

// do makes one call and decodes its JSON answer.
func (b *testBundle) do(t testing.TB, method, path, key, body string) (int, map[string]any) {
	t.Helper()
	code, raw := b.raw(t, method, path, key, body)
	var m map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s %s: %d, not JSON: %q", method, path, code, raw)
		}
	}
	return code, m
}

func TestPanicBecomesLoggedInternalError(t *testing.T) {
	b := setup(t, WithRoutes(func(e *echo.Echo, authn echo.MiddlewareFunc) {
		e.GET("/boom", func(c echo.Context) error { panic("kaboom") }, authn)
		e.GET("/whoami", func(c echo.Context) error {
			a, ok := auth.ActorFromContext(c.Request().Context())
			if !ok {
				return host.Errorf(host.CodeInternal, "no actor")
			}
			return c.JSON(200, a)
		}, authn)
	}))
	code, body := b.do(t, "GET", "/boom", b.agent, "")
	if code != 500 || body["error"] != "internal_error" {
		t.Fatalf("panic answered %d %v", code, body)
	}
	if !strings.Contains(b.logs.String(), "kaboom") {
		t.Fatalf("panic not logged: %s", b.logs.String())
	}
	code, body = b.do(t, "GET", "/whoami", b.worker, "")
	if code != 200 || body["principal"] != "echo.w1" || body["role"] != "worker" || body["tenant"] != "default" {
		t.Fatalf("whoami %d %v", code, body)
	}
	if code, _ = b.do(t, "GET", "/whoami", "", ""); code != 401 {
		t.Fatalf("mounted route without a key: %d", code)
	}
}

func TestAuthenticateAndCache(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	a, err := auth.Authenticate(ctx, b.st, "Bearer "+b.agent)
	if err != nil || a.Principal != "agent.a" || a.Role != engine.RoleAgent {
		t.Fatalf("Authenticate: %+v %v", a, err)
	}
	for _, bad := range []string{"", "Bearer ", "agw_x", "nope", strings.Repeat("agw_", 100)} {
		if _, err := auth.Authenticate(ctx, b.st, bad); !host.IsCode(err, host.CodeUnauthorized) {
			t.Fatalf("Authenticate(%q) = %v", bad, err)
		}
	}
	// Revocation through the admin API takes effect at once despite the cache.
	ks, _ := auth.ListKeys(ctx, b.st)
	var id string
	for _, k := range ks {
		if k.Principal == "agent.a" {
			id = k.ID
		}
	}
	if code, _ := b.do(t, "GET", "/v1/tasks", b.agent, ""); code != 200 {
		t.Fatal("agent key")
	}
	if code, _ := b.do(t, "DELETE", "/v1/admin/keys/"+id, b.admin, ""); code != 200 {
		t.Fatal("revoke")
	}
	if code, body := b.do(t, "GET", "/v1/tasks", b.agent, ""); code != 401 || body["error"] != "unauthorized" {
		t.Fatalf("revoked key answered %d %v", code, body)
	}
}

func TestReadyzReportsStoreDown(t *testing.T) {
	b := setup(t)
	if code, _ := b.do(t, "GET", "/readyz", "", ""); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	b.srv.Authenticator().Forget()
	b.st.Close()
	code, body := b.do(t, "GET", "/readyz", "", "")
	if code != 503 || body["error"] != "database_unavailable" {
		t.Fatalf("readyz with a closed store: %d %v", code, body)
	}
	// Authenticated routes say the same, never 500.
	code, body = b.do(t, "GET", "/v1/tasks", b.agent, "")
	if code != 503 || body["error"] != "database_unavailable" {
		t.Fatalf("route with a closed store: %d %v", code, body)
	}
}

func TestBodyLimitWithoutContentLength(t *testing.T) {
	b := setup(t)
	// A chunked body has no Content-Length: the limit applies while reading.
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`{"task_type":"echo","params":{"x":"`))
		pw.Write(bytes.Repeat([]byte("a"), 70<<10))
		pw.Write([]byte(`"}}`))
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", b.ts.URL+"/v1/tasks", pr)
	req.Header.Set("Authorization", "Bearer "+b.agent)
	res, err := b.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	json.NewDecoder(res.Body).Decode(&m)
	if res.StatusCode != 413 || m["error"] != "too_large" {
		t.Fatalf("chunked oversize body: %d %v", res.StatusCode, m)
	}
}

// bodyTargets are the body types the handlers decode.
func bodyTargets() []func() any {
	return []func() any{
		func() any { return &LeaseBody{} }, func() any { return &LeaseCallBody{} }, func() any { return &HeartbeatBody{} },
		func() any { return &CompleteBody{} }, func() any { return &FailBody{} }, func() any { return &engine.EnqueueRequest{} },
		func() any { return &AppendReceiptBody{} }, func() any { return &auth.NewKeyRequest{} }, func() any { t := host.NewTaskType("x"); return &t },
		func() any { return &MarkReadBody{} }, func() any { return &StoreInMemoryBody{} }, func() any { return &OutboxRetryBody{} },
		func() any { return &engine.CreateScheduleRequest{} },
	}
}

func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"worker_id":"a.b","max_tasks":3}`, `{"result":{"a":1},"result_base64":"AA=="}`,
		`{"params":[1]}`, `{"body":{"x":1}}`, `{"body":[1]}`, `{"task_type":5}`, `{"a":1}{"b":2}`, `[]`, `{"metadata":`, `{"x":"\ud800"}`,
		`{"progress_percent":1e400}`, `{"retryable":"yes"}`, `{"parents":[null]}`, `{"not_before":"yesterday"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, mk := range bodyTargets() {
			for _, mode := range []decodeMode{strict, lenient} {
				err := decodeBody(b, mk(), mode)
				if err != nil && host.HTTPStatus(host.ErrorCode(err)) >= 500 {
					t.Fatalf("decodeBody(%q) into %T: a %d error: %v", b, mk(), host.HTTPStatus(host.ErrorCode(err)), err)
				}
			}
		}
		if _, err := payload(json.RawMessage(b), nil); err != nil && !host.IsCode(err, host.CodeBadRequest) {
			t.Fatalf("payload: %v", err)
		}
	})
}

// FuzzRoutes sends arbitrary bodies to every JSON route of a live in-process
// gate: the answer is always a 2xx/4xx JSON answer, never a 5xx or a crash.
func FuzzRoutes(f *testing.F) {
	b := setup(f)
	routes := []struct{ method, path string }{
		{"POST", "/v1/tasks"}, {"POST", "/v1/leases"}, {"POST", "/v1/leases/lease-X/accept"}, {"POST", "/v1/leases/lease-X/heartbeat"},
		{"POST", "/v1/leases/lease-X/complete"}, {"POST", "/v1/leases/lease-X/fail"}, {"POST", "/v1/leases/lease-X/release"}, {"POST", "/v1/leases/lease-X/snooze"},
		{"POST", "/lease"}, {"POST", "/worker/lease"}, {"POST", "/worker/complete"}, {"POST", "/workers/fail"}, {"POST", "/workers/heartbeat"},
		{"POST", "/v1/receipts"}, {"POST", "/v1/receipts/check-terminator"}, {"PUT", "/v1/admin/task-types/fz"}, {"POST", "/v1/admin/keys"},
		{"POST", "/v1/tasks/T-X/cancel"},
	}
	for _, s := range []string{`{}`, `{"task_type":"echo","params":{}}`, `{"worker_id":"echo.w1","wait_seconds":0}`, `{"task_id":"T","run_id":"lease-X"}`,
		`{"receipt_type":"task.progress","body":{}}`, `{"params_schema":{"type":"object"}}`, `{"role":"agent","principal":"p"}`, `{"result_base64":"QQ=="}`} {
		for i := range routes {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		r := routes[int(which)%len(routes)]
		key := b.admin
		if strings.Contains(r.path, "lease") || strings.HasPrefix(r.path, "/worker") {
			key = b.worker
		}
		req, _ := http.NewRequest(r.method, b.ts.URL+r.path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := b.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode >= 500 {
			t.Fatalf("%s %s with %q: %d %s", r.method, r.path, body, res.StatusCode, raw)
		}
		if res.StatusCode >= 400 && !json.Valid(raw) {
			t.Fatalf("%s %s: error answer is not JSON: %q", r.method, r.path, raw)
		}
	})
}

func TestEncodedBodyIsUnsupportedMediaType(t *testing.T) {
	b := setup(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"task_type":"echo","params":{}}`))
	zw.Close()
	for _, enc := range []string{"gzip", "deflate", "br", "identity, gzip"} {
		req, _ := http.NewRequest("POST", b.ts.URL+"/v1/tasks", bytes.NewReader(gz.Bytes()))
		req.Header.Set("Authorization", "Bearer "+b.agent)
		req.Header.Set("Content-Encoding", enc)
		res, err := b.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.NewDecoder(res.Body).Decode(&m)
		res.Body.Close()
		if res.StatusCode != 415 || m["error"] != "unsupported_media_type" || !strings.Contains(m["detail"].(string), "Content-Encoding") {
			t.Fatalf("Content-Encoding %s: %d %v", enc, res.StatusCode, m)
		}
	}
	// identity, and no body at all, are read as ever (the body below is
	// decoded: its task type is looked up).
	req, _ := http.NewRequest("POST", b.ts.URL+"/v1/tasks", strings.NewReader(`{"task_type":"nope","params":{}}`))
	req.Header.Set("Authorization", "Bearer "+b.agent)
	req.Header.Set("Content-Encoding", "identity")
	res, err := b.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 400 || !strings.Contains(string(raw), "unknown_task_type") {
		t.Fatalf("Content-Encoding identity: %d %s", res.StatusCode, raw)
	}
	req, _ = http.NewRequest("GET", b.ts.URL+"/v1/tasks", nil)
	req.Header.Set("Authorization", "Bearer "+b.agent)
	req.Header.Set("Content-Encoding", "gzip")
	res, err = b.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET without a body, Content-Encoding gzip: %d", res.StatusCode)
	}
}
