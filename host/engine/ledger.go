package engine

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// receiptVisible reports whether actor may read r: admins the whole tenant,
// others the receipts they issued or that are addressed to them, and the
// receipts of tasks they may see.
func (e *Engine) receiptVisible(ctx context.Context, r store.Reader, a Actor, rc *host.Receipt) bool {
	if rc.Tenant != a.Tenant {
		return false
	}
	if a.Role == RoleAdmin || rc.From == a.Principal || rc.To == a.Principal {
		return true
	}
	if rc.TaskID != "" {
		if t, err := r.GetTask(ctx, a.Tenant, rc.TaskID); err == nil {
			return visible(a, t) || (a.Role == RoleWorker && rc.From == a.Principal)
		}
	}
	return false
}

// GetReceipt returns a receipt the actor may read, with its terminator if any.
func (e *Engine) GetReceipt(ctx context.Context, actor Actor, id string) (*host.Receipt, string, error) {
	var rc *host.Receipt
	var term string
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		if rc, err = r.GetReceipt(ctx, actor.Tenant, id); err != nil {
			return err
		}
		if !e.receiptVisible(ctx, r, actor, rc) {
			return host.Errorf(host.CodeNotFound, "no receipt %s", id)
		}
		term, err = r.Terminator(ctx, actor.Tenant, id)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return rc, term, nil
}

// TaskReceipts lists the receipts of a task the actor may see, in ledger
// order; given a workflow id, the workflow's own receipts (submitted, and
// how it ended) when the actor may read the workflow; given a schedule id,
// the schedule's (ScheduleReceipts).
func (e *Engine) TaskReceipts(ctx context.Context, actor Actor, taskID, cursor string, limit int) ([]*host.Receipt, string, error) {
	if strings.HasPrefix(taskID, host.PrefixSchedule) {
		return e.ScheduleReceipts(ctx, actor, taskID, cursor, limit)
	}
	if strings.HasPrefix(taskID, host.PrefixWorkflow) {
		if err := e.view(ctx, func(r store.Reader) error {
			wf, err := r.GetWorkflow(ctx, actor.Tenant, taskID)
			if err == nil && !workflowVisible(actor, wf) {
				err = host.Errorf(host.CodeNotFound, "no workflow %s", taskID)
			}
			return err
		}); err != nil {
			return nil, "", err
		}
	} else if _, err := e.PeekTask(ctx, actor, taskID); err != nil {
		return nil, "", err
	}
	limit, err := pageSize(limit, MaxPage)
	if err != nil {
		return nil, "", err
	}
	var out []*host.Receipt
	var cur string
	err = e.view(ctx, func(r store.Reader) error {
		var err error
		out, cur, err = r.ListReceipts(ctx, store.ReceiptFilter{Tenant: actor.Tenant, TaskID: taskID, Cursor: cursor, Limit: limit})
		return err
	})
	return out, cur, err
}

// ChainLink is one receipt of a chain with the receipt that terminated it.
type ChainLink struct {
	*host.Receipt
	TerminatedBy string `json:"terminated_by,omitempty"`
	Depth        int    `json:"depth"`
}

// MaxChainDepth bounds chain traversal.
const MaxChainDepth = 64

