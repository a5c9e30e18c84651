package groupcommit

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestNextBatchesWhatIsQueued: a batch is what waits, up to max; after
// Close, what was queued before comes one a batch, then none, and Put is
// refused.
func TestNextBatchesWhatIsQueued(t *testing.T) {
	ctx := context.Background()
	q := New[int](16)
	for i := range 5 {
		if err := q.Put(ctx, i, Prompt, ""); err != nil {
			t.Fatal(err)
		}
	}
	if q.Len() != 5 {
		t.Fatalf("Len %d, want 5", q.Len())
	}
	b, ok := q.Next(nil, 3)
	if !ok || !slices.Equal(b, []int{0, 1, 2}) {
		t.Fatalf("first batch %v %v, want [0 1 2] true", b, ok)
	}
	if !q.Close() || q.Close() {
		t.Fatal("Close reports true once, then false")
	}
	if !q.IsClosed() {
		t.Fatal("IsClosed after Close is false")
	}
	select {
	case <-q.Closing():
	default:
		t.Fatal("Closing is not closed after Close")
	}
	if err := q.Put(ctx, 9, Prompt, ""); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v, want ErrClosed", err)
	}
	for _, want := range []int{3, 4} {
		b, ok = q.Next(b, 3)
		if !ok || !slices.Equal(b, []int{want}) {
			t.Fatalf("batch after Close %v %v, want [%d] true", b, ok, want)
		}
	}
	if b, ok = q.Next(b, 3); ok || len(b) != 0 {
		t.Fatalf("drained queue gave %v %v, want [] false", b, ok)
	}
}

// TestPutWaitsForRoomOrItsContext: a full queue holds Put until its context
// ends.
func TestPutWaitsForRoomOrItsContext(t *testing.T) {
	q := New[int](1)
	if err := q.Put(context.Background(), 1, Prompt, ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := q.Put(ctx, 2, Prompt, ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put on a full queue: %v, want the context's deadline", err)
	}
}

// TestPromptFirstBulkBounded: a batch takes the prompt requests first and
// at most as many bulk ones (MinBulk at least), in queue order; with no
// prompt request waiting, bulk requests fill the batch; a bulk request is
// served within (bulk ahead of it / MinBulk) + 1 batches however many
// prompt requests keep arriving.
func TestPromptFirstBulkBounded(t *testing.T) {
	ctx := context.Background()
	q := New[int](4096)
	put := func(v int, c Class) {
		t.Helper()
		if err := q.Put(ctx, v, c, ""); err != nil {
			t.Fatal(err)
		}
	}
	// 40 bulk (1000..1039) queued before 20 prompt (0..19).
	for i := range 40 {
		put(1000+i, Bulk)
	}
	for i := range 20 {
		put(i, Prompt)
	}
	b, _ := q.Next(nil, 256)
	want := []int{}
	for i := range 20 {
		want = append(want, i)
	}
	for i := range 20 {
		want = append(want, 1000+i)
	}
	if !slices.Equal(b, want) {
		t.Fatalf("mixed batch %v, want the 20 prompt then 20 bulk in order", b)
	}
	// Only bulk waits: the batch takes all of it up to the limit.
	b, _ = q.Next(b, 256)
	if len(b) != 20 || b[0] != 1020 || b[19] != 1039 {
		t.Fatalf("bulk-only batch %v, want 1020..1039", b)
	}
	// A full batch of prompt requests still carries MinBulk bulk ones.
	for i := range 300 {
		put(i, Prompt)
	}
	for i := range 3 * MinBulk {
		put(2000+i, Bulk)
	}
	for round := range 3 {
		b, _ = q.Next(b, 64)
		nb := 0
		for _, v := range b {
			if v >= 2000 {
				if v != 2000+round*MinBulk+nb {
					t.Fatalf("round %d: bulk %d out of order in %v", round, v, b)
				}
				nb++
			}
		}
		if len(b) != 64 || nb != MinBulk {
			t.Fatalf("round %d: batch of %d with %d bulk, want 64 with %d", round, len(b), nb, MinBulk)
		}
		for i := range MinBulk { // prompt requests keep arriving
			put(5000+round*MinBulk+i, Prompt)
		}
	}
	// A lone bulk request found first while a few prompt ones arrive rides
	// in their batch.
	q2 := New[int](16)
	if err := q2.Put(ctx, 7, Bulk, ""); err != nil {
		t.Fatal(err)
	}
	if b, _ = q2.Next(nil, 4); !slices.Equal(b, []int{7}) {
		t.Fatalf("lone bulk batch %v, want [7]", b)
	}
	if q.Len() == 0 {
		t.Fatal("Len counts nothing while prompt requests wait")
	}
}
