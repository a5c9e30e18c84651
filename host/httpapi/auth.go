package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// KeyPrefix starts every API key, as the spec spells them ("agw_abc123...").
const KeyPrefix = "agw_"

// DefaultTenant is the tenant of keys created without one.
const DefaultTenant = "default"

var keyEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

var (
	tenantPattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$`)
	principalPattern = host.PrincipalPattern
)

// HashKey returns the stored form of an API key: the hex sha256 of the key.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewKeyRequest describes an API key to create.
type NewKeyRequest struct {
	Role      string `json:"role"`
	Principal string `json:"principal"`
	Tenant    string `json:"tenant,omitempty"`
}

// CreatedKey is a new key: its stored record and the secret, shown only once.
type CreatedKey struct {
	store.Key
	APIKey string `json:"api_key"`
}

// CreateKey makes a new API key "agw_" + 32 random bytes (base32), stores
// only its sha256 hash and returns the secret once. Roles are admin, agent
// and worker; a worker's principal is its worker id and must have the
// {type}.{instance} form.
func CreateKey(ctx context.Context, st store.Store, req NewKeyRequest) (*CreatedKey, error) {
	if req.Tenant == "" {
		req.Tenant = DefaultTenant
	}
	switch req.Role {
	case engine.RoleAdmin, engine.RoleAgent, engine.RoleWorker:
	default:
		return nil, badRequest("role must be admin, agent or worker, got %q", req.Role)
	}
	if !tenantPattern.MatchString(req.Tenant) {
		return nil, badRequest("tenant must match %s", tenantPattern)
	}
	if !principalPattern.MatchString(req.Principal) {
		return nil, badRequest("principal must match %s", principalPattern)
	}
	// The gate's own name is what its receipts (task.assigned, escalations,
	// checkpoints) come from: a key under it would read every receipt the
	// gate issued in its tenant and write words that read as the gate's.
	if strings.EqualFold(req.Principal, engine.GatePrincipal) {
		return nil, host.Errorf(host.CodeForbidden, "principal %q is the gate's own and cannot hold a key", req.Principal)
	}
	if req.Role == engine.RoleWorker && !host.ValidWorkerID(req.Principal) {
		return nil, host.Errorf(host.CodeInvalidWorkerID, "a worker key's principal is its worker id and must match pattern {type}.{instance}")
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	secret := KeyPrefix + strings.ToLower(keyEncoding.EncodeToString(raw[:]))
	k := store.Key{
		ID: host.NewID(host.PrefixKey), Hash: HashKey(secret), Prefix: secret[:len(KeyPrefix)+6],
		Role: req.Role, Tenant: req.Tenant, Principal: req.Principal, CreatedAt: time.Now().UTC().Truncate(time.Microsecond),
	}
	if err := st.Update(ctx, func(tx store.Tx) error { return tx.PutKey(ctx, k) }); err != nil {
		return nil, storeErr(err)
	}
	return &CreatedKey{Key: k, APIKey: secret}, nil
}

// ListKeys returns every key (hashes are never shown).
func ListKeys(ctx context.Context, st store.Store) ([]store.Key, error) {
	var out []store.Key
	err := st.View(ctx, func(r store.Reader) error {
		var err error
		out, err = r.ListKeys(ctx)
		return err
	})
	return out, storeErr(err)
}

// RevokeKey revokes a key by id; a revoked key authenticates nothing.
func RevokeKey(ctx context.Context, st store.Store, id string) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	return storeErr(st.Update(ctx, func(tx store.Tx) error { return tx.RevokeKey(ctx, id, now) }))
}

// storeErr makes driver errors database_unavailable, as the engine does.
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*host.Error); ok || host.ErrorCode(err) != host.CodeInternal {
		return err
	}
	return host.WrapError(host.CodeDatabaseUnavailable, err, "the store failed: "+err.Error())
}

// Authenticate resolves a bearer key (with or without the "Bearer " prefix)
// to the Actor it stands for, reading the store every time. A missing,
// unknown or revoked key is an unauthorized error.
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

// Authenticator resolves bearer keys with a short-lived cache, so a busy
// worker does not cost a database read per call. Keys revoked through the
// same Authenticator stop working at once; a key revoked elsewhere (the
// offline CLI, another gate) stops within TTL.
type Authenticator struct {
	st  store.Store
	ttl time.Duration
	mu  sync.RWMutex
	m   map[string]authEntry // key hash -> actor
}

type authEntry struct {
	actor engine.Actor
	until time.Time
}

// NewAuthenticator returns an Authenticator over st that caches a resolved
// key for ttl (0 means 5 s; negative disables the cache).
func NewAuthenticator(st store.Store, ttl time.Duration) *Authenticator {
	if ttl == 0 {
		ttl = 5 * time.Second
	}
	return &Authenticator{st: st, ttl: ttl, m: map[string]authEntry{}}
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

// Authenticate resolves a bearer key like the package function, through the cache.
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
	actor, err := Authenticate(ctx, a.st, key)
	if err != nil {
		if ok {
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
}

// Middleware returns echo middleware that requires a valid bearer key and
// stores the caller's Actor in the echo context and the request's context.
func (a *Authenticator) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			bearer := c.Request().Header.Get(echo.HeaderAuthorization)
			actor, err := a.Authenticate(c.Request().Context(), bearer)
			if err != nil {
				if host.IsCode(err, host.CodeUnauthorized) {
					c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="asyncgate"`)
				}
				return err
			}
			// The key chooses the tenant; ?tenant= lets an operator pick another
			// only on the admin routes. Elsewhere it is refused, never ignored.
			if c.QueryParams().Has("tenant") && !strings.HasPrefix(c.Request().URL.Path, "/v1/admin/") &&
				c.QueryParam("tenant") != actor.Tenant {
				return badRequest("?tenant= applies to /v1/admin routes only; this key acts in tenant %q", actor.Tenant)
			}
			c.Set(ctxKeyActor, actor)
			ctx := context.WithValue(WithActor(c.Request().Context(), actor), keyHashKey{}, HashKey(BearerKey(bearer)))
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	}
}

