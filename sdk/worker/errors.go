package worker

import (
	"errors"
	"fmt"
	"time"
)

// Causes of a handler's context being cancelled. Read them with
// context.Cause(ctx).
var (
	// ErrLeaseLost: the gate refused a heartbeat (409 lease_expired), or no
	// heartbeat reached the gate before the lease's conservative local expiry.
	// The task may already be leased to another worker: stop at once
	// (KLIS-3 §6.1). Whatever the handler returns is not reported.
	ErrLeaseLost = errors.New("worker: the lease was lost")
	// ErrTaskCanceled: a heartbeat answered cancel_requested. The Runner
	// releases the lease, which cancels the task at the gate.
	ErrTaskCanceled = errors.New("worker: the task was canceled")
	// ErrShutdown: the Runner is shutting down and its grace period is over.
	// A handler that returns an error after this has its lease released, so
	// the task goes back to the queue without using an attempt.
	ErrShutdown = errors.New("worker: the worker is shutting down")
)

// RetryableError marks a handler error as retryable: the gate's retry policy
// schedules another attempt (until the task's max_retries is used up).
// Handlers return it through Retryable.
type RetryableError struct{ Err error }

// Error implements error.
func (e *RetryableError) Error() string { return "retryable: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *RetryableError) Unwrap() error { return e.Err }

// FatalError marks a handler error as not retryable: the task goes to the
// dead-letter queue at once. Handlers return it through Fatal.
type FatalError struct{ Err error }

// Error implements error.
func (e *FatalError) Error() string { return "fatal: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *FatalError) Unwrap() error { return e.Err }

// Retryable marks err as retryable. Any error a handler returns that is not
// marked Fatal is retryable already; Retryable says so explicitly. It returns
// nil for nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &RetryableError{Err: err}
}

// Fatal marks err as fatal: the task is dead-lettered without another
// attempt. It returns nil for nil.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &FatalError{Err: err}
}

// Fatalf is Fatal(fmt.Errorf(format, args...)).
func Fatalf(format string, args ...any) error { return Fatal(fmt.Errorf(format, args...)) }

// IsRetryable reports how the Runner classifies a handler error: false when
// a FatalError is anywhere in its chain, true otherwise (plain errors are
// retryable).
func IsRetryable(err error) bool {
	var fe *FatalError
	return !errors.As(err, &fe)
}

// SnoozeError asks the Runner to give the task back until Delay from now
// without using an attempt (River's JobSnooze, SQS's
// ChangeMessageVisibility): the task's retry budget is untouched. Handlers
// return it through Snooze.
type SnoozeError struct {
	Delay  time.Duration
	Reason string
}

// Error implements error.
func (e *SnoozeError) Error() string { return fmt.Sprintf("snooze for %s", e.Delay) }

// Snooze returns the error that has the Runner snooze the task for d: it is
// offered again no earlier than d from now (rounded up to whole seconds,
// at least one, at most the gate's 366 days), and the attempt does not
// count as a failure. Should the gate refuse the snooze (400), the task is
// failed for good with the refusal as its error.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: d} }

// SnoozeFor is Snooze with a reason the task's history keeps (NUL is
// written U+FFFD, and a reason over the gate's 1000 characters is cut
// there).
func SnoozeFor(d time.Duration, reason string) error { return &SnoozeError{Delay: d, Reason: reason} }

// asSnooze returns the SnoozeError in err's chain, or nil.
func asSnooze(err error) *SnoozeError {
	var se *SnoozeError
	if errors.As(err, &se) {
		return se
	}
	return nil
}

// maxSnooze is the longest snooze the gate takes: 366 days (snooze_seconds
// 1..31622400).
const maxSnooze = 366 * 24 * time.Hour

// snoozeSeconds rounds d up to whole seconds, at least one and at most the
// gate's bound (maxSnooze).
func snoozeSeconds(d time.Duration) int64 {
	if d >= maxSnooze {
		return int64(maxSnooze / time.Second)
	}
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// PanicError is the error a handler panic becomes. The Runner reports it as a
// retryable failure with the stack in the failure's metadata.
type PanicError struct {
	Value any
	Stack string
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("handler panic: %v", e.Value) }
