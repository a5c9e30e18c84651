package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// TestVerifyReceipts checks the client-side verification: intact receipts
// pass, a changed field or a broken link is named, and a body that arrives
// with the JSON encoder's \u escapes still verifies.
func TestVerifyReceipts(t *testing.T) {
	at := time.Date(2026, 11, 26, 10, 0, 0, 123456000, time.UTC)
	a := host.Receipt{ID: "R-1", Tenant: "default", Type: host.ReceiptAssigned, From: "asyncgate", To: "agent.a", TaskID: "T-1",
		Parents: []string{}, Body: json.RawMessage(`{"note":"<b> & c"}`), CreatedAt: at, ChainID: 7, ChainSeq: 1}
	a.Hash = host.HashReceipt(host.ChainV2, &a, "")
	b := host.Receipt{ID: "R-2", Tenant: "default", Type: host.ReceiptAccepted, From: "echo.w1", To: "agent.a", TaskID: "T-1",
		Parents: []string{"R-1"}, Body: json.RawMessage(`{}`), CreatedAt: at.Add(time.Second), ChainID: 7, ChainSeq: 2, PrevHash: a.Hash}
	b.Hash = host.HashReceipt(host.ChainV2, &b, a.Hash)

	// As the gate sends them: the body's <, > and & escaped.
	wire := a
	wire.Body = json.RawMessage(`{"note":"\u003cb\u003e \u0026 c"}`)
	if rep := verifyReceipts([]host.Receipt{wire, b}); !rep.OK || rep.Receipts != 2 || rep.Links != 1 {
		t.Fatalf("intact receipts: %+v", rep)
	}

	changed := wire
	changed.To = "agent.b"
	if rep := verifyReceipts([]host.Receipt{changed, b}); rep.OK || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "R-1 (task.assigned): its hash") {
		t.Fatalf("a changed field: %+v", rep)
	}
	// A receipt hashed over another predecessor: its own hash matches, the link does not.
	relinked := b
	relinked.PrevHash = strings.Repeat("0", 64)
	relinked.Hash = host.HashReceipt(host.ChainV2, &relinked, relinked.PrevHash)
	if rep := verifyReceipts([]host.Receipt{wire, relinked}); rep.OK || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "R-2: prev_hash") {
		t.Fatalf("a broken link: %+v", rep)
	}
	body := wire
	body.Body = json.RawMessage(`{"note":"<b> & d"}`)
	if rep := verifyReceipts([]host.Receipt{body}); rep.OK {
		t.Fatalf("a changed body verified: %+v", rep)
	}
}