// Chain walks from a receipt up through its parents (O(depth) lookups, never a
// ledger scan) and returns the receipts found, nearest first. A parent the
// actor may not read is left out, as one not in the ledger is, and the walk
// does not go past it.
func (e *Engine) Chain(ctx context.Context, actor Actor, id string) ([]ChainLink, error) {
	var out []ChainLink
	err := e.view(ctx, func(r store.Reader) error {
		out = nil
		start, err := r.GetReceipt(ctx, actor.Tenant, id)
		if err != nil {
			return err
		}
		if !e.receiptVisible(ctx, r, actor, start) {
			return host.Errorf(host.CodeNotFound, "no receipt %s", id)
		}
		seen := map[string]bool{id: true}
		level := []*host.Receipt{start}
		for depth := 0; len(level) > 0 && depth <= MaxChainDepth; depth++ {
			var next []*host.Receipt
			for _, rc := range level {
				term, err := r.Terminator(ctx, actor.Tenant, rc.ID)
				if err != nil {
					return err
				}
				out = append(out, ChainLink{Receipt: rc, TerminatedBy: term, Depth: depth})
				for _, p := range rc.Parents {
					if seen[p] {
						continue
					}
					seen[p] = true
					pr, err := r.GetReceipt(ctx, actor.Tenant, p)
					if host.IsCode(err, host.CodeNotFound) {
						continue // a parent of another tenant or not (yet) in this ledger
					}
					if err != nil {
						return err
					}
					if !e.receiptVisible(ctx, r, actor, pr) {
						continue // one the actor may not read: left out as if it did not exist
					}
					next = append(next, pr)
				}
			}
			level = next
		}
		return nil
	})
	return out, err
}

// TerminatorCheck answers check-terminator.
type TerminatorCheck struct {
	ParentReceiptID string `json:"parent_receipt_id"`
	HasTerminator   bool   `json:"has_terminator"`
	TerminatorID    string `json:"terminator_receipt_id,omitempty"`
	IsObligation    bool   `json:"is_obligation"`
}

// CheckTerminator reports whether an obligation has been discharged, by one
// indexed lookup.
func (e *Engine) CheckTerminator(ctx context.Context, actor Actor, id string) (*TerminatorCheck, error) {
	rc, term, err := e.GetReceipt(ctx, actor, id)
	if err != nil {
		return nil, err
	}
	return &TerminatorCheck{ParentReceiptID: id, HasTerminator: term != "", TerminatorID: term, IsObligation: rc.Type.CreatesObligation()}, nil
}

// userDedupePrefix keeps principals' dedupe keys apart from the engine's.
const userDedupePrefix = "user:"

// AppendRequest is a receipt a principal appends itself.
type AppendRequest struct {
	Type      host.ReceiptType `json:"receipt_type"`
	To        string           `json:"to"`
	TaskID    string           `json:"task_id,omitempty"`
	Parents   []string         `json:"parents"`
	Body      []byte           `json:"body"`
	DedupeKey string           `json:"dedupe_key,omitempty"`
}

