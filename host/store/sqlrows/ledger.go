package sqlrows

import (
	"encoding/json"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// ReceiptColumns are the columns ScanReceipt reads: every column of
// receipts.
const ReceiptColumns = `seq, id, tenant, type, from_p, to_p, task_id, lease_id, parents, body, dedupe_key, created_at, prev_hash, hash, chain_id, chain_seq`

// ScanReceipt reads one row of ReceiptColumns.
func ScanReceipt(sc Scanner) (*host.Receipt, error) {
	var rc host.Receipt
	var typ, parents, body string
	var created int64
	if err := sc.Scan(&rc.Seq, &rc.ID, &rc.Tenant, &typ, &rc.From, &rc.To, &rc.TaskID, &rc.LeaseID, &parents, &body,
		&rc.DedupeKey, &created, &rc.PrevHash, &rc.Hash, &rc.ChainID, &rc.ChainSeq); err != nil {
		return nil, err
	}
	rc.Type = host.ReceiptType(typ)
	rc.Body = json.RawMessage(body)
	rc.CreatedAt = FromUS(created)
	if err := json.Unmarshal([]byte(parents), &rc.Parents); err != nil {
		return nil, err
	}
	return &rc, nil
}

// ReceiptParents is a receipt's parents as the JSON the receipts table
// keeps ("[]" for none).
func ReceiptParents(rc *host.Receipt) (string, error) {
	if rc.Parents == nil {
		return "[]", nil
	}
	b, err := json.Marshal(rc.Parents)
	return string(b), err
}

// ReceiptValues are rc's values in the order of ReceiptColumns; parents is
// ReceiptParents(rc).
func ReceiptValues(rc *host.Receipt, parents string) []any {
	return []any{rc.Seq, rc.ID, rc.Tenant, string(rc.Type), rc.From, rc.To, rc.TaskID, rc.LeaseID, parents, string(rc.Body),
		rc.DedupeKey, US(rc.CreatedAt), rc.PrevHash, rc.Hash, rc.ChainID, rc.ChainSeq}
}

// KeyColumns are the columns ScanKey reads: every column of api_keys.
const KeyColumns = `id, hash, prefix, role, tenant, principal, created_at, revoked_at`

// ScanKey reads one row of KeyColumns.
func ScanKey(sc Scanner) (*store.Key, error) {
	var k store.Key
	var created int64
	var revoked *int64
	if err := sc.Scan(&k.ID, &k.Hash, &k.Prefix, &k.Role, &k.Tenant, &k.Principal, &created, &revoked); err != nil {
		return nil, err
	}
	k.CreatedAt, k.RevokedAt = FromUS(created), FromNUS(revoked)
	return &k, nil
}
