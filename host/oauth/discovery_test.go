package oauth_test

import (
	"context"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/oauth"
	"github.com/asyncgate/asyncgate/host/oauth/oauthtest"
)

// TestDiscoveryCallerGivesUp does not let a caller that gives up during
// the issuer's discovery poison it for the next caller.
func TestDiscoveryCallerGivesUp(t *testing.T) {
	idp, err := oauthtest.Start(oauthtest.Client{ID: "svc", Secret: "s", Audience: []string{resource}})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	st := stores(t)["sqlite"](t)
	putKey(t, st, "default", "agent.svc", "agent")
	v, err := oauth.New(oauth.Config{Resource: resource, Issuers: []oauth.Issuer{{Issuer: idp.Issuer,
		Map: []oauth.Rule{{Claim: "sub", Value: "svc", Principal: "agent.svc", Role: "agent"}}}}}, st, -1)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := idp.ClientCredentials(context.Background(), "svc", "s")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	<-short.Done() // the caller is gone before discovery could finish
	if _, err := v.Authenticate(short, tok); err == nil {
		t.Log("the first call succeeded regardless")
	}
	if _, err := v.Authenticate(context.Background(), tok); err != nil {
		t.Fatalf("a caller that gave up poisoned the issuer: %v", err)
	}
}