// AppendReceipt lets a principal append a receipt under the ledger's
// invariants. The issuer is always the caller. A principal appends only
// what informs (task.progress, and task.escalated: a call for attention to
// a task's party or its configured supervisor); every type the gate writes
// as a task, an email or a workflow moves (assigned, accepted, completed,
// failed, canceled, retry_scheduled, released, snoozed, email.*,
// workflow.*, schedule.*) is refused. And what a principal appends ends no
// obligation: a parent its type would terminate (a task.escalated naming a
// task.accepted) is refused, whoever the caller (the worker, the task's
// creator or recipient, an admin), since only the gate's own state
// transitions (complete, fail, retry, release, snooze, cancel, and the
// gate's escalation when a lease expires) may end an obligation the ledger
// shows as open. A repeated dedupe key returns the first receipt the caller
// appended with it: dedupe keys belong to the principal that used them.
//
// What a principal writes stays within what it is a party to (issue 37):
// its task must be one it may see, every parent one it may read (a parent it
// may not read is refused with the answer an unknown id gets), and the
// receipt may be addressed only to a party of its task (who queued it, its
// recipient, the worker holding it) or to the escalation target its task
// type configures; a receipt without a task only to the caller or to a party
// of one of its parents. Admins may address any principal of their tenant.
func (e *Engine) AppendReceipt(ctx context.Context, actor Actor, req AppendRequest) (*host.Receipt, bool, error) {
	switch req.Type {
	case host.ReceiptProgress, host.ReceiptEscalated:
	default:
		if !req.Type.Known() {
			return nil, false, host.Errorf(host.CodeInvalidReceipt, "unknown receipt type %q", req.Type)
		}
		return nil, false, host.Errorf(host.CodeForbidden, "receipts of type %s are written by the gate as the task moves; use the task calls", req.Type)
	}
	if host.LongerThan(req.DedupeKey, 200) {
		return nil, false, host.Errorf(host.CodeBadRequest, "dedupe_key is longer than 200 characters")
	}
	if req.To == "" {
		req.To = actor.Principal
	} else if !host.ValidPrincipal(req.To) {
		// A malformed name is bad input, whoever may be addressed.
		return nil, false, host.Errorf(host.CodeBadRequest, "to %.80q is not a principal name (must match %s)", req.To, host.PrincipalPattern)
	}
	// Principals' dedupe keys live in their own namespace, apart from the keys
	// the engine uses for its outcome receipts (complete:<lease>, fail:<lease>),
	// and each principal's apart from every other's: the store looks a key up
	// among the receipts its caller issued, and holds it unique per issuer.
	dedupe := ""
	if req.DedupeKey != "" {
		dedupe = userDedupePrefix + req.DedupeKey
	}
	rc := &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: actor.Tenant, Type: req.Type, From: actor.Principal, To: req.To,
		TaskID: req.TaskID, Parents: req.Parents, Body: req.Body, DedupeKey: dedupe}
	if rc.Parents == nil {
		rc.Parents = []string{}
	}
	if err := rc.Validate(); err != nil {
		return nil, false, err
	}
	// to holds the principals the receipt may be addressed to.
	to := map[string]bool{actor.Principal: true}
	if req.TaskID != "" {
		t, err := e.PeekTask(ctx, actor, req.TaskID)
		if err != nil {
			return nil, false, err // only a task the caller may see (a worker: one it holds)
		}
		to[t.CreatedBy], to[t.Recipient] = true, true
		if t.WorkerID != "" {
			to[t.WorkerID] = true
		}
		if ct, err := e.types.get(ctx, t.Tenant, t.Type); err == nil {
			if s := configuredEscalateTo(ct.tt); s != "" {
				to[s] = true
			}
		} else if !host.IsCode(err, host.CodeUnknownTaskType) {
			return nil, false, err
		}
	}
	dup := false
	err := e.update(ctx, func(tx store.Tx) error {
		dup = false
		if rc.DedupeKey != "" {
			if prev, err := tx.GetReceiptByDedupe(ctx, actor.Tenant, actor.Principal, rc.DedupeKey); err != nil {
				return err
			} else if prev != nil {
				rc, dup = prev, true
				return nil
			}
		}
		parties := map[string]bool{}
		for _, p := range rc.Parents {
			pr, err := tx.GetReceipt(ctx, actor.Tenant, p)
			if err == nil && !e.receiptVisible(ctx, tx, actor, pr) {
				err = host.Errorf(host.CodeNotFound, "no receipt %s", p) // as if it did not exist
			}
			if err != nil {
				if host.IsCode(err, host.CodeNotFound) {
					return host.Errorf(host.CodeInvalidReceipt, "parent %s is not in this ledger", p)
				}
				return err
			}
			parties[pr.From], parties[pr.To] = true, true
			if rc.Type.Terminates(pr.Type) {
				// The ledger reads a receipt of a terminating type that
				// names an obligation as its end (receipt.go,
				// terminators): an escalation no lease made would stand
				// as the end of a worker's promise while its lease is
				// live, and the real outcome would end nothing. Citing
				// it without ending it would leave the ledger saying
				// one thing and the obligation index another.
				return host.Errorf(host.CodeForbidden, "parent %s is a %s, an obligation only the gate ends as the task moves "+
					"(complete, fail, release, snooze, cancel, or an expired lease); a %s you append may not name it. "+
					"Name receipts it does not end instead (the task's task.assigned, a task.progress)", p, pr.Type, rc.Type)
			}
		}
		if rc.TaskID == "" {
			for p := range parties {
				to[p] = true
			}
		}
		if !to[rc.To] && actor.Role != RoleAdmin {
			if rc.TaskID != "" {
				return host.Errorf(host.CodeForbidden, "a receipt about task %s may be addressed only to the task's parties (who queued it, its recipient, the worker holding it) or to the escalation target its task type configures, not to %.80q", rc.TaskID, rc.To)
			}
			return host.Errorf(host.CodeForbidden, "a receipt without a task may be addressed only to yourself or to a party of one of its parents, not to %.80q", rc.To)
		}
		rc.CreatedAt = e.now()
		return appendReceipt(ctx, tx, rc, nil) // it ends no obligation (above)
	})
	if err != nil {
		return nil, false, err
	}
	e.emit(Event{Kind: EvReceipt, Tenant: actor.Tenant, Detail: string(rc.Type)})
	return rc, dup, nil
}

