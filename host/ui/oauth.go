package ui

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// SignIn is the dashboard's sign-in through an identity provider (the
// authorization code flow with PKCE; host/oauth). Finish returns the actor
// the provider's token stands for and the hash of the key it acts through,
// which the session keeps as a key sign-in's does: revoking the key ends
// the session.
type SignIn interface {
	Start(ctx context.Context) (authURL, state, verifier string, err error)
	Finish(ctx context.Context, code, verifier string) (actor engine.Actor, keyHash string, err error)
}

// oauthCookie keeps a sign-in's state and PKCE verifier between the trip
// to the provider and its return. It is SameSite=Lax: the return is a
// navigation from the provider's site, on which a Strict cookie is not sent.
const oauthCookie = "asyncgate_oauth"

// oauthErrorCode is an OAuth error code (RFC 6749 §4.1.2.1) as shown.
var oauthErrorCode = regexp.MustCompile(`^[a-z_]{1,40}$`)

// oauthStart is GET /ui/oauth/start: off to the provider.
func (u *UI) oauthStart(c echo.Context) error {
	authURL, state, verifier, err := u.cfg.SignIn.Start(c.Request().Context())
	if err != nil {
		return err
	}
	c.SetCookie(&http.Cookie{Name: oauthCookie, Value: state + "." + verifier, Path: "/ui/oauth", MaxAge: 600,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: c.Request().TLS != nil})
	return c.Redirect(http.StatusFound, authURL)
}

// oauthCallback is GET /ui/oauth/callback: the provider's code → session.
func (u *UI) oauthCallback(c echo.Context) error {
	ck, err := c.Request().Cookie(oauthCookie)
	state, verifier, _ := strings.Cut(func() string {
		if err != nil {
			return ""
		}
		return ck.Value
	}(), ".")
	c.SetCookie(&http.Cookie{Name: oauthCookie, Value: "", Path: "/ui/oauth", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	// Only a return that carries this browser's state is the provider's
	// answer; anything else, error text included, is shown nothing of.
	if state == "" || !sameToken(c.QueryParam("state"), state) {
		return host.Errorf(host.CodeForbidden, "this sign-in's state is missing or wrong; start again from the sign-in page")
	}
	if e := c.QueryParam("error"); e != "" {
		// The provider's error_description is text anyone could have put
		// in the link: only the error code is shown, and only if it is one.
		if !oauthErrorCode.MatchString(e) {
			e = "unknown"
		}
		return u.refuseSignIn(c, http.StatusUnauthorized, "The identity provider refused the sign-in (error "+e+").")
	}
	a, keyHash, err := u.cfg.SignIn.Finish(c.Request().Context(), c.QueryParam("code"), verifier)
	if err != nil {
		if host.IsCode(err, host.CodeDatabaseUnavailable) {
			return err
		}
		return u.refuseSignIn(c, host.HTTPStatus(host.ErrorCode(err)), "The provider's token was refused: "+host.ErrorDetail(err))
	}
	if a.Role != engine.RoleAdmin {
		return u.refuseSignIn(c, http.StatusForbidden, "The dashboard needs an admin; the provider's token acts as a "+a.Role+".")
	}
	if wait := u.signins.take(keyHash, u.now()); wait > 0 {
		secs := int(wait/time.Second) + 1
		c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
		return u.refuseSignIn(c, http.StatusTooManyRequests, "This principal signed in too often; try again in "+strconv.Itoa(secs)+" s.")
	}
	s := u.sessions.create(keyHash, a, u.now())
	u.setCookie(c, loginCookie, "", -1) // the sign-in form's token, as a key sign-in drops it
	u.setCookie(c, sessionCookie, s.id, int(sessionMax/time.Second))
	// The session cookie is SameSite=Strict, and this answer ends a
	// navigation that began on the provider's site: a redirect would carry
	// no cookie. A page that moves on by itself starts a same-site one.
	return c.HTML(http.StatusOK, `<!doctype html><meta http-equiv="refresh" content="0;url=/ui/"><title>Signed in</title><a href="/ui/">Signed in: continue</a>`)
}

func (u *UI) refuseSignIn(c echo.Context, status int, msg string) error {
	tok := randomToken()
	u.setCookie(c, loginCookie, tok, 600)
	return u.render(c, status, "login", page{Title: "Sign in", CSRF: tok, Data: msg})
}
