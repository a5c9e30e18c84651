package host

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"
)

// ReceiptType names what a receipt attests.
type ReceiptType string

// Receipt types.
const (
	ReceiptAssigned       ReceiptType = "task.assigned"        // at enqueue, to the recipient; obligation
	ReceiptAccepted       ReceiptType = "task.accepted"        // a worker took the offer; obligation
	ReceiptProgress       ReceiptType = "task.progress"        // informational
	ReceiptCompleted      ReceiptType = "task.completed"       // success, locatable
	ReceiptFailed         ReceiptType = "task.failed"          // final failure
	ReceiptCanceled       ReceiptType = "task.canceled"        // canceled by a principal
	ReceiptRetryScheduled ReceiptType = "task.retry_scheduled" // a failed attempt, retried later
	ReceiptEscalated      ReceiptType = "task.escalated"       // lease expired, retries exhausted, policy fault
	ReceiptReleased       ReceiptType = "task.released"        // a worker gave the task back
	ReceiptSnoozed        ReceiptType = "task.snoozed"         // a worker gave the task back until a later time, no attempt used
	// ReceiptCancelRequested records, when it is asked, a principal's
	// cancel of a leased task: from the principal who asked to the worker
	// holding the lease, with the reason. Informational (it opens and
	// discharges nothing): the task.canceled that ends the lease names it
	// among its parents and repeats who asked and why.
	ReceiptCancelRequested ReceiptType = "task.cancel_requested"

	// Email (send_email): the gate owes the sender a delivery from the
	// moment it queues one until the mail server took it or refused it.
	ReceiptEmailQueued ReceiptType = "email.queued" // queued in the outbox; obligation of the gate
	ReceiptEmailSent   ReceiptType = "email.sent"   // the mail server took it (body: message_id)
	ReceiptEmailFailed ReceiptType = "email.failed" // the mail server refused it for good; on the outbox's dead list

	// Schedules (issue 39): informational, from the owner (or an admin) to
	// the owner; a fire from the gate to the owner, naming the task it
	// enqueued.
	ReceiptScheduleCreated ReceiptType = "schedule.created"
	ReceiptSchedulePaused  ReceiptType = "schedule.paused"
	ReceiptScheduleResumed ReceiptType = "schedule.resumed"
	ReceiptScheduleUpdated ReceiptType = "schedule.updated" // its definition changed; the body names the fields
	ReceiptScheduleDeleted ReceiptType = "schedule.deleted"
	ReceiptScheduleFired   ReceiptType = "schedule.fired"   // one per fire; task_id is the task it enqueued
	ReceiptScheduleSkipped ReceiptType = "schedule.skipped" // missed fires the policy did not run (or that could not run)
)

// Escalation reasons carried in task.escalated bodies.
const (
	ReasonLeaseExpired       = "lease_expired"
	ReasonMaxRetriesExceeded = "max_retries_exceeded"
	ReasonMaxLeaseExpiries   = "max_lease_expiries"
	ReasonFatalError         = "fatal_error"
	ReasonPolicyFault        = "policy_fault"
	ReasonPolicy             = "policy"
)

// terminators is the static half of obligation termination: which receipt types
// can discharge which obligation-creating types. The other half is database
// evidence: a receipt of such a type whose parents name the obligation.
var terminators = map[ReceiptType][]ReceiptType{
	ReceiptAssigned:    {ReceiptCompleted, ReceiptFailed, ReceiptCanceled},
	ReceiptAccepted:    {ReceiptCompleted, ReceiptFailed, ReceiptRetryScheduled, ReceiptEscalated, ReceiptReleased, ReceiptSnoozed, ReceiptCanceled},
	ReceiptEmailQueued: {ReceiptEmailSent, ReceiptEmailFailed},
	// A workflow (workflow.go): the gate owes its submitter its outcome.
	ReceiptWorkflowSubmitted: {ReceiptWorkflowCompleted, ReceiptWorkflowFailed, ReceiptWorkflowCanceled},
}