// OpenObligations lists the open obligations a principal owes or is owed
// (role "obligor" or "obligee" narrows it). Non-admins may ask only about
// themselves. It reads the obligation index, never the ledger.
func (e *Engine) OpenObligations(ctx context.Context, actor Actor, f store.ObligationFilter) ([]host.Obligation, string, error) {
	f.Tenant = actor.Tenant
	if f.Principal == "" {
		f.Principal = actor.Principal
	}
	if f.Principal != actor.Principal && actor.Role != RoleAdmin {
		return nil, "", host.Errorf(host.CodeForbidden, "only an admin may list another principal's obligations")
	}
	if f.Role != "" && f.Role != "obligor" && f.Role != "obligee" {
		return nil, "", host.Errorf(host.CodeBadRequest, "role must be obligor or obligee")
	}
	var err error
	if f.Limit, err = pageSize(f.Limit, MaxPage); err != nil {
		return nil, "", err
	}
	var out []host.Obligation
	var cur string
	err = e.view(ctx, func(r store.Reader) error {
		var err error
		out, cur, err = r.ListOpenObligations(ctx, f)
		return err
	})
	return out, cur, err
}

// VerifyReport is the outcome of a ledger verification.
type VerifyReport struct {
	OK          bool  `json:"ok"`
	Receipts    int64 `json:"receipts"`
	Chains      int   `json:"chains"`
	Checkpoints int64 `json:"checkpoints"`
	// HeadSeq is the last receipt's place in the ledger; HeadHash is the last
	// checkpoint's hash, the value to keep outside the database: a ledger
	// rewritten since cannot end in it.
	HeadSeq  int64  `json:"head_seq"`
	HeadHash string `json:"head_hash"`
	// FirstBad names the first receipt (or checkpoint) that breaks a chain,
	// BadSeq its place in the ledger, and Problem says how.
	FirstBad string `json:"first_bad_receipt,omitempty"`
	BadSeq   int64  `json:"bad_seq,omitempty"`
	Problem  string `json:"problem,omitempty"`
}

// chainWalk is the verifier's position in one chain.
type chainWalk struct {
	head    host.ChainHead // as recorded
	seq     int64          // chain_seq of the last receipt seen
	hash    string
	lastSeq int64 // ledger seq of the last receipt seen
}

type claimKey struct{ chain, seq int64 }

type claim struct {
	hash       string
	checkpoint int64
}

// VerifyLedger checks the whole ledger in one consistent read.
//
// Receipts are walked in ledger order. Each belongs to one writer's chain, in
// which its position must follow its predecessor's, its prev_hash must be its
// predecessor's hash, and its hash must match its content (and its position):
// an altered, removed, inserted or reordered receipt breaks one of those.
// Every chain must end where its recorded head says (a removed tail), and
// every checkpoint — each linked to the one before, the last one matching the
// checkpoint head — must name receipts that exist with the hashes it
// recorded, so a tail cut together with its chain's head row, or a whole
// chain removed, is caught as far as the last checkpoint that saw it.
func VerifyLedger(ctx context.Context, st store.Store) (*VerifyReport, error) {
	return VerifyLedgerExpecting(ctx, st, nil)
}

