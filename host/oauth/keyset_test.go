package oauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/oauth"
)

// jwksServer serves a key set it can change, counting its reads. It can
// answer 500 (down), send a Cache-Control header (cacheControl), and hold
// its answers until released (hold).
type jwksServer struct {
	*httptest.Server
	reads        atomic.Int64
	failures     atomic.Int64 // reads answered 500
	down         atomic.Bool
	mu           sync.Mutex
	keys         []jose.JSONWebKey
	cacheControl string
	hold         chan struct{} // when set, reads wait until it is closed
}

func newJWKSServer(t *testing.T) *jwksServer {
	s := &jwksServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.reads.Add(1)
		s.mu.Lock()
		body, _ := json.Marshal(jose.JSONWebKeySet{Keys: s.keys})
		cc, hold := s.cacheControl, s.hold
		s.mu.Unlock()
		if hold != nil {
			<-hold
		}
		if s.down.Load() {
			s.failures.Add(1)
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if cc != "" {
			w.Header().Set("Cache-Control", cc)
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// holdReads makes reads from now on wait until the returned function is
// called (also at the test's end, before the server closes).
func (s *jwksServer) holdReads(t *testing.T) (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.hold = ch
	s.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			s.mu.Lock()
			s.hold = nil
			s.mu.Unlock()
			close(ch)
		})
	}
	t.Cleanup(release)
	return release
}

// publish replaces the key set with key under kid.
func (s *jwksServer) publish(kid string, key *ecdsa.PrivateKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: kid, Algorithm: "ES256", Use: "sig"}}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sign makes an access token of iss for the gate, signed by key under kid.
func sign(t *testing.T, iss string, key *ecdsa.PrivateKey, kid string) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
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

// TestKeySetForgedTokens reads an issuer's keys once for fifty forged
// tokens (made-up key ids, or a known key id with a bad signature), and
// still picks up a genuinely rotated key once the refetch interval passes.
func TestKeySetForgedTokens(t *testing.T) {
	defer oauth.SetJWKSRefetch(time.Second)()
	jwks := newJWKSServer(t)
	k1, k2, rogue := newKey(t), newKey(t), newKey(t)
	jwks.publish("k1", k1)
	const iss = "https://idp.test"
	st := stores(t)["sqlite"](t)
	putKey(t, st, "default", "agent.svc", "agent")
	v, err := oauth.New(oauth.Config{Resource: resource, Issuers: []oauth.Issuer{{Issuer: iss, JWKSURI: jwks.URL,
		Map: []oauth.Rule{{Claim: "sub", Value: "svc", Principal: "agent.svc", Role: "agent"}}}}}, st, -1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := v.Authenticate(ctx, sign(t, iss, k1, "k1")); err != nil {
		t.Fatal(err)
	}
	if n := jwks.reads.Load(); n != 1 {
		t.Fatalf("first token: %d reads of the key set, want 1", n)
	}
	for i := range 25 {
		if _, err := v.Authenticate(ctx, sign(t, iss, rogue, "k1")); !host.IsCode(err, host.CodeUnauthorized) {
			t.Fatalf("known kid, bad signature %d: %v", i, err)
		}
	}
	if n := jwks.reads.Load(); n != 1 {
		t.Fatalf("25 tokens of a known kid with bad signatures: %d reads of the key set, want 1", n)
	}
	for i := range 25 {
		if _, err := v.Authenticate(ctx, sign(t, iss, rogue, fmt.Sprintf("forged-%d", i))); !host.IsCode(err, host.CodeUnauthorized) {
			t.Fatalf("unknown kid %d: %v", i, err)
		}
	}
	if n := jwks.reads.Load(); n > 2 {
		t.Fatalf("50 forged tokens: %d reads of the key set, want at most 2", n)
	}
	// The issuer rotates its key: k2 replaces k1.
	jwks.publish("k2", k2)
	fresh := sign(t, iss, k2, "k2")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := v.Authenticate(ctx, fresh)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated key was not picked up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := jwks.reads.Load(); n > 4 {
		t.Fatalf("after rotation: %d reads of the key set, want at most 4", n)
	}
}
