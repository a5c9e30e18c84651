package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store/groupcommit"
)

// Bound ends a context at the bound it carries, and TimedOut tells that from
// the caller's own end.
func TestBoundEndsAtTheCarriedTimeout(t *testing.T) {
	plain, cancel := Bound(context.Background())
	cancel()
	if _, ok := plain.Deadline(); ok || plain.Err() != nil {
		t.Fatal("Bound of a context carrying no timeout must leave it as it is")
	}
	ctx, cancel := Bound(WithTimeout(context.Background(), 10*time.Millisecond))
	defer cancel()
	<-ctx.Done()
	if !TimedOut(ctx) {
		t.Fatalf("a context ended at its bound: TimedOut false (%v)", context.Cause(ctx))
	}
	parent, stop := context.WithCancel(WithTimeout(context.Background(), time.Hour))
	ctx, cancel = Bound(parent)
	defer cancel()
	stop()
	if TimedOut(ctx) {
		t.Fatal("a context whose caller canceled it: TimedOut true")
	}
	if TimeoutOf(WithTimeout(context.Background(), -time.Second)) != 0 {
		t.Fatal("a negative timeout must carry none")
	}
}

// AwaitUpdate: every way a queued update's wait ends.
func TestAwaitUpdate(t *testing.T) {
	bounded := func() (context.Context, context.CancelFunc) {
		return Bound(WithTimeout(context.Background(), 20*time.Millisecond))
	}
	t.Run("outcome before the bound", func(t *testing.T) {
		ctx, cancel := bounded()
		defer cancel()
		done := make(chan struct{})
		var c groupcommit.Claim
		want := errors.New("its own failure")
		outcome := want
		c.Take()
		close(done)
		if err := AwaitUpdate(ctx, "db", done, &c, &outcome); err != want {
			t.Fatalf("got %v, want the update's own outcome", err)
		}
	})
	t.Run("not taken at the bound", func(t *testing.T) {
		ctx, cancel := bounded()
		defer cancel()
		var c groupcommit.Claim
		var outcome error
		err := AwaitUpdate(ctx, "db", make(chan struct{}), &c, &outcome)
		if !host.IsCode(err, host.CodeDatabaseUnavailable) || !strings.Contains(host.ErrorDetail(err), "was not made") {
			t.Fatalf("got %v, want database_unavailable saying it was not made", err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v wraps a context error", err)
		}
		if c.Take() {
			t.Fatal("the writer took an update its caller gave up")
		}
	})
	t.Run("taken at the bound", func(t *testing.T) {
		ctx, cancel := bounded()
		defer cancel()
		var c groupcommit.Claim
		if !c.Take() {
			t.Fatal("Take of a queued update")
		}
		var outcome error // a success the caller must not be told
		err := AwaitUpdate(ctx, "db", make(chan struct{}), &c, &outcome)
		if !host.IsCode(err, host.CodeDatabaseUnavailable) || !strings.Contains(host.ErrorDetail(err), "outcome is unknown") {
			t.Fatalf("got %v, want database_unavailable saying the outcome is unknown", err)
		}
		if !c.Take() {
			t.Fatal("a taken update must stay the writer's")
		}
	})
	t.Run("caller went away before it was taken", func(t *testing.T) {
		ctx, cancel := context.WithCancel(WithTimeout(context.Background(), time.Hour))
		bctx, bcancel := Bound(ctx)
		defer bcancel()
		cancel()
		var c groupcommit.Claim
		var outcome error
		if err := AwaitUpdate(bctx, "db", make(chan struct{}), &c, &outcome); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
	t.Run("caller went away after it was taken", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var c groupcommit.Claim
		c.Take()
		done := make(chan struct{})
		outcome := errors.New("placeholder")
		go func() {
			time.Sleep(20 * time.Millisecond)
			outcome = nil
			close(done)
		}()
		cancel()
		if err := AwaitUpdate(ctx, "db", done, &c, &outcome); err != nil {
			t.Fatalf("got %v, want the outcome the writer reported (nil)", err)
		}
	})
}

// ReadTimeout names the bound, keeps a domain answer, and passes a
// caller's own end through.
func TestReadTimeout(t *testing.T) {
	ctx, cancel := Bound(WithTimeout(context.Background(), time.Millisecond))
	defer cancel()
	<-ctx.Done()
	err := ReadTimeout(ctx, "db", context.DeadlineExceeded)
	if !host.IsCode(err, host.CodeDatabaseUnavailable) || !strings.Contains(host.ErrorDetail(err), "did not answer within 1ms") || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	nf := host.Errorf(host.CodeNotFound, "no such task")
	if err := ReadTimeout(ctx, "db", nf); err != nf {
		t.Fatalf("a domain answer became %v", err)
	}
	if err := ReadTimeout(ctx, "db", nil); err != nil {
		t.Fatalf("a success became %v", err)
	}
	own, stop := context.WithTimeout(context.Background(), time.Millisecond)
	defer stop()
	<-own.Done()
	if err := ReadTimeout(own, "db", own.Err()); err != context.DeadlineExceeded {
		t.Fatalf("a caller's own deadline became %v", err)
	}
}
