package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/asyncgate/asyncgate/host/engine"
)

func init() {
	register(command{name: "ledger", summary: "verify the receipt ledger's hash chains", run: runLedger})
}

const ledgerUsage = `Usage:
  gate ledger verify --data DIR [--db URL] [--json] [--expect-checkpoint HASH]...

Walks the whole ledger in one consistent read: every writer's receipt chain
link by link, every chain's recorded head, and the checkpoints that bind the
chains together. Exits 0 when the ledger is intact, 1 naming the first bad
receipt (or checkpoint) otherwise. Keep the printed checkpoint hash outside
the gate's store, and give it back with --expect-checkpoint: a ledger whose
checkpoints were rewritten (with everything they bound) fails against it.
`

// hashList is a repeatable flag.
type hashList []string

func (h *hashList) String() string { return fmt.Sprint(*h) }
func (h *hashList) Set(v string) error {
	if len(v) != 64 || strings.Trim(v, "0123456789abcdef") != "" {
		return fmt.Errorf("%q is not a checkpoint hash (64 lowercase hex digits)", v)
	}
	*h = append(*h, v)
	return nil
}

func runLedger(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprint(stderr, ledgerUsage)
		return 2
	}
	fs := flag.NewFlagSet("gate ledger verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "./gate-data", "data folder")
	db := fs.String("db", "", "database URL (empty: SQLite in the data folder)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	var expect hashList
	fs.Var(&expect, "expect-checkpoint", "a checkpoint hash kept from an earlier verify that must still be in the checkpoint chain (repeatable)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	st, _, err := openStore(context.Background(), *data, *db, openAsIs) // never creates a gate, never migrates
	if err != nil {
		fmt.Fprintln(stderr, "gate ledger verify:", err)
		return 1
	}
	defer st.Close()
	rep, err := engine.VerifyLedgerExpecting(context.Background(), st, expect)
	if err != nil {
		fmt.Fprintln(stderr, "gate ledger verify:", err)
		return 1
	}
	if *asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(stdout, string(b))
	}
	if !rep.OK {
		bad := rep.FirstBad
		if bad == "" {
			bad = fmt.Sprintf("after seq %d", rep.BadSeq)
		}
		fmt.Fprintf(stderr, "ledger BROKEN: first bad receipt %s (seq %d): %s\n", bad, rep.BadSeq, rep.Problem)
		return 1
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "ledger intact: %d receipts in %d chains, last seq %d; %d checkpoints, last checkpoint hash %s\n",
			rep.Receipts, rep.Chains, rep.HeadSeq, rep.Checkpoints, rep.HeadHash)
	}
	return 0
}
