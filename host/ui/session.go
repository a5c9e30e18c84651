package ui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

const (
	sessionCookie = "asyncgate_session"
	loginCookie   = "asyncgate_login" // the sign-in form's CSRF token, before a session exists
	csrfField     = "csrf"
	sessionIdle   = 2 * time.Hour  // a session unused this long ends
	sessionMax    = 12 * time.Hour // and any session ends after this
	maxSessions   = 10000
	ctxSession    = "asyncgate.ui.session"
)

// session is one signed-in browser. It holds the hash of the key it signed
// in with, never the key: each request resolves the hash again, so a revoked
// key ends its sessions at once.
type session struct {
	id, csrf  string
	keyHash   string
	principal string
	keyTenant string // the key's tenant
	tenant    string // the tenant the pages show (operators may switch)
	created   time.Time
	used      time.Time
	flash     string
}

// operator reports whether the session's key is an admin of the default
// tenant, who may look at any tenant.
func (s *session) operator() bool { return s.keyTenant == defaultTenant }

// actor is who the engine sees acting for the session.
func (s *session) actor() engine.Actor {
	return engine.Actor{Tenant: s.tenant, Principal: s.principal, Role: engine.RoleAdmin}
}

const defaultTenant = "default"

// sessions is the in-memory session table.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (ss *sessions) create(keyHash string, a engine.Actor, now time.Time) *session {
	s := &session{id: randomToken(), csrf: randomToken(), keyHash: keyHash, principal: a.Principal,
		keyTenant: a.Tenant, tenant: a.Tenant, created: now, used: now}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.m) >= maxSessions {
		var oldest *session
		for id, o := range ss.m {
			if ss.expired(o, now) {
				delete(ss.m, id)
			} else if oldest == nil || o.used.Before(oldest.used) {
				oldest = o
			}
		}
		if len(ss.m) >= maxSessions && oldest != nil {
			delete(ss.m, oldest.id)
		}
	}
	ss.m[s.id] = s
	return s
}

func (ss *sessions) expired(s *session, now time.Time) bool {
	return now.Sub(s.used) > sessionIdle || now.Sub(s.created) > sessionMax
}

// get returns a copy of the live session id, marking it used.
func (ss *sessions) get(id string, now time.Time) (session, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[id]
	if s == nil {
		return session{}, false
	}
	if ss.expired(s, now) {
		delete(ss.m, id)
		return session{}, false
	}
	s.used = now
	return *s, true
}

func (ss *sessions) end(id string) {
	ss.mu.Lock()
	delete(ss.m, id)
	ss.mu.Unlock()
}

// change edits a live session.
func (ss *sessions) change(id string, fn func(*session)) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.m[id]; s != nil {
		fn(s)
	}
}

// takeFlash returns and clears the session's one-time message.
func (ss *sessions) takeFlash(id string) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[id]
	if s == nil {
		return ""
	}
	f := s.flash
	s.flash = ""
	return f
}

func (u *UI) setCookie(c echo.Context, name, value string, maxAge int) {
	c.SetCookie(&http.Cookie{Name: name, Value: value, Path: "/ui", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.Request().TLS != nil})
}

// resolveKey looks a session's key up again: it must still exist, be
// unrevoked and be an admin key.
func (u *UI) resolveKey(ctx context.Context, hash string) (engine.Actor, error) {
	var k *store.Key
	err := u.st.View(ctx, func(r store.Reader) error {
		var err error
		k, err = r.GetKeyByHash(ctx, hash)
		return err
	})
	if err != nil {
		if host.IsCode(err, host.CodeNotFound) {
			return engine.Actor{}, host.Errorf(host.CodeUnauthorized, "the key this session signed in with no longer exists")
		}
		return engine.Actor{}, err
	}
	if k.RevokedAt != nil {
		return engine.Actor{}, host.Errorf(host.CodeUnauthorized, "the key this session signed in with was revoked")
	}
	if k.Role != engine.RoleAdmin {
		return engine.Actor{}, host.Errorf(host.CodeForbidden, "the dashboard needs an admin key")
	}
	return engine.Actor{Tenant: k.Tenant, Principal: k.Principal, Role: k.Role}, nil
}

// signedIn requires a live session. GET requests without one go to the
// sign-in page; other methods are refused. Every request but GET and HEAD
// must carry the session's CSRF token in the form field "csrf".
func (u *UI) signedIn(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		var s session
		ok := false
		if ck, err := r.Cookie(sessionCookie); err == nil {
			s, ok = u.sessions.get(ck.Value, u.now())
		}
		if ok {
			if _, err := u.resolveKey(r.Context(), s.keyHash); err != nil {
				if !host.IsCode(err, host.CodeUnauthorized) && !host.IsCode(err, host.CodeForbidden) {
					return err
				}
				u.sessions.end(s.id)
				ok = false
			}
		}
		if !ok {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				return c.Redirect(http.StatusSeeOther, "/ui/login")
			}
			return host.Errorf(host.CodeUnauthorized, "sign in first: this session is missing or has ended")
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if !sameToken(c.FormValue(csrfField), s.csrf) {
				return host.Errorf(host.CodeForbidden, "the form's CSRF token is missing or wrong; reload the page and try again")
			}
		}
		c.Set(ctxSession, &s)
		return next(c)
	}
}

func sameToken(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func sessionOf(c echo.Context) *session {
	s, _ := c.Get(ctxSession).(*session)
	return s
}
