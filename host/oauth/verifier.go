package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// signingAlgs are the asymmetric algorithms a token may be signed with.
var signingAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

// maxToken bounds a bearer token's length.
const maxToken = 16 << 10

// discoveryRetry is how long a failed discovery is remembered before it is
// tried again.
const discoveryRetry = 5 * time.Second

// Identity is who an accepted access token stands for.
type Identity struct {
	// Actor is the tenant, principal and role the token acts as.
	Actor engine.Actor
	// KeyHash is the stored hash of the principal's live key the token
	// acts through: a holder of the caller beyond one request (an MCP
	// session) checks it again to notice a revocation.
	KeyHash string
	// Issuer and Subject are the token's iss and sub.
	Issuer, Subject string
	// Expiry is when the token expires.
	Expiry time.Time
}

// Verifier checks access tokens against the configured issuers and maps
// them to principals. It is safe for concurrent use.
type Verifier struct {
	cfg     Config
	st      store.Store
	ttl     time.Duration
	client  *http.Client
	issuers map[string]*issuer
	fixed   map[string]bool // every rule's fixed principal, lower-cased

	mu    sync.Mutex
	cache map[string]Identity // sha256 of the token -> identity, until min(expiry, checked+ttl)
	until map[string]time.Time
}

type issuer struct {
	cfg      Issuer
	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	failed   time.Time
	err      error
	pending  chan struct{} // closed when the discovery under way ends
}

// New returns a Verifier for cfg (which must be valid and enabled) over the
// store whose keys tokens act through. An accepted token is remembered for
// ttl (never past its expiry), so a busy client does not cost a store read
// per request; 0 means 5 s, negative disables it. A revocation is noticed
// within ttl, as for API keys.
func New(cfg Config, st store.Store, ttl time.Duration) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("oauth: no issuers configured")
	}
	if ttl == 0 {
		ttl = 5 * time.Second
	}
	v := &Verifier{cfg: cfg, st: st, ttl: ttl, client: &http.Client{Timeout: 10 * time.Second},
		issuers: map[string]*issuer{}, fixed: map[string]bool{}, cache: map[string]Identity{}, until: map[string]time.Time{}}
	for _, is := range cfg.Issuers {
		v.issuers[is.Issuer] = &issuer{cfg: is}
		for _, r := range is.Map {
			if r.Principal != "" {
				v.fixed[strings.ToLower(r.Principal)] = true
			}
		}
	}
	return v, nil
}

// Config returns the verifier's configuration.
func (v *Verifier) Config() Config { return v.cfg }

// IsToken reports whether a bearer value is for Authenticate rather than an
// API key: anything that does not start with the keys' "agw_".
func IsToken(bearer string) bool { return bearer != "" && !strings.HasPrefix(bearer, "agw_") }

// tokenError marks a refusal of a presented token, for Challenge.
type tokenError struct{ msg string }

func (e *tokenError) Error() string { return e.msg }

func refuse(code, format string, args ...any) error {
	detail := fmt.Sprintf(format, args...)
	return host.WrapError(code, &tokenError{msg: detail}, detail)
}

// issuerUnavailable answers a token that cannot be judged because its
// issuer's discovery document or keys cannot be read now: not a fault of
// the token, so not invalid_token (which sends a client back through its
// sign-in), but a 503 to retry.
func issuerUnavailable() error {
	return host.Errorf(host.CodeIssuerUnavailable, "the signing keys of the access token's issuer cannot be read now; the token was not judged: retry it later")
}

// Authenticate verifies an access token and returns the identity it maps
// to. Errors: unauthorized (not a JWT, unknown issuer, bad signature, wrong
// audience, expired, or a principal without a live key), insufficient_scope
// (a required scope missing), token_not_mapped (no rule matches),
// issuer_unavailable when the issuer's discovery document or keys cannot
// be read, and database_unavailable when the store cannot be read.
func (v *Verifier) Authenticate(ctx context.Context, token string) (Identity, error) {
	if len(token) > maxToken {
		return Identity{}, refuse(host.CodeUnauthorized, "the access token is longer than %d bytes", maxToken)
	}
	sum := sha256.Sum256([]byte(token))
	ck := hex.EncodeToString(sum[:])
	now := time.Now()
	if v.ttl > 0 {
		v.mu.Lock()
		id, ok := v.cache[ck]
		until := v.until[ck]
		v.mu.Unlock()
		if ok && now.Before(until) {
			return id, nil
		}
	}
	id, err := v.authenticate(ctx, token)
	if err != nil || v.ttl < 0 {
		return id, err
	}
	until := now.Add(v.ttl)
	if id.Expiry.Before(until) {
		until = id.Expiry
	}
	v.mu.Lock()
	if len(v.cache) >= 10000 { // bound the cache; a full reset only costs reads
		v.cache, v.until = map[string]Identity{}, map[string]time.Time{}
	}
	v.cache[ck], v.until[ck] = id, until
	v.mu.Unlock()
	return id, nil
}

