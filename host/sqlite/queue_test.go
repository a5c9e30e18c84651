package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// TestUpdateCanceledWhileQueued queues an update behind one that holds the
// writer, cancels it while it waits, and checks that it reports the
// cancellation and wrote nothing, while the update ahead of it and the ones
// after it commit as usual.
func TestUpdateCanceledWhileQueued(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "gate.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	put := func(name string) func(store.Tx) error {
		return func(tx store.Tx) error {
			tt := host.NewTaskType(name)
			tt.Tenant = "acme"
			return tx.PutTaskType(ctx, &tt)
		}
	}
	hold, holding := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- st.Update(ctx, func(tx store.Tx) error {
			close(holding)
			<-hold
			return put("first")(tx)
		})
	}()
	select {
	case <-holding:
	case <-time.After(30 * time.Second):
		t.Fatal("the first update did not start within 30 s")
	}
	qctx, cancel := context.WithCancel(ctx)
	queued := make(chan error, 1)
	go func() { queued <- st.Update(qctx, put("canceled")) }()
	deadline := time.Now().Add(30 * time.Second)
	for st.queue.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second update was not queued within 30 s")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	close(hold)
	for name, ch := range map[string]chan error{"first": first, "queued": queued} {
		select {
		case err := <-ch:
			switch {
			case name == "first" && err != nil:
				t.Fatalf("the update holding the writer failed: %v", err)
			case name == "queued" && !errors.Is(err, context.Canceled):
				t.Fatalf("the update canceled while queued returned %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("update %q did not return within 30 s", name)
		}
	}
	if err := st.Update(ctx, put("after")); err != nil {
		t.Fatalf("an update after the canceled one: %v", err)
	}
	err = st.View(ctx, func(r store.Reader) error {
		for name, want := range map[string]bool{"first": true, "canceled": false, "after": true} {
			_, err := r.GetTaskType(ctx, "acme", name)
			if got := err == nil; got != want {
				t.Errorf("task type %q stored: %v, want %v (%v)", name, got, want, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestUpdateQueuedPastItsStoreTimeout: an update queued behind one that
// holds the writer answers database_unavailable at its store timeout
// (store.WithTimeout), saying it was not made, instead of waiting for the
// writer; the writer, once free, skips it. The update holding the writer
// (taken when its caller's own timeout passes) is told its outcome is
// unknown, and does commit.
func TestUpdateQueuedPastItsStoreTimeout(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "gate.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	put := func(name string) func(store.Tx) error {
		return func(tx store.Tx) error {
			tt := host.NewTaskType(name)
			tt.Tenant = "acme"
			return tx.PutTaskType(ctx, &tt)
		}
	}
	bounded := store.WithTimeout(ctx, 50*time.Millisecond)
	hold, holding := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- st.Update(bounded, func(tx store.Tx) error {
			close(holding)
			<-hold
			return put("first")(tx)
		})
	}()
	<-holding
	start := time.Now()
	err = st.Update(bounded, put("queued"))
	if !host.IsCode(err, host.CodeDatabaseUnavailable) || !strings.Contains(host.ErrorDetail(err), "was not made") {
		t.Fatalf("the update queued past its timeout: %v, want database_unavailable saying it was not made", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("it answered after %v, its timeout is 50ms", took)
	}
	select {
	case err := <-first:
		if !host.IsCode(err, host.CodeDatabaseUnavailable) || !strings.Contains(host.ErrorDetail(err), "outcome is unknown") {
			t.Fatalf("the update holding the writer: %v, want database_unavailable saying its outcome is unknown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the update holding the writer did not answer at its timeout")
	}
	close(hold)
	if err := st.Update(ctx, put("after")); err != nil {
		t.Fatalf("an update after: %v", err)
	}
	err = st.View(ctx, func(r store.Reader) error {
		for name, want := range map[string]bool{"first": true, "queued": false, "after": true} {
			_, err := r.GetTaskType(ctx, "acme", name)
			if got := err == nil; got != want {
				t.Errorf("task type %q stored: %v, want %v (%v)", name, got, want, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
