package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/faultnet"
)

// frozenStore opens a store with one writer whose batches give up after
// batchTimeout, through a proxy that can freeze (faultnet).
func frozenStore(t *testing.T, batchTimeout time.Duration) (*Store, *faultnet.Proxy) {
	t.Helper()
	schema := newSchema(t)
	url, proxy := faultnet.Through(t, testURL())
	st, err := Open(context.Background(), url, Options{Schema: schema, Writers: 1, Timeout: batchTimeout})
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() {
		proxy.Thaw()
		st.Close()
	})
	return st, proxy
}

func putFrozenType(name string) func(store.Tx) error {
	return func(tx store.Tx) error {
		tt := host.NewTaskType(name)
		tt.Tenant = "acme"
		return tx.PutTaskType(context.Background(), &tt)
	}
}

// hasType reads whether task type name is stored (on a fresh context: no
// store timeout).
func hasType(t *testing.T, st *Store, name string) bool {
	t.Helper()
	var found bool
	err := st.View(context.Background(), func(r store.Reader) error {
		_, err := r.GetTaskType(context.Background(), "acme", name)
		if host.IsCode(err, host.CodeNotFound) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		t.Fatalf("reading task type %q: %v", name, err)
	}
	return found
}

// outcome is an update's answer and how long it took.
type outcome struct {
	err  error
	took time.Duration
}

func updateAsync(st *Store, ctx context.Context, fn func(store.Tx) error) <-chan outcome {
	c := make(chan outcome, 1)
	go func() {
		start := time.Now()
		err := st.Update(ctx, fn)
		c <- outcome{err, time.Since(start)}
	}()
	return c
}

// wantUnavailable checks an answer given within bound+slack, 503
// database_unavailable with a detail saying detail.
func wantUnavailable(t *testing.T, what string, c <-chan outcome, bound time.Duration, detail string) {
	t.Helper()
	select {
	case o := <-c:
		if !host.IsCode(o.err, host.CodeDatabaseUnavailable) || !strings.Contains(host.ErrorDetail(o.err), detail) {
			t.Fatalf("%s: %v, want database_unavailable saying %q", what, o.err, detail)
		}
		if errors.Is(o.err, context.DeadlineExceeded) || errors.Is(o.err, context.Canceled) {
			t.Fatalf("%s: %v wraps a context error, which a door reads as %q", what, o.err, "the request timed out")
		}
		if o.took > bound+2*time.Second {
			t.Fatalf("%s answered after %v, want within its store timeout %v", what, o.took, bound)
		}
		t.Logf("%s: %v after %v", what, o.err, o.took.Round(time.Millisecond))
	case <-time.After(bound + 20*time.Second):
		t.Fatalf("%s: no answer %v after its store timeout %v", what, bound+20*time.Second, bound)
	}
}

// TestFrozenDatabaseUpdatesAnswerAtTheirTimeout freezes the connection to
// the server (no byte either way, no socket closed: a partition, a stopped
// server) with an update in the writer's batch and another queued behind
// it. Each caller is answered database_unavailable at its store timeout
// (store.WithTimeout), not when the database answers: the one in the batch
// that its outcome is unknown, the queued one that it was not made. A read
// fails at its timeout too. The database then answers again before the
// batch's own timeout (Options.Timeout): the batch commits, so the update
// whose caller was told "unknown" is there (which is why it was not told
// "not made", and never "done"), the one told "not made" is not, and the
// writer serves the next update at once.
func TestFrozenDatabaseUpdatesAnswerAtTheirTimeout(t *testing.T) {
	t.Parallel()
	st, proxy := frozenStore(t, 10*time.Second)
	if err := st.Update(context.Background(), putFrozenType("before")); err != nil {
		t.Fatal(err)
	}
	const bound = 3 * time.Second
	ctx := store.WithTimeout(context.Background(), bound)

	proxy.Freeze()
	batches := st.WriterStats().Batches
	inBatch := updateAsync(st, ctx, putFrozenType("in-batch"))
	waitTaken(t, st, batches)
	queued := updateAsync(st, ctx, putFrozenType("queued"))
	read := make(chan outcome, 1)
	go func() {
		start := time.Now()
		err := st.View(ctx, func(r store.Reader) error {
			_, err := r.GetTaskType(ctx, "acme", "before")
			return err
		})
		read <- outcome{err, time.Since(start)}
	}()
	wantUnavailable(t, "the update in the stuck batch", inBatch, bound, "outcome is unknown")
	wantUnavailable(t, "the update queued behind it", queued, bound, "was not made")
	wantUnavailable(t, "a read", read, bound, "did not answer within 3s")

	proxy.Thaw()
	start := time.Now()
	if err := st.Update(context.Background(), putFrozenType("after")); err != nil {
		t.Fatalf("the first update after the thaw: %v", err)
	}
	t.Logf("the first update after the thaw committed in %v", time.Since(start).Round(time.Millisecond))
	for name, want := range map[string]bool{"before": true, "in-batch": true, "queued": false, "after": true} {
		if got := hasType(t, st, name); got != want {
			t.Errorf("task type %q stored: %v, want %v", name, got, want)
		}
	}
}

// TestFrozenDatabaseWriterGivesUpItsBatch: the database stays frozen past
// the batch's own timeout (Options.Timeout). The writer gives the batch up
// and drops its connection, and reports the batch refused
// (store.CommitHealth, which /readyz reads), so once the database answers
// again it is not wedged: the next update commits at once. An update with
// no store timeout of its own (a background job's) in the stuck batch is
// told database_unavailable at the batch's timeout, never success.
func TestFrozenDatabaseWriterGivesUpItsBatch(t *testing.T) {
	t.Parallel()
	const batchTimeout = 2 * time.Second
	st, proxy := frozenStore(t, batchTimeout)
	if err := st.Update(context.Background(), putFrozenType("before")); err != nil {
		t.Fatal(err)
	}
	proxy.Freeze()
	frozen := time.Now()
	background := updateAsync(st, context.Background(), putFrozenType("background"))
	select {
	case o := <-background:
		if o.err == nil || !host.IsCode(o.err, host.CodeDatabaseUnavailable) {
			t.Fatalf("an update with no timeout in a batch stuck past its timeout: %v, want database_unavailable", o.err)
		}
		t.Logf("an update with no timeout of its own: %v after %v", o.err, o.took.Round(time.Millisecond))
	case <-time.After(40 * time.Second):
		t.Fatal("an update with no timeout of its own got no answer within 40 s: the writer is wedged")
	}
	if at, err := st.RefusedCommit(); err == nil || at.Before(frozen) {
		t.Errorf("RefusedCommit after the batch was given up: %v at %v, want the batch's failure", err, at)
	}
	proxy.Thaw()
	start := time.Now()
	if err := st.Update(store.WithTimeout(context.Background(), 10*time.Second), putFrozenType("after")); err != nil {
		t.Fatalf("the first update after the thaw: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the first update after the thaw took %v", took)
	}
	if !hasType(t, st, "after") || !hasType(t, st, "before") {
		t.Error("a committed update is missing after the thaw")
	}
}

// waitTaken waits until the writer has taken a batch after the first
// batches (the queue is empty, the writer busy).
func waitTaken(t *testing.T, st *Store, batches int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st.queue.Len() > 0 || st.WriterStats().Batches == batches {
		if time.Now().After(deadline) {
			t.Fatal("the writer took no batch within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // and began it
}

// TestConnectionsAreProbed: every pooled connection has the server probe
// the gate (tcp_keepalives_*), and opens within the connect timeout.
func TestConnectionsAreProbed(t *testing.T) {
	t.Parallel()
	st := openTest(t)
	if st.connCfg.ConnectTimeout != connectTimeout {
		t.Errorf("connect timeout %v, want %v", st.connCfg.ConnectTimeout, connectTimeout)
	}
	if st.connCfg.Host == "" || strings.HasPrefix(st.connCfg.Host, "/") {
		t.Skip("a Unix socket: the server ignores TCP keepalives")
	}
	for name, want := range map[string]string{"tcp_keepalives_idle": "15", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3"} {
		var got string
		if err := st.Pool().QueryRow(context.Background(), "SHOW "+name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if strings.TrimSuffix(got, "s") != want {
			t.Errorf("%s = %q on a pooled connection, want %s", name, got, want)
		}
	}
}