// Forget drops every remembered token, so a revocation takes effect at once.
func (v *Verifier) Forget() {
	v.mu.Lock()
	v.cache, v.until = map[string]Identity{}, map[string]time.Time{}
	v.mu.Unlock()
}

func (v *Verifier) authenticate(ctx context.Context, token string) (Identity, error) {
	parsed, err := jwt.ParseSigned(token, signingAlgs)
	if err != nil {
		return Identity{}, refuse(host.CodeUnauthorized, "the bearer is neither an API key (agw_…) nor a signed JWT access token")
	}
	if err := checkType(parsed.Headers[0]); err != nil {
		return Identity{}, err
	}
	var head struct {
		Issuer string `json:"iss"`
	}
	if err := parsed.UnsafeClaimsWithoutVerification(&head); err != nil || head.Issuer == "" {
		return Identity{}, refuse(host.CodeUnauthorized, "the access token names no issuer (iss)")
	}
	is, ok := v.issuers[head.Issuer]
	if !ok {
		return Identity{}, refuse(host.CodeUnauthorized, "the access token's issuer %q is not one this gate trusts", capText(head.Issuer))
	}
	verifier, err := is.get(ctx, v.client, v.cfg.Resource)
	if err != nil {
		if ctx.Err() == nil {
			slog.Warn("oauth: the issuer's discovery failed", "issuer", head.Issuer, "err", err)
		}
		return Identity{}, issuerUnavailable()
	}
	var sigOut signatureOutcome
	tok, err := verifier.Verify(context.WithValue(oidc.ClientContext(ctx, v.client), outcomeKey{}, &sigOut), token)
	if err != nil {
		var exp *oidc.TokenExpiredError
		switch {
		case sigOut.unavailable:
			return Identity{}, issuerUnavailable()
		case sigOut.keyAlg != "":
			return Identity{}, refuse(host.CodeUnauthorized, "the access token's header alg %q is not %q, the alg its signing key (kid %q) is published for (RFC 8725 §3.1)",
				capText(sigOut.tokenAlg), capText(sigOut.keyAlg), capText(sigOut.kid))
		case errors.As(err, &exp) && exp.Expiry.IsZero():
			return Identity{}, refuse(host.CodeUnauthorized, "the access token carries no exp: an access token must say when it expires (RFC 9068 §2.2)")
		case errors.As(err, &exp):
			return Identity{}, refuse(host.CodeUnauthorized, "the access token expired at %s", exp.Expiry.UTC().Format(time.RFC3339))
		case strings.Contains(err.Error(), "expected audience"):
			return Identity{}, refuse(host.CodeUnauthorized, "the access token is for another audience; this gate is %q (its aud must name it)", v.cfg.Resource)
		}
		// The cause may hold text of the issuer's responses: it goes to the
		// log, the caller gets a fixed message.
		slog.Info("oauth: an access token does not verify", "issuer", head.Issuer, "err", err)
		return Identity{}, refuse(host.CodeUnauthorized, "the access token does not verify (its signature, key or claims)")
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return Identity{}, refuse(host.CodeUnauthorized, "the access token's claims cannot be read")
	}
	have := scopesOf(claims)
	for _, s := range v.cfg.Scopes {
		if !slices.Contains(have, s) {
			return Identity{}, refuse(host.CodeInsufficientScope, "the access token lacks scope %q (this gate requires %s)", s, strings.Join(v.cfg.Scopes, " "))
		}
	}
	rule, principal, err := is.cfg.match(claims, v.fixed)
	if err != nil {
		return Identity{}, err
	}
	tenant := rule.Tenant
	if tenant == "" {
		tenant = DefaultTenant
	}
	key, err := v.liveKey(ctx, tenant, principal, rule.Role)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Actor: engine.Actor{Tenant: tenant, Principal: principal, Role: rule.Role}, KeyHash: key.Hash,
		Issuer: tok.Issuer, Subject: tok.Subject, Expiry: tok.Expiry}, nil
}

