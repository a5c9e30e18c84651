package storetest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// testObligationsWithinOneUpdate opens, terminates and reads obligations
// inside single updates, as a driver that writes rows behind must still
// answer: what an update wrote is visible to its own reads, and an update
// that fails leaves none of its obligations behind.
func testObligationsWithinOneUpdate(t *testing.T, b *Bundle) {
	now := Epoch
	open := func(tx store.Tx, id string) error {
		rc := &host.Receipt{ID: id, Tenant: "acme", Type: host.ReceiptAssigned, From: "x", To: "y", Parents: []string{}, Body: json.RawMessage(`{}`), CreatedAt: now}
		if err := tx.AppendReceipt(b.Ctx, rc); err != nil {
			return err
		}
		return tx.OpenObligation(b.Ctx, host.Obligation{ReceiptID: id, Tenant: "acme", Type: rc.Type, Obligor: "x", Obligee: "y", CreatedAt: now, Seq: rc.Seq})
	}
	// terminate appends the receipt id that discharges parent and records
	// it in the index, as the engine does (the verifier checks the two agree).
	terminate := func(tx store.Tx, parent, id string) error {
		rc := &host.Receipt{ID: id, Tenant: "acme", Type: host.ReceiptCompleted, From: "y", To: "x", Parents: []string{parent}, Body: json.RawMessage(`{}`), CreatedAt: now}
		if err := tx.AppendReceipt(b.Ctx, rc); err != nil {
			return err
		}
		return tx.Terminate(b.Ctx, "acme", parent, id)
	}
	err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		for _, id := range []string{"R-OB1", "R-OB2", "R-OB3"} {
			if err := open(tx, id); err != nil {
				return err
			}
		}
		if err := terminate(tx, "R-OB2", "R-T2"); err != nil {
			return err
		}
		if err := terminate(tx, "R-OB2", "R-T9"); err != nil {
			return err // a second termination changes nothing (checked below)
		}
		if term, err := tx.Terminator(b.Ctx, "acme", "R-OB2"); err != nil || term != "R-T2" {
			return errors.Join(err, errors.New("R-OB2's terminator within the update: "+term))
		}
		obs, _, err := tx.ListOpenObligations(b.Ctx, store.ObligationFilter{Tenant: "acme", Principal: "y", Limit: 10})
		if err != nil || len(obs) != 2 {
			return errors.Join(err, errors.New("open obligations within the update are not R-OB1 and R-OB3"))
		}
		// Written now, terminated later in the same update.
		if err := terminate(tx, "R-OB3", "R-T3"); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("fail after opening")
	err = b.Store.Update(b.Ctx, func(tx store.Tx) error {
		if err := open(tx, "R-OB4"); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("failing update: %v", err)
	}
	err = b.Store.View(b.Ctx, func(r store.Reader) error {
		for id, want := range map[string]string{"R-OB1": "", "R-OB2": "R-T2", "R-OB3": "R-T3", "R-OB4": ""} {
			if term, err := r.Terminator(b.Ctx, "acme", id); err != nil || term != want {
				t.Errorf("%s: terminator %q (%v), want %q", id, term, err, want)
			}
		}
		obs, _, err := r.ListOpenObligations(b.Ctx, store.ObligationFilter{Tenant: "acme", Principal: "y", Limit: 10})
		if err != nil || len(obs) != 1 || obs[0].ReceiptID != "R-OB1" {
			t.Errorf("open obligations after commit: %+v %v, want R-OB1 alone", obs, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Verify(t)
}
