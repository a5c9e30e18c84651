package host

import (
	"encoding/json"
	"testing"
	"time"
)

func TestChainHashV2CoversEveryField(t *testing.T) {
	r := Receipt{ID: "R-1", Tenant: "t", Type: ReceiptProgress, From: "a", To: "b", TaskID: "T-1", LeaseID: "l", Parents: []string{"p"},
		Body: json.RawMessage(`{}`), DedupeKey: "d", ChainID: 2, ChainSeq: 3, Seq: 9}
	h := ChainHashV2(&r, "prev")
	mods := []func(*Receipt){
		func(r *Receipt) { r.ID = "R-2" }, func(r *Receipt) { r.Tenant = "u" }, func(r *Receipt) { r.Type = ReceiptEscalated },
		func(r *Receipt) { r.From = "x" }, func(r *Receipt) { r.To = "x" }, func(r *Receipt) { r.TaskID = "T-2" },
		func(r *Receipt) { r.LeaseID = "m" }, func(r *Receipt) { r.Parents = []string{"q"} }, func(r *Receipt) { r.Body = json.RawMessage(`{"a":1}`) },
		func(r *Receipt) { r.DedupeKey = "e" }, func(r *Receipt) { r.ChainID = 3 }, func(r *Receipt) { r.ChainSeq = 4 },
		func(r *Receipt) { r.CreatedAt = r.CreatedAt.Add(1000) },
		func(r *Receipt) { r.From, r.To = "ab", "" }, // length prefixes keep field boundaries
	}
	for i, m := range mods {
		c := r
		m(&c)
		if ChainHashV2(&c, "prev") == h {
			t.Errorf("modification %d does not change the hash", i)
		}
	}
	if ChainHashV2(&r, "other") == h {
		t.Error("the predecessor's hash is not covered")
	}
	if ChainHashV2(&r, "prev") == ChainHash(&r, "prev") {
		t.Error("the two hash versions agree")
	}
	// The global seq is not covered: a writer links a receipt before it
	// knows where other writers' receipts put it in the whole ledger.
	c := r
	c.Seq = 10
	if HashReceipt(ChainV2, &c, "prev") != h || HashReceipt(ChainV1, &c, "prev") == HashReceipt(ChainV1, &r, "prev") {
		t.Error("HashReceipt does not follow the hash version")
	}
}

func TestCheckpointHashCoversEveryField(t *testing.T) {
	c := Checkpoint{ID: 4, At: time.UnixMicro(1000), Heads: []ChainHead{{ID: 2, Seq: 5, Hash: "h2"}, {ID: 3, Seq: 1, Hash: "h3"}}}
	h := CheckpointHash(&c, "prev")
	mods := []func(*Checkpoint){
		func(c *Checkpoint) { c.ID = 5 }, func(c *Checkpoint) { c.At = c.At.Add(time.Microsecond) },
		func(c *Checkpoint) { c.Heads = c.Heads[:1] }, func(c *Checkpoint) { c.Heads = []ChainHead{{ID: 2, Seq: 6, Hash: "h2"}, c.Heads[1]} },
		func(c *Checkpoint) { c.Heads = []ChainHead{{ID: 2, Seq: 5, Hash: "hx"}, c.Heads[1]} },
		func(c *Checkpoint) { c.Heads = []ChainHead{{ID: 9, Seq: 5, Hash: "h2"}, c.Heads[1]} },
	}
	for i, m := range mods {
		d := c
		m(&d)
		if CheckpointHash(&d, "prev") == h {
			t.Errorf("modification %d does not change the hash", i)
		}
	}
	if CheckpointHash(&c, "other") == h {
		t.Error("the predecessor's hash is not covered")
	}
}
