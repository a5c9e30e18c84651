package main

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/httpapi"
	"github.com/asyncgate/asyncgate/host/oauth"
	"github.com/asyncgate/asyncgate/host/store"
)

// setupOAuth makes the gate an OAuth protected resource when cfg names
// issuers (config file "oauth"; docs/mcp.md): authn accepts their access
// tokens beside agw_ keys, and the returned options serve the protected
// resource metadata at /.well-known/oauth-protected-resource and at its
// path-suffixed form for the resource (…/mcp). Without issuers it
// changes nothing: no metadata, and 401s name no authorization server
// (RATIONALE.md).
func setupOAuth(cfg *oauth.Config, st store.Store, ttl time.Duration, authn *auth.Authenticator) ([]httpapi.Option, error) {
	if cfg == nil || !cfg.Enabled() {
		return nil, nil
	}
	v, err := oauth.New(*cfg, st, ttl)
	if err != nil {
		return nil, err
	}
	authn.SetTokens(v)
	meta := echo.WrapHandler(cfg.MetadataHandler())
	paths := []string{oauth.WellKnown}
	if p := cfg.MetadataPath(); p != oauth.WellKnown {
		paths = append(paths, p)
	}
	return []httpapi.Option{httpapi.WithRoutes(func(e *echo.Echo, _ echo.MiddlewareFunc) {
		for _, p := range paths {
			e.Match([]string{http.MethodGet, http.MethodHead, http.MethodOptions}, p, meta)
		}
	})}, nil
}
