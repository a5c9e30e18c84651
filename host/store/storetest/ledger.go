package storetest

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// LedgerFixture writes a ledger of two chains, as two writers (two gate
// processes, or two hosts) leave it, through stores made by open, and closes
// them (Close records each chain's last checkpoint):
//
//	seq 1–6: chain A (the first writer), three tasks: assigned, completed
//	seq 7–8: chain B (the second writer), one task: assigned, completed
//
// open must open the same database each time.
func LedgerFixture(t *testing.T, open func(t testing.TB) Store) {
	t.Helper()
	for _, cycles := range []int{3, 1} {
		st := open(t)
		b := Setup(t, func(testing.TB) Store { return st })
		for i := 0; i < cycles; i++ {
			b.Enqueue(t, "work")
			b.Complete(t, "w.1", b.LeaseOne(t, "w.1"))
		}
		b.Engine.Close()
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TamperCase is one way of rewriting the ledger behind the gate's back, in
// SQL both drivers accept, and what the verifier must report.
type TamperCase struct {
	Name  string
	Stmts []string
	// BadSeq is the ledger seq the report must name (0: none, the problem is
	// in a checkpoint or a whole chain), and Problem a word its text must hold.
	BadSeq  int64
	Problem string
}

// The chain ids of LedgerFixture's writers: chain 1 is the (empty) chain of
// the first schema.
const (
	fixtureChainA = "2"
	fixtureChainB = "3"
)

// TamperCases are the rewrites of LedgerFixture's ledger that
// engine.VerifyLedger must catch, each on its own copy of the fixture.
var TamperCases = []TamperCase{
	{"altered body", []string{`UPDATE receipts SET body = '{"result_pointer":"inline:ZXZpbA=="}' WHERE seq = 4`}, 4, "altered"},
	{"altered party", []string{`UPDATE receipts SET to_p = 'mallory' WHERE seq = 2`}, 2, "altered"},
	{"altered chain position", []string{`UPDATE receipts SET chain_seq = 9 WHERE seq = 6`}, 6, "removed"},
	{"removed", []string{`DELETE FROM receipts WHERE seq = 3`}, 4, "removed"},
	{"removed tail", []string{`DELETE FROM receipts WHERE seq = 6`}, 5, "removed from the end"},
	{"removed tail of the second chain", []string{`DELETE FROM receipts WHERE seq = 8`}, 7, "removed from the end"},
	{"removed tail and its head row rewritten", []string{
		`DELETE FROM receipts WHERE seq = 6`,
		`UPDATE ledger_chains SET seq = 5, hash = (SELECT hash FROM receipts WHERE seq = 5) WHERE chain_id = ` + fixtureChainA}, 5, "removed from the end"},
	{"removed chain", []string{
		`DELETE FROM receipts WHERE chain_id = ` + fixtureChainB,
		`DELETE FROM ledger_chains WHERE chain_id = ` + fixtureChainB}, 0, "whole chain was removed"},
	{"inserted outside any chain", []string{
		`UPDATE receipts SET seq = -seq WHERE seq >= 3`, `UPDATE receipts SET seq = 1 - seq WHERE seq < 0`,
		`INSERT INTO receipts (seq, id, tenant, type, from_p, to_p, task_id, lease_id, parents, body, dedupe_key, created_at, prev_hash, hash)
SELECT 3, 'R-FAKE', tenant, type, from_p, to_p, task_id, lease_id, parents, body, '', created_at, prev_hash, hash FROM receipts WHERE seq = 2`}, 3, "inserted"},
	{"inserted into a chain", []string{
		`UPDATE receipts SET seq = -seq WHERE seq >= 3`, `UPDATE receipts SET seq = 1 - seq WHERE seq < 0`,
		`INSERT INTO receipts (seq, id, tenant, type, from_p, to_p, task_id, lease_id, parents, body, dedupe_key, created_at, prev_hash, hash, chain_id, chain_seq)
SELECT 3, 'R-FAKE', tenant, type, from_p, to_p, task_id, lease_id, parents, body, '', created_at, prev_hash, hash, chain_id, chain_seq FROM receipts WHERE seq = 2`}, 3, "inserted"},
	{"inserted in a new chain", []string{
		`INSERT INTO ledger_chains (chain_id, seq, hash, hash_version, opened_at) VALUES (9, 1, 'x', 2, 0)`,
		`INSERT INTO receipts (seq, id, tenant, type, from_p, to_p, task_id, lease_id, parents, body, dedupe_key, created_at, prev_hash, hash, chain_id, chain_seq)
SELECT 100, 'R-FAKE', tenant, type, from_p, to_p, task_id, lease_id, parents, body, '', created_at, '', 'x', 9, 1 FROM receipts WHERE seq = 2`}, 100, "altered"},
	{"inserted below the first seq", []string{
		`INSERT INTO receipts (seq, id, tenant, type, from_p, to_p, task_id, lease_id, parents, body, dedupe_key, created_at, prev_hash, hash, chain_id, chain_seq)
SELECT 0, 'R-FAKE', tenant, type, from_p, 'mallory', task_id, lease_id, parents, body, '', created_at, prev_hash, hash, chain_id, chain_seq FROM receipts WHERE seq = 2`}, 0, "below the ledger's first"},
	{"unknown hash version", []string{`UPDATE ledger_chains SET hash_version = 0 WHERE chain_id = ` + fixtureChainA}, 0, "hash version 0"},
	{"reordered", []string{`UPDATE receipts SET seq = -1 WHERE seq = 2`, `UPDATE receipts SET seq = 2 WHERE seq = 3`, `UPDATE receipts SET seq = 3 WHERE seq = -1`}, 2, "reordered"},
	{"reordered with positions swapped", []string{
		`UPDATE receipts SET chain_seq = -1 WHERE seq = 2`, `UPDATE receipts SET chain_seq = 2 WHERE seq = 3`, `UPDATE receipts SET chain_seq = 3 WHERE seq = 2`,
		`UPDATE receipts SET seq = -1 WHERE seq = 2`, `UPDATE receipts SET seq = 2 WHERE seq = 3`, `UPDATE receipts SET seq = 3 WHERE seq = -1`}, 2, "prev_hash does not match"},
	// A receipt's prev_hash column is no part of its hash (the hash takes
	// the predecessor's hash as the walk finds it): only the prev_hash check
	// sees this one.
	{"altered prev_hash", []string{`UPDATE receipts SET prev_hash = (SELECT hash FROM receipts WHERE seq = 1) WHERE seq = 3`}, 3, "prev_hash does not match"},
	{"altered checkpoint", []string{`UPDATE ledger_checkpoints SET at = at + 1 WHERE id = 1`}, 0, "checkpoint was altered"},
	{"removed checkpoint tail", []string{`DELETE FROM ledger_checkpoints WHERE id = (SELECT max(id) FROM ledger_checkpoints)`}, 0, "checkpoints were removed from the end"},
	// The obligation index (what open-obligation queries read; no hash
	// covers it) must agree with the receipts. Odd seqs are task.assigned,
	// each terminated by the task.completed after it.
	{"obligation reopened in the index", []string{`UPDATE obligations SET terminated_by = NULL WHERE seq = 3`}, 4, "lists as open"},
	{"obligation's terminator renamed", []string{`UPDATE obligations SET terminated_by = (SELECT id FROM receipts WHERE seq = 2) WHERE seq = 3`}, 3, "that receipt does not terminate it"},
	{"obligation's terminator invented", []string{`UPDATE obligations SET terminated_by = 'R-FAKE' WHERE seq = 5`}, 5, "R-FAKE"},
	{"obligation row removed", []string{`DELETE FROM obligations WHERE seq = 1`}, 1, "no row"},
	{"obligation row's party altered", []string{`UPDATE obligations SET obligor = 'mallory' WHERE seq = 7`}, 7, "row was altered"},
	{"obligation row inserted", []string{`INSERT INTO obligations (receipt_id, tenant, type, obligor, obligee, task_id, created_at, seq)
SELECT id, tenant, 'task.assigned', from_p, to_p, task_id, created_at, seq FROM receipts WHERE seq = 2`}, 0, "a row was inserted"},
}

// CheckTamper fails the test unless rep reports c.
func CheckTamper(t *testing.T, c TamperCase, rep *engine.VerifyReport) {
	t.Helper()
	if c.Problem == "" {
		t.Fatalf("case %q names no problem: any report would do", c.Name)
	}
	if rep.OK {
		t.Fatalf("tampering went unnoticed: %+v", rep)
	}
	if rep.BadSeq != c.BadSeq || !contains(rep.Problem, c.Problem) {
		t.Fatalf("report %+v, want bad seq %d and problem mentioning %q", rep, c.BadSeq, c.Problem)
	}
}

// RehashCase is a rewrite of LedgerFixture's ledger by someone who knows the
// hash function: Stmts change receipts, then Rehash recomputes every
// prev_hash and hash of chain Chain, and the chain's head row, so each
// receipt matches its content and its predecessor again. Only what a
// checkpoint recorded can catch it.
type RehashCase struct {
	TamperCase
	Chain int64
}

// RehashCases are the rewrites with hashes recomputed that
// engine.VerifyLedger must catch (issue 38 item 6b: no tamper case
// rewrote a checkpointed receipt with its hashes recomputed, so a verifier
// that no longer compared checkpoints with the receipts they recorded
// passed every case). Chain A's last receipt (seq 6) is what LedgerFixture's
// checkpoints recorded of it.
var RehashCases = []RehashCase{
	{TamperCase{"checkpointed receipt rewritten, hashes recomputed",
		[]string{`UPDATE receipts SET body = '{"result_pointer":"inline:ZXZpbA=="}' WHERE seq = 4`}, 6, "recorded another receipt"}, 2},
}

// Rehash returns the statements that recompute, as the gate would have
// written them, the prev_hash and hash of every receipt of chain (in chain
// order, each over its content as st reads it) and the chain's head row.
func Rehash(t testing.TB, st store.Store, chain int64) []string {
	t.Helper()
	ctx := context.Background()
	var rs []*host.Receipt
	var version int
	if err := st.View(ctx, func(r store.Reader) error {
		heads, err := r.LedgerHeads(ctx)
		if err != nil {
			return err
		}
		for _, h := range heads.Chains {
			if h.ID == chain {
				version = h.Version
			}
		}
		after := int64(math.MinInt64)
		for {
			page, err := r.ScanReceipts(ctx, after, 1000)
			if err != nil {
				return err
			}
			for _, rc := range page {
				after = rc.Seq
				if rc.ChainID == chain {
					rs = append(rs, rc)
				}
			}
			if len(page) < 1000 {
				return nil
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if version == 0 || len(rs) == 0 {
		t.Fatalf("chain %d: no head or no receipts", chain)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].ChainSeq < rs[j].ChainSeq })
	var stmts []string
	prev := ""
	for _, rc := range rs {
		h := host.HashReceipt(version, rc, prev)
		stmts = append(stmts, fmt.Sprintf(`UPDATE receipts SET prev_hash = '%s', hash = '%s' WHERE seq = %d`, prev, h, rc.Seq))
		prev = h
	}
	return append(stmts, fmt.Sprintf(`UPDATE ledger_chains SET hash = '%s' WHERE chain_id = %d`, prev, chain))
}
