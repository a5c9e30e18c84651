package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// trustIssuer is an authorization server the test controls: its JWKS (an
// ES256 key and an RSA key published for RS256, each naming its alg) and
// the tokens it signs, with any header, alg and exp.
type trustIssuer struct {
	*httptest.Server
	iss string
	ec  *ecdsa.PrivateKey
	rsa *rsa.PrivateKey
}

const trustIss = "https://idp.trust.test"

func newTrustIssuer(t *testing.T) *trustIssuer {
	t.Helper()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &trustIssuer{iss: trustIss, ec: ec, rsa: rk}
	body, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &ec.PublicKey, KeyID: "ec1", Algorithm: "ES256", Use: "sig"},
		{Key: &rk.PublicKey, KeyID: "rsa1", Algorithm: "RS256", Use: "sig"},
	}})
	is.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(is.Close)
	return is
}

// token signs claims (iss, aud, iat added) with alg under kid; typ is the
// JOSE header's typ, none when empty. ES* algs sign with the EC key, the
// others with the RSA key.
func (is *trustIssuer) token(t *testing.T, resource string, alg jose.SignatureAlgorithm, kid, typ string, exp time.Time, claims map[string]any) string {
	t.Helper()
	var key any = is.rsa
	if strings.HasPrefix(string(alg), "ES") {
		key = is.ec
	}
	opts := (&jose.SignerOptions{}).WithHeader("kid", kid)
	if typ != "" {
		opts = opts.WithType(jose.ContentType(typ))
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	c := map[string]any{"iss": is.iss, "aud": resource, "iat": time.Now().Unix(), "exp": exp.Unix(), "scope": "asyncgate"}
	for k, v := range claims {
		c[k] = v
	}
	payload, _ := json.Marshal(c)
	sig, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := sig.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// rawToken is a compact JWS with header and claims as given, signed by
// sign over its signing input (nil: an empty signature).
func rawToken(header, claims map[string]any, sign func([]byte) []byte) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	input := enc(header) + "." + enc(claims)
	var sig []byte
	if sign != nil {
		sig = sign([]byte(input))
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// mcpRaw is one request on /mcp with bearer and session sid (none when
// empty), ended by ctx.
func mcpRaw(ctx context.Context, method, base, bearer, sid, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+"/mcp", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	return http.DefaultClient.Do(req)
}

// mcpOpen initializes a session with bearer and returns its id.
func mcpOpen(t *testing.T, base, bearer string) string {
	t.Helper()
	r := mcpInit(t, base, bearer)
	sid := r.Header.Get("Mcp-Session-Id")
	if r.Status != 200 || sid == "" {
		t.Fatalf("initialize: %d %q %s", r.Status, r.Header.Get("WWW-Authenticate"), r.Body)
	}
	res, err := mcpRaw(context.Background(), "POST", base, bearer, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return sid
}

// TestE2EOAuthTokenTrust runs `gate serve` with an issuer whose keys and
// tokens the test controls, on each store, and checks what a token
// carries beyond its signature: a session's event stream and a worker's
// long-poll end by the token's exp (the client then signs in again); a
// token whose JOSE typ says it is not an access token, or whose alg is
// not the one its key is published for, or that is unsigned or HMAC'ed
// with the public key, is refused invalid_token; every 401 of /mcp,
// including one for a token of a key the issuer does not publish and one
// for a session whose principal's key was revoked while its token was
// remembered, names the resource metadata; and a worker rule with
// principal_claim maps a token to the worker id its prefix begins.
// (tasks/result's wait is cut the same way.)
func TestE2EOAuthTokenTrust(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var extra []string
			if db == "postgres" {
				extra = []string{"--db", postgresSchema(t)}
			}
			testOAuthTokenTrust(t, extra)
		})
	}
}

func testOAuthTokenTrust(t *testing.T, extra []string) {
	is := newTrustIssuer(t)
	port := freePort(t)
	base := "http://127.0.0.1:" + port
	resource := base + "/mcp"
	metadata := `resource_metadata="` + base + `/.well-known/oauth-protected-resource/mcp"`
	conf := map[string]any{"oauth": map[string]any{
		"resource": resource,
		"scopes":   []string{"asyncgate"},
		"issuers": []any{map[string]any{
			"issuer":   is.iss,
			"jwks_uri": is.URL,
			"map": []any{
				map[string]any{"claim": "sub", "value": "svc", "principal": "agent.svc", "role": "agent"},
				map[string]any{"claim": "kind", "value": "worker", "principal_claim": "sub", "principal_prefix": "echo.idp:", "role": "worker"},
			},
		}},
	}}
	raw, _ := json.Marshal(conf)
	cfgPath := filepath.Join(t.TempDir(), "gate.json")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// A long auth cache: an accepted token is remembered until its exp, so
	// only the door's own checks stand between a remembered token and its
	// session once its key is revoked behind the gate's back.
	g := startGate(t, dir, append([]string{"--config", cfgPath, "--listen", "127.0.0.1:" + port, "--auth-cache", "1h"}, extra...)...)
	g.putType(t, "echo", map[string]any{}, "")
	svcKeyID, _ := g.newKeyID(t, "agent", "agent.svc", "default")
	g.newKeyID(t, "worker", "echo.idp:w1", "default")

	svc := map[string]any{"sub": "svc"}
	long := time.Now().Add(time.Hour)

	// Finding 2: typ and alg.
	t.Run("typ and alg", func(t *testing.T) {
		for _, typ := range []string{"", "at+jwt", "application/at+JWT", "JWT"} {
			if r := mcpInit(t, base, is.token(t, resource, jose.ES256, "ec1", typ, long, svc)); r.Status != 200 {
				t.Errorf("typ %q: %d %s", typ, r.Status, r.Body)
			}
		}
		if r := mcpInit(t, base, is.token(t, resource, jose.RS256, "rsa1", "at+jwt", long, svc)); r.Status != 200 {
			t.Errorf("RS256 with the RS256 key: %d %s", r.Status, r.Body)
		}
		pubDER, _ := x509.MarshalPKIXPublicKey(&is.rsa.PublicKey)
		pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
		claims := map[string]any{"iss": is.iss, "aud": resource, "sub": "svc", "scope": "asyncgate", "exp": long.Unix(), "iat": time.Now().Unix()}
		refused := []struct{ name, token, detail string }{
			{"typ dpop+jwt", is.token(t, resource, jose.ES256, "ec1", "dpop+jwt", long, svc), `typ "dpop+jwt"`},
			{"typ logout+jwt", is.token(t, resource, jose.ES256, "ec1", "logout+jwt", long, svc), `typ "logout+jwt"`},
			{"PS256 with the RS256 key", is.token(t, resource, jose.PS256, "rsa1", "at+jwt", long, svc), `alg "PS256"`},
			{"alg none", rawToken(map[string]any{"alg": "none", "kid": "rsa1", "typ": "at+jwt"}, claims, nil), "neither an API key"},
			{"HS256 keyed with the public key", rawToken(map[string]any{"alg": "HS256", "kid": "rsa1", "typ": "at+jwt"}, claims, func(in []byte) []byte {
				m := hmac.New(sha256.New, pubPEM)
				m.Write(in)
				return m.Sum(nil)
			}), "neither an API key"},
		}
		for _, c := range refused {
			r := mcpInit(t, base, c.token)
			ch := r.Header.Get("WWW-Authenticate")
			var e struct{ Error, Detail string }
			_ = json.Unmarshal(r.Body, &e)
			if r.Status != 401 || e.Error != "unauthorized" || !strings.Contains(e.Detail, c.detail) || !strings.Contains(ch, `error="invalid_token"`) || !strings.Contains(ch, metadata) {
				t.Errorf("%s: %d %q %s", c.name, r.Status, ch, r.Body)
			}
		}
	})

	// Finding 3: a token of a key the issuer does not publish (removed).
	t.Run("removed key", func(t *testing.T) {
		other, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		gone := &trustIssuer{iss: is.iss, ec: is.ec, rsa: other}
		r := mcpInit(t, base, gone.token(t, resource, jose.RS256, "rsa-removed", "at+jwt", long, svc))
		if ch := r.Header.Get("WWW-Authenticate"); r.Status != 401 || !strings.Contains(ch, metadata) || !strings.Contains(ch, `error="invalid_token"`) {
			t.Errorf("a token of a removed key: %d %q %s", r.Status, ch, r.Body)
		}
	})

	// Finding 1: a session's event stream ends by its token's exp.
	t.Run("stream ends at exp", func(t *testing.T) {
		exp := time.Now().Add(3 * time.Second).Truncate(time.Second)
		tok := is.token(t, resource, jose.ES256, "ec1", "at+jwt", exp, svc)
		sid := mcpOpen(t, base, tok)
		ctx, cancel := context.WithTimeout(context.Background(), time.Until(exp)+30*time.Second)
		defer cancel()
		res, err := mcpRaw(ctx, "GET", base, tok, sid, "")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("GET stream: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
		}
		ended := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, res.Body)
			ended <- err
		}()
		const slack = 2 * time.Second
		select {
		case err := <-ended:
			if err != nil {
				t.Errorf("the stream did not end cleanly: %v", err)
			}
			if late := time.Since(exp); late > slack {
				t.Errorf("the stream ended %s after the token's exp", late)
			}
		case <-time.After(time.Until(exp) + slack):
			t.Fatalf("the event stream of a token that expired at %s is still open %s after it", exp.Format(time.RFC3339), slack)
		}
		// Reopened with the expired token: 401, invalid_token, so the
		// client signs in again.
		res2, err := mcpRaw(context.Background(), "GET", base, tok, sid, "")
		if err != nil {
			t.Fatal(err)
		}
		res2.Body.Close()
		if ch := res2.Header.Get("WWW-Authenticate"); res2.StatusCode != 401 || !strings.Contains(ch, `error="invalid_token"`) || !strings.Contains(ch, metadata) {
			t.Errorf("GET with the expired token: %d %q", res2.StatusCode, ch)
		}
	})

	// Finding 1: a worker's long-poll ends by its token's exp, and the
	// worker rule's principal_claim names the worker (finding 4).
	t.Run("long-poll ends at exp", func(t *testing.T) {
		exp := time.Now().Add(3 * time.Second).Truncate(time.Second)
		tok := is.token(t, resource, jose.ES256, "ec1", "at+jwt", exp, map[string]any{"sub": "w1", "kind": "worker"})
		sid := mcpOpen(t, base, tok)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := mcpRaw(ctx, "POST", base, tok, sid,
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"worker_lease_task","arguments":{"task_types":["echo"],"wait_seconds":20}}}`)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if late := time.Since(exp); late > 2*time.Second {
			t.Errorf("the lease long-poll of a token that expired at %s answered %s after it", exp.Format(time.RFC3339), late.Round(100*time.Millisecond))
		}
		if res.StatusCode != 200 || !strings.Contains(string(body), "No tasks available") {
			t.Errorf("the long-poll: %d %s", res.StatusCode, body)
		}
	})

	// An agent's tasks/result wait ends by its token's exp too.
	t.Run("tasks/result ends at exp", func(t *testing.T) {
		exp := time.Now().Add(3 * time.Second).Truncate(time.Second)
		tok := is.token(t, resource, jose.ES256, "ec1", "at+jwt", exp, svc)
		sid := mcpOpen(t, base, tok)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		post := func(body string) map[string]any {
			t.Helper()
			res, err := mcpRaw(ctx, "POST", base, tok, sid, body)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var m map[string]any
			if err := json.NewDecoder(res.Body).Decode(&m); err != nil || res.StatusCode != 200 {
				t.Fatalf("%s: %d %v", body, res.StatusCode, err)
			}
			return m
		}
		q := post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"queue_task","arguments":{"task_type":"echo"}}}`)
		sc, _ := q["result"].(map[string]any)["structuredContent"].(map[string]any)
		id, _ := sc["task_id"].(string)
		if id == "" {
			t.Fatalf("queue_task: %v", q)
		}
		// No worker takes it: the wait runs until something ends it.
		r := post(`{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"` + id + `"}}`)
		if late := time.Since(exp); late > 2*time.Second {
			t.Errorf("the tasks/result wait of a token that expired at %s answered %s after it: %v", exp.Format(time.RFC3339), late.Round(100*time.Millisecond), r)
		}
		if r["error"] == nil {
			t.Errorf("tasks/result of a task still queued: %v, want an error saying to ask again", r)
		}
	})

	// Finding 3: the principal's key revoked behind the gate's back (the
	// offline CLI) while the gate remembers its token: the session's next
	// request is 401, naming the resource metadata.
	t.Run("revoked key on a session", func(t *testing.T) {
		tok := is.token(t, resource, jose.ES256, "ec1", "at+jwt", long, svc)
		sid := mcpOpen(t, base, tok)
		// Its open event stream ends too (the session's key check).
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		stream, err := mcpRaw(sctx, "GET", base, tok, sid, "")
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Body.Close()
		if stream.StatusCode != 200 {
			t.Fatalf("GET stream: %d", stream.StatusCode)
		}
		streamEnded := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, stream.Body)
			streamEnded <- err
		}()
		args := []string{"keys", "revoke", "--data", dir}
		for i, a := range extra {
			if a == "--db" {
				args = append(args, "--db", extra[i+1])
			}
		}
		if out, err := exec.Command(gateBin, append(args, svcKeyID)...).CombinedOutput(); err != nil {
			t.Fatalf("gate keys revoke: %v %s", err, out)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			res, err := mcpRaw(context.Background(), "POST", base, tok, sid, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == 401 {
				if ch := res.Header.Get("WWW-Authenticate"); !strings.Contains(ch, metadata) || !strings.Contains(ch, `error="invalid_token"`) {
					t.Errorf("401 on a session whose key was revoked: WWW-Authenticate %q (%s)", ch, body)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the session of a revoked key still answers 30 s later: %d %s", res.StatusCode, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case err := <-streamEnded:
			if err != nil {
				t.Errorf("the revoked key's event stream did not end cleanly: %v", err)
			}
		case <-sctx.Done():
			t.Fatal("the event stream of a session whose key was revoked is still open a minute later")
		}
	})
}
