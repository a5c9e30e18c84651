package ui_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/sqlite/sqlitetest"
	"github.com/asyncgate/asyncgate/host/ui"
)

// bundle is an in-process gate over a real SQLite file, served over real HTTP.
type bundle struct {
	st     *sqlite.Store
	eng    *engine.Engine
	ts     *httptest.Server
	admin  string // default tenant: an operator
	acme   string // admin of tenant acme
	agent  string
	worker string
}

func setup(t testing.TB) *bundle {
	t.Helper()
	st, err := sqlite.Open(sqlitetest.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	srv, stop := serveGate(t, eng, -1)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		stop()
		_ = srv.Shutdown(context.Background())
		eng.Close()
		st.Close()
	})
	b := &bundle{st: st, eng: eng, ts: ts}
	ctx := context.Background()
	for _, k := range []struct {
		dst                *string
		role, name, tenant string
	}{{&b.admin, engine.RoleAdmin, "root", ""}, {&b.acme, engine.RoleAdmin, "acme-ops", "acme"},
		{&b.agent, engine.RoleAgent, "agent.a", ""}, {&b.worker, engine.RoleWorker, "echo.w1", ""}} {
		ck, err := auth.CreateKey(ctx, st, auth.NewKeyRequest{Role: k.role, Principal: k.name, Tenant: k.tenant})
		if err != nil {
			t.Fatal(err)
		}
		*k.dst = ck.APIKey
	}
	for _, tenant := range []string{"default", "acme"} {
		tt := host.NewTaskType("echo")
		tt.Tenant = tenant
		if _, err := eng.PutTaskType(ctx, tt); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// serveGate builds the gate's HTTP door with the dashboard mounted, as gate
// serve composes them: one key resolver (caching for authTTL) shared by
// both. stop ends the dashboard's sampler.
func serveGate(t testing.TB, eng *engine.Engine, authTTL time.Duration) (srv *httpapi.Server, stop func()) {
	t.Helper()
	authn := auth.NewAuthenticator(eng.Store(), authTTL)
	ctx, stop := context.WithCancel(context.Background())
	dash, err := ui.New(ui.Config{Engine: eng, Authenticate: authn.Authenticate, Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	srv, err = httpapi.New(httpapi.Config{Engine: eng, Authenticator: authn},
		httpapi.WithRoutes(func(e *echo.Echo, _ echo.MiddlewareFunc) { dash.Mount(e) }))
	if err != nil {
		t.Fatal(err)
	}
	return srv, stop
}

// api calls the JSON API with a bearer key.
func (b *bundle) api(t testing.TB, method, path, key string, body any) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = strings.NewReader(string(j))
	}
	req, _ := http.NewRequest(method, b.ts.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	if res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %v", method, path, res.StatusCode, out)
	}
	return out
}

// deadLetter queues a task and fails it fatally: a dead letter.
func (b *bundle) deadLetter(t testing.TB) string {
	t.Helper()
	id := b.api(t, "POST", "/v1/tasks", b.agent, map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}})["task_id"].(string)
	ls := b.api(t, "POST", "/v1/leases", b.worker, map[string]any{"worker_id": "echo.w1", "max_tasks": 1})["leases"].([]any)
	if len(ls) != 1 {
		t.Fatalf("leased %d tasks, want 1", len(ls))
	}
	lease := ls[0].(map[string]any)["lease_id"].(string)
	b.api(t, "POST", "/v1/leases/"+lease+"/fail", b.worker, map[string]any{"worker_id": "echo.w1", "error_message": "boom", "retryable": false})
	return id
}

// browser is an HTTP client with a cookie jar that does not follow redirects.
type browser struct {
	t  testing.TB
	c  *http.Client
	ts *httptest.Server
}

