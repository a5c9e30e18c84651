package oauth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/oauth"
)

// TestRefusalsKeepProviderTextOut answers a token of an issuer whose
// discovery fails with a fixed message, not the issuer's response body,
// and caps what a refusal repeats of the token and the challenge's
// error_description.
func TestRefusalsKeepProviderTextOut(t *testing.T) {
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "internal: upstream db password=hunter2", http.StatusInternalServerError)
	}))
	defer idp.Close()
	jwks := newJWKSServer(t)
	key := newKey(t)
	jwks.publish("k1", key)
	cfg := oauth.Config{Resource: resource, Issuers: []oauth.Issuer{
		{Issuer: idp.URL, Map: []oauth.Rule{{Claim: "sub", Value: "svc", Principal: "agent.svc", Role: "agent"}}},
		{Issuer: "https://good.test", JWKSURI: jwks.URL, Map: []oauth.Rule{{Claim: "sub", Value: "svc", Principal: "agent.svc", Role: "agent"}}},
	}}
	v, err := oauth.New(cfg, stores(t)["sqlite"](t), -1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = v.Authenticate(ctx, sign(t, idp.URL, newKey(t), "k1"))
	if !host.IsCode(err, host.CodeIssuerUnavailable) || strings.Contains(err.Error(), "hunter2") || strings.Contains(cfg.Challenge(err), "hunter2") {
		t.Fatalf("the issuer's response reached the caller: %v", err)
	}

	long := "https://evil.test/" + strings.Repeat("x", 5000)
	_, err = v.Authenticate(ctx, sign(t, long, newKey(t), "k1"))
	if !host.IsCode(err, host.CodeUnauthorized) || len(host.ErrorDetail(err)) > 300 {
		t.Fatalf("an untrusted iss of %d bytes: a detail of %d bytes", len(long), len(host.ErrorDetail(err)))
	}
	// A principal without a key: the longest detail there is.
	_, err = v.Authenticate(ctx, sign(t, "https://good.test", key, "k1"))
	desc := regexp.MustCompile(`error_description="([^"]*)"`).FindStringSubmatch(cfg.Challenge(err))
	if !host.IsCode(err, host.CodeUnauthorized) || desc == nil || len(desc[1]) > 200 {
		t.Fatalf("%v: challenge %s", err, cfg.Challenge(err))
	}
}
