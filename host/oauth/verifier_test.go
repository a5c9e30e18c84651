package oauth_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/oauth"
	"github.com/asyncgate/asyncgate/host/oauth/oauthtest"
	"github.com/asyncgate/asyncgate/host/postgres"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
)

const resource = "http://gate.test:8080/mcp"

// stores opens a fresh store of each driver; PostgreSQL's is skipped
// (failed under CI) when no server answers.
func stores(t *testing.T) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"sqlite": func(t *testing.T) store.Store {
			st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
		"postgres": func(t *testing.T) store.Store {
			url := os.Getenv("ASYNCGATE_TEST_POSTGRES")
			if url == "" {
				url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("PostgreSQL at %s is unreachable (CI is set, so this fails): %v", url, err)
				}
				t.Skipf("PostgreSQL at %s is unreachable: %v", url, err)
			}
			conn.Close(ctx)
			var b [6]byte
			_, _ = rand.Read(b[:])
			schema := "ag_oauth_" + hex.EncodeToString(b[:])
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if c, err := pgx.Connect(ctx, url); err == nil {
					_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
					c.Close(ctx)
				}
			})
			st, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
}

func putKey(t *testing.T, st store.Store, tenant, principal, role string) store.Key {
	t.Helper()
	k := store.Key{ID: host.NewID(host.PrefixKey), Hash: hex.EncodeToString([]byte(principal + tenant + role + time.Now().String())),
		Prefix: "agw_xxxxxx", Role: role, Tenant: tenant, Principal: principal, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := st.Update(context.Background(), func(tx store.Tx) error { return tx.PutKey(context.Background(), k) }); err != nil {
		t.Fatal(err)
	}
	return k
}

// TestVerifierRealProvider verifies tokens a real OpenID provider issued
// through client credentials and the authorization code flow with PKCE,
// and refuses every kind of wrong token, on both stores (a token acts
// through its principal's live key).
func TestVerifierRealProvider(t *testing.T) {
	idp, err := oauthtest.Start(
		oauthtest.Client{ID: "svc", Secret: "s", Audience: []string{resource}},
		oauthtest.Client{ID: "cli", Audience: []string{resource}},
		oauthtest.Client{ID: "other-aud", Secret: "s", Audience: []string{"http://elsewhere.test/mcp"}},
		oauthtest.Client{ID: "old", Secret: "s", Audience: []string{resource}, Lifetime: -time.Minute},
		oauthtest.Client{ID: "stranger", Secret: "s", Audience: []string{resource}},
		oauthtest.Client{ID: "blue", Secret: "s", Audience: []string{resource}},
	)
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	rogue, err := oauthtest.Start(oauthtest.Client{ID: "svc", Secret: "s", Audience: []string{resource}})
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	cfg := oauth.Config{Resource: resource, Scopes: []string{"asyncgate"}, Issuers: []oauth.Issuer{{
		Issuer: idp.Issuer,
		Map: []oauth.Rule{
			{Claim: "sub", Value: "svc", Principal: "agent.svc", Role: "agent"},
			{Claim: "sub", Value: oauthtest.UserSubject, Principal: "agent.user", Role: "agent"},
			{Claim: "old", Principal: "agent.old", Role: "agent"},
			{Claim: "sub", Value: "blue", Principal: "agent.svc", Tenant: "blue", Role: "agent"},
			{Claim: "sub", Value: "other-aud", Principal: "agent.svc", Role: "agent"},
		},
	}}}
	ctx := context.Background()
	cc := func(t *testing.T, p *oauthtest.Provider, id string, scopes ...string) string {
		t.Helper()
		tok, err := p.ClientCredentials(ctx, id, "s", scopes...)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			svcKey := putKey(t, st, "default", "agent.svc", "agent")
			userKey := putKey(t, st, "default", "agent.user", "agent")
			v, err := oauth.New(cfg, st, -1)
			if err != nil {
				t.Fatal(err)
			}
			id, err := v.Authenticate(ctx, cc(t, idp, "svc", "asyncgate"))
			if err != nil {
				t.Fatal(err)
			}
			if id.Actor != (engine.Actor{Tenant: "default", Principal: "agent.svc", Role: "agent"}) || id.KeyHash != svcKey.Hash || id.Subject != "svc" {
				t.Fatalf("client credentials: %+v", id)
			}
			tok, err := idp.AuthorizationCode(ctx, "cli", "http://localhost/callback", "openid", "asyncgate")
			if err != nil {
				t.Fatal(err)
			}
			if id, err = v.Authenticate(ctx, tok); err != nil || id.Actor.Principal != "agent.user" || id.KeyHash != userKey.Hash {
				t.Fatalf("authorization code: %+v %v", id, err)
			}

			refused := []struct {
				name, token, code, detail string
			}{
				{"wrong audience", cc(t, idp, "other-aud", "asyncgate"), host.CodeUnauthorized, "another audience"},
				{"expired", cc(t, idp, "old", "asyncgate"), host.CodeUnauthorized, "expired at"},
				{"unknown issuer", cc(t, rogue, "svc", "asyncgate"), host.CodeUnauthorized, "not one this gate trusts"},
				{"missing scope", cc(t, idp, "svc", "other"), host.CodeInsufficientScope, `lacks scope "asyncgate"`},
				{"no mapping", cc(t, idp, "stranger", "asyncgate"), host.CodeTokenNotMapped, "no oauth mapping"},
				{"another tenant's key", cc(t, idp, "blue", "asyncgate"), host.CodeUnauthorized, `holds no live agent key there`},
				{"not a JWT", "hello", host.CodeUnauthorized, "neither an API key"},
				{"forged signature", tamper(cc(t, idp, "svc", "asyncgate")), host.CodeUnauthorized, "does not verify"},
			}
			for _, c := range refused {
				_, err := v.Authenticate(ctx, c.token)
				if !host.IsCode(err, c.code) || !strings.Contains(host.ErrorDetail(err), c.detail) {
					t.Errorf("%s: got %v, want %s containing %q", c.name, err, c.code, c.detail)
				}
				ch := cfg.Challenge(err)
				want := `error="invalid_token"`
				if c.code == host.CodeInsufficientScope || c.code == host.CodeTokenNotMapped { // 403: RFC 6750 §3.1
					want = `error="insufficient_scope"`
				}
				if !strings.Contains(ch, want) || !strings.Contains(ch, `resource_metadata="http://gate.test:8080/.well-known/oauth-protected-resource/mcp"`) {
					t.Errorf("%s: challenge %s", c.name, ch)
				}
			}

			// Revoking the principal's key refuses its tokens.
			tok = cc(t, idp, "svc", "asyncgate")
			if _, err := v.Authenticate(ctx, tok); err != nil {
				t.Fatal(err)
			}
			if err := st.Update(ctx, func(tx store.Tx) error { return tx.RevokeKey(ctx, svcKey.ID, time.Now().UTC()) }); err != nil {
				t.Fatal(err)
			}
			if _, err := v.Authenticate(ctx, tok); !host.IsCode(err, host.CodeUnauthorized) || !strings.Contains(err.Error(), "no live agent key") {
				t.Fatalf("a revoked principal's token: %v", err)
			}
		})
	}
}

