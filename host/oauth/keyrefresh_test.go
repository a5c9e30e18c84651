package oauth_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/oauth"
)

// newKeyVerifier is a Verifier, without a token cache, of issuer iss whose
// keys jwks serves, with a live key for the principal its tokens map to.
func newKeyVerifier(t *testing.T, iss, jwksURI string) *oauth.Verifier {
	t.Helper()
	st := stores(t)["sqlite"](t)
	putKey(t, st, "default", "agent.svc", "agent")
	v, err := oauth.New(oauth.Config{Resource: resource, Issuers: []oauth.Issuer{{Issuer: iss, JWKSURI: jwksURI,
		Map: []oauth.Rule{{Claim: "sub", Value: "svc", Principal: "agent.svc", Role: "agent"}}}}}, st, -1)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// eventually calls f until it returns true, failing with what after the
// deadline.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKeySetRemovedKeyDropped stops trusting a key the issuer no longer
// publishes once the key set held is past its freshness, whether a token
// names the key or no key at all, and without any token naming an unknown
// key.
func TestKeySetRemovedKeyDropped(t *testing.T) {
	defer oauth.SetJWKSAges(200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond, time.Hour)()
	jwks := newJWKSServer(t)
	k1, k2 := newKey(t), newKey(t)
	jwks.publish("k1", k1)
	const iss = "https://idp.test"
	v := newKeyVerifier(t, iss, jwks.URL)
	ctx := context.Background()
	named, unnamed := sign(t, iss, k1, "k1"), sign(t, iss, k1, "")
	for _, tok := range []string{named, unnamed} {
		if _, err := v.Authenticate(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	// The issuer rotates after a leak: only k2 is published.
	jwks.publish("k2", k2)
	var err error
	eventually(t, "a token of the removed key k1 is still accepted", func() bool {
		_, err = v.Authenticate(ctx, named)
		return err != nil
	})
	if !host.IsCode(err, host.CodeUnauthorized) {
		t.Fatalf("the removed key: %v, want unauthorized", err)
	}
	if _, err := v.Authenticate(ctx, unnamed); !host.IsCode(err, host.CodeUnauthorized) {
		t.Fatalf("a token of the removed key naming no key: %v, want unauthorized", err)
	}
	if _, err := v.Authenticate(ctx, sign(t, iss, k2, "k2")); err != nil {
		t.Fatalf("the published key: %v", err)
	}
}

// TestKeySetCacheControl takes a key set's freshness from its response's
// max-age, held to the bounds.
func TestKeySetCacheControl(t *testing.T) {
	defer oauth.SetJWKSAges(time.Minute, 10*time.Minute, time.Hour, time.Hour)()
	for cc, want := range map[string]time.Duration{
		"":                               10 * time.Minute,
		"public, max-age=300":            5 * time.Minute,
		"max-age=5":                      time.Minute,
		"max-age=86400, must-revalidate": time.Hour,
		"no-store":                       time.Minute,
		"no-cache, max-age=600":          time.Minute,
		"max-age=junk":                   10 * time.Minute,
		`max-age="120"`:                  2 * time.Minute,
	} {
		h := http.Header{}
		if cc != "" {
			h.Set("Cache-Control", cc)
		}
		if got := oauth.KeySetAge(h); got != want {
			t.Errorf("Cache-Control %q: fresh for %s, want %s", cc, got, want)
		}
	}
	// And a set served with max-age=0 is read again after the minimum.
	defer oauth.SetJWKSAges(100*time.Millisecond, time.Hour, time.Hour, time.Hour)()
	jwks := newJWKSServer(t)
	jwks.mu.Lock()
	jwks.cacheControl = "max-age=0"
	jwks.mu.Unlock()
	k1 := newKey(t)
	jwks.publish("k1", k1)
	const iss = "https://idp.test"
	v := newKeyVerifier(t, iss, jwks.URL)
	tok := sign(t, iss, k1, "k1")
	eventually(t, "a key set served with max-age=0 is not read again", func() bool {
		if _, err := v.Authenticate(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
		return jwks.reads.Load() >= 2
	})
}

// TestKeySetOutage serves the key set held while the provider is down, for
// the stale limit past its freshness; then answers the issuer's tokens
// issuer_unavailable (503, not an invalid_token challenge) until the
// provider is back.
func TestKeySetOutage(t *testing.T) {
	defer oauth.SetJWKSAges(200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond, 2*time.Second)()
	jwks := newJWKSServer(t)
	k1 := newKey(t)
	jwks.publish("k1", k1)
	const iss = "https://idp.test"
	v := newKeyVerifier(t, iss, jwks.URL)
	ctx := context.Background()
	tok := sign(t, iss, k1, "k1")
	if _, err := v.Authenticate(ctx, tok); err != nil {
		t.Fatal(err)
	}
	jwks.down.Store(true)
	eventually(t, "the stale key set is not read again", func() bool {
		if _, err := v.Authenticate(ctx, tok); err != nil {
			t.Fatalf("within the stale limit: %v", err)
		}
		return jwks.failures.Load() >= 1
	})
	var err error
	eventually(t, "the key set is served past the stale limit", func() bool {
		_, err = v.Authenticate(ctx, tok)
		if err != nil && !host.IsCode(err, host.CodeIssuerUnavailable) {
			t.Fatalf("provider down: %v", err)
		}
		return err != nil
	})
	if host.HTTPStatus(host.ErrorCode(err)) != http.StatusServiceUnavailable || strings.Contains(v.Challenge(err), "invalid_token") {
		t.Fatalf("provider down: %v, challenge %s", err, v.Challenge(err))
	}
	jwks.down.Store(false)
	eventually(t, "the key set is not read again once the provider is back", func() bool {
		_, err := v.Authenticate(ctx, tok)
		return err == nil
	})
}

// TestKeySetUnreadable answers a token whose issuer's key set cannot be
// read 503 issuer_unavailable without invalid_token, and within the
// caller's deadline when the provider does not answer.
func TestKeySetUnreadable(t *testing.T) {
	jwks := newJWKSServer(t)
	jwks.down.Store(true)
	const iss = "https://idp.test"
	v := newKeyVerifier(t, iss, jwks.URL)
	_, err := v.Authenticate(context.Background(), sign(t, iss, newKey(t), "k1"))
	if !host.IsCode(err, host.CodeIssuerUnavailable) || host.HTTPStatus(host.ErrorCode(err)) != http.StatusServiceUnavailable ||
		strings.Contains(v.Challenge(err), "invalid_token") {
		t.Fatalf("key set unreadable: %v, challenge %s", err, v.Challenge(err))
	}

	slow := newJWKSServer(t)
	slow.holdReads(t)
	v = newKeyVerifier(t, iss, slow.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = v.Authenticate(ctx, sign(t, iss, newKey(t), "k1"))
	if took := time.Since(start); took > 5*time.Second || !host.IsCode(err, host.CodeIssuerUnavailable) {
		t.Fatalf("provider not answering: %v after %s (the caller's deadline was 300ms)", err, took)
	}
}

// TestKeySetUnknownKidDoesNotStall verifies a token of a known key while a
// read triggered by a token naming an unknown key is under way.
func TestKeySetUnknownKidDoesNotStall(t *testing.T) {
	defer oauth.SetJWKSRefetch(time.Millisecond)()
	jwks := newJWKSServer(t)
	k1 := newKey(t)
	jwks.publish("k1", k1)
	const iss = "https://idp.test"
	v := newKeyVerifier(t, iss, jwks.URL)
	ctx := context.Background()
	good := sign(t, iss, k1, "k1")
	if _, err := v.Authenticate(ctx, good); err != nil {
		t.Fatal(err)
	}
	release := jwks.holdReads(t)
	forgedTok := sign(t, iss, newKey(t), "made-up")
	forged := make(chan error, 1)
	go func() {
		_, err := v.Authenticate(ctx, forgedTok)
		forged <- err
	}()
	eventually(t, "the unknown key did not cause a read", func() bool { return jwks.reads.Load() >= 2 })
	done := make(chan error, 1)
	go func() {
		_, err := v.Authenticate(ctx, good)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a token of a known key during a read: %v", err)
		}
	case <-time.After(3 * time.Second):
		release()
		<-done
		t.Fatal("a token of a known key waited for the read an unknown key caused")
	}
	release()
	if err := <-forged; !host.IsCode(err, host.CodeUnauthorized) {
		t.Fatalf("the token of an unknown key: %v", err)
	}
	if n := jwks.reads.Load(); n != 2 {
		t.Fatalf("%d reads of the key set, want 2", n)
	}
}

// TestTokenWithoutExpiryNamesWhatIsMissing: a signed token of a trusted
// issuer that carries no exp is refused (unauthorized), and its detail
// says the claim is missing rather than naming the year 1 as its expiry.
func TestTokenWithoutExpiryNamesWhatIsMissing(t *testing.T) {
	jwks := newJWKSServer(t)
	k1 := newKey(t)
	jwks.publish("k1", k1)
	const iss = "https://idp.test"
	v := newKeyVerifier(t, iss, jwks.URL)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k1},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: iss, Subject: "svc", Audience: jwt.Audience{resource},
		IssuedAt: jwt.NewNumericDate(time.Now())}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Authenticate(context.Background(), tok)
	if !host.IsCode(err, host.CodeUnauthorized) || !strings.Contains(host.ErrorDetail(err), "carries no exp") {
		t.Fatalf("a token without exp: %v; want unauthorized saying it carries no exp", err)
	}
}

// TestKeySetStaleSetNotServedWhileTheIssuerAnswers: once the key set held
// is past its freshness, the first token that comes — however long after —
// is judged by a new read, not by the stale set, while the issuer answers:
// a key removed meanwhile is refused at once. (The stale set is served
// only while reads fail: TestKeySetOutage.)
func TestKeySetStaleSetNotServedWhileTheIssuerAnswers(t *testing.T) {
	defer oauth.SetJWKSAges(200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond, time.Hour)()
	jwks := newJWKSServer(t)
	k1, k2 := newKey(t), newKey(t)
	jwks.publish("k1", k1)
	const iss = "https://idp.test"
	v := newKeyVerifier(t, iss, jwks.URL)
	ctx := context.Background()
	old := sign(t, iss, k1, "k1")
	if _, err := v.Authenticate(ctx, old); err != nil {
		t.Fatal(err)
	}
	jwks.publish("k2", k2)
	// What is under test is the set's age: let it pass its freshness.
	time.Sleep(300 * time.Millisecond)
	if _, err := v.Authenticate(ctx, old); !host.IsCode(err, host.CodeUnauthorized) {
		t.Fatalf("the first token of the removed key after the set went stale: %v; want unauthorized", err)
	}
	if _, err := v.Authenticate(ctx, sign(t, iss, k2, "k2")); err != nil {
		t.Fatalf("the published key: %v", err)
	}
}
