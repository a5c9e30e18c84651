package main

import (
	"os"
	"testing"
	"time"
)

// TestE2EKeyRevokedOnEveryHost: two `gate serve` hosts on one PostgreSQL
// database, each caching resolved keys for a minute. A key used on host B
// and revoked through host A's admin API is refused by B at once, reads
// and writes alike (B used to accept it until its cache let go of it); and
// a key revoked with `gate keys revoke` on the database, by no host at all,
// is refused by both.
func TestE2EKeyRevokedOnEveryHost(t *testing.T) {
	t.Parallel()
	db := postgresSchema(t)
	results := t.TempDir()
	dirA, dirB := t.TempDir(), t.TempDir()
	a := startGate(t, dirA, "--db", db, "--results-dir", results, "--auth-cache", "60s")
	if err := os.WriteFile(dirB+"/admin.key", []byte(a.Admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startGate(t, dirB, "--db", db, "--results-dir", results, "--auth-cache", "60s")
	a.putType(t, "echo", map[string]any{}, "")
	refusedWithin := func(g *gateProc, key, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second) // far under the cache's minute
		for {
			r := call(t, "GET", g.URL+"/v1/tasks?limit=1", key, nil)
			if r.Status == 401 {
				break
			}
			if r.Status != 200 || time.Now().After(deadline) {
				t.Fatalf("%s: %d %s, want 401 soon after the revocation", what, r.Status, r.Body)
			}
			time.Sleep(50 * time.Millisecond)
		}
		want(t, call(t, "POST", g.URL+"/v1/tasks", key, map[string]any{"task_type": "echo", "params": map[string]any{}}), 401, "")
	}

	id, key := a.newKeyID(t, "agent", "agent.gone", "")
	want(t, call(t, "GET", b.URL+"/v1/tasks?limit=1", key, nil), 200, "") // B caches it
	want(t, call(t, "DELETE", a.URL+"/v1/admin/keys/"+id, a.Admin, nil), 200, "")
	refusedWithin(b, key, "host B, the key revoked through host A")

	id2, key2 := a.newKeyID(t, "agent", "agent.offline", "")
	for _, g := range []*gateProc{a, b} {
		want(t, call(t, "GET", g.URL+"/v1/tasks?limit=1", key2, nil), 200, "")
	}
	if out, errs, code := gateCLI(t, "keys", "revoke", "--db", db, id2); code != 0 {
		t.Fatalf("gate keys revoke --db: exit %d %s %s", code, out, errs)
	}
	refusedWithin(a, key2, "host A, the key revoked on the database")
	refusedWithin(b, key2, "host B, the key revoked on the database")
}