// checkType refuses a token whose JOSE header typ says it is something
// other than an access token: absent, "at+jwt" (RFC 9068 §2.1) and "JWT"
// (what most providers write on their access tokens) are accepted,
// compared without case and with or without "application/" (RFC 7515
// §4.1.9); anything else (a DPoP proof, a logout token, a security event
// token, …) is some other JWT that must not pass for an access token
// (RFC 8725 §3.11). An ID token typed "JWT" still needs aud to name this
// gate, which a provider writes only on tokens issued for it.
func checkType(h jose.Header) error {
	v, ok := h.ExtraHeaders[jose.HeaderType]
	if !ok {
		return nil
	}
	typ, _ := v.(string)
	switch strings.TrimPrefix(strings.ToLower(typ), "application/") {
	case "at+jwt", "jwt":
		return nil
	}
	if _, isString := v.(string); !isString {
		return refuse(host.CodeUnauthorized, "the access token's header typ is not a string")
	}
	return refuse(host.CodeUnauthorized, "the access token's header typ %q says it is not an access token: this gate accepts typ at+jwt or JWT, or none (RFC 9068 §2.1)", capText(typ))
}

// discoveryTimeout bounds one reading of an issuer's discovery document.
const discoveryTimeout = 10 * time.Second

// get returns the issuer's verifier, reading its discovery document the
// first time (and again, at most every discoveryRetry, while that fails).
// The reading runs apart from ctx, under its own timeout: a caller that
// gives up returns at once with ctx's error, which is not remembered, and
// the reading goes on for the next caller.
func (is *issuer) get(ctx context.Context, client *http.Client, audience string) (*oidc.IDTokenVerifier, error) {
	is.mu.Lock()
	if is.verifier != nil {
		defer is.mu.Unlock()
		return is.verifier, nil
	}
	if is.err != nil && time.Since(is.failed) < discoveryRetry {
		defer is.mu.Unlock()
		return nil, is.err
	}
	if is.pending == nil {
		is.pending = make(chan struct{})
		go is.discover(context.WithoutCancel(ctx), client, audience, is.pending)
	}
	done := is.pending
	is.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.verifier != nil {
		return is.verifier, nil
	}
	return nil, is.err
}

// discover reads the issuer's discovery document (or takes its jwks_uri
// from the configuration) and records the verifier or the failure, then
// closes done.
func (is *issuer) discover(ctx context.Context, client *http.Client, audience string, done chan struct{}) {
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	verifier, err := is.newVerifier(ctx, client, audience)
	is.mu.Lock()
	defer is.mu.Unlock()
	if err != nil {
		is.err, is.failed = err, time.Now()
	} else {
		is.verifier, is.err = verifier, nil
	}
	is.pending = nil
	close(done)
}

func (is *issuer) newVerifier(ctx context.Context, client *http.Client, audience string) (*oidc.IDTokenVerifier, error) {
	cfg := &oidc.Config{ClientID: audience, SupportedSigningAlgs: algNames()}
	if is.cfg.JWKSURI != "" {
		return oidc.NewVerifier(is.cfg.Issuer, newKeySet(client, is.cfg.JWKSURI), cfg), nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, client), is.cfg.Issuer)
	if err != nil {
		return nil, err
	}
	var disc struct {
		JWKSURI string `json:"jwks_uri"`
	}
	if err := p.Claims(&disc); err != nil || disc.JWKSURI == "" {
		return nil, errors.New("the discovery document names no jwks_uri")
	}
	return oidc.NewVerifier(is.cfg.Issuer, newKeySet(client, disc.JWKSURI), cfg), nil
}

func algNames() []string {
	out := make([]string, len(signingAlgs))
	for i, a := range signingAlgs {
		out[i] = string(a)
	}
	return out
}

