package oauth

import (
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

// TestMatchPrincipalClaim takes a principal from a claim only under the
// rule's prefix, and refuses a value that makes an invalid name, the
// gate's own, or a fixed rule's principal.
func TestMatchPrincipalClaim(t *testing.T) {
	is := Issuer{Issuer: "https://idp.test", Map: []Rule{
		{Claim: "sub", Value: "svc", Principal: "kc:admin", Role: "admin"},
		{Claim: "groups", Value: "gate-agents", PrincipalClaim: "sub", PrincipalPrefix: "kc:", Role: "agent"},
	}}
	cfg := Config{Resource: "https://g/mcp", Issuers: []Issuer{is,
		{Issuer: "https://other.test", Map: []Rule{{Claim: "sub", Value: "x", Principal: "ops.root", Role: "admin"}}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	v, err := New(cfg, nil, -1)
	if err != nil {
		t.Fatal(err)
	}
	agent := func(sub string) map[string]any {
		return map[string]any{"sub": sub, "groups": []any{"gate-agents"}}
	}
	_, p, err := is.match(agent("3f2a-77"), v.fixed)
	if err != nil || p != "kc:3f2a-77" {
		t.Fatalf("valid sub: %q, %v", p, err)
	}
	for name, sub := range map[string]string{
		"invalid characters":        "alice smith/../x",
		"a fixed principal":         "admin",
		"empty":                     "",
		"longer than a name may be": strings.Repeat("a", 300),
	} {
		_, p, err := is.match(agent(sub), v.fixed)
		if !host.IsCode(err, host.CodeTokenNotMapped) {
			t.Errorf("%s (%q): got principal %q, %v; want token_not_mapped", name, sub, p, err)
		}
	}
	// A value naming the gate itself or another issuer's fixed principal
	// stays inside the prefix: a distinct principal.
	for sub, want := range map[string]string{"asyncgate": "kc:asyncgate", "ops.root": "kc:ops.root", "kc:admin": "kc:kc:admin"} {
		if _, p, err := is.match(agent(sub), v.fixed); err != nil || p != want {
			t.Errorf("sub %q: got %q, %v; want %q", sub, p, err, want)
		}
	}
}
