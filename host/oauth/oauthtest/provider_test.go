package oauthtest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func claimsOf(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestProviderFlows obtains JWT access tokens through both flows and
// checks the claims a resource server reads.
func TestProviderFlows(t *testing.T) {
	p, err := Start(
		Client{ID: "svc", Secret: "s3cret", Audience: []string{"http://gate.test/mcp"}},
		Client{ID: "cli", Audience: []string{"http://gate.test/mcp"}},
		Client{ID: "old", Secret: "s3cret", Lifetime: -time.Minute},
	)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	tok, err := p.ClientCredentials(ctx, "svc", "s3cret", "asyncgate")
	if err != nil {
		t.Fatal(err)
	}
	c := claimsOf(t, tok)
	if c["iss"] != p.Issuer || c["sub"] != "svc" || c["scope"] != "asyncgate" {
		t.Fatalf("client credentials claims: %v", c)
	}
	if aud, _ := c["aud"].([]any); len(aud) != 1 || aud[0] != "http://gate.test/mcp" {
		t.Fatalf("aud: %v", c["aud"])
	}
	if _, err := p.ClientCredentials(ctx, "svc", "wrong"); err == nil {
		t.Fatal("a wrong secret got a token")
	}
	tok, err = p.AuthorizationCode(ctx, "cli", "http://localhost/callback", "openid", "asyncgate")
	if err != nil {
		t.Fatal(err)
	}
	c = claimsOf(t, tok)
	if s, _ := c["scope"].(string); c["sub"] != UserSubject || !strings.Contains(" "+s+" ", " asyncgate ") {
		t.Fatalf("authorization code claims: %v", c)
	}
	tok, err = p.ClientCredentials(ctx, "old", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if exp := claimsOf(t, tok)["exp"].(float64); int64(exp) > time.Now().Unix() {
		t.Fatalf("exp %v is not past", exp)
	}
}
