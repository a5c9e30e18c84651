package oauth_test

import (
	"context"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/oauth"
	"github.com/asyncgate/asyncgate/host/oauth/oauthtest"
)

// TestLogin signs a person in to the dashboard through the real provider:
// the authorization URL the gate builds, the provider's login page, the
// code exchanged with the PKCE verifier, and the token mapped to the
// principal's admin key.
func TestLogin(t *testing.T) {
	callback := "http://gate.test:8080" + oauth.CallbackPath
	idp, err := oauthtest.Start(oauthtest.Client{ID: "gate-ui", Secret: "s", Audience: []string{resource}, RedirectURIs: []string{callback}})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	st := stores(t)["sqlite"](t)
	k := putKey(t, st, "default", "admin.user", "admin")
	cfg := oauth.Config{Resource: resource, Scopes: []string{"asyncgate"},
		Issuers:   []oauth.Issuer{{Issuer: idp.Issuer, Map: []oauth.Rule{{Claim: "sub", Value: oauthtest.UserSubject, Principal: "admin.user", Role: "admin"}}}},
		Dashboard: &oauth.Dashboard{Issuer: idp.Issuer, ClientID: "gate-ui", ClientSecret: "s"}}
	v, err := oauth.New(cfg, st, -1)
	if err != nil {
		t.Fatal(err)
	}
	login := v.Login()
	ctx := context.Background()
	authURL, state, verifier, err := login.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	back, err := oauthtest.SignIn(ctx, authURL, oauthtest.User, oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	if back.Query().Get("state") != state || back.Scheme+"://"+back.Host+back.Path != callback {
		t.Fatalf("back at %s, state %s", back, state)
	}
	id, err := login.Finish(ctx, back.Query().Get("code"), verifier)
	if err != nil {
		t.Fatal(err)
	}
	if id.Actor != (engine.Actor{Tenant: "default", Principal: "admin.user", Role: "admin"}) || id.KeyHash != k.Hash {
		t.Fatalf("identity %+v", id)
	}
	_, err = login.Finish(ctx, back.Query().Get("code"), verifier)
	if err == nil {
		t.Fatal("a code was exchanged twice")
	}
	if d := host.ErrorDetail(err); d != "the identity provider refused the sign-in (error invalid_grant)" {
		t.Fatalf("a refused exchange repeats the provider's text: %q", d)
	}
	// The provider holds the gate to PKCE: another verifier gets nothing.
	authURL, _, _, err = login.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if back, err = oauthtest.SignIn(ctx, authURL, oauthtest.User, oauthtest.Password); err != nil {
		t.Fatal(err)
	}
	if _, err := login.Finish(ctx, back.Query().Get("code"), verifier); err == nil {
		t.Fatal("a code was exchanged with another sign-in's verifier")
	}
}
