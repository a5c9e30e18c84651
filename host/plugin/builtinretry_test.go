package plugin

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// TestBuiltinTransientRefusalRetried: a built-in whose start runs out of
// its deadline at boot (a busy machine) is refused and tried again with the
// drop-ins' backoff, listed as they are (refused, refused_code
// start_timeout, retry_at) and named by Pending (so /readyz says the gate
// is not ready without it) while a try is due; once starts fit the deadline
// again it serves, without a restart. It used to stay missing until the
// gate restarted.
func TestBuiltinTransientRefusalRetried(t *testing.T) {
	t.Parallel()
	builtins := t.TempDir()
	copyPlugin(t, "slowinit", "slowpol", builtins)
	copyPlugin(t, "inline", "inline", builtins)
	rt := newTestRuntime(t, Limits{})
	// slowinit spins through millions of iterations before it serves: a
	// start deadline of 20 ms is one it cannot meet, as a loaded machine
	// made a 10 s one for a built-in at boot.
	var startTimeout atomic.Int64
	startTimeout.Store(int64(20 * time.Millisecond))
	rt.limitsHook = func(name string, l Limits) Limits {
		if name == "slowpol" {
			l.StartTimeout = time.Duration(startTimeout.Load())
		}
		return l
	}
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Builtins: os.DirFS(builtins), Background: true, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go reg.Run(ctx)

	waitFor(t, func() bool { return strings.Contains(infoOf(reg, "slowpol").Refused, "deadline exceeded") })
	in := infoOf(reg, "slowpol")
	if in.State != "refused" || in.RefusedCode != RefusalStartTimeout || in.RetryAt.IsZero() {
		t.Fatalf("built-in slowpol after its start ran out of time: state %q, code %q, retry_at %v, refused %q; want refused (start_timeout) with a retry due",
			in.State, in.RefusedCode, in.RetryAt, in.Refused)
	}
	if st, _, why := reg.State("slowpol"); st != "refused" || !strings.HasPrefix(why, "plugin slowpol: start instance") {
		t.Fatalf("State(slowpol) = %s, %q", st, why)
	}
	// Its first load ended: the registry gets ready (once inline loaded).
	waitFor(t, reg.Ready)
	if p := reg.Pending(); !slices.Contains(p, "slowpol") {
		t.Fatalf("Pending() = %v while a retry of the built-in slowpol is due; /readyz would say ready", p)
	}
	// A call meanwhile: the name is known, nothing serves it.
	if _, err := reg.Policy("slowpol", nil); err == nil {
		t.Fatal("Policy(slowpol) while it is refused")
	}

	// The machine is quiet again: starts fit their deadline.
	startTimeout.Store(int64(10 * time.Minute))
	// The next try is up to retryMax away, then compiles and starts the
	// module: under two test runs and more on two cores that passed the
	// usual five minutes once (load 11-13).
	waitForWithin(t, 10*time.Minute, func() bool { return infoOf(reg, "slowpol").State == "ready" })
	in = infoOf(reg, "slowpol")
	if in.Refused != "" || in.RefusedCode != "" || !in.RetryAt.IsZero() || in.Source != "builtin" {
		t.Fatalf("slowpol serving: %+v; want the built-in, its refusal and retry cleared", in)
	}
	if p := reg.Pending(); len(p) != 0 {
		t.Fatalf("Pending() = %v once every plugin serves", p)
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

// TestBuiltinTransientRetriesGiveUp: a built-in's retries follow the
// drop-ins' limit: retryLimit transient refusals in a row, then no try
// is due (and Pending no longer names it), its refusal still listed.
func TestBuiltinTransientRetriesGiveUp(t *testing.T) {
	r := &Registry{log: testLogger(t), entries: map[string]*entry{}, ready: make(chan struct{})}
	close(r.ready)
	e := r.entry("slow")
	slow := transientError{os.ErrDeadlineExceeded}
	for i := 1; i <= retryLimit; i++ {
		r.refuseBuiltin(e, slow)
		if e.builtinRetryAt.IsZero() || e.builtinRetries != i || e.builtinRetryDelay > retryMax {
			t.Fatalf("refusal %d: retry_at %v, tries %d, wait %v; want a try due", i, e.builtinRetryAt, e.builtinRetries, e.builtinRetryDelay)
		}
	}
	r.refuseBuiltin(e, slow)
	if !e.builtinRetryAt.IsZero() {
		t.Fatalf("after %d transient refusals in a row a try is still due at %v", retryLimit+1, e.builtinRetryAt)
	}
	if in := infoOf(r, "slow"); in.State != "refused" || in.RefusedCode != RefusalStartTimeout || !in.RetryAt.IsZero() {
		t.Fatalf("given up: %+v", in)
	}
	if p := r.Pending(); len(p) != 0 {
		t.Fatalf("Pending() = %v with no try due", p)
	}
}
