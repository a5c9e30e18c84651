package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/asyncgate/asyncgate/host"
)

// gate receipts: read receipts and their chains from a running gate, and
// check their hashes on this side.

func init() {
	registerRemote(remoteGroup{name: "receipts", summary: "show receipts and chains on a running gate, and verify their hashes", subs: []remoteSub{
		{name: "show", args: "RECEIPT_ID", summary: "show a receipt and what terminated it", minArgs: 1, maxArgs: 1,
			run: func(rc *remoteCtx, args []string) error {
				var raw json.RawMessage
				if err := rc.call("GET", "/v1/receipts/"+url.PathEscape(args[0]), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var r struct {
					host.Receipt
					TerminatedBy string `json:"terminated_by"`
				}
				if err := json.Unmarshal(raw, &r); err != nil {
					return err
				}
				hashOK := "does not match its content"
				if receiptHashOK(&r.Receipt) {
					hashOK = "matches its content"
				}
				rc.fields([][2]string{
					{"receipt", r.ID}, {"type", string(r.Type)}, {"from", r.From}, {"to", r.To}, {"task", r.TaskID}, {"lease", r.LeaseID},
					{"parents", strings.Join(r.Parents, ", ")}, {"terminated by", r.TerminatedBy}, {"created", fmtTime(&r.CreatedAt)},
					{"seq", strconv.FormatInt(r.Seq, 10)}, {"chain", chainPos(&r.Receipt)}, {"hash", r.Hash + " (" + hashOK + ")"},
					{"prev hash", r.PrevHash}, {"body", clip(string(r.Body), 300)},
				})
				return nil
			}},
		{name: "chain", args: "RECEIPT_ID", summary: "show a receipt's chain up through its parents, nearest first", minArgs: 1, maxArgs: 1,
			run: func(rc *remoteCtx, args []string) error {
				var raw json.RawMessage
				if err := rc.call("GET", "/v1/receipts/"+url.PathEscape(args[0])+"/chain", nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var out struct {
					Chain []struct {
						host.Receipt
						TerminatedBy string `json:"terminated_by"`
						Depth        int    `json:"depth"`
					} `json:"chain"`
				}
				if err := json.Unmarshal(raw, &out); err != nil {
					return err
				}
				rows := make([][]string, 0, len(out.Chain))
				for _, l := range out.Chain {
					ok := "ok"
					if !receiptHashOK(&l.Receipt) {
						ok = "BAD"
					}
					rows = append(rows, []string{strconv.Itoa(l.Depth), l.ID, string(l.Type), l.From + " → " + l.To, l.TerminatedBy, ok})
				}
				rc.table([]string{"DEPTH", "RECEIPT", "TYPE", "FROM → TO", "TERMINATED BY", "HASH"}, rows)
				return nil
			}},
		{name: "verify", args: "TASK_ID|RECEIPT_ID", summary: "check the hashes of a task's receipts (or of one receipt's chain)", minArgs: 1, maxArgs: 1,
			more: `Recomputes each receipt's hash from its content and its predecessor's hash,
here, with the gate's encoding, and checks that consecutive receipts of one
writer's chain link up. A T-… id checks every receipt of the task; an R-… id
the receipt and its parents. Exit status 1 when a receipt does not match.
For the whole ledger, run gate ledger verify on the gate's host.`,
			run: func(rc *remoteCtx, args []string) error {
				rs, err := receiptsToVerify(rc, args[0])
				if err != nil {
					return err
				}
				rep := verifyReceipts(rs)
				if rc.json {
					if err := rc.printJSON(rep); err != nil {
						return err
					}
				} else {
					for _, p := range rep.Problems {
						fmt.Fprintln(rc.out, "BAD", p)
					}
					if rep.OK {
						fmt.Fprintf(rc.out, "%d receipts verified: every hash matches its content; %d chain links checked\n", rep.Receipts, rep.Links)
					}
				}
				if !rep.OK {
					return exitErr{exitError, fmt.Sprintf("%d of %d receipts do not verify", len(rep.Problems), rep.Receipts)}
				}
				return nil
			}},
	}})
}

// chainPos is "chain 3, link 17" (per-writer chains) or the global sequence.
func chainPos(r *host.Receipt) string {
	if r.ChainID > 0 {
		return fmt.Sprintf("%d, link %d", r.ChainID, r.ChainSeq)
	}
	return "global (v1)"
}

// receiptHashOK recomputes a receipt's hash under its chain's version.
// The gate's JSON encoder writes <, >, &, U+2028 and U+2029 inside a raw
// body as \u escapes, so a body the ledger holds with those characters
// arrives escaped: when the body as received does not match, it is tried
// with those escapes undone (the same JSON value).
func receiptHashOK(r *host.Receipt) bool {
	v := host.ChainV1
	if r.ChainID > 0 {
		v = host.ChainV2
	}
	if host.HashReceipt(v, r, r.PrevHash) == r.Hash {
		return true
	}
	if !bytes.Contains(r.Body, []byte(`\u`)) {
		return false
	}
	c := *r
	c.Body = json.RawMessage(htmlUnescaper.Replace(string(r.Body)))
	return host.HashReceipt(v, &c, r.PrevHash) == r.Hash
}

// htmlUnescaper undoes the escapes encoding/json adds to raw JSON.
var htmlUnescaper = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&", `\u2028`, "\u2028", `\u2029`, "\u2029")

// receiptsToVerify fetches a task's receipts (every page), or a receipt's chain.
func receiptsToVerify(rc *remoteCtx, id string) ([]host.Receipt, error) {
	var rs []host.Receipt
	if strings.HasPrefix(id, "R-") {
		var out struct {
			Chain []host.Receipt `json:"chain"`
		}
		if err := rc.call("GET", "/v1/receipts/"+url.PathEscape(id)+"/chain", nil, &out); err != nil {
			return nil, err
		}
		return out.Chain, nil
	}
	cur := ""
	for {
		path := "/v1/receipts?limit=100&task_id=" + url.QueryEscape(id)
		if cur != "" {
			path += "&cursor=" + url.QueryEscape(cur)
		}
		var out struct {
			Receipts []host.Receipt `json:"receipts"`
			Cursor   string         `json:"cursor"`
		}
		if err := rc.call("GET", path, nil, &out); err != nil {
			return nil, err
		}
		rs = append(rs, out.Receipts...)
		if out.Cursor == "" || len(out.Receipts) == 0 {
			return rs, nil
		}
		cur = out.Cursor
	}
}

// verifyReport is what gate receipts verify found.
type verifyReport struct {
	OK       bool     `json:"ok"`
	Receipts int      `json:"receipts"`
	Links    int      `json:"links_checked"`
	Problems []string `json:"problems,omitempty"`
}

// verifyReceipts checks each receipt's hash, and the links between receipts
// that follow each other in one chain.
func verifyReceipts(rs []host.Receipt) verifyReport {
	rep := verifyReport{Receipts: len(rs)}
	type pos struct{ chain, seq int64 }
	byPos := map[pos]*host.Receipt{}
	for i := range rs {
		r := &rs[i]
		if !receiptHashOK(r) {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s (%s): its hash %s does not match its content", r.ID, r.Type, r.Hash))
		}
		if r.ChainID > 0 {
			byPos[pos{r.ChainID, r.ChainSeq}] = r
		} else {
			byPos[pos{0, r.Seq}] = r
		}
	}
	for p, r := range byPos {
		prev, ok := byPos[pos{p.chain, p.seq - 1}]
		if !ok {
			continue
		}
		rep.Links++
		if r.PrevHash != prev.Hash {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: prev_hash %s is not the hash of %s, its predecessor", r.ID, r.PrevHash, prev.ID))
		}
	}
	sort.Strings(rep.Problems)
	rep.OK = len(rep.Problems) == 0
	return rep
}
