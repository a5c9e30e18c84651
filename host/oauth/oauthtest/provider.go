// Package oauthtest runs a real OpenID provider on a loopback port for
// tests: the example OP of github.com/zitadel/oidc (its login page, token
// endpoint, discovery and JWKS, with in-memory storage), with clients whose
// access tokens are JWTs for a chosen audience and lifetime.
//
// It serves the flows an MCP client uses: client credentials, and the
// authorization code flow with PKCE, whose login page takes a user name and
// password (the example's users: "test-user2" / "verysecure" is one).
package oauthtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// User and Password sign in on the provider's login page.
const (
	User     = "test-user2"
	Password = "verysecure"
	// UserSubject is the sub claim of User's tokens.
	UserSubject = "id2"
)

// Client is a client registered with the provider.
type Client struct {
	// ID is the client_id; the sub of its client credentials tokens.
	ID string
	// Secret is the client secret; empty makes a public client (PKCE, no
	// secret), which cannot use client credentials.
	Secret string
	// Audience is the aud of its access tokens (empty: the client id).
	Audience []string
	// Lifetime is how long its access tokens live (0: five minutes). A
	// negative lifetime issues tokens that expired that long ago.
	Lifetime time.Duration
	// RedirectURIs are where the authorization code flow may return to
	// (default http://localhost/callback).
	RedirectURIs []string
}

// Provider is a running OpenID provider.
type Provider struct {
	// Issuer is the provider's issuer URL (http://127.0.0.1:port), also
	// its base URL.
	Issuer string
	srv    *http.Server
	done   chan struct{}
}

