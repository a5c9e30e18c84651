// Package ui is the gate's operator dashboard, served at /ui: server-rendered
// html/template pages embedded in the binary, a few lines of script for
// polling, and inline SVG plots drawn on the server. Operators sign in with
// an admin key, which becomes a cookie session (HttpOnly, SameSite=Strict);
// every form carries the session's CSRF token. A tenant's admin sees only
// that tenant; an admin of the default tenant (an operator of the gate) may
// switch to any tenant.
//
// Every page reads bounded amounts: queue counts come from the store's
// maintained counters (QueueStats), lists page by cursor, and nothing counts
// or scans every task.
package ui

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/plugin"
	"github.com/asyncgate/asyncgate/host/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// DefaultSampleEvery is how often queue counts are sampled for the plots.
const DefaultSampleEvery = 10 * time.Second

// Config configures the dashboard. Engine is required.
type Config struct {
	Engine *engine.Engine
	// Authenticate resolves an API key to its actor (the gate's own key check).
	Authenticate func(ctx context.Context, key string) (engine.Actor, error)
	// Plugins, when set, lists the loaded plugins and whether the first
	// load finished.
	Plugins func() (ready bool, list []plugin.Info)
	Version string
	Logger  *slog.Logger
	// SampleEvery is the queue sampling period (default DefaultSampleEvery).
	SampleEvery time.Duration
	// Context ends the sampler and any ledger verification in progress.
	Context context.Context
	// SignIn, when set, offers sign-in through an identity provider (oauth.go).
	SignIn SignIn
}

// UI is the dashboard.
type UI struct {
	cfg      Config
	eng      *engine.Engine
	st       store.Store
	log      *slog.Logger
	pages    map[string]*template.Template
	sessions sessions
	signins  signins
	sampler  *sampler
	verify   verifier
	ctx      context.Context
}

// New builds the dashboard. Its queue sampler starts with the first page
// that shows queues and runs until cfg.Context ends.
func New(cfg Config) (*UI, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.Context == nil {
		cfg.Context = context.Background()
	}
	u := &UI{cfg: cfg, eng: cfg.Engine, st: cfg.Engine.Store(), log: cfg.Logger, ctx: cfg.Context,
		sessions: sessions{m: map[string]*session{}}}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	u.pages = pages
	u.sampler = newSampler(cfg.Context, u.st, cfg.SampleEvery, u.now)
	return u, nil
}

func (u *UI) now() time.Time { return u.eng.Clock().Now().UTC() }

var funcs = template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return ago(time.Since(t))
	},
	"agop": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return ago(time.Since(*t))
	},
	"dur": func(d time.Duration) string { return ago(d) },
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"short": func(s string) string {
		if r := []rune(s); len(r) > 16 {
			return string(r[:16]) + "…" // runes: a cut inside a character is not UTF-8
		}
		return s
	},
	"pct": func(p *float64) string {
		if p == nil {
			return "—"
		}
		return strings.TrimSuffix(strings.TrimSuffix(trimFloat(*p), ".0"), ".") + "%"
	},
	"f1":    trimFloat,
	"mul6":  func(v float64) float64 { return v * 6 }, // percent → the 600-wide bar
	"deref": func(b *bool) bool { return b != nil && *b },
	"add":   func(a, b int) int { return a + b },
	"us": func(v float64) string {
		if v >= 1000 {
			return trimFloat(v/1000) + " ms"
		}
		return trimFloat(v) + " µs"
	},
	"terminal": func(s host.TaskState) bool { return s.Terminal() },
}

// parsePages builds one template set per page: the layout, the shared
// partials and the page's own file.
func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("base").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" || name == "partials" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	out["partials"] = base
	return out, nil
}