// tamper changes one character of a JWT's signature.
func tamper(tok string) string {
	b := []byte(tok)
	i := len(b) - 5
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// TestVerifierCache remembers an accepted token for the TTL and drops it on
// Forget, so a revocation through the same gate takes effect at once.
func TestVerifierCache(t *testing.T) {
	idp, err := oauthtest.Start(oauthtest.Client{ID: "svc", Secret: "s", Audience: []string{resource}})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	st := stores(t)["sqlite"](t)
	k := putKey(t, st, "default", "agent.svc", "agent")
	v, err := oauth.New(oauth.Config{Resource: resource, Issuers: []oauth.Issuer{{Issuer: idp.Issuer,
		Map: []oauth.Rule{{Claim: "sub", Value: "svc", Principal: "agent.svc", Role: "agent"}}}}}, st, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tok, err := idp.ClientCredentials(ctx, "svc", "s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Authenticate(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := st.Update(ctx, func(tx store.Tx) error { return tx.RevokeKey(ctx, k.ID, time.Now().UTC()) }); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Authenticate(ctx, tok); err != nil {
		t.Fatalf("within the TTL the token is remembered: %v", err)
	}
	v.Forget()
	if _, err := v.Authenticate(ctx, tok); !host.IsCode(err, host.CodeUnauthorized) {
		t.Fatalf("after Forget: %v", err)
	}
}

// TestVerifierIssuerAway refuses tokens while the issuer's discovery
// document cannot be read, rather than failing open, with a 503 to retry
// (not invalid_token, which would send the client back through its
// sign-in).
func TestVerifierIssuerAway(t *testing.T) {
	idp, err := oauthtest.Start(oauthtest.Client{ID: "svc", Secret: "s", Audience: []string{resource}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := idp.ClientCredentials(context.Background(), "svc", "s")
	if err != nil {
		t.Fatal(err)
	}
	idp.Close() // the provider is away before the gate first reads its keys
	st := stores(t)["sqlite"](t)
	putKey(t, st, "default", "agent.svc", "agent")
	v, err := oauth.New(oauth.Config{Resource: resource, Issuers: []oauth.Issuer{{Issuer: idp.Issuer,
		Map: []oauth.Rule{{Claim: "sub", Value: "svc", Principal: "agent.svc", Role: "agent"}}}}}, st, -1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Authenticate(context.Background(), tok)
	if !host.IsCode(err, host.CodeIssuerUnavailable) || host.HTTPStatus(host.ErrorCode(err)) != http.StatusServiceUnavailable ||
		!strings.Contains(err.Error(), "cannot be read now") || strings.Contains(v.Challenge(err), "invalid_token") {
		t.Fatalf("issuer away: %v, challenge %s", err, v.Challenge(err))
	}
}