// Start runs a provider with clients on a free loopback port until Close.
func Start(clients ...Client) (*Provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	issuer := "http://" + ln.Addr().String()
	st := &store{Storage: storage.NewStorage(storage.NewUserStore(issuer)), clients: map[string]*client{}}
	for _, c := range clients {
		st.clients[c.ID] = newClient(c)
	}
	router := exampleop.SetupServer(issuer, st, nil, false)
	p := &Provider{Issuer: issuer, srv: &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// Close stops the provider.
func (p *Provider) Close() {
	_ = p.srv.Close()
	<-p.done
}

// ClientCredentials obtains an access token with the client credentials
// grant, as a service would.
func (p *Provider) ClientCredentials(ctx context.Context, id, secret string, scopes ...string) (string, error) {
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {strings.Join(scopes, " ")}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Issuer+"/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	return tokenOf(http.DefaultClient.Do(req))
}

// AuthorizationCode obtains an access token for User through the
// authorization code flow with PKCE (S256), as a native client does: it
// opens the authorization URL, signs in on the login page, reads the code
// from the redirect and exchanges it with its verifier.
func (p *Provider) AuthorizationCode(ctx context.Context, clientID, redirectURI string, scopes ...string) (string, error) {
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	verifier := base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {redirectURI},
		"scope": {strings.Join(scopes, " ")}, "state": {"s1"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
	}
	back, err := SignIn(ctx, p.Issuer+"/auth?"+q.Encode(), User, Password)
	if err != nil {
		return "", err
	}
	code := back.Query().Get("code")
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirectURI},
		"client_id": {clientID}, "code_verifier": {verifier}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Issuer+"/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return tokenOf(http.DefaultClient.Do(req))
}

var authRequestID = regexp.MustCompile(`name="id" value="([^"]+)"`)

// SignIn follows an authorization URL as a browser would: it fetches the
// login page, posts user and password, and follows the redirects until one
// leaves the provider; it returns that redirect (the client's redirect URI
// with code and state), or an error when it carries none.
func SignIn(ctx context.Context, authURL, user, password string) (*url.URL, error) {
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base, err := url.Parse(authURL)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return nil, err
	}
	for range 10 {
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := authRequestID.FindSubmatch(body)
		switch {
		case resp.StatusCode/100 == 3:
			loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
			if err != nil {
				return nil, err
			}
			if loc.Host != base.Host { // back to the client
				return codeOf(loc)
			}
			req, err = http.NewRequestWithContext(ctx, http.MethodGet, loc.String(), nil)
			if err != nil {
				return nil, err
			}
		case resp.StatusCode == http.StatusOK && m != nil: // the login page
			form := url.Values{"username": {user}, "password": {password}, "id": {string(m[1])}}
			login, _ := resp.Request.URL.Parse("/login/username")
			req, err = http.NewRequestWithContext(ctx, http.MethodPost, login.String(), strings.NewReader(form.Encode()))
			if err != nil {
				return nil, err
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		default:
			return nil, fmt.Errorf("oauthtest: %s %s answered %d: %.300s", req.Method, req.URL, resp.StatusCode, body)
		}
	}
	return nil, errors.New("oauthtest: too many redirects")
}

func codeOf(u *url.URL) (*url.URL, error) {
	if e := u.Query().Get("error"); e != "" {
		return nil, fmt.Errorf("oauthtest: the provider refused: %s: %s", e, u.Query().Get("error_description"))
	}
	if u.Query().Get("code") == "" {
		return nil, fmt.Errorf("oauthtest: redirect without a code: %s", u)
	}
	return u, nil
}

func tokenOf(resp *http.Response, err error) (string, error) {
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var t struct {
		AccessToken string `json:"access_token"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &t) != nil || t.AccessToken == "" {
		return "", fmt.Errorf("oauthtest: token endpoint answered %d: %.300s", resp.StatusCode, body)
	}
	return t.AccessToken, nil
}

// store is the example's in-memory storage with this package's clients:
// JWT access tokens with their audience, lifetime and a scope claim.
type store struct {
	*storage.Storage
	clients map[string]*client
}

type client struct {
	*storage.Client
	cfg Client
}

func newClient(c Client) *client {
	if len(c.RedirectURIs) == 0 {
		c.RedirectURIs = []string{"http://localhost/callback"}
	}
	base := storage.NativeClient(c.ID, c.RedirectURIs...)
	if c.Secret != "" {
		base = storage.WebClient(c.ID, c.Secret, c.RedirectURIs...)
	}
	return &client{Client: base, cfg: c}
}

func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (c *client) IsScopeAllowed(string) bool          { return true }
func (c *client) DevMode() bool                       { return true }
func (c *client) GrantTypes() []oidc.GrantType {
	return append(c.Client.GrantTypes(), oidc.GrantTypeClientCredentials)
}

func (s *store) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	if c, ok := s.clients[id]; ok {
		return c, nil
	}
	return s.Storage.GetClientByClientID(ctx, id)
}

func (s *store) AuthorizeClientIDSecret(ctx context.Context, id, secret string) error {
	if c, ok := s.clients[id]; ok {
		if c.cfg.Secret == "" || c.cfg.Secret != secret {
			return errors.New("invalid client secret")
		}
		return nil
	}
	return s.Storage.AuthorizeClientIDSecret(ctx, id, secret)
}

func (s *store) ClientCredentials(ctx context.Context, id, secret string) (op.Client, error) {
	c, ok := s.clients[id]
	if !ok || c.cfg.Secret == "" || c.cfg.Secret != secret {
		return nil, errors.New("wrong client id or secret")
	}
	return c, nil
}

func (s *store) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	c, ok := s.clients[id]
	if !ok {
		return nil, errors.New("unknown client")
	}
	return &oidc.JWTTokenRequest{Subject: id, Audience: c.audience(), Scopes: scopes}, nil
}

func (c *client) audience() []string {
	if len(c.cfg.Audience) > 0 {
		return c.cfg.Audience
	}
	return []string{c.cfg.ID}
}

// authRequest is an authorization request of one of this package's
// clients: its tokens carry the client's audience.
type authRequest struct {
	op.AuthRequest
	aud []string
}

func (a *authRequest) GetAudience() []string { return a.aud }

func (s *store) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	r, err := s.Storage.AuthRequestByCode(ctx, code)
	if err != nil {
		return nil, err
	}
	if c, ok := s.clients[r.GetClientID()]; ok {
		return &authRequest{AuthRequest: r, aud: c.audience()}, nil
	}
	return r, nil
}

// clientOf names the client a token request is for.
func (s *store) clientOf(r op.TokenRequest) *client {
	switch r := r.(type) {
	case *authRequest:
		return s.clients[r.GetClientID()]
	case *oidc.JWTTokenRequest:
		return s.clients[r.Subject]
	}
	return nil
}

func (s *store) CreateAccessToken(ctx context.Context, r op.TokenRequest) (string, time.Time, error) {
	id, exp, err := s.Storage.CreateAccessToken(ctx, r)
	if c := s.clientOf(r); err == nil && c != nil && c.cfg.Lifetime != 0 {
		exp = time.Now().Add(c.cfg.Lifetime)
	}
	return id, exp, err
}

func (s *store) CreateAccessAndRefreshTokens(ctx context.Context, r op.TokenRequest, current string) (string, string, time.Time, error) {
	id, refresh, exp, err := s.Storage.CreateAccessAndRefreshTokens(ctx, r, current)
	if c := s.clientOf(r); err == nil && c != nil && c.cfg.Lifetime != 0 {
		exp = time.Now().Add(c.cfg.Lifetime)
	}
	return id, refresh, exp, err
}

// GetPrivateClaimsFromScopes adds the granted scopes as the scope claim
// (RFC 9068), which the example does not write into JWT access tokens.
func (s *store) GetPrivateClaimsFromScopes(ctx context.Context, userID, clientID string, scopes []string) (map[string]any, error) {
	claims, err := s.Storage.GetPrivateClaimsFromScopes(ctx, userID, clientID, scopes)
	if err != nil {
		return nil, err
	}
	if claims == nil {
		claims = map[string]any{}
	}
	if len(scopes) > 0 {
		claims["scope"] = strings.Join(scopes, " ")
	}
	return claims, nil
}
