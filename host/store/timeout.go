package store

import (
	"context"
	"errors"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store/groupcommit"
)

// DefaultTimeout is the bound on one store call made for a request when the
// gate is not told otherwise (gate serve --db-timeout; RATIONALE.md, "A
// request's store calls answer within 15 s").
const DefaultTimeout = 15 * time.Second

type timeoutKey struct{}

// WithTimeout returns ctx marked so that each store call made with it, or
// with a context derived from it, waits for the database at most d: a read
// (View) that has not finished by then fails, and an update (Update) stops
// waiting for its outcome, both with host.CodeDatabaseUnavailable. Only the
// store's own calls are bounded: whatever else the caller does under ctx
// (a plugin call, a result streamed through a channel) keeps its own
// bounds. The doors mark every request's context so (httpapi.Config.StoreTimeout);
// d <= 0 removes a bound an outer caller set.
func WithTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, timeoutKey{}, d)
}

// TimeoutOf returns the bound WithTimeout set on ctx, 0 for none.
func TimeoutOf(ctx context.Context) time.Duration {
	d, _ := ctx.Value(timeoutKey{}).(time.Duration)
	return max(d, 0)
}

// ErrTimeout is the cause (context.Cause) of a context from Bound that
// reached its bound.
var ErrTimeout = errors.New("the store call reached its timeout")

// Bound returns ctx ended after the bound ctx carries (WithTimeout), with
// ErrTimeout as its cause, or ctx itself when it carries none. A driver
// calls it first in Update and View; cancel releases it.
func Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	d := TimeoutOf(ctx)
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, d, ErrTimeout)
}

// TimedOut reports whether ctx ended at a store call's bound (Bound), not
// because its caller went away or its own deadline passed.
func TimedOut(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrTimeout)
}

// ReadTimeout returns the error of a read (View) whose context from Bound
// ended: host.CodeDatabaseUnavailable naming the bound when it was the
// bound, err as it is otherwise (the caller went away: its own
// cancellation or deadline). The error never wraps a context error, so the
// doors answer its detail, not "the request timed out".
//
// A domain answer the read reached before the bound (not_found, a
// conflict) is returned as it is.
func ReadTimeout(ctx context.Context, driver string, err error) error {
	if err == nil || !TimedOut(ctx) {
		return err
	}
	var he *host.Error
	if errors.As(err, &he) && he.Code != host.CodeDatabaseUnavailable && he.Code != host.CodeInternal &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	return host.WrapError(host.CodeDatabaseUnavailable, ErrTimeout,
		driver+" did not answer within "+TimeoutOf(ctx).String()+"; try again")
}

// AwaitUpdate is how a driver's Update waits for its queued request: until
// done is closed, then *err is the outcome; or until ctx (from Bound) ends,
// then the request is given up with its Claim (UpdateAbandoned says what
// the caller is told). A caller that went away (ctx canceled, not at its
// bound) and whose request the writer took waits for the outcome as
// before: the writer bounds its batches (host/postgres: Options.Timeout),
// and one who left is told nothing anyway.
func AwaitUpdate(ctx context.Context, driver string, done <-chan struct{}, c *groupcommit.Claim, err *error) error {
	select {
	case <-done:
		return *err
	case <-ctx.Done():
	}
	select {
	case <-done: // both at once: the outcome is known, so it is told
		return *err
	default:
	}
	if c.Abandon() {
		return UpdateAbandoned(ctx, driver, false)
	}
	if !TimedOut(ctx) && errors.Is(ctx.Err(), context.Canceled) {
		<-done
		return *err
	}
	return UpdateAbandoned(ctx, driver, true)
}

// UpdateAbandoned returns the error of an update whose caller stopped
// waiting for it (ctx from Bound ended after it was queued). taken tells
// whether the writer had taken it into a batch by then
// (groupcommit.Claim):
//
//   - not taken: it will never run, nothing of it is written. At its
//     bound, host.CodeDatabaseUnavailable saying so; otherwise ctx's own
//     error (the caller went away, or its own deadline passed), as when
//     ctx ends before the update is queued.
//   - taken: its batch is still running (stuck on the database, most
//     likely), so whether it commits is unknown:
//     host.CodeDatabaseUnavailable saying so, never a success, and never a
//     context error, which a door could take for "not done".
func UpdateAbandoned(ctx context.Context, driver string, taken bool) error {
	timedOut := TimedOut(ctx)
	within := ""
	if timedOut {
		within = " within " + TimeoutOf(ctx).String()
	}
	if !taken {
		if !timedOut {
			return ctx.Err()
		}
		return host.WrapError(host.CodeDatabaseUnavailable, ErrTimeout,
			driver+" is not answering: the update waited "+TimeoutOf(ctx).String()+" for a writer and was not made; try again")
	}
	return host.WrapError(host.CodeDatabaseUnavailable, ErrOutcomeUnknown,
		driver+" did not confirm the update"+within+": its outcome is unknown (it may still commit); read it back, or retry the same call")
}

// ErrOutcomeUnknown is in the chain of an update's error when the update
// may or may not have committed (UpdateAbandoned, OutcomeUnknown). The
// store's detail says to read it back or retry the same call; a caller that
// knows what makes its call safe to repeat (an idempotency key, a lease id)
// adds it.
var ErrOutcomeUnknown = errors.New("the update's outcome is unknown")

// OutcomeUnknown returns err with ErrOutcomeUnknown in its chain and err's
// text.
func OutcomeUnknown(err error) error { return outcomeUnknown{err} }

type outcomeUnknown struct{ error }

func (e outcomeUnknown) Unwrap() error        { return e.error }
func (e outcomeUnknown) Is(target error) bool { return target == ErrOutcomeUnknown }

// QueueTimeout is UpdateAbandoned for an update that was never queued:
// err is what queueing it returned (groupcommit.Queue.Put), ctx its Bound
// context.
func QueueTimeout(ctx context.Context, driver string, err error) error {
	if !TimedOut(ctx) {
		return err
	}
	return UpdateAbandoned(ctx, driver, false)
}
