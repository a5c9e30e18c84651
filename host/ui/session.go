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

	// maxSessionsPerKey bounds one key's live sessions: signing in again
	// past it ends that key's least recently used session, nobody else's.
	maxSessionsPerKey = 16
	// maxSessionsPerTenant bounds the sessions of one tenant's keys, so one
	// tenant's admins (who may make more admin keys) never fill the table;
	// when it is full all the same, the largest tenant gives one up.
	maxSessionsPerTenant = maxSessions / 4

	// A key signs in at most signinBurst times at once, then once per
	// signinEvery: sign-in is not a way to churn the session table.
	signinBurst = 20
	signinEvery = 3 * time.Second
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

// sessions is the in-memory session table, indexed by key and counted by
// the key's tenant.
type sessions struct {
	mu        sync.Mutex
	m         map[string]*session
	byKey     map[string][]*session
	perTenant map[string]int
}

func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// create adds a session for the key. Room is made from the key's own
// sessions first (maxSessionsPerKey), then its tenant's
// (maxSessionsPerTenant), and only with the whole table full from the
// tenant holding the most sessions: one key or tenant signing in over and
// over never signs out another tenant's admins.
func (ss *sessions) create(keyHash string, a engine.Actor, now time.Time) *session {
	s := &session{id: randomToken(), csrf: randomToken(), keyHash: keyHash, principal: a.Principal,
		keyTenant: a.Tenant, tenant: a.Tenant, created: now, used: now}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.byKey == nil {
		ss.byKey, ss.perTenant = map[string][]*session{}, map[string]int{}
	}
	own := ss.byKey[keyHash]
	for _, o := range own {
		if ss.expired(o, now) {
			ss.remove(o)
		}
	}
	if own = ss.byKey[keyHash]; len(own) >= maxSessionsPerKey {
		ss.remove(lruOf(own, nil))
	} else if ss.perTenant[a.Tenant] >= maxSessionsPerTenant || len(ss.m) >= maxSessions {
		// Rare (a tenant with this many sessions has hundreds of keys):
		// one pass drops the expired and finds whom to end.
		for _, o := range ss.m {
			if ss.expired(o, now) {
				ss.remove(o)
			}
		}
		if ss.perTenant[a.Tenant] >= maxSessionsPerTenant {
			ss.remove(lruOf(nil, func(o *session) bool { return o.keyTenant == a.Tenant }, ss.m))
		} else if len(ss.m) >= maxSessions {
			big := ""
			for t, n := range ss.perTenant {
				if big == "" || n > ss.perTenant[big] {
					big = t
				}
			}
			ss.remove(lruOf(nil, func(o *session) bool { return o.keyTenant == big }, ss.m))
		}
	}
	ss.m[s.id] = s
	ss.byKey[keyHash] = append(ss.byKey[keyHash], s)
	ss.perTenant[a.Tenant]++
	return s
}

// lruOf returns the least recently used session of list, or of the
// sessions in the maps that match.
func lruOf(list []*session, match func(*session) bool, maps ...map[string]*session) *session {
	var out *session
	for _, o := range list {
		if out == nil || o.used.Before(out.used) {
			out = o
		}
	}
	for _, m := range maps {
		for _, o := range m {
			if match(o) && (out == nil || o.used.Before(out.used)) {
				out = o
			}
		}
	}
	return out
}

// remove drops s from the table and its indexes; ss.mu is held.
func (ss *sessions) remove(s *session) {
	if s == nil || ss.m[s.id] != s {
		return
	}
	delete(ss.m, s.id)
	own := ss.byKey[s.keyHash]
	for i, o := range own {
		if o == s {
			own = append(own[:i:i], own[i+1:]...)
			break
		}
	}
	if len(own) == 0 {
		delete(ss.byKey, s.keyHash)
	} else {
		ss.byKey[s.keyHash] = own
	}
	if ss.perTenant[s.keyTenant]--; ss.perTenant[s.keyTenant] <= 0 {
		delete(ss.perTenant, s.keyTenant)
	}
}

// signins throttles sign-ins per key: a token bucket of signinBurst, one
// token back every signinEvery.
type signins struct {
	mu sync.Mutex
	m  map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// take spends one sign-in of the key, or returns how long until one is
// available.
func (si *signins) take(keyHash string, now time.Time) time.Duration {
	si.mu.Lock()
	defer si.mu.Unlock()
	if si.m == nil {
		si.m = map[string]*bucket{}
	}
	b := si.m[keyHash]
	if b == nil {
		if len(si.m) >= maxSessions {
			// Full buckets say nothing: forget them.
			for k, o := range si.m {
				if now.Sub(o.at) >= signinEvery*signinBurst {
					delete(si.m, k)
				}
			}
		}
		b = &bucket{tokens: signinBurst, at: now}
		si.m[keyHash] = b
	}
	b.tokens = min(signinBurst, b.tokens+float64(now.Sub(b.at))/float64(signinEvery))
	b.at = now
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) * float64(signinEvery))
	}
	b.tokens--
	return 0
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
		ss.remove(s)
		return session{}, false
	}
	s.used = now
	return *s, true
}

func (ss *sessions) end(id string) {
	ss.mu.Lock()
	ss.remove(ss.m[id])
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
			// The token is read from the form body only, never from the
			// query: a URL carrying it would land in logs and histories.
			if !sameToken(c.Request().PostFormValue(csrfField), s.csrf) {
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
