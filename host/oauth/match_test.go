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

// TestWorkerRulePrincipal: a worker's principal is its worker id
// ({type}.{instance}), so a worker rule whose prefix cannot begin one
// (no '.' before its ':', or a character a worker id does not have) is
// refused at start naming the rule, as is a fixed worker principal that
// is no worker id; a prefix that begins one maps a token to a worker, and
// a claim value that would end it badly is token_not_mapped.
func TestWorkerRulePrincipal(t *testing.T) {
	cfg := func(r Rule) Config {
		return Config{Resource: "https://g/mcp", Issuers: []Issuer{{Issuer: "https://idp.test", Map: []Rule{
			{Claim: "sub", Value: "svc", Principal: "agent.svc", Role: "agent"}, r}}}}
	}
	for _, r := range []Rule{
		{Claim: "kind", Value: "worker", PrincipalClaim: "sub", PrincipalPrefix: "kc:", Role: "worker"},
		{Claim: "kind", Value: "worker", PrincipalClaim: "sub", PrincipalPrefix: "echo@kc.w:", Role: "worker"},
		{Claim: "kind", Value: "worker", Principal: "kc:w1", Role: "worker"},
	} {
		err := cfg(r).Validate()
		if err == nil || !strings.Contains(err.Error(), "oauth.issuers[0].map[1]") || !strings.Contains(err.Error(), "worker id") {
			t.Errorf("%+v: %v; want a refusal of oauth.issuers[0].map[1] naming the worker id", r, err)
		}
	}
	good := cfg(Rule{Claim: "kind", Value: "worker", PrincipalClaim: "sub", PrincipalPrefix: "echo.kc:", Role: "worker"})
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	v, err := New(good, nil, -1)
	if err != nil {
		t.Fatal(err)
	}
	is := good.Issuers[0]
	if _, p, err := is.match(map[string]any{"sub": "3f2a-77", "kind": "worker"}, v.fixed); err != nil || p != "echo.kc:3f2a-77" || !host.ValidWorkerID(p) {
		t.Fatalf("a worker's sub: %q, %v", p, err)
	}
	_, p, err := is.match(map[string]any{"sub": "alice@example.com", "kind": "worker"}, v.fixed)
	if !host.IsCode(err, host.CodeTokenNotMapped) || !strings.Contains(host.ErrorDetail(err), "worker id") {
		t.Fatalf("a sub that makes no worker id: %q, %v; want token_not_mapped naming the worker id", p, err)
	}
}
