package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// jwksRefetch is how often, at most, an issuer's key set is read again
// for a token that names a key it does not hold.
var jwksRefetch = 30 * time.Second

// maxJWKS bounds a key set document.
const maxJWKS = 1 << 20

// keySet is an issuer's signing keys (an oidc.KeySet). It reads the JWKS
// on first use, and again for a token that names a key it does not hold
// (the issuer rotated its keys), but at most once per jwksRefetch however
// many such tokens come: a forged token with a made-up kid costs the issuer
// nothing. A token whose key is held but whose signature fails never
// causes a read.
type keySet struct {
	client  *http.Client
	uri     string
	refetch time.Duration

	mu      sync.Mutex
	keys    []jose.JSONWebKey
	read    bool      // a read succeeded once
	fetched time.Time // the last read, whether or not it succeeded
}

func newKeySet(client *http.Client, uri string) *keySet {
	return &keySet{client: client, uri: uri, refetch: jwksRefetch}
}

// errUnknownKey and errSignature are why a token's signature is refused.
var (
	errUnknownKey = errors.New("the token names a key the issuer does not publish")
	errSignature  = errors.New("the token's signature does not verify")
)

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
	ks.mu.Lock()
	defer ks.mu.Unlock()
	cands := ks.find(kid)
	if len(cands) == 0 && ks.mayRead() {
		ks.fetch(ctx)
		cands = ks.find(kid)
	}
	if len(cands) == 0 {
		return nil, errUnknownKey
	}
	for _, k := range cands {
		if payload, err := jws.Verify(k); err == nil {
			return payload, nil
		}
	}
	return nil, errSignature
}

// find returns the signing keys a token with kid may be signed by: the
// key of that id, or every key when the token names none.
func (ks *keySet) find(kid string) []*jose.JSONWebKey {
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

// mayRead reports whether the key set may be read again now: never read,
// or read longer than refetch ago (discoveryRetry while no read has
// succeeded yet).
func (ks *keySet) mayRead() bool {
	if ks.fetched.IsZero() {
		return true
	}
	wait := ks.refetch
	if !ks.read && discoveryRetry < wait {
		wait = discoveryRetry
	}
	return time.Since(ks.fetched) >= wait
}

// fetch reads the key set, apart from the caller's context and under its
// own timeout; on failure the keys held stay and the failure is logged.
func (ks *keySet) fetch(ctx context.Context) {
	ks.fetched = time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), discoveryTimeout)
	defer cancel()
	keys, err := readJWKS(ctx, ks.client, ks.uri)
	if err != nil {
		slog.Warn("oauth: reading an issuer's keys failed", "jwks_uri", ks.uri, "err", err)
		return
	}
	ks.keys, ks.read = keys, true
}

func readJWKS(ctx context.Context, client *http.Client, uri string) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKS+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s: %.200q", resp.Status, body)
	}
	if len(body) > maxJWKS {
		return nil, fmt.Errorf("the key set is longer than %d bytes", maxJWKS)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("the key set is not a JWKS: %w", err)
	}
	return set.Keys, nil
}
