package oauth_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/oauth"
)

// TestMetadata serves RFC 9728's document and names it in the challenge.
func TestMetadata(t *testing.T) {
	cfg := oauth.Config{Resource: "https://gate.example.com/mcp", Scopes: []string{"asyncgate", "mcp:tools"},
		Issuers: []oauth.Issuer{{Issuer: "https://idp.example.com", Map: []oauth.Rule{{Claim: "sub", Principal: "a", Role: "agent"}}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.MetadataPath(); got != "/.well-known/oauth-protected-resource/mcp" {
		t.Fatalf("path %s", got)
	}
	rec := httptest.NewRecorder()
	cfg.MetadataHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, cfg.MetadataPath(), nil))
	var m map[string]any
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &m) != nil {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if m["resource"] != cfg.Resource || m["authorization_servers"].([]any)[0] != "https://idp.example.com" ||
		len(m["scopes_supported"].([]any)) != 2 || rec.Header().Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("metadata %v", m)
	}
	rec = httptest.NewRecorder()
	cfg.MetadataHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, cfg.MetadataPath(), nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", rec.Code)
	}
	want := `Bearer realm="asyncgate", resource_metadata="https://gate.example.com/.well-known/oauth-protected-resource/mcp", scope="asyncgate mcp:tools"`
	if got := cfg.Challenge(nil); got != want {
		t.Fatalf("challenge\n got %s\nwant %s", got, want)
	}
}

// TestConfigValidate names the field at fault.
func TestConfigValidate(t *testing.T) {
	ok := oauth.Rule{Claim: "sub", Value: "x", Principal: "agent.x", Role: "agent"}
	cases := []struct {
		cfg  oauth.Config
		want string
	}{
		{oauth.Config{Resource: "https://g/mcp"}, "no issuers"},
		{oauth.Config{Resource: "/mcp", Issuers: []oauth.Issuer{{Issuer: "https://i", Map: []oauth.Rule{ok}}}}, "oauth.resource"},
		{oauth.Config{Resource: "https://g/mcp", Issuers: []oauth.Issuer{{Issuer: "i", Map: []oauth.Rule{ok}}}}, "oauth.issuers[0].issuer"},
		{oauth.Config{Resource: "https://g/mcp", Issuers: []oauth.Issuer{{Issuer: "https://i"}}}, "oauth.issuers[0].map: no rules"},
		{oauth.Config{Resource: "https://g/mcp", Issuers: []oauth.Issuer{{Issuer: "https://i", Map: []oauth.Rule{{Claim: "sub", Role: "agent"}}}}}, "principal or principal_claim"},
		{oauth.Config{Resource: "https://g/mcp", Issuers: []oauth.Issuer{{Issuer: "https://i", Map: []oauth.Rule{{Claim: "sub", Principal: "asyncgate", Role: "agent"}}}}}, "the gate's own"},
		{oauth.Config{Resource: "https://g/mcp", Issuers: []oauth.Issuer{{Issuer: "https://i", Map: []oauth.Rule{{Claim: "sub", Principal: "a", Role: "root"}}}}}, "role must be"},
		{oauth.Config{Resource: "https://g/mcp", Issuers: []oauth.Issuer{{Issuer: "https://i", Map: []oauth.Rule{{Claim: "sub", PrincipalClaim: "sub", Role: "agent"}}}}}, "principal_claim needs a principal_prefix"},
		{oauth.Config{Resource: "https://g/mcp", Issuers: []oauth.Issuer{{Issuer: "https://i", Map: []oauth.Rule{{Claim: "sub", PrincipalClaim: "sub", PrincipalPrefix: "kc", Role: "agent"}}}}}, "principal_prefix must match"},
		{oauth.Config{Resource: "https://g/mcp", Issuers: []oauth.Issuer{{Issuer: "https://i", Map: []oauth.Rule{{Claim: "sub", Principal: "a", PrincipalPrefix: "kc:", Role: "agent"}}}}}, "principal_prefix goes with principal_claim"},
		{oauth.Config{Resource: "https://g/mcp", Issuers: []oauth.Issuer{
			{Issuer: "https://i", Map: []oauth.Rule{{Claim: "sub", PrincipalClaim: "sub", PrincipalPrefix: "kc:", Role: "agent"}}},
			{Issuer: "https://j", Map: []oauth.Rule{{Claim: "sub", PrincipalClaim: "sub", PrincipalPrefix: "kc:", Role: "agent"}}}}}, "oauth.issuers[1].map[0].principal_prefix"},
		{oauth.Config{Resource: "https://g/mcp", Scopes: []string{"a b"}, Issuers: []oauth.Issuer{{Issuer: "https://i", Map: []oauth.Rule{ok}}}}, "oauth.scopes"},
	}
	for _, c := range cases {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.cfg, err, c.want)
		}
	}
	if err := (oauth.Config{}).Validate(); err != nil {
		t.Fatalf("the zero config is OAuth off: %v", err)
	}
}

// TestCovers accepts tokens on /mcp, and on /v1/ only with http_api.
func TestCovers(t *testing.T) {
	cfg := oauth.Config{Resource: "https://gate.example.com/mcp",
		Issuers: []oauth.Issuer{{Issuer: "https://idp.example.com", Map: []oauth.Rule{{Claim: "sub", Principal: "a", Role: "agent"}}}}}
	for _, httpAPI := range []bool{false, true} {
		cfg.HTTPAPI = httpAPI
		v, err := oauth.New(cfg, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]bool{"/mcp": true, "/mcpx": false, "/v1/tasks": httpAPI, "/ui/": false, "/v1": false} {
			if got := v.Covers(path); got != want {
				t.Errorf("http_api %v: Covers(%q) = %v", httpAPI, path, got)
			}
		}
	}
}
