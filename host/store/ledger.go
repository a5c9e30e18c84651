package store

import (
	"context"

	"github.com/asyncgate/asyncgate/host"
)

// LedgerReader reads the receipt ledger: receipts, their chains and the
// checkpoints that bind the chains' heads.
//
// Seq is a receipt's place in the whole ledger: unique, and increasing in
// each writer's chain. With several writers (PostgreSQL, several hosts or
// Options.Writers) Seq order need not be commit order: a receipt can become
// visible after one with a higher Seq, so a reader that pages by Seq
// (ListReceipts, ScanReceipts) may see it only on a later read. The chains
// (ChainID, ChainSeq) have no gaps. The conformance suite does not check the
// order in which receipts of different writers become visible.
type LedgerReader interface {
	// GetReceipt returns a receipt or host.CodeNotFound.
	GetReceipt(ctx context.Context, tenant, id string) (*host.Receipt, error)
	// GetReceiptByDedupe returns the receipt appended with the dedupe key,
	// or nil and no error. A dedupe key is unique per (tenant, issuer): with
	// from set it looks among the receipts that principal issued; with from
	// empty among all of the tenant's, for the engine's own keys, which embed
	// an id and so can have one issuer only (storetest: DedupePerPrincipal,
	// DedupeNamespaces).
	GetReceiptByDedupe(ctx context.Context, tenant, from, key string) (*host.Receipt, error)
	// GetLeaseReceipt returns the first receipt (lowest Seq) of type typ
	// that task taskID's ledger holds under lease leaseID, or nil and no
	// error. It reads the task's receipts (the index by task), so an
	// outcome the gate writes once a lease is found without a dedupe key
	// of its own (storetest: CompleteIdempotentPerLease, OlderLeaseIDs).
	GetLeaseReceipt(ctx context.Context, tenant, taskID, leaseID string, typ host.ReceiptType) (*host.Receipt, error)
	// ListReceipts lists a tenant's receipts in ledger (Seq) order from the
	// cursor on, with the cursor of the next page; a bad cursor is
	// host.CodeBadRequest.
	ListReceipts(ctx context.Context, f ReceiptFilter) ([]*host.Receipt, string, error)
	// ScanReceipts returns up to limit receipts of every tenant with Seq >
	// afterSeq, in Seq order (the ledger verifier walks the ledger with it).
	ScanReceipts(ctx context.Context, afterSeq int64, limit int) ([]*host.Receipt, error)
	// LedgerHeads returns the recorded head of every receipt chain and of the
	// checkpoint chain. A head moves in the same transaction as the receipt
	// that moves it, so a view's heads match its receipts (the verifier
	// checks them: every case ends with Bundle.VerifyAfter).
	LedgerHeads(ctx context.Context) (LedgerHeads, error)
	// ScanCheckpoints returns up to limit checkpoints with ID > afterID, in ID order.
	ScanCheckpoints(ctx context.Context, afterID int64, limit int) ([]host.Checkpoint, error)
}

// LedgerWriter appends receipts.
type LedgerWriter interface {
	// AppendReceipt appends r to the ledger: it links it into this writer's
	// own chain (r.ChainID, r.ChainSeq, r.PrevHash, r.Hash) at once and sets
	// r.Seq (its place in the whole ledger) by the time Update returns, or
	// sooner after Flush: a driver may send the write with the rest of the
	// batch. Writers never share a chain, so no append waits for another
	// writer's. A clash on (tenant, dedupe key, issuer) or on the id is a
	// host.CodeConflict error from Update (a driver that finds it late runs
	// the batch again with every write answered at once). An update that
	// fails after appending leaves no gap in its chain (storetest:
	// ReceiptsChainAndTerminators, AppendReceiptInvariants,
	// GroupCommitIsolatesFailures, ClashWithCommittedRow).
	AppendReceipt(ctx context.Context, r *host.Receipt) error
}

// ObligationReader reads the obligation index: which receipts oblige whom,
// and which receipt discharged each. Its reads never scan the ledger.
type ObligationReader interface {
	// Terminator returns the id of the receipt that terminated the obligation
	// receiptID, or "" when it is open or is no obligation. Inside Update it
	// sees obligations opened and terminated earlier in the same update
	// (storetest: ObligationsWithinOneUpdate).
	Terminator(ctx context.Context, tenant, receiptID string) (string, error)
	// ListOpenObligations lists open obligations in ledger order from the
	// cursor on, with the cursor of the next page; a bad cursor is
	// host.CodeBadRequest.
	ListOpenObligations(ctx context.Context, f ObligationFilter) ([]host.Obligation, string, error)
	// GetObligations returns the obligation index's rows of the receipts ids
	// (of any tenant), each with the receipt that terminated it; a receipt
	// without a row is left out. The ledger verifier checks the index
	// against the receipts with it.
	GetObligations(ctx context.Context, ids []string) ([]ObligationRow, error)
	// CountObligations counts the obligation index's rows.
	CountObligations(ctx context.Context) (int64, error)
}

// ObligationWriter opens and discharges obligations. Both run in the
// transaction that appends the receipts they name, so the index never lists
// a receipt the ledger lacks.
type ObligationWriter interface {
	// OpenObligation records an obligation created by a receipt appended in
	// the same transaction.
	OpenObligation(ctx context.Context, o host.Obligation) error
	// Terminate records that terminatorID discharged the obligation parentID
	// if it is open. A closed one keeps its first terminator; terminating an
	// unknown or closed obligation writes nothing and is no error (storetest:
	// CompleteAfterConcurrentWrite, ObligationsWithinOneUpdate).
	Terminate(ctx context.Context, tenant, parentID, terminatorID string) error
}

// ReceiptFilter selects receipts for ListReceipts.
type ReceiptFilter struct {
	Tenant string
	TaskID string
	// ScheduleID selects the schedule.* receipts of a schedule, read
	// through an index on the id their bodies name (migration 0054;
	// storetest: ScheduleReceiptsListed). Only the gate writes those
	// receipts, compact, and every one names its schedule.
	ScheduleID string
	// Latest lists the last Limit receipts instead (still in ledger
	// order, with no cursor of a next page); Cursor must be "".
	Latest bool
	Cursor string
	Limit  int
}

// ScheduleIDOfReceipt is the SQL expression both drivers index a schedule
// receipt's schedule id by (migration 0054): the 28 characters after the
// first "schedule_id":" of its compact body. PostgreSQL names instr
// strpos. A query must spell it (and ScheduleReceiptOnly) as the index
// does for the planners to use the index.
const ScheduleIDOfReceipt = `substr(body, instr(body, '"schedule_id":"') + 15, 28)`

// ScheduleReceiptOnly is the partial index's condition: a schedule.*
// receipt.
const ScheduleReceiptOnly = `substr(type, 1, 9) = 'schedule.'`

// ObligationRow is a row of the obligation index: the obligation, whether
// the index lists it as open (terminated_by is NULL), and the receipt that
// terminated it otherwise.
type ObligationRow struct {
	host.Obligation
	Open         bool
	TerminatedBy string
}

// ObligationFilter selects open obligations.
type ObligationFilter struct {
	Tenant string
	// Principal matches obligations it owes or is owed; Role narrows it to
	// "obligor" or "obligee".
	Principal string
	Role      string
	Cursor    string
	Limit     int
}

// LedgerHeads are the recorded last links of the ledger's chains.
type LedgerHeads struct {
	Chains []host.ChainHead // every chain, by id
	// Checkpoint is the last checkpoint: Seq is its id, Hash its hash.
	Checkpoint host.ChainHead
}
