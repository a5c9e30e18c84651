package postgres

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// TestHostsDoNotWaitForEachOther holds one host's batch transaction open
// after it appended a receipt and inserted a task, and requires another
// host's batch doing the same to commit meanwhile: no row (ledger head, count)
// is shared between hosts' batches.
func TestHostsDoNotWaitForEachOther(t *testing.T) {
	schema := newSchema(t)
	a, b := openIn(t, schema, Options{}), openIn(t, schema, Options{})
	ctx := context.Background()
	write := func(tx store.Tx) error {
		now := time.Now().UTC().Truncate(time.Microsecond)
		tk := &host.Task{ID: host.NewID(host.PrefixTask), Tenant: "acme", Type: "work", CreatedBy: "a", Recipient: "b", State: host.StateQueued,
			Priority: 5, Params: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now, AvailableAt: now.Add(time.Hour), MaxRetries: 3}
		if err := tx.InsertTask(ctx, tk); err != nil {
			return err
		}
		return tx.AppendReceipt(ctx, &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: "acme", Type: host.ReceiptProgress, From: "a", To: "b",
			TaskID: tk.ID, Parents: []string{}, Body: json.RawMessage(`{}`), CreatedAt: now})
	}
	// Both hosts have written before, so each has what it registers once.
	for _, s := range []*Store{a, b} {
		if err := s.Update(ctx, write); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	holding, release := make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		aDone <- a.Update(ctx, func(tx store.Tx) error {
			if err := write(tx); err != nil {
				return err
			}
			once.Do(func() { close(holding) })
			<-release
			return nil
		})
	}()
	<-holding
	bDone := make(chan error, 1)
	go func() { bDone <- b.Update(ctx, write) }()
	select {
	case err := <-bDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		close(release)
		t.Fatal("host B's batch waited 60 s for host A's open transaction")
	}
	close(release)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	rep, err := engine.VerifyLedger(ctx, a)
	if err != nil || !rep.OK || rep.Receipts != 4 {
		t.Fatalf("ledger %+v %v, want 4 receipts", rep, err)
	}
}
