package ui_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi"
	"github.com/asyncgate/asyncgate/host/ui"
)

// fakeSignIn starts every sign-in with state "the-state"; Finish refuses.
type fakeSignIn struct{}

func (fakeSignIn) Start(context.Context) (string, string, string, error) {
	return "http://idp.test/authorize", "the-state", "the-verifier", nil
}

func (fakeSignIn) Finish(context.Context, string, string) (engine.Actor, string, error) {
	return engine.Actor{}, "", errors.New("not reached in this test")
}

// TestOAuthCallbackShowsNoAttackerText checks the state before anything
// else and shows only a well-formed error code, never error_description.
func TestOAuthCallbackShowsNoAttackerText(t *testing.T) {
	b := setup(t)
	authn := auth.NewAuthenticator(b.st, -1)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	dash, err := ui.New(ui.Config{Engine: b.eng, Authenticate: authn.Authenticate, Context: ctx, SignIn: fakeSignIn{}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Engine: b.eng, Authenticator: authn},
		httpapi.WithRoutes(func(e *echo.Echo, _ echo.MiddlewareFunc) { dash.Mount(e) }))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	const lure = "Your account is locked: call +1 555 0100"
	cb := func(state, code string) string {
		q := url.Values{"error": {code}, "error_description": {lure}}
		if state != "" {
			q.Set("state", state)
		}
		return "/ui/oauth/callback?" + q.Encode()
	}
	cases := []struct {
		name, state, code string
		started           bool
		status            int
		want              string
	}{
		{"no sign-in started", "the-state", "access_denied", false, http.StatusForbidden, "state is missing or wrong"},
		{"missing state", "", "access_denied", true, http.StatusForbidden, "state is missing or wrong"},
		{"wrong state", "forged", "access_denied", true, http.StatusForbidden, "state is missing or wrong"},
		{"right state", "the-state", "access_denied", true, http.StatusUnauthorized, "(error access_denied)"},
		{"right state, text as the code", "the-state", lure, true, http.StatusUnauthorized, "(error unknown)"},
	}
	for _, c := range cases {
		br := newBrowser(t, ts)
		if c.started {
			if res, _ := br.get("/ui/oauth/start"); res.StatusCode != http.StatusFound {
				t.Fatalf("start: %d", res.StatusCode)
			}
		}
		res, body := br.get(cb(c.state, c.code))
		if res.StatusCode != c.status || !strings.Contains(body, c.want) || strings.Contains(body, "555 0100") {
			t.Errorf("%s: %d, want %d with %q and without the lure:\n%s", c.name, res.StatusCode, c.status, c.want, body)
		}
	}
}