// VerifyLedgerExpecting is VerifyLedger that also requires every hash in
// checkpoints, each a checkpoint hash kept outside the store (as a verify
// printed it, or a checkpoint published earlier), to be in the checkpoint
// chain. Without such a hash a store rewritten whole (its checkpoints with
// their head row, and the chains with theirs) can verify; with one, any
// rewrite of what that checkpoint bound is caught.
func VerifyLedgerExpecting(ctx context.Context, st store.Store, checkpoints []string) (*VerifyReport, error) {
	var rep *VerifyReport
	err := st.View(ctx, func(r store.Reader) error {
		var err error
		rep, err = verifyLedger(ctx, r, checkpoints)
		return err
	})
	return rep, err
}

func verifyLedger(ctx context.Context, r store.Reader, expect []string) (*VerifyReport, error) {
	rep := &VerifyReport{OK: true}
	fail := func(id string, seq int64, problem string) (*VerifyReport, error) {
		rep.OK, rep.FirstBad, rep.BadSeq, rep.Problem = false, id, seq, problem
		return rep, nil
	}
	heads, err := r.LedgerHeads(ctx)
	if err != nil {
		return nil, err
	}
	chains := map[int64]*chainWalk{}
	for _, h := range heads.Chains {
		if h.Version != host.ChainV1 && h.Version != host.ChainV2 {
			return fail(fmt.Sprintf("chain %d", h.ID), 0, fmt.Sprintf("chain %d records hash version %d, which no gate writes: its head record was altered", h.ID, h.Version))
		}
		chains[h.ID] = &chainWalk{head: h}
	}
	expected := map[string]bool{}
	for _, h := range expect {
		expected[h] = false
	}
	rep.Chains = len(chains)

	// The checkpoint chain, and what each checkpoint claims.
	claims := map[claimKey]claim{}
	var cpID int64
	var cpHash string
	for {
		page, err := r.ScanCheckpoints(ctx, cpID, 1000)
		if err != nil {
			return nil, err
		}
		for i := range page {
			c := &page[i]
			name := fmt.Sprintf("checkpoint %d", c.ID)
			switch {
			case c.ID != cpID+1:
				return fail(name, 0, fmt.Sprintf("checkpoints jump from %d to %d: a checkpoint was removed or inserted", cpID, c.ID))
			case c.PrevHash != cpHash:
				return fail(name, 0, "the checkpoint's prev_hash does not match the checkpoint before it: checkpoints were cut, reordered or spliced")
			case host.CheckpointHash(c, cpHash) != c.Hash:
				return fail(name, 0, "the checkpoint's hash does not match its content: the checkpoint was altered")
			}
			for _, h := range c.Heads {
				if chains[h.ID] == nil {
					return fail(name, 0, fmt.Sprintf("checkpoint %d records chain %d at %d, but the chain has no head record: a whole chain was removed", c.ID, h.ID, h.Seq))
				}
				claims[claimKey{h.ID, h.Seq}] = claim{h.Hash, c.ID}
			}
			if _, ok := expected[c.Hash]; ok {
				expected[c.Hash] = true
			}
			cpID, cpHash = c.ID, c.Hash
			rep.Checkpoints++
		}
		if len(page) < 1000 {
			break
		}
	}
	if heads.Checkpoint.Seq != cpID || heads.Checkpoint.Hash != cpHash {
		return fail(fmt.Sprintf("checkpoint %d", cpID), 0, fmt.Sprintf("the checkpoint head records checkpoint %d (%.12s…) but the checkpoints end at %d: checkpoints were removed from the end",
			heads.Checkpoint.Seq, heads.Checkpoint.Hash, cpID))
	}
	for _, h := range expect {
		if !expected[h] {
			return fail("", 0, fmt.Sprintf("checkpoint hash %.12s… (kept outside the store) is not in the checkpoint chain: checkpoints were removed or rewritten", h))
		}
	}
	rep.HeadHash = cpHash

	// The receipts, in ledger order, from the lowest seq the store holds:
	// a seq starts at 1, so one at 0 or below can only have been put there.
	var lastSeq int64
	obs := obligationWalk{open: map[string]*obligationState{}}
	after := int64(math.MinInt64)
	for {
		page, err := r.ScanReceipts(ctx, after, 1000)
		if err != nil {
			return nil, err
		}
		rows, err := obligationRows(ctx, r, page)
		if err != nil {
			return nil, err
		}
		for _, rc := range page {
			after = rc.Seq
			if rc.Seq <= 0 {
				return fail(rc.ID, rc.Seq, fmt.Sprintf("the receipt is stored at seq %d, below the ledger's first (1): a receipt was inserted", rc.Seq))
			}
			cw := chains[rc.ChainID]
			if cw == nil {
				return fail(rc.ID, rc.Seq, fmt.Sprintf("the receipt names chain %d, which has no head record: a receipt was inserted", rc.ChainID))
			}
			switch {
			case rc.ChainSeq <= cw.seq:
				return fail(rc.ID, rc.Seq, fmt.Sprintf("chain %d: position %d comes again after %d: a receipt was inserted or reordered", rc.ChainID, rc.ChainSeq, cw.seq))
			case rc.ChainSeq != cw.seq+1:
				return fail(rc.ID, rc.Seq, fmt.Sprintf("chain %d: sequence jumps from %d to %d: a receipt was removed, inserted or reordered", rc.ChainID, cw.seq, rc.ChainSeq))
			case rc.PrevHash != cw.hash:
				return fail(rc.ID, rc.Seq, fmt.Sprintf("chain %d: prev_hash does not match the preceding receipt: the chain was cut, reordered or spliced", rc.ChainID))
			case host.HashReceipt(cw.head.Version, rc, cw.hash) != rc.Hash:
				return fail(rc.ID, rc.Seq, "hash does not match the receipt's content: the receipt was altered")
			}
			if c, ok := claims[claimKey{rc.ChainID, rc.ChainSeq}]; ok && c.hash != rc.Hash {
				return fail(rc.ID, rc.Seq, fmt.Sprintf("checkpoint %d recorded another receipt at chain %d position %d: the chain was rewritten", c.checkpoint, rc.ChainID, rc.ChainSeq))
			}
			cw.seq, cw.hash, cw.lastSeq = rc.ChainSeq, rc.Hash, rc.Seq
			lastSeq = rc.Seq
			rep.Receipts++
			if problem := obs.receipt(rc, rows); problem != "" {
				return fail(rc.ID, rc.Seq, problem)
			}
		}
		if len(page) < 1000 {
			break
		}
	}
	rep.HeadSeq = lastSeq

	// Every chain ends where its head row and every checkpoint say.
	for _, h := range heads.Chains {
		cw := chains[h.ID]
		if h.Seq != cw.seq || h.Hash != cw.hash {
			return fail("", cw.lastSeq, fmt.Sprintf("chain %d's head records receipt %d (%.12s…) but the chain ends at %d: receipts were removed from the end",
				h.ID, h.Seq, h.Hash, cw.seq))
		}
	}
	for k, c := range claims {
		if cw := chains[k.chain]; k.seq > cw.seq {
			return fail("", cw.lastSeq, fmt.Sprintf("checkpoint %d records chain %d at %d but the chain ends at %d: receipts were removed from the end",
				c.checkpoint, k.chain, k.seq, cw.seq))
		}
	}

	// The obligation index agrees with the receipts.
	if id, seq, problem := obs.end(); problem != "" {
		return fail(id, seq, problem)
	}
	n, err := r.CountObligations(ctx)
	if err != nil {
		return nil, err
	}
	if n != obs.rows {
		return fail("", 0, fmt.Sprintf("the obligation index holds %d rows but the ledger's receipts create %d obligations: a row was inserted", n, obs.rows))
	}
	return rep, nil
}

