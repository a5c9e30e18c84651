package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// TestWriterStatsCountTheWritersWork: WriterStats reports the configured
// writers, and after concurrent updates every update counted once, in at
// least one batch and at most one per update, and busy time.
func TestWriterStatsCountTheWritersWork(t *testing.T) {
	s := openIn(t, newSchema(t), Options{Writers: 2})
	before := s.WriterStats()
	if before.Writers != 2 {
		t.Fatalf("Writers = %d, want 2", before.Writers)
	}
	const n = 40
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Update(context.Background(), func(tx store.Tx) error {
				tt := host.NewTaskType(fmt.Sprintf("ws-%d", i))
				tt.Tenant = "acme"
				return tx.PutTaskType(context.Background(), &tt)
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	after := s.WriterStats()
	batches, updates := after.Batches-before.Batches, after.Updates-before.Updates
	if updates != n || batches < 1 || batches > n {
		t.Fatalf("%d updates counted in %d batches, want %d in 1 to %d", updates, batches, n, n)
	}
	if after.Busy <= before.Busy {
		t.Fatalf("busy time did not grow: %v → %v", before.Busy, after.Busy)
	}
	// A caller that was answered finds its update counted, with its
	// batch's time, the moment it reads.
	for i := range 20 {
		prev := s.WriterStats()
		if err := s.Update(context.Background(), func(tx store.Tx) error {
			tt := host.NewTaskType(fmt.Sprintf("ws-seq-%d", i))
			tt.Tenant = "acme"
			return tx.PutTaskType(context.Background(), &tt)
		}); err != nil {
			t.Fatal(err)
		}
		now := s.WriterStats()
		if now.Updates != prev.Updates+1 || now.Batches != prev.Batches+1 || now.Busy <= prev.Busy {
			t.Fatalf("update %d answered before it was counted: %+v → %+v", i, prev, now)
		}
	}
}
