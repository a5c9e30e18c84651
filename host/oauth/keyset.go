package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// jwksRefetch is how often, at most, an issuer's key set is read again
// for a token that names a key it does not hold.
var jwksRefetch = 30 * time.Second

// A key set read is fresh for the max-age of its response's Cache-Control
// held to [jwksMinAge, jwksMaxAge]; for jwksDefaultAge without one; for
// jwksMinAge with no-cache or no-store. Past that the next token that uses
// it has it read again, and tokens wait for that read (a stale set is not
// served while the provider answers). While it cannot be read again (the
// provider down), the
// set held is served for jwksStaleLimit past its freshness and then no
// longer: the issuer's tokens are answered issuer_unavailable until a read
// succeeds.
var (
	jwksMinAge     = time.Minute
	jwksDefaultAge = 10 * time.Minute
	jwksMaxAge     = time.Hour
	jwksStaleLimit = time.Hour
)

// maxJWKS bounds a key set document.
const maxJWKS = 1 << 20

// keySet is an issuer's signing keys (an oidc.KeySet). It reads the JWKS
// on first use; again once the set held is past its freshness (see
// jwksDefaultAge); and again for a token that names a key it does not hold
// (the issuer rotated its keys), but at most once per jwksRefetch however
// many such tokens come: a forged token with a made-up kid costs the issuer
// nothing. A token whose key is held but whose signature fails never
// causes a read. Reads run apart from the lock: a token whose key is held
// in a fresh set never waits for one (nor for a read an unknown kid
// caused); a token whose key is not held, or whose issuer's set was never
// read or is past its freshness while the issuer answers, waits, within
// its context and discoveryTimeout.
type keySet struct {
	client                            *http.Client
	uri                               string
	refetch                           time.Duration
	minAge, defaultAge, maxAge, limit time.Duration

	mu      sync.Mutex
	keys    []jose.JSONWebKey // replaced, never changed in place
	read    bool              // a read succeeded once
	fresh   time.Time         // keys are fresh until then, served until fresh+limit
	fetched time.Time         // the last read started, whether or not it succeeded
	failed  bool              // the last read failed
	pending chan struct{}     // closed when the read under way ends
}

func newKeySet(client *http.Client, uri string) *keySet {
	return &keySet{client: client, uri: uri, refetch: jwksRefetch,
		minAge: jwksMinAge, defaultAge: jwksDefaultAge, maxAge: jwksMaxAge, limit: jwksStaleLimit}
}

// errUnknownKey and errSignature are why a token's signature is refused;
// errKeysUnavailable is why it cannot be judged.
var (
	errUnknownKey      = errors.New("the token names a key the issuer does not publish")
	errSignature       = errors.New("the token's signature does not verify")
	errKeysUnavailable = errors.New("the issuer's keys cannot be read now")
)

// errAlgMismatch is why a token is refused whose header alg is not the
// alg its key is published for.
var errAlgMismatch = errors.New("the token's alg is not its key's")

// outcomeKey marks a context whose *signatureOutcome VerifySignature fills
// in when it cannot judge a token or refuses it for its alg (go-oidc does
// not wrap its key set's errors).
type outcomeKey struct{}

// signatureOutcome is why VerifySignature did not verify a token, beyond
// its error: the issuer's keys could not be read (unavailable), or the
// token's alg (tokenAlg) is not the alg (keyAlg) its key kid names.
type signatureOutcome struct {
	unavailable           bool
	tokenAlg, keyAlg, kid string
}