// Mount registers the dashboard's routes on e under /ui. Middleware is
// attached per route, not to a group, so a wrong method still gets the
// gate's 405 with Allow.
func (u *UI) Mount(e *echo.Echo) {
	e.GET("/ui", func(c echo.Context) error { return c.Redirect(http.StatusSeeOther, "/ui/") })
	static, _ := fs.Sub(staticFS, "static")
	fileServer := http.StripPrefix("/ui/static/", http.FileServer(http.FS(filesOnly{static})))
	e.GET("/ui/static/*", func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "public, max-age=300")
		fileServer.ServeHTTP(c.Response(), c.Request())
		return nil
	}, u.headers)
	open := []echo.MiddlewareFunc{u.headers, u.errorsAsPages}
	e.GET("/ui/login", u.loginPage, open...)
	e.POST("/ui/login", u.login, open...)
	if u.cfg.SignIn != nil {
		e.GET("/ui/oauth/start", u.oauthStart, open...)
		e.GET("/ui/oauth/callback", u.oauthCallback, open...)
	}
	in := []echo.MiddlewareFunc{u.headers, u.errorsAsPages, u.signedIn}
	e.POST("/ui/logout", u.logout, in...)
	e.GET("/ui/", u.overview, in...)
	e.GET("/ui/fragments/queues", u.queuesFragment, in...)
	e.POST("/ui/tenant", u.switchTenant, in...)
	e.GET("/ui/tasks", u.tasks, in...)
	e.POST("/ui/find-task", u.findTask, in...)
	e.GET("/ui/tasks/:id", u.task, in...)
	e.GET("/ui/tasks/:id/progress", u.progressFragment, in...)
	e.POST("/ui/tasks/:id/cancel", u.cancel, in...)
	e.GET("/ui/workflows", u.workflows, in...)
	e.GET("/ui/workflows/:id", u.workflow, in...)
	e.POST("/ui/workflows/:id/cancel", u.cancelWorkflow, in...)
	e.GET("/ui/dead-letters", u.deadLetters, in...)
	e.POST("/ui/dead-letters/redrive", u.redrive, in...)
	e.GET("/ui/schedules", u.schedules, in...)
	e.GET("/ui/workers", u.workers, in...)
	e.GET("/ui/plugins", u.plugins, in...)
	e.GET("/ui/obligations", u.obligations, in...)
	e.GET("/ui/ledger", u.ledger, in...)
	e.GET("/ui/fragments/ledger", u.ledgerFragment, in...)
	e.POST("/ui/ledger/verify", u.startVerify, in...)
}

// filesOnly is a file system whose folders do not exist: the file server
// lists none, however the path names one ("/", "%2F", "./").
type filesOnly struct{ fs.FS }

func (f filesOnly) Open(name string) (fs.File, error) {
	file, err := f.FS.Open(name)
	if err != nil {
		return nil, err
	}
	if st, err := file.Stat(); err != nil || st.IsDir() {
		file.Close()
		return nil, fs.ErrNotExist
	}
	return file, nil
}

// headers sets the security headers of every dashboard answer: no framing,
// no inline script, no caching of pages that show tenant data.
func (u *UI) headers(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		return next(c)
	}
}

// errorsAsPages turns an error into an HTML page with its status, machine
// code and detail.
func (u *UI) errorsAsPages(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err == nil || c.Response().Committed {
			return err
		}
		code := host.ErrorCode(err)
		detail := err.Error()
		if he, ok := err.(*echo.HTTPError); ok {
			code, detail = http.StatusText(he.Code), strings.TrimSpace(strings.TrimPrefix(he.Error(), "code="))
			return u.render(c, he.Code, "error", page{Title: "Error", Data: errorData{Code: code, Detail: detail}})
		}
		if e, ok := err.(*host.Error); ok {
			detail = e.Detail
		}
		status := host.HTTPStatus(code)
		if status >= 500 {
			u.log.Error("dashboard page failed", "path", c.Request().URL.Path, "err", err)
		}
		p := page{Title: "Error", Data: errorData{Code: code, Detail: detail}}
		if s := sessionOf(c); s != nil {
			p.fill(s)
		}
		return u.render(c, status, "error", p)
	}
}

type errorData struct{ Code, Detail string }

// page is what every page template gets.
type page struct {
	Title     string
	Nav       string
	Tenant    string
	Principal string
	Operator  bool
	CSRF      string
	Flash     string
	Version   string
	Data      any
	// SignIn offers sign-in through the identity provider (login page).
	SignIn bool
}

func (p *page) fill(s *session) {
	p.Tenant, p.Principal, p.Operator, p.CSRF = s.tenant, s.principal, s.operator(), s.csrf
}

func (u *UI) newPage(c echo.Context, title, nav string, data any) page {
	p := page{Title: title, Nav: nav, Data: data, Version: u.cfg.Version}
	if s := sessionOf(c); s != nil {
		p.fill(s)
		p.Flash = u.sessions.takeFlash(s.id)
	}
	return p
}