func newBrowser(t testing.TB, ts *httptest.Server) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, ts: ts, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (br *browser) get(path string) (*http.Response, string) {
	br.t.Helper()
	res, err := br.c.Get(br.ts.URL + path)
	if err != nil {
		br.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func (br *browser) post(path string, form url.Values) (*http.Response, string) {
	br.t.Helper()
	res, err := br.c.PostForm(br.ts.URL+path, form)
	if err != nil {
		br.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t testing.TB, page string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

// signIn signs br in with key and returns the session's CSRF token.
func (br *browser) signIn(key string) string {
	br.t.Helper()
	_, page := br.get("/ui/login")
	res, body := br.post("/ui/login", url.Values{"csrf": {csrfOf(br.t, page)}, "key": {key}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/" {
		br.t.Fatalf("sign-in answered %d %q:\n%s", res.StatusCode, res.Header.Get("Location"), body)
	}
	_, page = br.get("/ui/")
	return csrfOf(br.t, page)
}

func TestSignInMakesAStrictHttpOnlySessionAndNeverShowsTheKey(t *testing.T) {
	b := setup(t)
	br := newBrowser(t, b.ts)
	res, _ := br.get("/ui/")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/login" {
		t.Fatalf("unsigned GET /ui/ answered %d to %q, want 303 to /ui/login", res.StatusCode, res.Header.Get("Location"))
	}
	_, page := br.get("/ui/login")
	res, body := br.post("/ui/login", url.Values{"csrf": {csrfOf(t, page)}, "key": {b.agent}})
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "needs an admin key") {
		t.Fatalf("an agent key signed in: %d\n%s", res.StatusCode, body)
	}
	res, _ = br.post("/ui/login", url.Values{"csrf": {csrfOf(t, body)}, "key": {"agw_nope"}})
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a bad key answered %d, want 401", res.StatusCode)
	}
	_, page = br.get("/ui/login")
	res, _ = br.post("/ui/login", url.Values{"csrf": {csrfOf(t, page)}, "key": {b.admin}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("admin sign-in answered %d", res.StatusCode)
	}
	var sess *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "asyncgate_session" {
			sess = c
		}
	}
	if sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Path != "/ui" {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui", sess)
	}
	if strings.Contains(sess.Value, b.admin) || strings.Contains(res.Header.Get("Location"), "agw_") {
		t.Fatal("the key leaks into the cookie or the redirect")
	}
	for _, p := range []string{"/ui/", "/ui/tasks", "/ui/dead-letters", "/ui/schedules", "/ui/workers", "/ui/plugins", "/ui/obligations", "/ui/ledger"} {
		res, body := br.get(p)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", p, res.StatusCode, body)
		}
		if strings.Contains(body, b.admin) || strings.Contains(body, "agw_") {
			t.Fatalf("GET %s shows a key", p)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Fatalf("GET %s: CSP %q", p, csp)
		}
	}
	// Signing out ends the session on the server, not only in the browser.
	_, page = br.get("/ui/")
	br.post("/ui/logout", url.Values{"csrf": {csrfOf(t, page)}})
	old := &browser{t: t, ts: b.ts, c: &http.Client{CheckRedirect: br.c.CheckRedirect}}
	req, _ := http.NewRequest("GET", b.ts.URL+"/ui/", nil)
	req.AddCookie(sess)
	res, err := old.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("a signed-out session still opens /ui/: %d", res.StatusCode)
	}
}

func TestFormPostsWithoutTheSessionCSRFTokenAreRefused(t *testing.T) {
	b := setup(t)
	id := b.deadLetter(t)
	br := newBrowser(t, b.ts)
	tok := br.signIn(b.admin)
	for name, form := range map[string]url.Values{
		"no token":    {"id": {id}},
		"wrong token": {"id": {id}, "csrf": {tok + "x"}},
	} {
		res, body := br.post("/ui/dead-letters/redrive", form)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Fatalf("%s: %d\n%s", name, res.StatusCode, body)
		}
	}
	if st := b.api(t, "GET", "/v1/tasks/"+id, b.admin, nil)["status"]; st != "dead_letter" {
		t.Fatalf("a refused post changed the task: %v", st)
	}
	// The token counts only in the form's body: one in the URL's query
	// (where logs and histories keep it) is no token.
	res, body := br.post("/ui/dead-letters/redrive?csrf="+url.QueryEscape(tok), url.Values{"id": {id}})
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Fatalf("the token in the query: %d\n%s", res.StatusCode, body)
	}
	// The sign-in form is protected too (login CSRF).
	res, _ = newBrowser(t, b.ts).post("/ui/login", url.Values{"key": {b.admin}})
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-in without its form token answered %d, want 403", res.StatusCode)
	}
	// Nor does a key in the query sign in.
	anon := newBrowser(t, b.ts)
	_, page := anon.get("/ui/login")
	if res, _ = anon.post("/ui/login?key="+url.QueryEscape(b.admin), url.Values{"csrf": {csrfOf(t, page)}}); res.StatusCode == http.StatusSeeOther {
		t.Fatal("a key in the sign-in's query signed in")
	}
	res, _ = br.post("/ui/dead-letters/redrive", url.Values{"id": {id}, "csrf": {tok}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("redrive with the token answered %d", res.StatusCode)
	}
	if st := b.api(t, "GET", "/v1/tasks/"+id, b.admin, nil)["status"]; st != "queued" {
		t.Fatalf("after redrive the task is %v, want queued", st)
	}
}