const ctxKeyActor = "asyncgate.actor"

type actorKey struct{}

// WithActor returns a context that carries actor.
func WithActor(ctx context.Context, actor engine.Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFromContext returns the Actor the auth middleware stored in a request's
// context (for handlers mounted with WithRoutes, e.g. the MCP door).
func ActorFromContext(ctx context.Context) (engine.Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(engine.Actor)
	return a, ok
}

type keyHashKey struct{}

// KeyHashFromContext returns the stored hash of the key the auth middleware
// authenticated a request's caller with (for handlers that hold on to a
// caller beyond one request, e.g. the MCP door's event streams, and check
// again with AuthenticateHash that the key was not revoked since).
func KeyHashFromContext(ctx context.Context) (string, bool) {
	h, ok := ctx.Value(keyHashKey{}).(string)
	return h, ok && h != ""
}

// ActorOf returns the caller of an authenticated echo request.
func ActorOf(c echo.Context) engine.Actor {
	a, _ := c.Get(ctxKeyActor).(engine.Actor)
	return a
}

// requireRole refuses callers whose role is not in roles.
// requireOperator admits only admins of the default tenant, the gate's
// operators. The routes it guards act on the whole gate, across tenants (the
// outbox to the external ledger holds every tenant's receipts and results;
// a retention sweep archives every tenant's due tasks), so no other tenant's
// admin may read or drive them.
func requireOperator(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a := ActorOf(c); a.Role != engine.RoleAdmin || a.Tenant != DefaultTenant {
			return host.Errorf(host.CodeForbidden, "this route acts on every tenant's data and needs an admin key of the %q tenant; yours is a %s of tenant %q",
				DefaultTenant, a.Role, a.Tenant)
		}
		return next(c)
	}
}

func requireRole(roles ...string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			a := ActorOf(c)
			for _, r := range roles {
				if a.Role == r {
					return next(c)
				}
			}
			return host.Errorf(host.CodeForbidden, "this route needs a key with role %s; yours is %s", strings.Join(roles, " or "), a.Role)
		}
	}
}
