package oauth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/asyncgate/asyncgate/host"
)

// signWith makes an access token of iss for the gate, signed by key with
// alg under kid, with JOSE header typ (none when empty).
func signWith(t *testing.T, iss string, alg jose.SignatureAlgorithm, key any, kid, typ string) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithHeader("kid", kid)
	if typ != "" {
		opts = opts.WithType(jose.ContentType(typ))
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: iss, Subject: "svc", Audience: jwt.Audience{resource},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestTokenTypChecked accepts a token whose JOSE typ is absent or says
// it is an access token or a plain JWT (media types compared without
// case, "application/" optional), and refuses any other typ (a DPoP
// proof, a logout token, a security event) as invalid_token.
func TestTokenTypChecked(t *testing.T) {
	jwks := newJWKSServer(t)
	k1 := newKey(t)
	jwks.publish("k1", k1)
	const iss = "https://idp.test"
	v := newKeyVerifier(t, iss, jwks.URL)
	ctx := context.Background()
	for _, typ := range []string{"", "at+jwt", "AT+JWT", "application/at+jwt", "JWT", "application/jwt"} {
		if _, err := v.Authenticate(ctx, signWith(t, iss, jose.ES256, k1, "k1", typ)); err != nil {
			t.Errorf("typ %q: %v", typ, err)
		}
	}
	for _, typ := range []string{"dpop+jwt", "logout+jwt", "secevent+jwt", "id_token+jwt", "JOSE", "at+jwt+x"} {
		_, err := v.Authenticate(ctx, signWith(t, iss, jose.ES256, k1, "k1", typ))
		if !host.IsCode(err, host.CodeUnauthorized) || !strings.Contains(host.ErrorDetail(err), `typ "`+typ+`"`) ||
			!strings.Contains(v.Challenge(err), `error="invalid_token"`) {
			t.Errorf("typ %q: %v; want unauthorized naming the typ, invalid_token", typ, err)
		}
	}
}

// TestTokenAlgMatchesKey refuses a token whose header alg is not the alg
// its key is published with (RFC 8725 §3.1), even where the signature
// verifies under the key for the other alg (RS256 key, PS256 token), and
// accepts a key published without an alg for any asymmetric alg.
func TestTokenAlgMatchesKey(t *testing.T) {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	jwks := newJWKSServer(t)
	jwks.mu.Lock()
	jwks.keys = []jose.JSONWebKey{
		{Key: &rk.PublicKey, KeyID: "rs", Algorithm: "RS256", Use: "sig"},
		{Key: &rk.PublicKey, KeyID: "any"},
	}
	jwks.mu.Unlock()
	const iss = "https://idp.test"
	v := newKeyVerifier(t, iss, jwks.URL)
	ctx := context.Background()
	if _, err := v.Authenticate(ctx, signWith(t, iss, jose.RS256, rk, "rs", "at+jwt")); err != nil {
		t.Fatalf("RS256 with the RS256 key: %v", err)
	}
	for _, alg := range []jose.SignatureAlgorithm{jose.PS256, jose.RS512} {
		_, err := v.Authenticate(ctx, signWith(t, iss, alg, rk, "rs", "at+jwt"))
		if !host.IsCode(err, host.CodeUnauthorized) || !strings.Contains(host.ErrorDetail(err), `alg "`+string(alg)+`"`) ||
			!strings.Contains(host.ErrorDetail(err), `"RS256"`) || !strings.Contains(v.Challenge(err), `error="invalid_token"`) {
			t.Errorf("%s with the RS256 key: %v; want unauthorized naming both algs, invalid_token", alg, err)
		}
		if _, err := v.Authenticate(ctx, signWith(t, iss, alg, rk, "any", "at+jwt")); err != nil {
			t.Errorf("%s with a key that names no alg: %v", alg, err)
		}
	}
}