func TestRedriveManyAndTheTaskPageChecksReceiptHashes(t *testing.T) {
	b := setup(t)
	ids := []string{b.deadLetter(t), b.deadLetter(t), b.deadLetter(t)}
	br := newBrowser(t, b.ts)
	tok := br.signIn(b.admin)
	_, page := br.get("/ui/dead-letters")
	for _, id := range ids {
		if !strings.Contains(page, id) {
			t.Fatalf("dead letter %s not listed", id)
		}
	}
	res, _ := br.post("/ui/dead-letters/redrive", url.Values{"csrf": {tok}, "ids": {ids[0], ids[1]}, "selected": {"1"}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("redrive many: %d", res.StatusCode)
	}
	_, page = br.get("/ui/dead-letters")
	if !strings.Contains(page, "Redriven: 2 tasks") || strings.Contains(page, ids[0]) || !strings.Contains(page, ids[2]) {
		t.Fatalf("after redriving two of three:\n%s", page)
	}
	_, page = br.get("/ui/")
	for _, want := range []string{`/ui/tasks?type=echo&amp;state=queued">2<`, `/ui/tasks?type=echo&amp;state=dead_letter">1<`, `id="count-queued">2<`} {
		if !strings.Contains(page, want) {
			t.Fatalf("the queues page lacks %s:\n%s", want, page)
		}
	}
	// A delayed task is counted as scheduled, not queued; a paused type
	// says so.
	if code := b.api(t, "POST", "/v1/tasks", b.admin, map[string]any{"task_type": "echo", "params": map[string]any{}, "delay_seconds": 600}); code["task_id"] == nil {
		t.Fatalf("delayed enqueue: %v", code)
	}
	if r := b.api(t, "POST", "/v1/admin/task-types/echo/pause", b.admin, map[string]any{}); r["status"] != "paused" {
		t.Fatalf("pause: %v", r)
	}
	_, page = br.get("/ui/")
	for _, want := range []string{`/ui/tasks?type=echo&amp;state=scheduled">1<`, `id="count-queued">2<`, `id="count-scheduled">1<`, `class="paused"`} {
		if !strings.Contains(page, want) {
			t.Fatalf("the queues page lacks %s:\n%s", want, page)
		}
	}
	_, page = br.get("/ui/tasks/" + ids[0])
	if n := strings.Count(page, "hash-ok"); n < 3 || strings.Contains(page, "hash-bad") {
		t.Fatalf("task page: %d receipts with a verified hash (want ≥ 3: assigned, failed, assigned again), or a bad one:\n%s", n, page)
	}
	res, _ = br.get("/ui/tasks/task_nope")
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown task answered %d, want 404", res.StatusCode)
	}
}

