package auth

import (
	"context"
	"crypto/subtle"
	"strings"
	"sync"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Authenticate resolves a bearer credential (an Authorization header's
// value, with or without the "Bearer " prefix) to the Actor it stands for,
// reading the store every time. Today the credential is an API key; a
// missing, unknown or revoked one is an unauthorized error.
func Authenticate(ctx context.Context, st store.Store, bearer string) (engine.Actor, error) {
	key := BearerKey(bearer)
	if key == "" {
		return engine.Actor{}, host.Errorf(host.CodeUnauthorized, "an API key is required: Authorization: Bearer agw_…")
	}
	if !strings.HasPrefix(key, KeyPrefix) || len(key) > 200 {
		return engine.Actor{}, host.Errorf(host.CodeUnauthorized, "the API key is not valid")
	}
	return AuthenticateHash(ctx, st, HashKey(key))
}

// AuthenticateHash resolves the stored hash of a key (as KeyHashFromContext
// gives it) to the Actor it stands for, reading the store. An unknown or
// revoked key is an unauthorized error.
func AuthenticateHash(ctx context.Context, st store.Store, hash string) (engine.Actor, error) {
	var k *store.Key
	err := st.View(ctx, func(r store.Reader) error {
		var err error
		k, err = r.GetKeyByHash(ctx, hash)
		return err
	})
	if err != nil {
		if host.IsCode(err, host.CodeNotFound) {
			return engine.Actor{}, host.Errorf(host.CodeUnauthorized, "the API key is not valid")
		}
		return engine.Actor{}, storeErr(err)
	}
	if subtle.ConstantTimeCompare([]byte(k.Hash), []byte(hash)) != 1 || k.RevokedAt != nil {
		return engine.Actor{}, host.Errorf(host.CodeUnauthorized, "the API key is not valid or was revoked")
	}
	return engine.Actor{Tenant: k.Tenant, Principal: k.Principal, Role: k.Role}, nil
}

// BearerKey is the key of an Authorization header's value, with or without
// the "Bearer " prefix.
func BearerKey(bearer string) string {
	key := strings.TrimSpace(bearer)
	if len(key) > 7 && strings.EqualFold(key[:7], "bearer ") {
		key = strings.TrimSpace(key[7:])
	}
	return key
}

// Authenticator resolves bearer keys with a short-lived cache, so a busy
// worker does not cost a database read per call. Keys revoked through the
// same Authenticator stop working at once; a key revoked elsewhere (the
// offline CLI, another gate) stops within TTL.
type Authenticator struct {
	st  store.Store
	ttl time.Duration
	mu  sync.RWMutex
	m   map[string]authEntry // key hash -> actor
	// tokens, when set, resolves OAuth access tokens (tokens.go).
	tokens TokenVerifier
}

type authEntry struct {
	actor engine.Actor
	until time.Time
}

// StaleWhileUnavailable is how long past its TTL a cached key still
// resolves, under a context from AllowStale (only /metrics), while the
// store answers database_unavailable or not at all: a scraper keeps its
// series through a database outage. A key revoked elsewhere just before the
// outage reads /metrics for at most this long more; every other route
// needs the store's word.
const StaleWhileUnavailable = 5 * time.Minute

// staleProbe is how long the store has to resolve a key the cache still
// holds as stale before it is taken as unavailable.
const staleProbe = time.Second

// NewAuthenticator returns an Authenticator over st that caches a resolved
// key for ttl (0 means 5 s; negative disables the cache).
func NewAuthenticator(st store.Store, ttl time.Duration) *Authenticator {
	if ttl == 0 {
		ttl = 5 * time.Second
	}
	return &Authenticator{st: st, ttl: ttl, m: map[string]authEntry{}}
}

// Authenticate resolves a bearer credential like the package function, through the cache.
func (a *Authenticator) Authenticate(ctx context.Context, bearer string) (engine.Actor, error) {
	key := BearerKey(bearer)
	if a.ttl < 0 || key == "" {
		return Authenticate(ctx, a.st, key)
	}
	h := HashKey(key)
	now := time.Now()
	a.mu.RLock()
	e, ok := a.m[h]
	a.mu.RUnlock()
	if ok && now.Before(e.until) {
		return e.actor, nil
	}
	stale := ok && staleAllowed(ctx) && now.Before(e.until.Add(StaleWhileUnavailable))
	rctx := ctx
	if stale {
		// A store that does not answer soon is taken as unavailable: the
		// key then answers from the cache at once, not after the store's
		// whole timeout (a scrape of /metrics has about 10 s).
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, staleProbe)
		defer cancel()
	}
	actor, err := Authenticate(rctx, a.st, key)
	if err != nil {
		// Unavailable: the store said so, or did not answer within the
		// probe. Never a refusal it did answer (a key revoked or unknown).
		refused := host.IsCode(err, host.CodeUnauthorized)
		unavailable := !refused && (host.IsCode(err, host.CodeDatabaseUnavailable) || rctx.Err() != nil && ctx.Err() == nil)
		if stale && unavailable {
			// The store cannot say; the key it last said was good stays
			// good for a while for /metrics, so a scraper keeps its series
			// through an outage (those the store does not back).
			markServedStale(ctx)
			return e.actor, nil
		}
		if ok && refused {
			// Forgotten only on the store's refusal: an outage keeps the
			// entry for /metrics' stale answer.
			a.mu.Lock()
			delete(a.m, h)
			a.mu.Unlock()
		}
		return actor, err
	}
	a.mu.Lock()
	if len(a.m) > 10000 { // bound the cache; a full reset is fine
		a.m = map[string]authEntry{}
	}
	a.m[h] = authEntry{actor: actor, until: now.Add(a.ttl)}
	a.mu.Unlock()
	return actor, nil
}

// Forget drops every cached key, so a revocation takes effect at once.
func (a *Authenticator) Forget() {
	a.mu.Lock()
	a.m = map[string]authEntry{}
	a.mu.Unlock()
	if a.tokens != nil {
		a.tokens.Forget()
	}
}
