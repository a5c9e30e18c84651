package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/oauth/oauthtest"
)

// TestE2EOAuth puts `gate serve` behind a real OpenID provider (issue 44)
// on each store: the protected resource metadata and the 401 challenge
// that names it, static keys still working, tokens obtained through client
// credentials and the authorization code flow with PKCE used by the
// official MCP TypeScript SDK's OAuth client support
// (testdata/mcp-client/oauth.mjs), the tasks they queue belonging to the
// mapped principals, and the refused tokens: wrong audience, expired,
// unknown issuer, missing scope, no mapping, a mapping to a tenant where
// the principal holds no key, a token on the HTTP API (not enabled), a
// token whose principal's key was revoked; and the dashboard's sign-in
// through the provider, ended by revoking the admin key it acts through.
func TestE2EOAuth(t *testing.T) {
	node, npm := needNode(t)
	clientDir := mcpClientDir(t, npm)
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var extra []string
			if db == "postgres" {
				extra = []string{"--db", postgresSchema(t)}
			}
			testOAuth(t, node, clientDir, extra)
		})
	}
}

func testOAuth(t *testing.T, node, clientDir string, extra []string) {
	port := freePort(t)
	base := "http://127.0.0.1:" + port
	resource := base + "/mcp"
	idp, err := oauthtest.Start(
		oauthtest.Client{ID: "svc", Secret: "s", Audience: []string{resource}},
		oauthtest.Client{ID: "cli", Audience: []string{resource}},
		oauthtest.Client{ID: "other-aud", Secret: "s", Audience: []string{"http://127.0.0.1:1/mcp"}},
		oauthtest.Client{ID: "old", Secret: "s", Audience: []string{resource}, Lifetime: -time.Minute},
		oauthtest.Client{ID: "stranger", Secret: "s", Audience: []string{resource}},
		oauthtest.Client{ID: "blue", Secret: "s", Audience: []string{resource}},
		oauthtest.Client{ID: "gate-ui", Secret: "s", Audience: []string{resource}, RedirectURIs: []string{base + "/ui/oauth/callback"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idp.Close)
	rogue, err := oauthtest.Start(oauthtest.Client{ID: "svc", Secret: "s", Audience: []string{resource}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rogue.Close)

	conf := map[string]any{"oauth": map[string]any{
		"resource": resource,
		"scopes":   []string{"asyncgate"},
		"issuers": []any{map[string]any{
			"issuer": idp.Issuer,
			"map": []any{
				map[string]any{"claim": "client_id", "value": "gate-ui", "principal": "admin.user", "role": "admin"},
				map[string]any{"claim": "sub", "value": "svc", "principal": "agent.svc", "role": "agent"},
				map[string]any{"claim": "sub", "value": oauthtest.UserSubject, "principal": "agent.user", "role": "agent"},
				map[string]any{"claim": "sub", "value": "blue", "principal": "agent.svc", "tenant": "blue", "role": "agent"},
				map[string]any{"claim": "client_id", "value": "other-aud", "principal": "agent.svc", "role": "agent"},
				map[string]any{"claim": "client_id", "value": "old", "principal": "agent.svc", "role": "agent"},
			},
		}},
		"dashboard": map[string]any{"issuer": idp.Issuer, "client_id": "gate-ui", "client_secret": "s"},
	}}
	raw, _ := json.Marshal(conf)
	cfgPath := filepath.Join(t.TempDir(), "gate.json")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGate(t, t.TempDir(), append([]string{"--config", cfgPath, "--listen", "127.0.0.1:" + port}, extra...)...)
	if g.URL != base {
		t.Fatalf("gate at %s, want %s", g.URL, base)
	}
	g.putType(t, "echo", map[string]any{}, "")
	svcKeyID, svcKey := g.newKeyID(t, "agent", "agent.svc", "default")
	_, userKey := g.newKeyID(t, "agent", "agent.user", "default")

	// The metadata, at the path-suffixed form and the root.
	for _, p := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		r := call(t, "GET", base+p, "", nil)
		want(t, r, 200, "")
		m := r.JSON(t)
		if m["resource"] != resource || m["authorization_servers"].([]any)[0] != idp.Issuer || m["scopes_supported"].([]any)[0] != "asyncgate" {
			t.Fatalf("%s: %s", p, r.Body)
		}
	}
	// No credentials: 401 naming the metadata.
	r := mcpInit(t, base, "")
	if ch := r.Header.Get("WWW-Authenticate"); r.Status != 401 ||
		!strings.Contains(ch, `resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`) || !strings.Contains(ch, `scope="asyncgate"`) {
		t.Fatalf("no credentials: %d %q %s", r.Status, ch, r.Body)
	}
	// A static key keeps working.
	if r := mcpInit(t, base, svcKey); r.Status != 200 {
		t.Fatalf("static key: %d %s", r.Status, r.Body)
	}

	ctx := context.Background()
	cc := func(p *oauthtest.Provider, id string, scopes ...string) string {
		t.Helper()
		tok, err := p.ClientCredentials(ctx, id, "s", scopes...)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := cc(idp, "svc", "asyncgate")
	if r := mcpInit(t, base, good); r.Status != 200 {
		t.Fatalf("client credentials token: %d %s", r.Status, r.Body)
	}
	refused := []struct {
		name, token string
		status      int
		code, oauth string
	}{
		{"wrong audience", cc(idp, "other-aud", "asyncgate"), 401, "unauthorized", "invalid_token"},
		{"expired", cc(idp, "old", "asyncgate"), 401, "unauthorized", "invalid_token"},
		{"unknown issuer", cc(rogue, "svc", "asyncgate"), 401, "unauthorized", "invalid_token"},
		{"missing scope", cc(idp, "svc", "openid"), 403, "insufficient_scope", "insufficient_scope"},
		{"no mapping", cc(idp, "stranger", "asyncgate"), 403, "token_not_mapped", "insufficient_scope"},
		{"another tenant's key", cc(idp, "blue", "asyncgate"), 401, "unauthorized", "invalid_token"},
	}
	for _, c := range refused {
		r := mcpInit(t, base, c.token)
		m := map[string]any{}
		_ = json.Unmarshal(r.Body, &m)
		if r.Status != c.status || m["error"] != c.code || !strings.Contains(r.Header.Get("WWW-Authenticate"), `error="`+c.oauth+`"`) {
			t.Errorf("%s: %d %q %s", c.name, r.Status, r.Header.Get("WWW-Authenticate"), r.Body)
		}
	}
	// Tokens are for /mcp unless http_api is set.
	want(t, call(t, "GET", base+"/v1/tasks", good, nil), 401, "unauthorized")

	// The official TypeScript SDK signs in with both flows.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, node, "oauth.mjs", base, idp.Issuer)
	cmd.Dir = clientDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Logf("oauth.mjs output:\n%s", stdout.String())
	if err != nil || !strings.Contains(stdout.String(), "OAUTH OK") {
		t.Fatalf("oauth.mjs: %v\n%s", err, stderr.String())
	}
	// Their tasks are the mapped principals': the principal's own key
	// finds them, and the gate's receipt names it.
	owners := map[string]string{"client_credentials": svcKey, "authorization_code": userKey}
	principals := map[string]string{"client_credentials": "agent.svc", "authorization_code": "agent.user"}
	seen := 0
	for _, line := range strings.Split(stdout.String(), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "task" {
			continue
		}
		seen++
		r := call(t, "GET", base+"/v1/tasks/"+f[2], owners[f[1]], nil)
		want(t, r, 200, "")
		if by := r.JSON(t)["created_by"]; by != principals[f[1]] {
			t.Errorf("%s: task created by %v, want %s", f[1], by, principals[f[1]])
		}
	}
	if seen != 2 {
		t.Fatalf("oauth.mjs reported %d tasks, want 2", seen)
	}

	// Revoking the principal's key refuses its tokens.
	want(t, call(t, "DELETE", base+"/v1/admin/keys/"+svcKeyID, g.Admin, nil), 200, "")
	if r := mcpInit(t, base, good); r.Status != 401 || !strings.Contains(string(r.Body), "no live agent key") {
		t.Fatalf("a revoked principal's token: %d %s", r.Status, r.Body)
	}

	// The dashboard: a person signs in at the provider; the session ends
	// when the admin key the token acts through is revoked.
	adminID, _ := g.newKeyID(t, "admin", "admin.user", "default")
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string) (*http.Response, string) {
		t.Helper()
		res, err := browser.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	if res, page := get(base + "/ui/login"); res.StatusCode != 200 || !strings.Contains(page, `id="oauth-signin"`) {
		t.Fatalf("login page: %d %s", res.StatusCode, page)
	}
	res, _ := get(base + "/ui/oauth/start")
	if res.StatusCode != http.StatusFound || !strings.HasPrefix(res.Header.Get("Location"), idp.Issuer) {
		t.Fatalf("start: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	back, err := oauthtest.SignIn(ctx, res.Header.Get("Location"), oauthtest.User, oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	if res, page := get(back.String()); res.StatusCode != 200 || !strings.Contains(page, "Signed in") {
		t.Fatalf("callback: %d %s", res.StatusCode, page)
	}
	// Signed in, the sign-in form's CSRF cookie is gone (as after a key
	// sign-in); only the session's stays.
	bu, _ := url.Parse(base + "/ui/")
	for _, ck := range jar.Cookies(bu) {
		if ck.Name == "asyncgate_login" {
			t.Fatalf("the sign-in form's cookie outlives the sign-in: %s", ck)
		}
	}
	if res, page := get(base + "/ui/"); res.StatusCode != 200 || !strings.Contains(page, "admin.user") {
		t.Fatalf("dashboard after sign-in: %d %.300s", res.StatusCode, page)
	}
	want(t, call(t, "DELETE", base+"/v1/admin/keys/"+adminID, g.Admin, nil), 200, "")
	if res, _ := get(base + "/ui/"); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/login" {
		t.Fatalf("dashboard after the key was revoked: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
}

// newKeyID creates a key through the admin API and returns its id and secret.
func (g *gateProc) newKeyID(t *testing.T, role, principal, tenant string) (id, key string) {
	t.Helper()
	r := call(t, "POST", g.URL+"/v1/admin/keys"+tenantQuery(tenant), g.Admin, map[string]string{"role": role, "principal": principal, "tenant": tenant})
	want(t, r, 201, "")
	m := r.JSON(t)
	return m["key_id"].(string), m["api_key"].(string)
}

// freePort returns a loopback port that was free a moment ago: the gate's
// resource identifier names its port before it starts.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// mcpInit posts an MCP initialize with bearer (none when empty).
func mcpInit(t *testing.T, base, bearer string) resp {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`
	req, err := http.NewRequest("POST", base+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{Status: res.StatusCode, Body: b, Header: res.Header}
}
