package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// TestHostilePlugin runs each kind of fault and checks that the host reports
// it clearly, counts it, discards the instance, and keeps serving: on
// compiled code, and on the interpreter a start serves from until the
// compiled code is ready (a loop must stop at the deadline there too).
func TestHostilePlugin(t *testing.T) {
	t.Parallel()
	for _, eng := range []string{"compiler", "interpreter"} {
		t.Run(eng, func(t *testing.T) {
			t.Parallel()
			testHostilePlugin(t, eng == "interpreter")
		})
	}
}

func testHostilePlugin(t *testing.T, interp bool) {
	// The interpreter is several times slower than compiled code, and a Go
	// guest's panic prints its whole stack before it exits: under -race on a
	// loaded machine that alone took over a second there, so the interpreter
	// gets a longer deadline (the loop case still has to reach it).
	timeout := time.Second
	if interp {
		timeout = 5 * time.Second
	}
	b := setupOn(t, interp, nil, Limits{Timeout: timeout, MemoryPages: 256}, "hostile")
	if p, _ := b.reg.Plugin("hostile"); p.Interpreted() != interp {
		t.Fatalf("plugin runs interpreted=%v, want %v", p.Interpreted(), interp)
	}
	pol, err := b.reg.Policy("hostile", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := func(t *testing.T) {
		t.Helper()
		d, err := pol.Decide(ctx, host.FailureInput{TaskID: "t", TaskType: "fine", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3})
		if err != nil || d.Reason != "hostile-ok" {
			t.Fatalf("healthy call after fault: %+v, %v", d, err)
		}
	}
	ok(t)
	cases := []struct {
		taskType string
		kind     FaultKind
		detail   string
		discard  bool
	}{
		{"loop", FaultTimeout, "deadline exceeded", true},
		{"panic", FaultPanic, "assignment to entry in nil map", true},
		{"exit", FaultTrap, "exited with code 3", true},
		{"bomb", FaultTrap, "out of memory", true},
		{"garbage", FaultBadOutput, "/action", true},
		{"readfile", FaultGuestError, "could not read any file", false},
		{"error", FaultGuestError, "refusing on purpose", false},
	}
	for _, c := range cases {
		t.Run(c.taskType, func(t *testing.T) {
			p, _ := b.reg.Plugin("hostile")
			before := p.Stats()
			start := time.Now()
			_, err := pol.Decide(ctx, host.FailureInput{TaskID: "t", TaskType: c.taskType, Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3})
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("fault took %v to surface", took)
			}
			var f *Fault
			if !errors.As(err, &f) {
				t.Fatalf("got %v, want a *Fault", err)
			}
			if c.taskType == "bomb" && f.Kind == FaultTimeout {
				// Under -race a slow machine may hit the deadline before the memory cap; both are contained.
				c.kind, c.detail = FaultTimeout, "deadline"
			}
			if f.Kind != c.kind {
				t.Fatalf("got %v, want fault kind %s", err, c.kind)
			}
			// A timeout names itself and the plugin (504); other faults of a
			// policy are the plugin's (plugin_fault, 502), not the gate's bugs.
			wantCode := host.CodePluginFault
			if f.Kind == FaultTimeout {
				wantCode = host.CodePluginTimeout
			}
			if !host.IsCode(err, wantCode) || !strings.Contains(host.ErrorDetail(err), "plugin hostile@0.0.1 decide") {
				t.Fatalf("got %v, want %s naming the plugin", err, wantCode)
			}
			// What reaches answers and receipts is one short line; a panic's
			// stack goes to the operator log only.
			if msg := err.Error(); strings.Contains(msg, "\n") || strings.Contains(msg, "goroutine ") || len(msg) > 400 {
				t.Errorf("error carries a trace: %q", msg)
			}
			if c.taskType == "panic" && !strings.Contains(f.Trace, "goroutine ") {
				t.Errorf("the panic's stack is not kept for the log: %q", f.Trace)
			}
			switch {
			case c.taskType == "bomb" && f.Kind == FaultTrap:
				// The guest runtime's own "out of memory" report goes to its
				// stderr (kept in the trace) and may or may not precede the
				// trap; the trap itself surfaces as "unreachable".
				if !strings.Contains(err.Error()+f.Trace, c.detail) && !strings.Contains(err.Error(), "wasm error: unreachable") {
					t.Errorf("error %q (trace %q) shows no out-of-memory trap", err, f.Trace)
				}
			case !strings.Contains(err.Error(), c.detail):
				t.Errorf("error %q does not mention %q", err, c.detail)
			}
			if f.discard() != c.discard {
				t.Errorf("discard = %v, want %v", f.discard(), c.discard)
			}
			after := p.Stats()
			if after.Failures != before.Failures+1 {
				t.Errorf("failures %d → %d, want +1", before.Failures, after.Failures)
			}
			ok(t)
		})
	}
}

// TestHostileReadsUngrantedFile checks that a plugin without a grant sees no
// filesystem at all, even when the host's folder has the file.
func TestHostileReadsUngrantedFile(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{}, "hostile")
	if err := os.WriteFile(filepath.Join(b.dir, "secret.txt"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, _ := b.reg.Policy("hostile", nil)
	_, err := pol.Decide(context.Background(), host.FailureInput{TaskID: "t", TaskType: "readfile", Kind: host.FailureError, Attempts: 1})
	if err == nil || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "root:") {
		t.Fatalf("plugin read a file it was not granted: %v", err)
	}
	var f *Fault
	if !errors.As(err, &f) || f.Code != "no_access" {
		t.Fatalf("got %v, want the plugin's no_access error", err)
	}
}

func TestFallbackPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{Timeout: time.Second}, "hostile")
	pol, _ := b.reg.Policy("hostile", nil)
	fb := FallbackPolicy{Policy: pol, Fallback: host.ExponentialBackoff{Base: time.Second, Max: time.Minute, Jitter: -1}}
	in := host.FailureInput{TaskID: "t", TaskType: "loop", Kind: host.FailureError, Retryable: true, Attempts: 2, MaxRetries: 3}
	d, err := fb.Decide(context.Background(), in)
	if !FellBack(err) {
		t.Fatalf("want a FallbackError, got %v", err)
	}
	if d.Action != host.ActionRetry || d.DelaySeconds != 2 || d.Reason != host.ReasonPolicyFault {
		t.Fatalf("fallback decision %+v", d)
	}
	var fe *FallbackError
	errors.As(err, &fe)
	var f *Fault
	if !errors.As(fe.Cause, &f) || f.Kind != FaultTimeout {
		t.Fatalf("cause %v, want a timeout fault", fe.Cause)
	}
	in.TaskType = "fine"
	if d, err := fb.Decide(context.Background(), in); err != nil || d.Reason != "hostile-ok" {
		t.Fatalf("healthy: %+v %v", d, err)
	}
	in.TaskType, in.Attempts = "panic", 4
	d, err = fb.Decide(context.Background(), in)
	if !FellBack(err) || d.Action != host.ActionDeadLetter || d.Reason != host.ReasonPolicyFault {
		t.Fatalf("exhausted fallback: %+v %v", d, err)
	}
	if errors.As(err, &fe); fe.FallbackReason != host.ReasonMaxRetriesExceeded {
		t.Fatalf("fallback reason %q", fe.FallbackReason)
	}
}

// TestDecideGarbageDiscardsInstance: an instance whose decision fails the
// output checks is discarded, not returned to the pool, and the fault is
// counted once against the version that answered.
func TestDecideGarbageDiscardsInstance(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{Timeout: time.Second, MemoryPages: 256}, "hostile")
	pol, err := b.reg.Policy("hostile", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := b.reg.Plugin("hostile")
	in := host.FailureInput{TaskID: "t", TaskType: "garbage", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3}
	before := p.Stats()
	_, err = pol.Decide(context.Background(), in)
	var f *Fault
	if !errors.As(err, &f) || f.Kind != FaultBadOutput || f.Version != p.Manifest.Version {
		t.Fatalf("got %v, want bad_output of hostile@%s", err, p.Manifest.Version)
	}
	if live, idle := p.Instances(); live != 0 || idle != 0 {
		t.Fatalf("the instance that answered garbage was kept (live=%d idle=%d)", live, idle)
	}
	in.TaskType = "fine"
	if _, err := pol.Decide(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	after := p.Stats()
	if after.ColdStarts != before.ColdStarts+1 {
		t.Errorf("cold starts %d → %d: the instance that answered garbage was reused", before.ColdStarts, after.ColdStarts)
	}
	if after.Calls != before.Calls+2 || after.Failures != before.Failures+1 || after.Faults != before.Faults+1 {
		t.Errorf("stats %+v → %+v, want 2 calls, 1 failure, 1 fault", before, after)
	}
}

func TestRawGarbageFrames(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{}, "rawgarbage")
	pol, err := b.reg.Policy("rawgarbage", nil)
	if err != nil {
		t.Fatal(err)
	}
	in := host.FailureInput{TaskID: "t", TaskType: "x", Kind: host.FailureError, Attempts: 1}
	for i := range 4 {
		_, err := pol.Decide(context.Background(), in)
		var f *Fault
		if !errors.As(err, &f) || f.Kind != FaultBadOutput {
			t.Fatalf("call %d: got %v, want bad_output", i, err)
		}
	}
	p, _ := b.reg.Plugin("rawgarbage")
	if st := p.Stats(); st.Faults != 4 || st.ColdStarts < 4 {
		t.Fatalf("stats %+v: every garbage answer should cost its instance", st)
	}
}

func TestBadABIRefused(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, Limits{})
	wasm, man := readBuilt(t, "badabi")
	_, err := rt.Load(context.Background(), wasm, man, Grant{}, "test")
	if err == nil || !strings.Contains(err.Error(), "ABI 99") {
		t.Fatalf("got %v, want an ABI refusal", err)
	}
	_, err = rt.Load(context.Background(), []byte("\x00asm garbage"), man, Grant{}, "test")
	if err == nil || !strings.Contains(err.Error(), "compile") {
		t.Fatalf("got %v, want a compile error", err)
	}
}

// TestHammer runs P goroutines × N calls against a small pool, with faults
// mixed in, and checks every healthy call succeeded and the counts add up.
func TestHammer(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{MaxInstances: 3, Timeout: time.Second}, "hostile")
	pol, _ := b.reg.Policy("hostile", nil)
	const P, N = 6, 40
	errs := make(chan error, P*N)
	done := make(chan struct{})
	for g := range P {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range N {
				tt := "fine"
				if (g*N+i)%17 == 0 {
					tt = "panic"
				}
				d, err := pol.Decide(context.Background(), host.FailureInput{TaskID: "t", TaskType: tt, Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3})
				if tt == "fine" && (err != nil || d.Reason != "hostile-ok") {
					errs <- err
				}
				if tt == "panic" && err == nil {
					errs <- errors.New("panic call succeeded")
				}
			}
		}()
	}
	for range P {
		<-done
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	p, _ := b.reg.Plugin("hostile")
	st := p.Stats()
	if st.Calls != P*N {
		t.Errorf("calls = %d, want %d", st.Calls, P*N)
	}
	if live, _ := p.Instances(); live > 3 {
		t.Errorf("%d live instances, cap is 3", live)
	}
}