// VerifySignature returns the payload of a token signed by one of the
// issuer's keys.
func (ks *keySet) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	jws, err := jose.ParseSigned(token, signingAlgs)
	if err != nil {
		return nil, fmt.Errorf("malformed token: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("the token does not carry exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	now := time.Now()
	ks.mu.Lock()
	if ks.pending == nil && !now.Before(ks.fresh) && (!ks.failed || now.Sub(ks.fetched) >= discoveryRetry) {
		// Never read, or past its freshness: read (again) in the
		// background, at most every discoveryRetry while reads fail.
		ks.start(ctx)
	}
	cands := ks.find(kid, now)
	if len(cands) == 0 && ks.pending == nil && ks.read && now.Sub(ks.fetched) >= ks.refetch {
		ks.start(ctx) // a key not held: perhaps a rotation
	}
	// A set past its freshness is served only while reads of it fail (the
	// issuer down): otherwise the token waits for the read under way, so a
	// key the issuer removed is refused from the first token after the
	// set's max age, however long after it comes.
	stale := ks.read && !now.Before(ks.fresh) && !ks.failed
	wait := ks.pending
	ks.mu.Unlock()
	if wait != nil && (len(cands) == 0 || stale) {
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, unavailable(ctx)
		}
		ks.mu.Lock()
		cands = ks.find(kid, time.Now())
		ks.mu.Unlock()
	}
	if len(cands) == 0 {
		ks.mu.Lock()
		usable, failed := ks.usable(time.Now()), ks.failed
		ks.mu.Unlock()
		if !usable || failed {
			return nil, unavailable(ctx)
		}
		return nil, errUnknownKey
	}
	// A key published with an alg verifies only tokens of that alg (RFC
	// 8725 §3.1): never another alg its key type would also verify (an
	// RS256 key for PS256 or RS512).
	alg := string(jws.Signatures[0].Header.Algorithm)
	var wrongAlg *jose.JSONWebKey
	for _, k := range cands {
		if k.Algorithm != "" && k.Algorithm != alg {
			wrongAlg = k
			continue
		}
		if payload, err := jws.Verify(k); err == nil {
			return payload, nil
		}
	}
	if wrongAlg != nil && kid != "" && len(cands) == 1 {
		if p, ok := ctx.Value(outcomeKey{}).(*signatureOutcome); ok {
			p.tokenAlg, p.keyAlg, p.kid = alg, wrongAlg.Algorithm, kid
		}
		return nil, errAlgMismatch
	}
	return nil, errSignature
}

// unavailable returns errKeysUnavailable, marking ctx's outcome.
func unavailable(ctx context.Context) error {
	if p, ok := ctx.Value(outcomeKey{}).(*signatureOutcome); ok {
		p.unavailable = true
	}
	return errKeysUnavailable
}

// usable reports whether the keys held may be served at now: read, and
// not stale beyond the limit.
func (ks *keySet) usable(now time.Time) bool {
	return ks.read && now.Before(ks.fresh.Add(ks.limit))
}

// find returns the signing keys a token with kid may be signed by: the
// key of that id, or every key when the token names none; none when the
// keys held may not be served.
func (ks *keySet) find(kid string, now time.Time) []*jose.JSONWebKey {
	if !ks.usable(now) {
		return nil
	}
	var out []*jose.JSONWebKey
	for i := range ks.keys {
		k := &ks.keys[i]
		if k.Use == "enc" || (kid != "" && k.KeyID != kid) {
			continue
		}
		out = append(out, k)
	}
	return out
}

// start begins a read of the key set, apart from ctx's cancellation;
// ks.mu is held.
func (ks *keySet) start(ctx context.Context) {
	done := make(chan struct{})
	ks.pending, ks.fetched = done, time.Now()
	go ks.fetch(context.WithoutCancel(ctx), done)
}

// fetch reads the key set under its own timeout, then closes done; on
// failure the keys held stay (within their limit) and the failure is
// logged.
func (ks *keySet) fetch(ctx context.Context, done chan struct{}) {
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	keys, maxAge, err := readJWKS(ctx, ks.client, ks.uri)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	defer close(done)
	ks.pending = nil
	if err != nil {
		ks.failed = true
		slog.Warn("oauth: reading an issuer's keys failed", "jwks_uri", ks.uri, "err", err,
			"serving_held_keys", ks.usable(time.Now()))
		return
	}
	ks.keys, ks.read, ks.failed, ks.fresh = keys, true, false, time.Now().Add(ks.age(maxAge))
}

// age is how long a key set read with Cache-Control max-age maxAge (-1:
// none; 0: no-cache, no-store or max-age=0) stays fresh.
func (ks *keySet) age(maxAge time.Duration) time.Duration {
	if maxAge < 0 {
		return ks.defaultAge
	}
	return min(max(maxAge, ks.minAge), ks.maxAge)
}

// cacheMaxAge reads a Cache-Control header's max-age: -1 without one, 0
// with no-cache or no-store.
func cacheMaxAge(h http.Header) time.Duration {
	out := time.Duration(-1)
	for _, d := range strings.Split(strings.Join(h.Values("Cache-Control"), ","), ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), "=")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "no-cache", "no-store":
			return 0
		case "max-age":
			n, err := strconv.ParseInt(strings.Trim(strings.TrimSpace(value), `"`), 10, 64)
			if err == nil && n >= 0 && out < 0 {
				out = time.Duration(min(n, 1<<31)) * time.Second
			}
		}
	}
	return out
}

func readJWKS(ctx context.Context, client *http.Client, uri string) ([]jose.JSONWebKey, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKS+1))
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("status %s: %.200q", resp.Status, body)
	}
	if len(body) > maxJWKS {
		return nil, 0, fmt.Errorf("the key set is longer than %d bytes", maxJWKS)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, 0, fmt.Errorf("the key set is not a JWKS: %w", err)
	}
	return set.Keys, cacheMaxAge(resp.Header), nil
}
