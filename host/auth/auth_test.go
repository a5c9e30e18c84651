package auth_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store/faultstore"
)

// TestAuthenticatorCachesUntilForget: a key revoked behind the cache's back
// (the offline CLI, another gate) still answers from the cache until Forget;
// without a cache it is refused at once. Every form of the credential
// ("Bearer …", bare) resolves to the key's Actor.
func TestAuthenticatorCachesUntilForget(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ck, err := auth.CreateKey(ctx, st, auth.NewKeyRequest{Role: engine.RoleWorker, Principal: "echo.w1"})
	if err != nil {
		t.Fatal(err)
	}
	want := engine.Actor{Tenant: auth.DefaultTenant, Principal: "echo.w1", Role: engine.RoleWorker}
	cached, uncached := auth.NewAuthenticator(st, 0), auth.NewAuthenticator(st, -1)
	for _, bearer := range []string{ck.APIKey, "Bearer " + ck.APIKey, "bearer  " + ck.APIKey + " "} {
		for _, a := range []*auth.Authenticator{cached, uncached} {
			if got, err := a.Authenticate(ctx, bearer); err != nil || got != want {
				t.Fatalf("Authenticate(%q) = %+v, %v; want %+v", bearer, got, err, want)
			}
		}
	}
	if err := auth.RevokeKey(ctx, st, ck.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := uncached.Authenticate(ctx, ck.APIKey); !host.IsCode(err, host.CodeUnauthorized) {
		t.Fatalf("uncached, revoked: %v", err)
	}
	if _, err := cached.Authenticate(ctx, ck.APIKey); err != nil {
		t.Fatalf("cached, revoked elsewhere: %v (want the cached answer until Forget)", err)
	}
	cached.Forget()
	if _, err := cached.Authenticate(ctx, ck.APIKey); !host.IsCode(err, host.CodeUnauthorized) {
		t.Fatalf("cached after Forget, revoked: %v", err)
	}
}

// TestCreateKeyRefusesBadRequests: each bad field is refused with its code
// and nothing is stored.
func TestCreateKeyRefusesBadRequests(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, c := range []struct {
		req  auth.NewKeyRequest
		code string
	}{
		{auth.NewKeyRequest{Role: "root", Principal: "a"}, host.CodeBadRequest},
		{auth.NewKeyRequest{Role: engine.RoleAgent, Principal: "a", Tenant: "-bad"}, host.CodeBadRequest},
		{auth.NewKeyRequest{Role: engine.RoleAgent, Principal: ""}, host.CodeBadRequest},
		{auth.NewKeyRequest{Role: engine.RoleAgent, Principal: engine.GatePrincipal}, host.CodeForbidden},
		{auth.NewKeyRequest{Role: engine.RoleWorker, Principal: "nodot"}, host.CodeInvalidWorkerID},
	} {
		if _, err := auth.CreateKey(ctx, st, c.req); !host.IsCode(err, c.code) {
			t.Errorf("CreateKey(%+v) = %v, want %s", c.req, err, c.code)
		}
	}
	if ks, err := auth.ListKeys(ctx, st); err != nil || len(ks) != 0 {
		t.Fatalf("stored %d keys (%v), want none", len(ks), err)
	}
}

// TestAuthenticatorServesAKnownKeyWhileTheStoreIsUnavailable: under a
// context from AllowStale (/metrics), a key the cache resolved keeps
// resolving past its TTL while the store answers database_unavailable or
// does not answer at all; without it (every other route) the call gets
// database_unavailable. A key the cache never saw gets
// database_unavailable, and a key the store refuses (revoked) is refused
// with or without it.
func TestAuthenticatorServesAKnownKeyWhileTheStoreIsUnavailable(t *testing.T) {
	ctx := context.Background()
	staleOK := auth.AllowStale(ctx)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fs := faultstore.New(st, nil)
	known, err := auth.CreateKey(ctx, st, auth.NewKeyRequest{Role: engine.RoleAdmin, Principal: "root"})
	if err != nil {
		t.Fatal(err)
	}
	unseen, err := auth.CreateKey(ctx, st, auth.NewKeyRequest{Role: engine.RoleAdmin, Principal: "other"})
	if err != nil {
		t.Fatal(err)
	}
	a := auth.NewAuthenticator(fs, time.Millisecond)
	if _, err := a.Authenticate(ctx, known.APIKey); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past the TTL
	down := func(op faultstore.Op) faultstore.Fault {
		return faultstore.Fault{Step: op.Step, Err: host.Errorf(host.CodeDatabaseUnavailable, "the database is unavailable")}
	}
	fs.SetPlan(down)
	if _, err := a.Authenticate(ctx, known.APIKey); !host.IsCode(err, host.CodeDatabaseUnavailable) {
		t.Fatalf("a cached key past its TTL, store unavailable, on a route that needs the store's word: %v", err)
	}
	if auth.ServedStale(staleOK) {
		t.Fatal("ServedStale before any stale answer")
	}
	if got, err := a.Authenticate(staleOK, known.APIKey); err != nil || got.Principal != "root" || !auth.ServedStale(staleOK) {
		t.Fatalf("a cached key past its TTL, store unavailable, stale allowed: %+v, %v, served stale %v", got, err, auth.ServedStale(staleOK))
	}
	if _, err := a.Authenticate(staleOK, unseen.APIKey); !host.IsCode(err, host.CodeDatabaseUnavailable) {
		t.Fatalf("an unseen key while the store is unavailable: %v", err)
	}
	fs.SetPlan(nil)
	if err := auth.RevokeKey(ctx, st, known.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(staleOK, known.APIKey); !host.IsCode(err, host.CodeUnauthorized) {
		t.Fatalf("the revoked key once the store answers, stale allowed: %v", err)
	}
	fs.SetPlan(down)
	if _, err := a.Authenticate(staleOK, known.APIKey); !host.IsCode(err, host.CodeDatabaseUnavailable) {
		t.Fatalf("a key refused since, while the store is unavailable: %v", err)
	}

	// A store that does not answer at all (a frozen connection): the
	// cached key answers within about a second, not the store's timeout.
	fs.SetPlan(nil)
	if _, err := a.Authenticate(ctx, unseen.APIKey); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	fs.SetPlan(func(op faultstore.Op) faultstore.Fault { return faultstore.Fault{Latency: time.Hour} })
	start := time.Now()
	got, err := a.Authenticate(staleOK, unseen.APIKey)
	if took := time.Since(start); err != nil || got.Principal != "other" || took > 5*time.Second {
		t.Fatalf("a cached key while the store hangs: %+v, %v after %v", got, err, took)
	}
}
