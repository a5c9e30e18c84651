package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// TestQueueStatsStatementsBounded: the queue stats, of a tenant and of
// every tenant, run as many statements with 200 queued types as with one:
// the oldest ready age of every type is read in one statement, not one per
// type.
func TestQueueStatsStatementsBounded(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "gate.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var statements atomic.Int64
	st.onStatement = func(string) { statements.Add(1) }
	ctx := context.Background()
	now := time.Now().UTC()
	added := 0
	counted := func(types int) int64 {
		t.Helper()
		if err := st.Update(ctx, func(tx store.Tx) error {
			for ; added < types; added++ {
				if err := tx.InsertTask(ctx, typedTask(added, now)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		statements.Store(0)
		for _, tenant := range []string{"acme", ""} {
			var qs store.QueueStats
			if err := st.View(ctx, func(r store.Reader) error {
				qs, err = r.QueueStats(ctx, tenant)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if got, want := qs.OldestReadyAge, time.Duration(types)*time.Second; got < want || got > want+time.Minute {
				t.Fatalf("%d types, tenant %q: oldest ready age %v, want %v", types, tenant, got, want)
			}
		}
		return statements.Load()
	}
	one := counted(1)
	if many := counted(200); many != one {
		t.Fatalf("queue stats ran %d statements with 200 queued types, %d with one: want as many", many, one)
	}
}

// typedTask is task i of TestQueueStatsStatementsBounded and
// BenchmarkQueueStatsTypes: of type i, ready i+1 seconds before now.
func typedTask(i int, now time.Time) *host.Task {
	return &host.Task{ID: fmt.Sprintf("T-SQ%04d", i), Tenant: "acme", Type: fmt.Sprintf("type-%04d", i),
		CreatedBy: "agent.kee", Recipient: "agent.kee", State: host.StateQueued, Priority: i%10 + 1,
		Params: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now, AvailableAt: now.Add(-time.Duration(i+1) * time.Second), MaxRetries: 3}
}

// BenchmarkQueueStatsTypes measures a tenant's queue stats with 1, 20 and
// 200 types queued, 10 ready tasks each.
func BenchmarkQueueStatsTypes(b *testing.B) {
	for _, types := range []int{1, 20, 200} {
		b.Run(fmt.Sprintf("types=%d", types), func(b *testing.B) {
			st, err := Open(filepath.Join(b.TempDir(), "gate.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			ctx := context.Background()
			now := time.Now().UTC()
			if err := st.Update(ctx, func(tx store.Tx) error {
				for i := range types * 10 {
					tk := typedTask(i, now)
					tk.Type = fmt.Sprintf("type-%04d", i%types)
					if err := tx.InsertTask(ctx, tk); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := st.View(ctx, func(r store.Reader) error {
					qs, err := r.QueueStats(ctx, "acme")
					if err == nil && qs.ByState[host.StateQueued] != int64(types*10) {
						err = fmt.Errorf("queued %d, want %d", qs.ByState[host.StateQueued], types*10)
					}
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
