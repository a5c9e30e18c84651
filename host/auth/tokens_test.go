package auth_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/sqlite"
)

// tokens is a TokenVerifier that accepts the token "good" on /mcp.
type tokens struct{ forgot int }

func (*tokens) Covers(path string) bool { return path == "/mcp" }
func (*tokens) VerifyToken(_ context.Context, tok string) (engine.Actor, string, time.Time, error) {
	if tok != "good" {
		return engine.Actor{}, "", time.Time{}, host.Errorf(host.CodeUnauthorized, "bad token")
	}
	return engine.Actor{Tenant: "default", Principal: "agent.t", Role: engine.RoleAgent}, "hash-of-agent.t", time.Unix(2e9, 0), nil
}
func (*tokens) Challenge(error) string { return `Bearer resource_metadata="m"` }
func (t *tokens) Forget()              { t.forgot++ }

// TestAuthenticateRequestTokens: a bearer that is not an agw_ key goes to
// the token verifier on the paths it covers (with the hash of the key the
// token acts through), and is a bad API key elsewhere; keys work
// everywhere; the challenge names the metadata only where tokens are
// accepted; Forget reaches the verifier.
func TestAuthenticateRequestTokens(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ck, err := auth.CreateKey(ctx, st, auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "agent.k"})
	if err != nil {
		t.Fatal(err)
	}
	a := auth.NewAuthenticator(st, 0)
	tv := &tokens{}
	a.SetTokens(tv)
	if got, hash, exp, err := a.AuthenticateRequest(ctx, "/mcp", "Bearer good"); err != nil || got.Principal != "agent.t" || hash != "hash-of-agent.t" || !exp.Equal(time.Unix(2e9, 0)) {
		t.Fatalf("token on /mcp: %+v %q %s %v", got, hash, exp, err)
	}
	if _, _, _, err := a.AuthenticateRequest(ctx, "/v1/tasks", "Bearer good"); !host.IsCode(err, host.CodeUnauthorized) || !strings.Contains(err.Error(), "API key") {
		t.Fatalf("token on /v1: %v", err)
	}
	for _, path := range []string{"/mcp", "/v1/tasks"} {
		if got, hash, exp, err := a.AuthenticateRequest(ctx, path, "Bearer "+ck.APIKey); err != nil || got.Principal != "agent.k" || hash != ck.Hash || !exp.IsZero() {
			t.Fatalf("key on %s: %+v %q %s %v", path, got, hash, exp, err)
		}
	}
	_, _, _, err = a.AuthenticateRequest(ctx, "/mcp", "Bearer bad")
	if ch := a.Challenge("/mcp", err); ch != `Bearer resource_metadata="m"` {
		t.Fatalf("challenge on /mcp: %q", ch)
	}
	if ch := a.Challenge("/v1/tasks", err); ch != `Bearer realm="asyncgate"` {
		t.Fatalf("challenge on /v1: %q", ch)
	}
	if ch := a.Challenge("/mcp", host.Errorf(host.CodeForbidden, "role")); ch != "" {
		t.Fatalf("challenge of a forbidden role: %q", ch)
	}
	a.Forget()
	if tv.forgot != 1 {
		t.Fatalf("Forget reached the verifier %d times", tv.forgot)
	}
}
