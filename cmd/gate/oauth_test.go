package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeOAuthConfig reads the oauth object of a config file: the schema
// and then Validate refuse a bad one with the field at fault, and a good
// one reaches the config.
func TestServeOAuthConfig(t *testing.T) {
	rule := `{"claim":"sub","value":"svc","principal":"agent.svc","role":"agent"}`
	cases := []struct{ file, want string }{
		{`{"oauth":{"resource":"https://gate.example.com/mcp","issuers":[{"issuer":"https://idp.example.com","map":[` + rule + `]}]}}`, ""},
		{`{"oauth":{"resource":"https://gate.example.com/mcp","issuers":[{"issuer":"https://idp.example.com","map":[{"claim":"sub","principal":"a","role":"root"}]}]}}`, "role"},
		{`{"oauth":{"resource":"https://gate.example.com/mcp","issuers":[{"issuer":"idp.example.com/x","map":[` + rule + `]}]}}`, "oauth.issuers[0].issuer"},
		{`{"oauth":{"resource":"gate.example.com/mcp","issuers":[{"issuer":"https://idp.example.com","map":[` + rule + `]}]}}`, "oauth.resource"},
		{`{"oauth":{"resource":"https://gate.example.com/mcp","issuers":[]}}`, "minItems"},
		// A worker's principal is its worker id: "kc:" + sub never is one.
		{`{"oauth":{"resource":"https://gate.example.com/mcp","issuers":[{"issuer":"https://idp.example.com","map":[` + rule +
			`,{"claim":"kind","value":"worker","principal_claim":"sub","principal_prefix":"kc:","role":"worker"}]}]}}`, "oauth.issuers[0].map[1]: a worker's principal is its worker id"},
	}
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "gate.json")
		if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := parseServeFlags([]string{"--config", path}, io.Discard)
		if c.want == "" {
			if err != nil || cfg.OAuth == nil || cfg.OAuth.Issuers[0].Map[0].Principal != "agent.svc" {
				t.Fatalf("%s: %v %+v", c.file, err, cfg.OAuth)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.file, err, c.want)
		}
	}
}