func (u *UI) render(c echo.Context, status int, name string, p page) error {
	if p.Version == "" {
		p.Version = u.cfg.Version
	}
	p.SignIn = u.cfg.SignIn != nil
	t := u.pages[name]
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "layout", p); err != nil {
		return err
	}
	return c.HTML(status, b.String())
}

// fragment renders one partial template alone (for polling).
func (u *UI) fragment(c echo.Context, name string, data any) error {
	var b strings.Builder
	if err := u.pages["partials"].ExecuteTemplate(&b, name, data); err != nil {
		return err
	}
	return c.HTML(http.StatusOK, b.String())
}

func (u *UI) flash(c echo.Context, msg string) {
	if s := sessionOf(c); s != nil {
		u.sessions.change(s.id, func(s *session) { s.flash = msg })
	}
}

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// loginPage is GET /ui/login: the sign-in form, with a fresh CSRF token in
// a cookie and in the form (double submit), since no session exists yet.
func (u *UI) loginPage(c echo.Context) error {
	tok := randomToken()
	u.setCookie(c, loginCookie, tok, 600)
	return u.render(c, http.StatusOK, "login", page{Title: "Sign in", CSRF: tok})
}

// login is POST /ui/login: key (form field, never the URL) → session.
func (u *UI) login(c echo.Context) error {
	ck, err := c.Request().Cookie(loginCookie)
	// Both from the form body only: a key or a token in the URL's query
	// would land in logs and histories.
	if err != nil || !sameToken(c.Request().PostFormValue(csrfField), ck.Value) {
		return host.Errorf(host.CodeForbidden, "the sign-in form's CSRF token is missing or wrong; reload the sign-in page")
	}
	key := strings.TrimSpace(c.Request().PostFormValue("key"))
	a, err := u.cfg.Authenticate(c.Request().Context(), key)
	if err != nil {
		if host.IsCode(err, host.CodeUnauthorized) || host.IsCode(err, host.CodeBadRequest) {
			tok := randomToken()
			u.setCookie(c, loginCookie, tok, 600)
			return u.render(c, http.StatusUnauthorized, "login", page{Title: "Sign in", CSRF: tok, Data: "That key is not valid or was revoked."})
		}
		return err
	}
	if a.Role != engine.RoleAdmin {
		tok := randomToken()
		u.setCookie(c, loginCookie, tok, 600)
		return u.render(c, http.StatusForbidden, "login", page{Title: "Sign in", CSRF: tok, Data: "The dashboard needs an admin key; this one has role " + a.Role + "."})
	}
	if wait := u.signins.take(hashKey(key), u.now()); wait > 0 {
		secs := int(wait/time.Second) + 1
		tok := randomToken()
		u.setCookie(c, loginCookie, tok, 600)
		c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
		return u.render(c, http.StatusTooManyRequests, "login", page{Title: "Sign in", CSRF: tok,
			Data: "This key signed in too often; try again in " + strconv.Itoa(secs) + " s."})
	}
	s := u.sessions.create(hashKey(key), a, u.now())
	u.setCookie(c, loginCookie, "", -1)
	u.setCookie(c, sessionCookie, s.id, int(sessionMax/time.Second))
	return c.Redirect(http.StatusSeeOther, "/ui/")
}

// logout is POST /ui/logout.
func (u *UI) logout(c echo.Context) error {
	u.sessions.end(sessionOf(c).id)
	u.setCookie(c, sessionCookie, "", -1)
	return c.Redirect(http.StatusSeeOther, "/ui/login")
}

// switchTenant is POST /ui/tenant: an operator picks the tenant to look at.
func (u *UI) switchTenant(c echo.Context) error {
	s := sessionOf(c)
	t := strings.TrimSpace(c.FormValue("tenant"))
	if !s.operator() && t != s.keyTenant {
		return host.Errorf(host.CodeForbidden, "an admin of tenant %q cannot look at tenant %q", s.keyTenant, t)
	}
	if !tenantPattern.MatchString(t) {
		return host.Errorf(host.CodeBadRequest, "not a tenant name: %q", t)
	}
	u.sessions.change(s.id, func(s *session) { s.tenant = t })
	return c.Redirect(http.StatusSeeOther, "/ui/")
}
