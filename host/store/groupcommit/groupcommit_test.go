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
		if err := q.Put(ctx, i); err != nil {
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
	if err := q.Put(ctx, 9); !errors.Is(err, ErrClosed) {
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
	if err := q.Put(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := q.Put(ctx, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put on a full queue: %v, want the context's deadline", err)
	}
}
