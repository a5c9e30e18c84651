package storetest

import (
	"encoding/json"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Principals of one tenant in the ledger (issue 37): what one agent may take
// of another's receipt dedupe keys.

// testDedupePerPrincipal: a receipt dedupe key belongs to the principal that
// used it, whoever uses it first, within one update too.
func testDedupePerPrincipal(t *testing.T, b *Bundle) {
	hexy := engine.Actor{Tenant: "acme", Principal: "agent.hexy", Role: engine.RoleAgent}
	app := func(a engine.Actor, key, note string) (*host.Receipt, bool) {
		t.Helper()
		rc, dup, err := b.Engine.AppendReceipt(b.Ctx, a, engine.AppendRequest{Type: host.ReceiptProgress, Body: []byte(`{"note":"` + note + `"}`), DedupeKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return rc, dup
	}
	k1, dup := app(b.Agent, "k", "kee's")
	h1, dup2 := app(hexy, "k", "hexy's")
	if dup || dup2 || h1.ID == k1.ID || h1.From != "agent.hexy" || string(h1.Body) != `{"note":"hexy's"}` {
		t.Fatalf("hexy's use of kee's key: %+v (duplicate %v)", h1, dup2)
	}
	// The other order: hexy first, then kee's own is written.
	h2, _ := app(hexy, "k2", "hexy's")
	k2, dup := app(b.Agent, "k2", "kee's")
	if dup || k2.ID == h2.ID || k2.From != "agent.kee" {
		t.Fatalf("kee's receipt after hexy took its key: %+v (duplicate %v)", k2, dup)
	}
	for _, c := range []struct {
		a    engine.Actor
		key  string
		want string
	}{{b.Agent, "k", k1.ID}, {hexy, "k", h1.ID}, {b.Agent, "k2", k2.ID}, {hexy, "k2", h2.ID}} {
		if rc, dup := app(c.a, c.key, "again"); !dup || rc.ID != c.want {
			t.Fatalf("%s repeating %s: %s (duplicate %v), want %s", c.a.Principal, c.key, rc.ID, dup, c.want)
		}
	}
	// In the store: one key, two issuers, one update; the same issuer twice clashes.
	rc := func(id, from string) *host.Receipt {
		return &host.Receipt{ID: id, Tenant: "acme", Type: host.ReceiptProgress, From: from, To: from, Parents: []string{},
			Body: json.RawMessage(`{}`), DedupeKey: "user:same", CreatedAt: Epoch}
	}
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		if err := tx.AppendReceipt(b.Ctx, rc("R-DP1", "p.one")); err != nil {
			return err
		}
		return tx.AppendReceipt(b.Ctx, rc("R-DP2", "p.two"))
	}); err != nil {
		t.Fatalf("one key of two issuers in one update: %v", err)
	}
	err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.AppendReceipt(b.Ctx, rc("R-DP3", "p.one")) })
	WantCode(t, err, host.CodeConflict)
	err = b.Store.View(b.Ctx, func(r store.Reader) error {
		for from, want := range map[string]string{"p.one": "R-DP1", "p.two": "R-DP2", "p.three": ""} {
			got, err := r.GetReceiptByDedupe(b.Ctx, "acme", from, "user:same")
			if err != nil {
				return err
			}
			if (got == nil && want != "") || (got != nil && got.ID != want) {
				t.Errorf("GetReceiptByDedupe(%s): %+v, want %q", from, got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Verify(t)
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// DedupeBeforeMigration appends agent.kee's receipt under the dedupe key
// "old" and returns it: the data a migration test writes, then winds the
// store back to its schema before migration 0020 (receipt dedupe keys per
// issuer) and opens again.
func DedupeBeforeMigration(t testing.TB, b *Bundle) *host.Receipt {
	t.Helper()
	rc, _, err := b.Engine.AppendReceipt(b.Ctx, b.Agent, engine.AppendRequest{Type: host.ReceiptProgress, Body: []byte(`{"note":"kee's"}`), DedupeKey: "old"})
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// CheckDedupeAfterMigration checks, on a store migrated past 0020 with the
// receipt DedupeBeforeMigration wrote, that the key written before the
// migration still answers its issuer's repeat with that receipt, and that
// another principal using it gets a receipt of its own.
func CheckDedupeAfterMigration(t testing.TB, b *Bundle, old *host.Receipt) {
	t.Helper()
	hexy := engine.Actor{Tenant: "acme", Principal: "agent.hexy", Role: engine.RoleAgent}
	rc, dup, err := b.Engine.AppendReceipt(b.Ctx, hexy, engine.AppendRequest{Type: host.ReceiptProgress, Body: []byte(`{"note":"hexy's"}`), DedupeKey: "old"})
	if err != nil || dup || rc.ID == old.ID || rc.From != "agent.hexy" {
		t.Fatalf("hexy's use of a key kee used before the migration: %+v (duplicate %v) %v", rc, dup, err)
	}
	for _, c := range []struct {
		a    engine.Actor
		want string
	}{{b.Agent, old.ID}, {hexy, rc.ID}} {
		got, dup, err := b.Engine.AppendReceipt(b.Ctx, c.a, engine.AppendRequest{Type: host.ReceiptProgress, DedupeKey: "old"})
		if err != nil || !dup || got.ID != c.want {
			t.Fatalf("%s repeating the key: %+v (duplicate %v) %v, want %s", c.a.Principal, got, dup, err, c.want)
		}
	}
	if rep := b.Verify(t); rep.Receipts != 2 {
		t.Fatalf("ledger holds %d receipts, want 2", rep.Receipts)
	}
}
