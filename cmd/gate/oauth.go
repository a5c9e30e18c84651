package main

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi"
	"github.com/asyncgate/asyncgate/host/oauth"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/ui"
)

// setupOAuth makes the gate an OAuth protected resource when cfg names
// issuers (config file "oauth"; docs/mcp.md): authn accepts their access
// tokens beside agw_ keys, and the returned options serve the protected
// resource metadata at /.well-known/oauth-protected-resource and at its
// path-suffixed form for the resource (…/mcp). signIn, when the config
// has a dashboard, signs operators in to the dashboard through the
// provider. Without issuers it changes nothing: no metadata, and 401s name
// no authorization server (RATIONALE.md).
func setupOAuth(cfg *oauth.Config, st store.Store, ttl time.Duration, authn *auth.Authenticator) (opts []httpapi.Option, signIn ui.SignIn, err error) {
	if cfg == nil || !cfg.Enabled() {
		return nil, nil, nil
	}
	v, err := oauth.New(*cfg, st, ttl)
	if err != nil {
		return nil, nil, err
	}
	authn.SetTokens(v)
	if l := v.Login(); l != nil {
		signIn = dashboardSignIn{l}
	}
	meta := echo.WrapHandler(cfg.MetadataHandler())
	paths := []string{oauth.WellKnown}
	if p := cfg.MetadataPath(); p != oauth.WellKnown {
		paths = append(paths, p)
	}
	return []httpapi.Option{httpapi.WithRoutes(func(e *echo.Echo, _ echo.MiddlewareFunc) {
		for _, p := range paths {
			e.Match([]string{http.MethodGet, http.MethodHead, http.MethodOptions}, p, meta)
		}
	})}, signIn, nil
}

// mcpChallenge is the WWW-Authenticate value of a 401 the MCP door answers
// itself (mcpapi.Config.Challenge): authn's, as the auth middleware
// answers, so it names the resource metadata when OAuth is on, with
// error="invalid_token" for a request that came with an access token.
func mcpChallenge(authn *auth.Authenticator) func(*http.Request, error) string {
	return func(r *http.Request, err error) string {
		if oauth.IsToken(auth.BearerKey(r.Header.Get("Authorization"))) {
			err = oauth.InvalidToken(err)
		}
		return authn.Challenge(r.URL.Path, err)
	}
}

// dashboardSignIn is the dashboard's sign-in through the provider.
type dashboardSignIn struct{ l *oauth.Login }

func (d dashboardSignIn) Start(ctx context.Context) (string, string, string, error) {
	return d.l.Start(ctx)
}

func (d dashboardSignIn) Finish(ctx context.Context, code, verifier string) (engine.Actor, string, error) {
	id, err := d.l.Finish(ctx, code, verifier)
	return id.Actor, id.KeyHash, err
}