var knownReceiptTypes = map[ReceiptType]bool{
	ReceiptAssigned: true, ReceiptAccepted: true, ReceiptProgress: true, ReceiptCompleted: true,
	ReceiptFailed: true, ReceiptCanceled: true, ReceiptRetryScheduled: true, ReceiptEscalated: true,
	ReceiptReleased: true, ReceiptSnoozed: true, ReceiptCancelRequested: true,
	ReceiptEmailQueued: true, ReceiptEmailSent: true, ReceiptEmailFailed: true,
	ReceiptWorkflowSubmitted: true, ReceiptWorkflowCompleted: true, ReceiptWorkflowFailed: true, ReceiptWorkflowCanceled: true,
	ReceiptScheduleCreated: true, ReceiptSchedulePaused: true, ReceiptScheduleResumed: true, ReceiptScheduleUpdated: true,
	ReceiptScheduleDeleted: true, ReceiptScheduleFired: true, ReceiptScheduleSkipped: true,
}

// ReceiptTypes returns every receipt type of this ledger, sorted.
func ReceiptTypes() []ReceiptType {
	out := make([]ReceiptType, 0, len(knownReceiptTypes))
	for t := range knownReceiptTypes {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Known reports whether t is a receipt type of this ledger.
func (t ReceiptType) Known() bool { return knownReceiptTypes[t] }

// CreatesObligation reports whether a receipt of type t is an obligation until terminated.
func (t ReceiptType) CreatesObligation() bool { _, ok := terminators[t]; return ok }

// Terminates reports whether a receipt of type t can discharge an obligation of type parent.
func (t ReceiptType) Terminates(parent ReceiptType) bool { return contains(terminators[parent], t) }

// Terminal reports whether t can discharge any obligation; such receipts must have parents.
func (t ReceiptType) Terminal() bool {
	for _, ts := range terminators {
		if contains(ts, t) {
			return true
		}
	}
	return false
}

// Ledger limits from the Architecture document.
const (
	MaxReceiptBody = 64 << 10
	MaxParents     = 10
	MaxArtifacts   = 100
	// ContractsNotChat is the seed's message for a receipt over a size limit.
	ContractsNotChat = "Receipt bodies are contracts, not chat messages."
)

// Receipt is an immutable ledger entry. Seq, ChainID, ChainSeq, PrevHash and
// Hash are set by the store when it appends the receipt: Seq is its place in
// the whole ledger, ChainID and ChainSeq its place in the chain of the writer
// that appended it, PrevHash the hash of its predecessor in that chain.
type Receipt struct {
	ID        string          `json:"receipt_id"`
	Tenant    string          `json:"tenant"`
	Type      ReceiptType     `json:"receipt_type"`
	From      string          `json:"from"`
	To        string          `json:"to"`
	TaskID    string          `json:"task_id,omitempty"`
	LeaseID   string          `json:"lease_id,omitempty"`
	Parents   []string        `json:"parents"`
	Body      json.RawMessage `json:"body"`
	DedupeKey string          `json:"dedupe_key,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	Seq       int64           `json:"seq"`
	ChainID   int64           `json:"chain_id,omitempty"`
	ChainSeq  int64           `json:"chain_seq,omitempty"`
	PrevHash  string          `json:"prev_hash"`
	Hash      string          `json:"hash"`
}

// Validate checks the ledger invariants that need no database: known type,
// size limits, terminal receipts have parents, successes are locatable. It
// compacts Body in place so the hash covers one canonical form.
func (r *Receipt) Validate() error {
	if !r.Type.Known() {
		return Errorf(CodeInvalidReceipt, "unknown receipt type %q", r.Type)
	}
	if r.From == "" || r.To == "" {
		return Errorf(CodeInvalidReceipt, "receipt needs both from and to")
	}
	if len(r.Body) > MaxReceiptBody {
		return Errorf(CodeTooLarge, "receipt body is %d bytes, the limit is %d. %s", len(r.Body), MaxReceiptBody, ContractsNotChat)
	}
	if len(r.Parents) > MaxParents {
		return Errorf(CodeTooLarge, "receipt has %d parents, the limit is %d. %s", len(r.Parents), MaxParents, ContractsNotChat)
	}
	seen := make(map[string]bool, len(r.Parents))
	for _, p := range r.Parents {
		if p == "" || seen[p] {
			return Errorf(CodeInvalidReceipt, "parents must be distinct, non-empty receipt ids")
		}
		seen[p] = true
	}
	if len(r.Body) == 0 {
		r.Body = json.RawMessage(`{}`)
	}
	// A body with no whitespace byte is compact already if it is JSON at
	// all, which the decoding below checks: the bodies the engine marshals
	// are read once, not compacted, scanned and decoded.
	compacted := false
	if bytes.ContainsAny(r.Body, " \t\r\n") {
		var buf bytes.Buffer
		if err := json.Compact(&buf, r.Body); err != nil {
			return Errorf(CodeInvalidReceipt, "receipt body is not valid JSON: %v", err)
		}
		r.Body, compacted = buf.Bytes(), true
	}
	var body struct {
		Artifacts     []json.RawMessage `json:"artifacts"`
		ResultPointer any               `json:"result_pointer"`
		DeliveryProof json.RawMessage   `json:"delivery_proof"`
	}
	err := json.Unmarshal(r.Body, &body)
	var syntax *json.SyntaxError
	if !compacted && errors.As(err, &syntax) {
		return Errorf(CodeInvalidReceipt, "receipt body is not valid JSON: %v", err)
	}
	if r.Body[0] != '{' {
		return Errorf(CodeInvalidReceipt, "receipt body must be a JSON object")
	}
	if err != nil {
		return Errorf(CodeInvalidReceipt, "receipt body: %v", err)
	}
	if len(body.Artifacts) > MaxArtifacts {
		return Errorf(CodeTooLarge, "receipt has %d artifacts, the limit is %d. %s", len(body.Artifacts), MaxArtifacts, ContractsNotChat)
	}
	if r.Type.Terminal() && len(r.Parents) == 0 {
		return Errorf(CodeInvalidReceipt, "a %s receipt must name the obligations it answers in parents", r.Type)
	}
	if r.Type == ReceiptCompleted {
		res := Result{DeliveryProof: body.DeliveryProof}
		if p, ok := body.ResultPointer.(string); ok {
			res.Pointer = p
		}
		for _, raw := range body.Artifacts {
			var a Artifact
			if json.Unmarshal(raw, &a) == nil {
				res.Artifacts = append(res.Artifacts, a)
			}
		}
		if !res.Locatable() {
			return Errorf(CodeNotLocatable, "a success must be locatable: give result_pointer, artifacts (type and url or ref) or a non-empty delivery_proof")
		}
	}
	return nil
}

// ChainHash computes a receipt's hash from its content and its predecessor's
// hash. Every field that matters is length-prefixed so no two receipts encode
// alike. The genesis predecessor hash is the empty string.
func ChainHash(r *Receipt, prevHash string) string {
	return hashReceipt("asyncgate.receipt.v1", prevHash, []string{strconv.FormatInt(r.Seq, 10)}, r)
}

// hashReceipt is the one receipt encoding behind every chain version: a
// version tag, the predecessor's hash, the receipt's position (per version),
// then its content, every field length-prefixed.
func hashReceipt(tag, prevHash string, position []string, r *Receipt) string {
	h := sha256.New()
	var n [8]byte
	put := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put(tag)
	put(prevHash)
	for _, p := range position {
		put(p)
	}
	put(r.ID)
	put(r.Tenant)
	put(string(r.Type))
	put(r.From)
	put(r.To)
	put(r.TaskID)
	put(r.LeaseID)
	put(strconv.Itoa(len(r.Parents)))
	for _, p := range r.Parents {
		put(p)
	}
	put(string(r.Body))
	put(r.DedupeKey)
	put(strconv.FormatInt(r.CreatedAt.UnixMicro(), 10))
	return hex.EncodeToString(h.Sum(nil))
}

// Obligation is an open obligation: a receipt of an obligation-creating type with
// no terminator yet. Obligor owes Obligee.
type Obligation struct {
	ReceiptID string          `json:"receipt_id"`
	Tenant    string          `json:"tenant"`
	Type      ReceiptType     `json:"receipt_type"`
	Obligor   string          `json:"obligor"`
	Obligee   string          `json:"obligee"`
	TaskID    string          `json:"task_id,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	Seq       int64           `json:"seq"`
	Body      json.RawMessage `json:"body,omitempty"`
}
