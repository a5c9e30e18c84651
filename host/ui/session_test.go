package ui

import (
	"fmt"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/asyncgate/asyncgate/host/engine"
)

// TestOneTenantSigningInNeverSignsOutAnother (issue 37 item 8a): a tenant
// admin signing in 10,050 times with one key, then with 300 keys, never
// ends the other tenant's session; no key holds more than
// maxSessionsPerKey sessions and the tenant no more than
// maxSessionsPerTenant. With the table full all the same, the largest
// tenant gives a session up.
func TestOneTenantSigningInNeverSignsOutAnother(t *testing.T) {
	ss := sessions{m: map[string]*session{}}
	now := time.Unix(1_800_000_000, 0)
	other := ss.create("other-key", engine.Actor{Tenant: "default", Principal: "root"}, now)
	attacker := engine.Actor{Tenant: "acme", Principal: "acme-ops"}
	var last *session
	for i := 0; i < maxSessions+50; i++ {
		now = now.Add(time.Millisecond)
		last = ss.create("acme-key", attacker, now)
	}
	if _, ok := ss.get(other.id, now); !ok {
		t.Fatal("another tenant's session was signed out by 10,050 sign-ins of one key")
	}
	if _, ok := ss.get(last.id, now); !ok {
		t.Fatal("the newest session was ended")
	}
	if n := len(ss.byKey["acme-key"]); n != maxSessionsPerKey || len(ss.m) != maxSessionsPerKey+1 {
		t.Fatalf("one key holds %d sessions (table %d), want %d", n, len(ss.m), maxSessionsPerKey)
	}
	for i := 0; i < 300*maxSessionsPerKey; i++ {
		now = now.Add(time.Millisecond)
		ss.create(fmt.Sprintf("acme-key-%d", i%300), attacker, now)
	}
	if _, ok := ss.get(other.id, now); !ok {
		t.Fatal("another tenant's session was signed out by 300 keys of one tenant")
	}
	perTenant := map[string]int{}
	for _, s := range ss.m {
		perTenant[s.keyTenant]++
	}
	if perTenant["acme"] != maxSessionsPerTenant || perTenant["acme"] != ss.perTenant["acme"] {
		t.Fatalf("tenant acme holds %d sessions (counted %d), the cap is %d", perTenant["acme"], ss.perTenant["acme"], maxSessionsPerTenant)
	}
	// Fill the table with three more tenants; one more sign-in ends a
	// session of a largest tenant, not default's only one.
	for i := 0; len(ss.m) < maxSessions; i++ {
		now = now.Add(time.Millisecond)
		ss.create(fmt.Sprintf("t%d-key-%d", i%3, i), engine.Actor{Tenant: fmt.Sprintf("t%d", i%3)}, now)
	}
	now = now.Add(time.Millisecond)
	ss.create("late", engine.Actor{Tenant: "t9"}, now)
	if _, ok := ss.get(other.id, now); !ok || len(ss.m) != maxSessions {
		t.Fatalf("with the table full, the smallest tenant's session was ended (table %d)", len(ss.m))
	}
}

// TestSignInThrottle: a key signs in signinBurst times at once, then waits.
func TestSignInThrottle(t *testing.T) {
	var si signins
	now := time.Unix(1_800_000_000, 0)
	for i := 0; i < signinBurst; i++ {
		if w := si.take("k", now); w != 0 {
			t.Fatalf("sign-in %d waited %v", i+1, w)
		}
	}
	if w := si.take("k", now); w <= 0 || w > signinEvery {
		t.Fatalf("sign-in past the burst: wait %v", w)
	}
	if w := si.take("other", now); w != 0 {
		t.Fatalf("another key waited %v", w)
	}
	if w := si.take("k", now.Add(signinEvery)); w != 0 {
		t.Fatalf("after %v: wait %v", signinEvery, w)
	}
}

// TestShortCutsWholeCharacters: the dashboard's short form of a pointer or
// an id cuts after 16 characters, never inside one (a cut inside a
// multi-byte character made the page invalid UTF-8).
func TestShortCutsWholeCharacters(t *testing.T) {
	short := funcs["short"].(func(string) string)
	for in, want := range map[string]string{
		"s3://aaaaaaaaaa€€€/x": "s3://aaaaaaaaaa€…",
		"€€€€€€€€€€€€€€€€":     "€€€€€€€€€€€€€€€€",
		"T-01M8SAYKZJC0QACF":   "T-01M8SAYKZJC0QA…",
		"short":                "short",
	} {
		if got := short(in); got != want || !utf8.ValidString(got) {
			t.Errorf("short(%q) = %q, want %q", in, got, want)
		}
	}
}
