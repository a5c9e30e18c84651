package oauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/asyncgate/asyncgate/host"
)

// Dashboard is the dashboard's sign-in through an issuer: the gate is a
// client of it (the authorization code flow with PKCE), registered with
// the redirect URI CallbackPath on the resource's origin.
type Dashboard struct {
	// Issuer is one of Config.Issuers.
	Issuer string `json:"issuer"`
	// ClientID and ClientSecret are the gate's client registration;
	// without a secret the gate is a public client (PKCE alone).
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret,omitempty"`
}

// CallbackPath is where the provider sends the browser back to.
const CallbackPath = "/ui/oauth/callback"

func (d *Dashboard) validate(c Config) error {
	if d == nil {
		return nil
	}
	if d.ClientID == "" {
		return fmt.Errorf("oauth.dashboard.client_id is required")
	}
	for _, is := range c.Issuers {
		if is.Issuer == d.Issuer {
			return nil
		}
	}
	return fmt.Errorf("oauth.dashboard.issuer %q is not one of oauth.issuers", d.Issuer)
}

// Login signs people in to the dashboard through the provider. Its tokens
// are checked as any other (Verifier.Authenticate): the dashboard admits
// the principal's admin key the token acts through.
type Login struct {
	v   *Verifier
	d   Dashboard
	mu  sync.Mutex
	cfg *oauth2.Config
}

// Login returns the dashboard's sign-in, or nil when none is configured.
func (v *Verifier) Login() *Login {
	if v.cfg.Dashboard == nil {
		return nil
	}
	return &Login{v: v, d: *v.cfg.Dashboard}
}

// oauth2Config reads the issuer's endpoints once.
func (l *Login) oauth2Config(ctx context.Context) (*oauth2.Config, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cfg != nil {
		return l.cfg, nil
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(oidc.ClientContext(dctx, l.v.client), l.d.Issuer)
	if err != nil {
		slog.Warn("oauth: the dashboard's identity provider's discovery failed", "issuer", l.d.Issuer, "err", err)
		return nil, host.WrapError(host.CodeUnauthorized, err, fmt.Sprintf("the identity provider %q cannot be reached; try again later", l.d.Issuer))
	}
	u, _ := url.Parse(l.v.cfg.Resource)
	l.cfg = &oauth2.Config{ClientID: l.d.ClientID, ClientSecret: l.d.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: u.Scheme + "://" + u.Host + CallbackPath, Scopes: append([]string{"openid"}, l.v.cfg.Scopes...)}
	if l.d.ClientSecret == "" {
		l.cfg.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	}
	return l.cfg, nil
}

// oauthErrorCode is an OAuth error code (RFC 6749 §5.2) as repeated.
var oauthErrorCode = regexp.MustCompile(`^[a-z_]{1,40}$`)

// Start begins a sign-in: the provider's authorization URL (PKCE S256, the
// resource indicator), and the state and code verifier the browser's
// cookie keeps until Finish.
func (l *Login) Start(ctx context.Context) (authURL, state, verifier string, err error) {
	cfg, err := l.oauth2Config(ctx)
	if err != nil {
		return "", "", "", err
	}
	state, verifier = oauth2.GenerateVerifier(), oauth2.GenerateVerifier()
	return cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", l.v.cfg.Resource)), state, verifier, nil
}

// Finish exchanges the code the provider sent back for an access token
// and returns who it stands for, as Authenticate does.
func (l *Login) Finish(ctx context.Context, code, verifier string) (Identity, error) {
	cfg, err := l.oauth2Config(ctx)
	if err != nil {
		return Identity{}, err
	}
	tok, err := cfg.Exchange(oidc.ClientContext(ctx, l.v.client), code, oauth2.VerifierOption(verifier),
		oauth2.SetAuthURLParam("resource", l.v.cfg.Resource))
	if err != nil {
		// The provider's answer is its text: the log gets it, the browser
		// the error code only.
		slog.Info("oauth: the dashboard's code exchange failed", "issuer", l.d.Issuer, "err", err)
		code := "unknown"
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && oauthErrorCode.MatchString(re.ErrorCode) {
			code = re.ErrorCode
		}
		return Identity{}, refuse(host.CodeUnauthorized, "the identity provider refused the sign-in (error %s)", code)
	}
	return l.v.Authenticate(ctx, tok.AccessToken)
}
