package engine

import (
	"context"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// TestResultSlotsQueueThenBusy: a fetch waits for a free slot, gets one when
// another fetch ends, and is answered busy when none frees up in time.
func TestResultSlotsQueueThenBusy(t *testing.T) {
	s := make(slots, 1)
	ctx := context.Background()
	release, err := s.take(ctx, time.Millisecond, "results")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.take(ctx, 10*time.Millisecond, "results"); !host.IsCode(err, host.CodeBusy) || host.HTTPStatus(host.CodeBusy) != 503 {
		t.Fatalf("second take with the slot held: %v, want busy (503)", err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := s.take(ctx, time.Minute, "results") // queues
		if err == nil {
			r()
		}
		got <- err
	}()
	release()
	if err := <-got; err != nil {
		t.Fatalf("a queued fetch did not get the freed slot: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	s <- struct{}{}
	if _, err := s.take(cctx, time.Minute, "results"); err == nil {
		t.Fatal("a canceled fetch got a slot")
	}
}