func TestTenantAdminSeesOnlyItsTenant(t *testing.T) {
	b := setup(t)
	id := b.deadLetter(t) // in the default tenant
	br := newBrowser(t, b.ts)
	tok := br.signIn(b.acme)
	_, page := br.get("/ui/")
	if !strings.Contains(page, "tenant <b>acme</b>") || strings.Contains(page, `name="tenant"`) {
		t.Fatalf("a tenant admin's page does not show its tenant or offers a switch:\n%s", page)
	}
	if res, _ := br.get("/ui/tasks/" + id); res.StatusCode != http.StatusNotFound {
		t.Fatalf("another tenant's task answered %d, want 404", res.StatusCode)
	}
	if _, page := br.get("/ui/dead-letters"); strings.Contains(page, id) {
		t.Fatal("another tenant's dead letter is listed")
	}
	if res, _ := br.post("/ui/tenant", url.Values{"csrf": {tok}, "tenant": {"default"}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("a tenant admin switched tenants: %d", res.StatusCode)
	}
	if res, _ := br.post("/ui/dead-letters/redrive", url.Values{"csrf": {tok}, "id": {id}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("redrive post: %d", res.StatusCode)
	}
	if st := b.api(t, "GET", "/v1/tasks/"+id, b.admin, nil)["status"]; st != "dead_letter" {
		t.Fatalf("a tenant admin redrove another tenant's task: %v", st)
	}
	if res, _ := br.post("/ui/ledger/verify", url.Values{"csrf": {tok}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("a tenant admin started a whole-ledger verification: %d", res.StatusCode)
	}
	// An operator may switch to acme.
	op := newBrowser(t, b.ts)
	otok := op.signIn(b.admin)
	if res, _ := op.post("/ui/tenant", url.Values{"csrf": {otok}, "tenant": {"acme"}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("operator switch: %d", res.StatusCode)
	}
	if _, page := op.get("/ui/"); !strings.Contains(page, "Queues of tenant acme") {
		t.Fatal("the operator's switch did not take")
	}
}

func TestARevokedKeyEndsItsSessions(t *testing.T) {
	b := setup(t)
	br := newBrowser(t, b.ts)
	br.signIn(b.acme)
	keys := b.api(t, "GET", "/v1/admin/keys?tenant=acme", b.admin, nil)["keys"].([]any)
	b.api(t, "DELETE", "/v1/admin/keys/"+keys[0].(map[string]any)["key_id"].(string)+"?tenant=acme", b.admin, nil)
	if res, _ := br.get("/ui/"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("a session of a revoked key still opens pages: %d", res.StatusCode)
	}
}

func TestLedgerVerificationRunsInTheBackground(t *testing.T) {
	b := setup(t)
	b.deadLetter(t)
	br := newBrowser(t, b.ts)
	tok := br.signIn(b.admin)
	if res, _ := br.post("/ui/ledger/verify", url.Values{"csrf": {tok}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("verify: %d", res.StatusCode)
	}
	waitFor(t, func() bool {
		_, page := br.get("/ui/fragments/ledger")
		return strings.Contains(page, "Verified OK")
	})
}

func TestFindingATaskKeepsWhatWasTypedOutOfURLs(t *testing.T) {
	b := setup(t)
	id := b.deadLetter(t)
	br := newBrowser(t, b.ts)
	tok := br.signIn(b.admin)
	res, _ := br.post("/ui/find-task", url.Values{"csrf": {tok}, "q": {id}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/tasks/"+id {
		t.Fatalf("find %s: %d to %q", id, res.StatusCode, res.Header.Get("Location"))
	}
	res, body := br.post("/ui/find-task", url.Values{"csrf": {tok}, "q": {b.agent}})
	if res.StatusCode != http.StatusBadRequest || res.Header.Get("Location") != "" || strings.Contains(body, b.agent) {
		t.Fatalf("a key typed into the task box: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	// The filters are GET forms: a key pasted into one is refused, not
	// shown back in the page, its form or its next-page links.
	for _, path := range []string{"/ui/tasks?recipient=", "/ui/tasks?type=", "/ui/obligations?principal="} {
		for _, typed := range []string{b.agent, "Bearer " + b.agent, `"` + strings.ToUpper(b.agent) + `"`} {
			res, body := br.get(path + url.QueryEscape(typed))
			if res.StatusCode != http.StatusBadRequest || strings.Contains(strings.ToLower(body), strings.ToLower(b.agent)) {
				t.Fatalf("a key typed into the filter %s as %q: %d, the page shows it: %v", path, typed, res.StatusCode, strings.Contains(body, b.agent))
			}
		}
	}
	// A principal's name that only starts like a key is still a filter.
	if res, _ := br.get("/ui/tasks?recipient=agw_tool"); res.StatusCode != http.StatusOK {
		t.Fatalf("the filter recipient=agw_tool: %d", res.StatusCode)
	}
}

// TestStaticServesFilesNotFolders: the dashboard's assets are served with
// their security headers; the folder that holds them is not listed.
func TestStaticServesFilesNotFolders(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/ui/static/app.css", 200},
		{"/ui/static/", 404},
		{"/ui/static/.", 404},
		{"/ui/static/./", 404},
		{"/ui/static/%2F", 404},
		{"/ui/static/.%2F", 404},
		{"/ui/static/%2e%2F", 404},
		{"/ui/static/nope.js", 404},
	} {
		res, err := http.Get(b.ts.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.status || strings.Contains(string(body), "app.js") && c.status != 200 {
			t.Errorf("GET %s: %d %q, want %d and no listing", c.path, res.StatusCode, body, c.status)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", c.path)
		}
	}
}
