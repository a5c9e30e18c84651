// Package worker is the Go SDK for AsyncGate workers. It talks to the gate's
// canonical worker API over HTTP only and depends on nothing but the standard
// library, so it can be vendored on its own.
//
// A worker registers one handler per task type on a Runner and calls Run:
//
//	c := worker.NewClient("http://127.0.0.1:8080", os.Getenv("ASYNCGATE_KEY"))
//	r := worker.NewRunner(c, worker.Config{Concurrency: 4})
//	r.Handle("doc.index", func(ctx context.Context, t *worker.Task) (any, error) {
//		var p struct{ Path string }
//		if err := t.Bind(&p); err != nil {
//			return nil, worker.Fatal(err) // bad params: no point retrying
//		}
//		worker.Progress(ctx, 50, "halfway")
//		return map[string]int{"files": 42}, nil // inline JSON result
//	})
//	err := r.Run(ctx) // until ctx is done, then a graceful shutdown
//
// What the Runner does for each task, following the seeds (Lease Protocol,
// KLIS-3, "Lease to Receipt flow"):
//
//   - Long-polls POST /v1/leases for as many tasks as it has free slots
//     (Config.Concurrency); no work means another long-poll (or a 5 s pause
//     without long-polling); network errors and 5xx answers back off 5 s →
//     10 s → 20 s → 40 s, at most 60 s.
//   - Accepts the offer before the handler starts (receipt task.accepted).
//   - Heartbeats at a third of the lease length. The handler's context is
//     cancelled when the gate answers 409 lease_expired, when no heartbeat
//     got through before the lease's conservative local expiry (KLIS-3 §6.1:
//     an agent that cannot heartbeat must assume it lost the lease), or when
//     a heartbeat answers cancel_requested. context.Cause tells which
//     (ErrLeaseLost, ErrTaskCanceled, ErrShutdown). Each heartbeat call is
//     bounded by that local expiry. A failed heartbeat (network error, 429,
//     5xx) is retried after 250 ms doubling with each failure, at most the
//     regular interval and half the time left on the lease.
//   - Retry-After: every call it retries (lease, accept, heartbeat,
//     complete, fail, release, the spool, a Holder's heartbeat) waits at
//     least the Retry-After of a 429 or 5xx answer (seconds or an
//     HTTP-date; at most MaxRetryAfter, plus up to 10% jitter) when that is
//     longer than its own backoff, within the bounds it already keeps: Run's
//     context, and for accepts and heartbeats the lease (never past half
//     the time left).
//   - Progress(ctx, percent, msg) sends progress with an early heartbeat,
//     but early heartbeats are at least max(1 s, a tenth of the lease) apart
//     (never more than the regular interval): faster reports are coalesced
//     and the latest is sent when the gap is over. Progress still unsent
//     when the handler returns goes with one last heartbeat before the
//     outcome.
//   - The result: bytes or JSON go inline for the gate's result channel;
//     a Pointer names a result the handler stored itself.
//   - Errors: plain errors and Retryable(err) are retryable; Fatal(err)
//     dead-letters the task at once. A panic becomes a retryable failure.
//   - Completions and failures are retried with exponential backoff; when the
//     gate still cannot be reached they are appended (fsync'd) to a local
//     spool file of JSON lines, which is retried when Run starts and every
//     Config.SpoolInterval. A retry stops at the first outcome the gate
//     cannot take now (network error or timeout, 408, 429, 503), leaving it
//     and the rest spooled for the next one, which waits at least that
//     answer's Retry-After; one answered with another 5xx (its result
//     channel down) stays spooled while the retry goes on. The gate refuses outcomes for leases that expired
//     meanwhile (strict expiry); such a task is leased again, never lost.
//   - Graceful shutdown: when Run's context is done it stops leasing, lets
//     in-flight tasks finish for Config.ShutdownTimeout, then cancels them
//     (ErrShutdown) and releases their leases so the tasks go back to the
//     queue without using an attempt.
//
// Logs go to Config.Logger (log/slog) with task_id, lease_id and task_type on
// every task line; Logger(ctx) gives a handler the same logger.
//
// Until the module path is published, one command makes a module use the SDK
// from a checkout of the repository beside it (docs/workers.md has a go.work
// alternative):
//
//	go mod edit -require=github.com/asyncgate/asyncgate/sdk/worker@v0.0.0-00010101000000-000000000000 -replace=github.com/asyncgate/asyncgate/sdk/worker=../asyncgate/sdk/worker
package worker
