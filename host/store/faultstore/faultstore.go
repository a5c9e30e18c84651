// Package faultstore wraps a store.Store and injects faults at each step of
// its calls: an error before a transaction begins, a commit that fails (the
// work is rolled back), an ambiguous commit (the work is durable but the
// caller hears an error, as when a connection dies after COMMIT was sent), a
// lost connection on a read, and latency. Tests use it to check that callers
// of the store never diverge from what was stored when it fails.
package faultstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncgate/asyncgate/host/store"
)

// Step is where in a call a fault strikes.
type Step string

const (
	// Begin fails an Update before its function runs: nothing is written.
	Begin Step = "begin"
	// Commit runs an Update's function, then fails the commit: its writes are
	// rolled back and the caller gets an error.
	Commit Step = "commit"
	// Ambiguous runs and commits an Update, then reports an error, as a
	// driver does when the connection is lost after COMMIT was sent: the
	// caller cannot tell whether it happened (it did).
	Ambiguous Step = "ambiguous"
	// View fails a read before it runs.
	View Step = "view"
	// Ping fails a health check.
	Ping Step = "ping"
)

// Op describes a call the wrapper is about to make.
type Op struct {
	Step Step  // Begin for Update, View for View, Ping for Ping
	N    int64 // how many calls of any kind came before this one
}

// Fault is what to do to one call. The zero Fault does nothing.
type Fault struct {
	// Step at which Err is returned: Begin, Commit or Ambiguous for an
	// Update; View for View; Ping for Ping. Empty: no error.
	Step Step
	// Err is the error injected (ErrLostConnection when nil).
	Err error
	// Latency delays the call before it runs (or until its context is done).
	Latency time.Duration
}

// Plan decides the fault for each call; it may be called concurrently.
type Plan func(op Op) Fault

// ErrLostConnection is the default injected error: what a driver reports when
// its connection to the database dies.
var ErrLostConnection = errors.New("faultstore: connection to the database lost")

// Store is a store.Store with faults injected by its plan.
type Store struct {
	inner store.Store
	n     atomic.Int64
	mu    sync.Mutex
	plan  Plan
	count map[Step]int64
}

var _ store.Store = (*Store)(nil)

// New wraps inner; plan may be nil (no faults) and be set later with SetPlan.
func New(inner store.Store, plan Plan) *Store {
	return &Store{inner: inner, plan: plan, count: map[Step]int64{}}
}

// SetPlan replaces the plan for calls from now on (nil: no faults).
func (s *Store) SetPlan(p Plan) {
	s.mu.Lock()
	s.plan = p
	s.mu.Unlock()
}

// Injected reports how many faults with an error were injected at step.
func (s *Store) Injected(step Step) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[step]
}

// Inner returns the wrapped store.
func (s *Store) Inner() store.Store { return s.inner }

func (s *Store) fault(ctx context.Context, step Step) (Fault, error) {
	op := Op{Step: step, N: s.n.Add(1) - 1}
	s.mu.Lock()
	plan := s.plan
	s.mu.Unlock()
	if plan == nil {
		return Fault{}, nil
	}
	f := plan(op)
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return f, ctx.Err()
		}
	}
	if f.Step != "" {
		if f.Err == nil {
			f.Err = ErrLostConnection
		}
		s.mu.Lock()
		s.count[f.Step]++
		s.mu.Unlock()
	}
	return f, nil
}

// errCommit makes the inner store roll an update back.
type errCommit struct{ err error }

func (e errCommit) Error() string { return e.err.Error() }
func (e errCommit) Unwrap() error { return e.err }

// Update runs fn through the inner store with the plan's fault.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	f, err := s.fault(ctx, Begin)
	if err != nil {
		return err
	}
	switch f.Step {
	case Begin, View, Ping:
		return f.Err
	case Commit:
		err := s.inner.Update(ctx, func(tx store.Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			return errCommit{f.Err}
		})
		var ec errCommit
		if errors.As(err, &ec) {
			return ec.err
		}
		return err
	case Ambiguous:
		if err := s.inner.Update(ctx, fn); err != nil {
			return err
		}
		return f.Err
	}
	return s.inner.Update(ctx, fn)
}

// View runs fn through the inner store unless the plan fails it.
func (s *Store) View(ctx context.Context, fn func(store.Reader) error) error {
	f, err := s.fault(ctx, View)
	if err != nil {
		return err
	}
	if f.Step != "" {
		return f.Err
	}
	return s.inner.View(ctx, fn)
}

// Ping checks the inner store unless the plan fails it.
func (s *Store) Ping(ctx context.Context) error {
	f, err := s.fault(ctx, Ping)
	if err != nil {
		return err
	}
	if f.Step != "" {
		return f.Err
	}
	return s.inner.Ping(ctx)
}

// Close closes the inner store.
func (s *Store) Close() error { return s.inner.Close() }

// Driver names the inner store's driver.
func (s *Store) Driver() string { return s.inner.Driver() }

// AddReadyHook implements store.ReadyHooker when the inner store does (the
// inner store's transactions, which the wrapper hands through, may leave
// the waiters they make ready to their batch's end and report them only
// through it); otherwise the hook is never called.
func (s *Store) AddReadyHook(hook func(tenant, taskType string)) (remove func()) {
	if h, ok := s.inner.(store.ReadyHooker); ok {
		return h.AddReadyHook(hook)
	}
	return func() {}
}

var _ store.ReadyHooker = (*Store)(nil)

// Once returns a plan that injects f into the next call at f's kind of step
// (an Update for Begin, Commit and Ambiguous) and nothing afterwards.
func Once(f Fault) Plan {
	var done atomic.Bool
	return func(op Op) Fault {
		want := f.Step
		if want == Commit || want == Ambiguous {
			want = Begin
		}
		if op.Step == want && done.CompareAndSwap(false, true) {
			return f
		}
		return Fault{}
	}
}

// Nth returns a plan that injects f into the call numbered skip+1 (from 1)
// among the calls at f's kind of step, and nothing else: Nth(1, f) lets one
// Update through and faults the second.
func Nth(skip int64, f Fault) Plan {
	var seen atomic.Int64
	want := f.Step
	if want == Commit || want == Ambiguous {
		want = Begin
	}
	return func(op Op) Fault {
		if op.Step == want && seen.Add(1) == skip+1 {
			return f
		}
		return Fault{}
	}
}

// Latency returns a plan that delays every call by d and fails none.
func Latency(d time.Duration) Plan {
	return func(Op) Fault { return Fault{Latency: d} }
}