// scopesOf reads a token's scopes: the space-separated scope claim (RFC
// 9068), or scp as a string or an array (as some providers write it).
func scopesOf(claims map[string]any) []string {
	var out []string
	for _, name := range []string{"scope", "scp"} {
		switch v := claims[name].(type) {
		case string:
			out = append(out, strings.Fields(v)...)
		case []any:
			for _, s := range v {
				if s, ok := s.(string); ok {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// claimHas reports whether claim value v equals want (a string) or contains
// it (an array); any value matches an empty want.
func claimHas(v any, want string) bool {
	switch v := v.(type) {
	case string:
		return want == "" || v == want
	case []any:
		if want == "" {
			return len(v) > 0
		}
		for _, s := range v {
			if s == want {
				return true
			}
		}
	case bool, float64:
		return want == "" || fmt.Sprint(v) == want
	}
	return false
}

// match returns the first rule that matches claims and the principal it
// names. A principal taken from a claim is the rule's prefix followed by
// the claim's value; it must be a valid principal name, not the gate's
// own, and none of the fixed principals (fixed) of any rule.
func (is Issuer) match(claims map[string]any, fixed map[string]bool) (Rule, string, error) {
	for _, r := range is.Map {
		v, ok := claims[r.Claim]
		if !ok || !claimHas(v, r.Value) {
			continue
		}
		if r.Principal != "" {
			return r, r.Principal, nil
		}
		value, _ := claims[r.PrincipalClaim].(string)
		if r.PrincipalPrefix == "" || value == "" { // Validate refuses such a rule
			return r, "", refuse(host.CodeTokenNotMapped, "the access token's %s claim is empty or not a string", r.PrincipalClaim)
		}
		p := r.PrincipalPrefix + value
		if !host.ValidPrincipal(p) || strings.EqualFold(p, engine.GatePrincipal) {
			return r, "", refuse(host.CodeTokenNotMapped, "the access token's %s claim %q does not make a valid principal name (%s)", r.PrincipalClaim, capText(value), host.PrincipalPattern)
		}
		if r.Role == engine.RoleWorker && !host.ValidWorkerID(p) {
			return r, "", refuse(host.CodeTokenNotMapped, "the access token's %s claim %q does not make a worker id ({type}.{instance}) after prefix %q: a worker's principal is its worker id", r.PrincipalClaim, capText(value), r.PrincipalPrefix)
		}
		if fixed[strings.ToLower(p)] {
			return r, "", refuse(host.CodeTokenNotMapped, "the access token's %s claim makes principal %q, which a fixed rule names: refused", r.PrincipalClaim, p)
		}
		return r, p, nil
	}
	sub, _ := claims["sub"].(string)
	return Rule{}, "", refuse(host.CodeTokenNotMapped, "no oauth mapping of issuer %q matches this access token (sub %q): add a rule to oauth.issuers[].map", is.Issuer, capText(sub))
}

// liveKey returns the principal's unrevoked key of role in tenant: the
// switch that admits its tokens.
func (v *Verifier) liveKey(ctx context.Context, tenant, principal, role string) (store.Key, error) {
	var keys []store.Key
	err := v.st.View(ctx, func(r store.Reader) error {
		var err error
		keys, err = r.ListKeys(ctx)
		return err
	})
	if err != nil {
		return store.Key{}, host.WrapError(host.CodeDatabaseUnavailable, err, "the store failed: "+err.Error())
	}
	elsewhere := false
	for _, k := range keys {
		if k.Principal != principal || k.RevokedAt != nil {
			continue
		}
		if k.Tenant == tenant && k.Role == role {
			return k, nil
		}
		elsewhere = true
	}
	detail := fmt.Sprintf("the access token maps to principal %q (%s of tenant %q), which holds no live %s key there: its tokens are refused until it does (gate keys create --tenant %s --principal %s --role %s); a revoked key refuses them",
		principal, role, tenant, role, tenant, principal, role)
	if elsewhere {
		detail += "; its keys of another tenant or role do not count"
	}
	return store.Key{}, host.WrapError(host.CodeUnauthorized, &tokenError{msg: detail}, detail)
}

// MCPPath is where the gate serves MCP (mcpapi.Path): tokens are always
// accepted there.
const MCPPath = "/mcp"

// Covers reports whether tokens are accepted on a request path: /mcp, and
// the HTTP API (/v1/…) when Config.HTTPAPI is set.
func (v *Verifier) Covers(path string) bool {
	return path == MCPPath || strings.HasPrefix(path, MCPPath+"/") || (v.cfg.HTTPAPI && strings.HasPrefix(path, "/v1/"))
}

// VerifyToken is Authenticate for the HTTP doors: the actor a token stands
// for, the hash of the key it acts through, and when the token expires.
func (v *Verifier) VerifyToken(ctx context.Context, token string) (engine.Actor, string, time.Time, error) {
	id, err := v.Authenticate(ctx, token)
	return id.Actor, id.KeyHash, id.Expiry, err
}

// InvalidToken is err, a refusal (unauthorized) of a request that came
// with an access token, as a refusal of that token, as Authenticate's
// are: its Challenge says error="invalid_token".
func InvalidToken(err error) error {
	if err == nil {
		return nil
	}
	detail := host.ErrorDetail(err)
	return host.WrapError(host.ErrorCode(err), &tokenError{msg: detail}, detail)
}

// Challenge is the WWW-Authenticate value of a refusal with err (see
// Config.Challenge).
func (v *Verifier) Challenge(err error) string { return v.cfg.Challenge(err) }

// maxEcho bounds how much of a token's own text (a claim, its iss) a
// refusal repeats back.
const maxEcho = 64

// capText shortens s to maxEcho bytes for a refusal's detail.
func capText(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return strings.ToValidUTF8(s[:maxEcho], "") + "…"
}
