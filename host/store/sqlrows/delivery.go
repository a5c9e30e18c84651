package sqlrows

import (
	"encoding/json"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// InboxColumns are the columns ScanInbox reads: every column of inbox.
const InboxColumns = `seq, ` + InboxInsertColumns

// InboxInsertColumns are the columns an insert of an inbox item writes, in
// the order of InboxInsertValues: every column but seq.
const InboxInsertColumns = `id, tenant, recipient, kind, task_id, task_type, receipt_id, summary, created_at, delivered_at, read_at, fetched_at, promoted_at`

// ScanInbox reads one row of InboxColumns.
func ScanInbox(sc Scanner) (host.InboxItem, error) {
	var it host.InboxItem
	var kind string
	var created int64
	var dl, rd, ft, pr *int64
	err := sc.Scan(&it.Seq, &it.ID, &it.Tenant, &it.Recipient, &kind, &it.TaskID, &it.TaskType, &it.ReceiptID, &it.Summary, &created, &dl, &rd, &ft, &pr)
	if err != nil {
		return it, err
	}
	it.Kind = host.InboxKind(kind)
	it.CreatedAt = FromUS(created)
	it.DeliveredAt, it.ReadAt, it.FetchedAt, it.PromotedAt = FromNUS(dl), FromNUS(rd), FromNUS(ft), FromNUS(pr)
	return it, nil
}

// InboxInsertValues are it's values in the order of InboxInsertColumns.
func InboxInsertValues(it host.InboxItem) []any {
	return []any{it.ID, it.Tenant, it.Recipient, string(it.Kind), it.TaskID, it.TaskType, it.ReceiptID, it.Summary,
		US(it.CreatedAt), NUS(it.DeliveredAt), NUS(it.ReadAt), NUS(it.FetchedAt), NUS(it.PromotedAt)}
}

// OutboxColumns are the columns ScanOutbox reads: every column of outbox.
const OutboxColumns = `id, tenant, task_id, kind, dedupe_key, body, state, attempts, next_at, claimed_until, last_error, created_at`

// ScanOutbox reads one row of OutboxColumns.
func ScanOutbox(sc Scanner) (store.OutboxEntry, error) {
	var e store.OutboxEntry
	var body, state string
	var next, created int64
	var claimed *int64
	if err := sc.Scan(&e.ID, &e.Tenant, &e.TaskID, &e.Kind, &e.Key, &body, &state, &e.Attempts, &next, &claimed, &e.LastError, &created); err != nil {
		return e, err
	}
	e.Body, e.State = json.RawMessage(body), store.OutboxState(state)
	e.NextAt, e.CreatedAt, e.ClaimedTill = FromUS(next), FromUS(created), FromNUS(claimed)
	return e, nil
}
