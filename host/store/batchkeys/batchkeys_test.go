package batchkeys

import (
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

// A key is claimed once; a claim that meets a held key records none of its
// keys; Undo frees exactly the keys claimed after its mark; a task id, an
// idempotency key and a receipt id with the same text are different keys.
func TestClaimAndUndo(t *testing.T) {
	var s Set
	a := &host.Task{ID: "T1", Tenant: "acme", Recipient: "w", IdempotencyKey: "k"}
	if !s.Claim(Task(a)) || !s.HasTask("T1") {
		t.Fatal("a first task's keys were refused")
	}
	if s.Claim(Task(&host.Task{ID: "T2", Tenant: "acme", Recipient: "w", IdempotencyKey: "k"})) {
		t.Fatal("a second task under idempotency key k was accepted")
	}
	if s.HasTask("T2") {
		t.Fatal("a refused claim recorded its task id")
	}
	if !s.Claim(Task(&host.Task{ID: "T3", Tenant: "acme", Recipient: "other", IdempotencyKey: "k"})) {
		t.Fatal("the same idempotency key for another recipient was refused")
	}
	if !s.Claim(Receipt(&host.Receipt{ID: "T1", Tenant: "acme"})) {
		t.Fatal("a receipt whose id is a task's id was refused")
	}
	m := s.Mark()
	if !s.Claim(Receipt(&host.Receipt{ID: "R1", Tenant: "acme", DedupeKey: "d"})) || s.Claim(Receipt(&host.Receipt{ID: "R2", Tenant: "acme", DedupeKey: "d"})) {
		t.Fatal("dedupe keys: the first was refused or the second accepted")
	}
	s.Undo(m)
	if !s.Claim(Receipt(&host.Receipt{ID: "R2", Tenant: "acme", DedupeKey: "d"})) {
		t.Fatal("a dedupe key claimed after the mark is still held after Undo")
	}
	if s.Claim(Task(a)) {
		t.Fatal("Undo forgot a key claimed before its mark")
	}
}
