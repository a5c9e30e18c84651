// Package batchkeys keeps the unique keys of the rows a write batch has
// inserted (a task's id and idempotency key, a receipt's id and dedupe key).
// A driver that writes a batch's rows behind, in a few multi-row statements
// at the batch's end, uses it to refuse a second insert of a key at once, as
// the store contract asks of every insert, and to forget the keys of an
// update that failed.
package batchkeys

import "github.com/asyncgate/asyncgate/host"

// Set is one batch's keys. The zero value is empty and ready to use.
type Set struct {
	has   map[string]bool
	order []string // claimed keys in order, so Undo forgets an update's own
}

// Task returns a task's keys: its id and, when it has one, its idempotency
// key (unique per tenant, producing principal and recipient).
func Task(t *host.Task) []string {
	ks := []string{"t\x00" + t.ID}
	if t.IdempotencyKey != "" {
		ks = append(ks, "k\x00"+t.Tenant+"\x00"+t.CreatedBy+"\x00"+t.Recipient+"\x00"+t.IdempotencyKey)
	}
	return ks
}

// Receipt returns a receipt's keys: its id and, when it has one, its dedupe
// key (unique per tenant and issuer).
func Receipt(rc *host.Receipt) []string {
	ks := []string{"r\x00" + rc.ID}
	if rc.DedupeKey != "" {
		ks = append(ks, "d\x00"+rc.Tenant+"\x00"+rc.From+"\x00"+rc.DedupeKey)
	}
	return ks
}

// Claim records keys as the batch's, or reports false, recording none of
// them, when the batch holds one already.
func (s *Set) Claim(keys []string) bool {
	for _, k := range keys {
		if s.has[k] {
			return false
		}
	}
	if s.has == nil {
		s.has = map[string]bool{}
	}
	for _, k := range keys {
		s.has[k] = true
		s.order = append(s.order, k)
	}
	return true
}

// HasTask reports whether the batch inserted the task with this id.
func (s *Set) HasTask(id string) bool { return s.has["t\x00"+id] }

// Mark is where the keys claimed from now on begin.
func (s *Set) Mark() int { return len(s.order) }

// Undo forgets the keys claimed since mark.
func (s *Set) Undo(mark int) {
	mark = min(mark, len(s.order))
	for _, k := range s.order[mark:] {
		delete(s.has, k)
	}
	s.order = s.order[:mark]
}
