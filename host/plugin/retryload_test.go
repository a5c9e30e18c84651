package plugin

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// TestTransientRefusalRetried: a drop-in whose start ran out of its
// deadline (a slow start on a busy machine) is refused, and tried again
// with a backoff: once starts fit the deadline again it serves, without a
// restart and without its files changing. A module refused for what it is
// (here: not a module) is not retried.
func TestTransientRefusalRetried(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyPlugin(t, "slowinit", "slowpol", dir)
	_, bman := readBuilt(t, "backoff")
	writePair(t, dir, "bad", []byte("\x00asm\x01\x00\x00\x00garbage"), []byte(replaceName(string(bman), "backoff", "bad")))
	rt := newTestRuntime(t, Limits{})
	// slowinit spins through millions of iterations before it serves: a
	// start deadline of 20 ms is one it cannot meet, as a loaded machine
	// made a 10 s one for slowpol.
	var startTimeout atomic.Int64
	startTimeout.Store(int64(20 * time.Millisecond))
	rt.limitsHook = func(name string, l Limits) Limits {
		if name == "slowpol" {
			l.StartTimeout = time.Duration(startTimeout.Load())
		}
		return l
	}
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, Background: true, PollInterval: 20 * time.Millisecond, RemoveAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go reg.Run(ctx)

	waitFor(t, func() bool { return strings.Contains(infoOf(reg, "slowpol").Refused, "deadline exceeded") })
	if in := infoOf(reg, "slowpol"); in.State != "refused" || in.RetryAt.IsZero() {
		t.Fatalf("slowpol after its start ran out of time: %+v; want refused with a retry due", in)
	}
	if st, _, why := reg.State("slowpol"); st != "refused" || !strings.HasPrefix(why, "plugin slowpol: start instance") {
		t.Fatalf("State(slowpol) = %s, %q", st, why)
	}
	waitFor(t, func() bool { return strings.Contains(infoOf(reg, "bad").Refused, "compile") })
	if in := infoOf(reg, "bad"); !in.RetryAt.IsZero() {
		t.Fatalf("a module that does not compile is retried: %+v", in)
	}

	// The machine is quiet again: starts fit their deadline.
	startTimeout.Store(int64(10 * time.Minute))
	waitFor(t, func() bool { return infoOf(reg, "slowpol").State == "ready" })
	in := infoOf(reg, "slowpol")
	if in.Refused != "" || !in.RetryAt.IsZero() {
		t.Fatalf("slowpol serving: %+v; want the refusal and the retry cleared", in)
	}
	if st, kind, why := reg.State("slowpol"); st != "ready" || kind != KindPolicy || why != "" {
		t.Fatalf("State(slowpol) serving = %s, %s, %q", st, kind, why)
	}
	pol, err := reg.Policy("slowpol", nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := pol.Decide(context.Background(), host.FailureInput{TaskID: "t", TaskType: "x", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3})
	if err != nil || d.Reason != "slowinit-ok" {
		t.Fatalf("slowpol decides: %+v, %v", d, err)
	}
}