// obligationState is what the verifier knows of one obligation the ledger
// created: its type, the terminator its index row names, and whether a
// receipt of the ledger has terminated it.
type obligationState struct {
	typ       host.ReceiptType
	seq       int64
	indexOpen bool   // the index lists it as open
	indexTerm string // else the receipt its row names
	ledger    bool   // a receipt of the ledger terminated it
}

// obligationWalk checks the obligation index (the table open-obligation
// queries read, which no hash covers) against the receipts as the verifier
// walks them: every receipt that creates an obligation has its row, with the
// receipt's parties, task, time and place; a row is open exactly while no
// receipt of the ledger terminates it (a receipt of a terminating type whose
// parents name it); and a terminated row names a receipt that terminates it.
// An obligation is remembered from its receipt until the receipt its row
// names is seen, so memory follows the obligations open at a point of the
// walk, not the ledger's length.
type obligationWalk struct {
	open map[string]*obligationState
	rows int64 // obligations the receipts created
}

// obligationRows reads the index rows of the obligations a page of receipts
// creates.
func obligationRows(ctx context.Context, r store.Reader, page []*host.Receipt) (map[string]store.ObligationRow, error) {
	var ids []string
	for _, rc := range page {
		if rc.Type.CreatesObligation() {
			ids = append(ids, rc.ID)
		}
	}
	out := make(map[string]store.ObligationRow, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := r.GetObligations(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, o := range rows {
		out[o.ReceiptID] = o
	}
	return out, nil
}

// receipt checks one receipt, in ledger order, against the index and
// returns the problem found ("" for none).
func (w *obligationWalk) receipt(rc *host.Receipt, rows map[string]store.ObligationRow) string {
	for _, p := range rc.Parents {
		o := w.open[p]
		if o == nil || !rc.Type.Terminates(o.typ) {
			continue
		}
		if !o.ledger {
			o.ledger = true
			if o.indexOpen {
				return fmt.Sprintf("receipt %s terminates obligation %s, which the obligation index lists as open: its row was altered", rc.ID, p)
			}
		}
		if !o.indexOpen && o.indexTerm == rc.ID {
			delete(w.open, p)
		}
	}
	if !rc.Type.CreatesObligation() {
		return ""
	}
	w.rows++
	o, ok := rows[rc.ID]
	switch {
	case !ok:
		return "the receipt creates an obligation that the obligation index has no row for: the row was removed"
	case o.Tenant != rc.Tenant || o.Type != rc.Type || o.Obligor != rc.From || o.Obligee != rc.To || o.TaskID != rc.TaskID ||
		o.Seq != rc.Seq || !o.CreatedAt.Equal(rc.CreatedAt):
		return "the obligation index's row for the receipt does not match it (tenant, type, parties, task, time or seq): the row was altered"
	}
	w.open[rc.ID] = &obligationState{typ: rc.Type, seq: rc.Seq, indexOpen: o.Open, indexTerm: o.TerminatedBy}
	return ""
}

// end reports the first obligation (in ledger order) whose row names a
// terminator that the walk never met terminating it.
func (w *obligationWalk) end() (id string, seq int64, problem string) {
	for pid, o := range w.open {
		if o.indexOpen || (id != "" && o.seq > seq) {
			continue
		}
		id, seq = pid, o.seq
		problem = fmt.Sprintf("the obligation index marks the obligation terminated by %q, but no receipt of the ledger terminates it: its row was altered", o.indexTerm)
		if o.ledger {
			problem = fmt.Sprintf("the obligation index names %q as the obligation's terminator, but that receipt does not terminate it: its row was altered", o.indexTerm)
		}
	}
	return id, seq, problem
}

// VerifyLedger verifies this engine's store; see the package function.
func (e *Engine) VerifyLedger(ctx context.Context) (*VerifyReport, error) {
	return VerifyLedger(ctx, e.st)
}
