package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// HandlerFunc does the work of one task. ctx is cancelled when the lease is
// lost, the task is canceled or the Runner shuts down (context.Cause tells
// which: ErrLeaseLost, ErrTaskCanceled, ErrShutdown); the handler must then
// stop promptly. The result is reported as described for Runner.Handle; an
// error fails the attempt (retryable unless marked with Fatal).
type HandlerFunc func(ctx context.Context, t *Task) (any, error)

// Config configures a Runner. The zero value works: one task at a time,
// 30 s long-polls, the Lease Protocol's backoffs, a spool in the user's cache
// folder and a 30 s shutdown grace.
type Config struct {
	// WorkerID is "{type}.{instance}". Empty: the key's own worker id (a
	// worker key always acts as its own).
	WorkerID string
	// Concurrency is how many tasks run at once (default 1). Each lease call
	// asks for as many tasks as there are free slots.
	Concurrency int
	// LeaseSeconds asks for this lease length and heartbeat extension
	// (0: the task type's lease_seconds).
	LeaseSeconds int
	// PollWait is how long one lease call long-polls (default 30 s, the
	// gate's cap; negative: no long-poll). A lease call names at most 50
	// task types: a Runner with more handlers asks for them in chunks of
	// 50, in turn, each call long-polling its share of PollWait, so that
	// every type is asked for at least once a PollWait.
	PollWait time.Duration
	// IdleWait is the pause after an empty answer that did not long-poll
	// (default 5 s, the Lease Protocol's "no work" backoff).
	IdleWait time.Duration
	// PollBackoff paces lease calls after network errors and 5xx answers
	// (default 5 s → 10 s → 20 s → 40 s, at most 60 s).
	PollBackoff Backoff
	// DeliveryAttempts is how often a completion or failure is tried before
	// it is written to the spool (default 5).
	DeliveryAttempts int
	// DeliveryBackoff paces those attempts (default 1 s doubling to 15 s).
	DeliveryBackoff Backoff
	// SpoolPath is the local dead-letter file (JSON lines, fsync'd) for
	// outcomes the gate could not be reached for. Default:
	// <user cache dir>/asyncgate/spool-<worker id>.jsonl, or, without a
	// WorkerID, spool-key-<hash of the key>.jsonl (a worker key acts as its
	// own worker id, so one spool per worker id either way). While Run runs
	// it holds an exclusive lock (flock) on <SpoolPath>.lock: a second
	// process or Runner with the same spool gets ErrSpoolLocked.
	SpoolPath string
	// DisableSpool drops undeliverable outcomes (logged) instead.
	DisableSpool bool
	// SpoolInterval is how often the spool is retried (default 30 s); it is
	// also retried when Run starts. A pass stops at the first outcome the
	// gate cannot take now (a network error or timeout, 408, 429, 503; see
	// FlushSpool); when that answer's Retry-After is longer, the next pass
	// waits for it (at most MaxRetryAfter, plus up to 10% jitter).
	SpoolInterval time.Duration
	// ShutdownTimeout is how long in-flight tasks may run on after Run's
	// context is done (default 30 s). Then their contexts are cancelled with
	// ErrShutdown, and the leases of handlers that fail because of it are
	// released.
	ShutdownTimeout time.Duration
	// DataURIFallback lets the Runner complete with a self-contained data:
	// URI pointer (result_channel "data") when the gate refuses an inline
	// result with 400 (a gate without result channels). Results up to ~6 KB.
	DataURIFallback bool
	// SingleOutcomes sends every completion and failure by its own call.
	// By default outcomes that are ready while others are being sent go
	// together in one POST /v1/leases/batch (a lone outcome is sent at once,
	// never held back); a gate without that route (404) gets single calls.
	SingleOutcomes bool
	// Logger receives the Runner's logs (default slog.Default()). Each task's
	// lines carry task_id, lease_id and task_type.
	Logger *slog.Logger
}

// Runner leases tasks of the types it has handlers for, runs them with
// heartbeats, and reports their outcomes. Register handlers with Handle, then
// call Run.
type Runner struct {
	c    *Client
	cfg  Config
	log  *slog.Logger
	sp   *spool
	ob   *outcomeBatcher
	mu   sync.Mutex
	h    map[string]HandlerFunc
	live map[string]*lease
	// hard is closed when the shutdown grace is over: deliveries stop
	// retrying and spool at once.
	hard     chan struct{}
	hardOnce sync.Once
	running  bool
}

// NewRunner returns a Runner that talks to the gate through c.
func NewRunner(c *Client, cfg Config) *Runner {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Concurrency > 100 {
		cfg.Concurrency = 100
	}
	if cfg.PollWait == 0 {
		cfg.PollWait = 30 * time.Second
	}
	if cfg.IdleWait <= 0 {
		cfg.IdleWait = 5 * time.Second
	}
	if cfg.DeliveryAttempts <= 0 {
		cfg.DeliveryAttempts = 5
	}
	if cfg.DeliveryBackoff.Initial <= 0 {
		cfg.DeliveryBackoff.Initial = time.Second
	}
	if cfg.DeliveryBackoff.Max <= 0 {
		cfg.DeliveryBackoff.Max = 15 * time.Second
	}
	if cfg.SpoolInterval <= 0 {
		cfg.SpoolInterval = 30 * time.Second
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Runner{c: c, cfg: cfg, log: cfg.Logger, h: map[string]HandlerFunc{}, live: map[string]*lease{}, hard: make(chan struct{}), ob: newOutcomeBatcher(c)}
	r.ob.unsupported.Store(cfg.SingleOutcomes)
	if !cfg.DisableSpool {
		p := cfg.SpoolPath
		if p == "" {
			p = defaultSpoolPath(cfg.WorkerID, c.key)
		}
		if p != "" {
			r.sp = &spool{path: p}
		}
	}
	return r
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// defaultSpoolPath names the spool after the worker id, or after a hash of
// the key when the worker id is the key's own: never one file for workers
// that are different to the gate.
func defaultSpoolPath(workerID, key string) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	sum := sha256.Sum256([]byte(key))
	name := "key-" + hex.EncodeToString(sum[:8])
	if workerID != "" {
		name = unsafeName.ReplaceAllString(workerID, "_")
	}
	return filepath.Join(dir, "asyncgate", "spool-"+name+".jsonl")
}

// SpoolPath returns the spool file's path ("" when the spool is disabled).
func (r *Runner) SpoolPath() string {
	if r.sp == nil {
		return ""
	}
	return r.sp.path
}

// Handle registers the handler for a task type; the Runner leases only the
// types it has handlers for. Register before Run. The handler's result is
// reported as a success:
//   - nil: an empty JSON object, inline;
//   - Pointer or *Pointer: a result the handler stored itself;
//   - Completion or *Completion: the completion body as given;
//   - []byte: inline bytes (result_base64);
//   - json.RawMessage or any other value: inline JSON (encoding/json).
//
// Inline results are stored by the gate through the task type's result
// channel. A returned error fails the attempt: retryable unless marked with
// Fatal (a plain error is retryable). A panic is recovered and reported as a
// retryable failure (PanicError) with the stack in the failure's metadata.
func (r *Runner) Handle(taskType string, h HandlerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		panic("worker: Handle called after Run")
	}
	r.h[taskType] = h
}

// TaskTypes returns the registered task types, sorted.
func (r *Runner) TaskTypes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.h))
	for t := range r.h {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Run leases and runs tasks until ctx is done, then shuts down gracefully:
// it stops leasing, lets in-flight tasks finish for up to
// Config.ShutdownTimeout, cancels the rest (ErrShutdown) and releases their
// leases, and returns once every outcome is delivered or spooled. It returns
// nil after a shutdown asked for through ctx, or the error that stopped it
// (a key the gate refuses, a worker id it rejects).
func (r *Runner) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("worker: Run called twice")
	}
	r.running = true
	n := len(r.h)
	r.mu.Unlock()
	if n == 0 {
		return errors.New("worker: no handlers registered")
	}
	types := r.TaskTypes()
	if r.sp != nil {
		if err := r.sp.lock(); err != nil {
			return err
		}
		defer r.sp.unlock()
	}
	r.log.Info("worker starting", "worker_id", r.cfg.WorkerID, "task_types", types, "concurrency", r.cfg.Concurrency,
		"gate", r.c.BaseURL(), "spool", r.SpoolPath())

	spoolCtx, stopSpool := context.WithCancel(ctx)
	var spoolWG sync.WaitGroup
	if r.sp != nil {
		spoolWG.Add(1)
		go func() {
			defer spoolWG.Done()
			r.spoolLoop(spoolCtx)
		}()
	}

	var wg sync.WaitGroup
	err := r.leaseLoop(ctx, types, &wg)
	stopSpool()
	r.log.Info("worker stopping: no more leases; waiting for in-flight tasks", "in_flight", r.inFlight(), "grace", r.cfg.ShutdownTimeout)

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	grace := time.NewTimer(r.cfg.ShutdownTimeout)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		r.log.Warn("shutdown grace is over; canceling in-flight tasks", "in_flight", r.inFlight())
		r.hardOnce.Do(func() { close(r.hard) })
		r.mu.Lock()
		for _, l := range r.live {
			l.cancel(ErrShutdown)
		}
		r.mu.Unlock()
		<-done
	}
	spoolWG.Wait()
	r.log.Info("worker stopped")
	return err
}

func (r *Runner) inFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

// maxLeaseTypes is how many task types one lease call may name (the gate
// refuses more with 400).
const maxLeaseTypes = 50

// typeChunks splits types into lease calls' worth: at most maxLeaseTypes
// each.
func typeChunks(types []string) [][]string {
	var out [][]string
	for len(types) > maxLeaseTypes {
		out = append(out, types[:maxLeaseTypes:maxLeaseTypes])
		types = types[maxLeaseTypes:]
	}
	return append(out, types)
}

// leaseLoop asks for work while slots are free, until ctx is done or a
// permanent error. More types than one lease call may name are split into
// chunks of at most maxLeaseTypes, asked for in turn, each call
// long-polling its share of PollWait: every type is asked for at least once
// a PollWait.
func (r *Runner) leaseLoop(ctx context.Context, types []string, wg *sync.WaitGroup) error {
	slots := make(chan struct{}, r.cfg.Concurrency)
	chunks := typeChunks(types)
	wait := r.cfg.PollWait / time.Duration(len(chunks))
	next := 0 // the chunk the next lease call asks for
	fails := 0
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		n := 1
	more:
		for n < r.cfg.Concurrency && n < 100 {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		req := LeaseRequest{WorkerID: r.cfg.WorkerID, TaskTypes: chunks[next], MaxTasks: n, LeaseSeconds: r.cfg.LeaseSeconds}
		if r.cfg.PollWait > 0 {
			req.WaitSeconds = wait.Seconds()
		}
		start := time.Now()
		offers, err := r.c.Lease(ctx, req)
		for i := len(offers); i < n; i++ {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ae *APIError
			if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden || ae.Status == http.StatusBadRequest) {
				r.log.Error("the gate refuses this worker's lease calls; stopping", "err", err)
				return fmt.Errorf("worker: leasing: %w", err)
			}
			fails++
			d := retryWait(err, r.cfg.PollBackoff.Delay(fails))
			r.log.Warn("lease call failed; backing off", "err", err, "retry_in", d.Round(time.Millisecond), "failures", fails)
			if !sleep(ctx, d) {
				return nil
			}
			continue
		}
		fails = 0
		next = (next + 1) % len(chunks)
		for _, o := range offers {
			wg.Add(1)
			go func(o Offer) {
				defer wg.Done()
				defer func() { <-slots }()
				r.work(o)
			}(o)
		}
		// An empty answer that did not long-poll pauses the loop, once a
		// round of the chunks is over.
		if len(offers) == 0 && next == 0 && (r.cfg.PollWait <= 0 || time.Since(start) < wait/2) {
			if !sleep(ctx, r.cfg.IdleWait) {
				return nil
			}
		}
	}
}

// lease is one offer being worked on.
type lease struct {
	r      *Runner
	o      Offer
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time // conservative local expiry
	ttl      time.Duration
	pending  *HeartbeatRequest // progress not yet sent
	beatMu   sync.Mutex        // one heartbeat at a time
	lost     bool
	canceled bool
	// reporting is set once the handler returned: its outcome is being
	// reported (or was).
	reporting bool
	// ended is the task's state once a heartbeat was answered that the
	// task already ended (TaskFinished): heartbeats stop.
	ended string
	// progressRefused is set once the gate refused a progress report (it
	// is logged once per task).
	progressRefused bool
	nudge           chan struct{}
}

type leaseKey struct{}

func (l *lease) isLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// endedAs is the task's state when a heartbeat was answered that it
// already ended, else "".
func (l *lease) endedAs() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// work runs one offer: accept, heartbeat, handler, outcome.
func (r *Runner) work(o Offer) {
	log := r.log.With("task_id", o.Task.ID, "lease_id", o.LeaseID, "task_type", o.Task.Type, "attempt", o.Attempt)
	r.mu.Lock()
	h := r.h[o.Task.Type]
	r.mu.Unlock()
	// Every call about this lease carries the task's trace (the gate hands
	// it out with the offer), and so does the handler's context.
	bg := o.Task.traceInto(context.Background())
	if h == nil {
		log.Warn("no handler for this task type; releasing the lease")
		r.release(bg, log, o, "no handler for task type "+o.Task.Type)
		return
	}
	if !r.accept(o, log) {
		return
	}
	l := &lease{r: r, o: o, log: log, deadline: o.deadline, ttl: o.ttl, nudge: make(chan struct{}, 1)}
	if l.deadline.IsZero() {
		l.deadline = o.LeaseExpiresAt
		l.ttl = time.Until(o.LeaseExpiresAt)
	}
	l.ctx, l.cancel = context.WithCancelCause(context.WithValue(bg, leaseKey{}, l))
	defer l.cancel(nil)
	r.mu.Lock()
	r.live[o.LeaseID] = l
	select {
	case <-r.hard:
		l.cancel(ErrShutdown)
	default:
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.live, o.LeaseID)
		r.mu.Unlock()
	}()

	hbStop := make(chan struct{})
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		l.heartbeatLoop(hbStop)
	}()
	defer func() {
		close(hbStop)
		<-hbDone
	}()

	log.Info("task started")
	start := time.Now()
	val, err := r.call(l.ctx, h, &l.o.Task)
	took := time.Since(start).Round(time.Millisecond)
	l.mu.Lock()
	l.reporting = true
	l.mu.Unlock()
	cause := context.Cause(l.ctx)
	if cause == nil {
		l.flushProgress()
	}
	switch {
	case l.isLost() && l.endedAs() != "":
		log.Info("task stopped: it already ended at the gate; its outcome is not reported", "task_status", l.endedAs(), "took", took, "handler_err", err)
	case l.isLost():
		log.Warn("task stopped: the lease was lost; its outcome is not reported (the gate will lease it again)", "took", took, "handler_err", err)
	case errors.Is(cause, ErrTaskCanceled):
		log.Info("task canceled by the gate; releasing the lease", "took", took)
		r.release(bg, log, o, "canceled: cancel_requested")
	case err == nil:
		comp, cerr := completion(val)
		if cerr != nil {
			log.Error("the handler's result cannot be encoded", "err", cerr)
			r.deliverFail(l, cerr)
			return
		}
		comp.TaskID = o.Task.ID
		r.deliverComplete(l, comp, took)
	case errors.Is(cause, ErrShutdown):
		log.Info("task interrupted by shutdown; releasing the lease", "took", took, "err", err)
		r.release(bg, log, o, "worker shutting down")
	case asSnooze(err) != nil:
		se := asSnooze(err)
		log.Info("task snoozed; giving the lease back until later without using an attempt", "took", took, "for", se.Delay)
		if serr := r.snooze(bg, log, o, se); serr != nil {
			// The gate will never take this snooze: fail the task instead,
			// so its lease does not run out with no trace of why.
			log.Error("the gate refused the snooze; reporting a failure instead", "err", serr)
			r.deliverFail(l, Fatal(fmt.Errorf("the gate refused the snooze: %w", serr)))
		}
	default:
		r.deliverFail(l, err)
	}
}

// call runs the handler, turning a panic into a *PanicError.
func (r *Runner) call(ctx context.Context, h HandlerFunc, t *Task) (val any, err error) {
	defer func() {
		if p := recover(); p != nil {
			buf := make([]byte, 16<<10)
			buf = buf[:runtime.Stack(buf, false)]
			val, err = nil, &PanicError{Value: p, Stack: string(buf)}
		}
	}()
	return h(ctx, t)
}

// accept accepts the offer, retrying network errors until the lease's local
// deadline. It reports whether the work may start.
func (r *Runner) accept(o Offer, log *slog.Logger) bool {
	dl := o.deadline
	if dl.IsZero() {
		dl = o.LeaseExpiresAt
	}
	for n := 1; ; n++ {
		ctx, cancel := context.WithDeadline(o.Task.traceInto(context.Background()), dl)
		err := r.c.Accept(ctx, o.LeaseID, o.Task.ID)
		cancel()
		switch {
		case err == nil:
			return true
		case errors.Is(err, ErrLeaseLost):
			log.Warn("the offer expired before it was accepted", "err", err)
			return false
		case !Temporary(err):
			log.Error("the gate refused to accept the offer; releasing it", "err", err)
			r.release(context.Background(), log, o, "accept refused")
			return false
		}
		d := retryWait(err, r.cfg.DeliveryBackoff.Delay(n))
		if time.Now().Add(d).After(dl) {
			log.Warn("could not accept the offer before its lease ran out; the gate will lease it again", "err", err)
			return false
		}
		log.Warn("accept failed; retrying", "err", err, "retry_in", d.Round(time.Millisecond))
		select {
		case <-time.After(d):
		case <-r.hard:
			// Shutting down past its grace: the work would not start, so
			// the offer is left to expire and be leased again.
			log.Warn("shutting down; the offer is left unaccepted", "err", err)
			return false
		}
	}
}

// heartbeatLoop extends the lease at a third of its length, sends progress
// early (but at most once per progressGap), and cancels the handler when the
// lease is lost or the task canceled.
func (l *lease) heartbeatLoop(stop <-chan struct{}) {
	fails := 0
	var wait time.Duration // the last failed heartbeat's Retry-After
	var last time.Time     // when the last heartbeat was sent
	for {
		l.mu.Lock()
		ttl, deadline := l.ttl, l.deadline
		l.mu.Unlock()
		interval := heartbeatInterval(ttl)
		untilDeadline := time.Until(deadline)
		if untilDeadline <= 0 {
			l.loseLease("no heartbeat reached the gate before the lease's local expiry")
			return
		}
		if fails > 0 {
			interval = heartbeatRetry(fails, interval, untilDeadline, wait)
		}
		if !l.waitBeat(stop, interval, untilDeadline, last, progressGap(ttl), fails > 0) {
			return
		}
		last = time.Now()
		ok, err := l.beat(stop)
		if !ok {
			fails++
			wait = retryAfter(err)
			continue
		}
		fails, wait = 0, 0
		if l.isLost() || l.endedAs() != "" {
			return
		}
	}
}

// waitBeat waits until the next heartbeat is due: after interval, or, for
// progress reported meanwhile, once gap has passed since last (never while
// retrying a failed heartbeat: the retry carries the progress). It reports
// false when the loop must end (stopped, or the lease's local expiry passed).
func (l *lease) waitBeat(stop <-chan struct{}, interval, untilDeadline time.Duration, last time.Time, gap time.Duration, retrying bool) bool {
	t := time.NewTimer(interval)
	defer t.Stop()
	dl := time.NewTimer(untilDeadline)
	defer dl.Stop()
	nudge := l.nudge
	if retrying {
		nudge = nil
	}
	var early <-chan time.Time
	for {
		select {
		case <-stop:
			return false
		case <-dl.C:
			l.mu.Lock()
			extended := time.Now().Before(l.deadline) // by flushProgress meanwhile
			l.mu.Unlock()
			if extended {
				return true
			}
			l.loseLease("no heartbeat reached the gate before the lease's local expiry")
			return false
		case <-t.C:
			return true
		case <-early:
			return true
		case <-nudge:
			l.mu.Lock()
			pending := l.pending != nil
			l.mu.Unlock()
			if !pending {
				continue // progress an earlier heartbeat already carried
			}
			d := time.Until(last.Add(gap))
			if d <= 0 {
				return true
			}
			nudge = nil // the latest progress is read when the heartbeat is sent
			pt := time.NewTimer(d)
			defer pt.Stop()
			early = pt.C
		}
	}
}

// heartbeatInterval is the regular heartbeat period: a third of the lease.
func heartbeatInterval(ttl time.Duration) time.Duration {
	return max(ttl/3, 50*time.Millisecond)
}

// progressGap is the least time between two heartbeats sent early for
// Progress: max(1 s, a tenth of the lease), never longer than the regular
// interval. Progress reported faster is coalesced; the latest wins.
func progressGap(ttl time.Duration) time.Duration {
	return min(max(time.Second, ttl/10), heartbeatInterval(ttl))
}

// heartbeatRetry is the wait before retrying a failed heartbeat (after fails
// failures in a row): 250 ms doubling with every failure, at most the regular
// interval, or the failed answer's Retry-After (hint) when that is
// longer; never more than half the time left before the lease's local
// expiry (at least 50 ms), so that a retry still has time to get through.
func heartbeatRetry(fails int, interval, untilDeadline, hint time.Duration) time.Duration {
	d := 250 * time.Millisecond
	for i := 1; i < fails && d < interval; i++ {
		d *= 2
	}
	d = max(min(d, interval), hint)
	return max(min(d, untilDeadline/2), 50*time.Millisecond)
}

// beat sends one heartbeat with the latest unsent progress; it reports
// whether the gate answered, and otherwise the error. beatMu keeps it from
// running alongside flushProgress. A progress report the gate refuses (400,
// 413) is dropped and the heartbeat sent again without it: it says nothing
// about the lease.
func (l *lease) beat(stop <-chan struct{}) (bool, error) {
	l.beatMu.Lock()
	defer l.beatMu.Unlock()
	l.mu.Lock()
	sent := l.pending
	l.mu.Unlock()
	for {
		res, err := l.heartbeat(stop, sent)
		if err != nil && sent != nil && progressRefused(err) {
			l.dropProgress(sent, err)
			sent = nil
			continue
		}
		return l.beaten(stop, sent, res, err)
	}
}

// heartbeat sends one heartbeat carrying the progress of sent (none when
// nil), bounded by the lease's local expiry and cut off by stop.
func (l *lease) heartbeat(stop <-chan struct{}, sent *HeartbeatRequest) (*HeartbeatResult, error) {
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	req := HeartbeatRequest{TaskID: l.o.Task.ID, ExtendLeaseSeconds: l.r.cfg.LeaseSeconds}
	if sent != nil {
		req.ProgressPercent, req.ProgressMessage = sent.ProgressPercent, sent.ProgressMessage
	}
	ctx, cancel := context.WithDeadline(l.o.Task.traceInto(context.Background()), deadline)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return l.r.c.Heartbeat(ctx, l.o.LeaseID, req)
}

// progressRefused reports whether a heartbeat carrying progress was refused
// for it: 400 (a percent or message the gate does not take) or 413 (a
// message over its limit).
func progressRefused(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && (ae.Status == http.StatusBadRequest || ae.Status == http.StatusRequestEntityTooLarge)
}

// dropProgress forgets the progress report the gate refused (unless a newer
// one replaced it meanwhile); the first refusal of a task is logged as a
// warning, later ones at debug level.
func (l *lease) dropProgress(sent *HeartbeatRequest, err error) {
	l.mu.Lock()
	if l.pending == sent {
		l.pending = nil
	}
	first := !l.progressRefused
	l.progressRefused = true
	l.mu.Unlock()
	if first {
		l.log.Warn("the gate refused a progress report; dropping it and heartbeating without it", "err", err)
	} else {
		l.log.Debug("the gate refused a progress report; dropping it", "err", err)
	}
}

// beaten handles a heartbeat's answer (res, or err).
func (l *lease) beaten(stop <-chan struct{}, sent *HeartbeatRequest, res *HeartbeatResult, err error) (bool, error) {
	if err != nil {
		select {
		case <-stop:
			return true, nil // the task is over; nothing more to do
		default:
		}
		if st := TaskFinished(err); st != "" {
			l.taskEnded(st)
			return true, nil
		}
		if errors.Is(err, ErrLeaseLost) {
			l.loseLease(err.Error())
			return true, nil
		}
		l.mu.Lock()
		deadline := l.deadline
		l.mu.Unlock()
		l.log.Warn("heartbeat failed", "err", err, "lease_local_expiry_in", time.Until(deadline).Round(time.Millisecond))
		if ae := (*APIError)(nil); errors.As(err, &ae) && !Temporary(err) {
			// A refusal of the heartbeat itself that is not lease_expired
			// (400, 403): the lease cannot be kept, so the work must stop.
			l.loseLease(err.Error())
			return true, nil
		}
		return false, err
	}
	l.mu.Lock()
	if res.ttl > 0 {
		l.ttl, l.deadline = res.ttl, res.deadline
	}
	if l.pending == sent {
		l.pending = nil
	}
	first := res.CancelRequested && !l.canceled
	if first {
		l.canceled = true
	}
	l.mu.Unlock()
	if first {
		l.log.Info("the gate asks to cancel the task; canceling the handler")
		l.cancel(ErrTaskCanceled)
	}
	return true, nil
}

// flushProgress sends the handler's last progress, if no heartbeat carried
// it yet, before the outcome is reported: progress held back by the gap is
// not lost when the task ends.
func (l *lease) flushProgress() {
	l.mu.Lock()
	pending, lost, deadline := l.pending != nil, l.lost, l.deadline
	l.mu.Unlock()
	if pending && !lost && time.Now().Before(deadline) {
		l.beat(nil)
	}
}

// taskEnded follows a heartbeat answered that the task already ended (st,
// its state): the gate told the worker that held the lease, so it is not a
// lease lost to another worker. Heartbeats stop. With the handler's outcome
// being reported (or reported already: an answer lost, a gate restarted)
// that is all; with the handler still running, it is canceled and its
// outcome not reported, as the task needs none.
func (l *lease) taskEnded(st string) {
	l.mu.Lock()
	first := l.ended == ""
	l.ended = st
	running := !l.reporting
	if running {
		l.lost = true
	}
	l.mu.Unlock()
	if !first {
		return
	}
	if !running {
		l.log.Info("the task already ended at the gate; heartbeats stop", "task_status", st)
		return
	}
	l.log.Info("the task already ended at the gate; canceling the handler", "task_status", st)
	l.cancel(ErrLeaseLost)
}

func (l *lease) loseLease(why string) {
	l.mu.Lock()
	first := !l.lost
	l.lost = true
	l.mu.Unlock()
	if first {
		l.log.Warn("lease lost; canceling the handler (KLIS-3 §6.1)", "reason", why)
		l.cancel(ErrLeaseLost)
	}
}

// Progress reports a task's progress from inside its handler: percent
// (0..100, or negative for none) and a message. It is sent with an early
// heartbeat, but early heartbeats are at least max(1 s, a tenth of the
// lease) apart (never more than the regular third of the lease): reports
// made faster are coalesced and the latest one is sent when the gap is over.
// Progress not yet sent when the handler returns goes with one last
// heartbeat before the outcome. Calling it in a tight loop is cheap. The
// message is made one the gate takes: a NUL character (or invalid UTF-8)
// is written U+FFFD, and a message longer than the gate's 4096 bytes is cut
// there, on a character boundary. Should the gate still refuse a report,
// it is dropped (logged) and the lease kept. It returns an error when ctx
// is not a handler's context or percent is over 100.
func Progress(ctx context.Context, percent float64, msg string) error {
	l, _ := ctx.Value(leaseKey{}).(*lease)
	if l == nil {
		return errors.New("worker: Progress needs the context of a task handler")
	}
	if percent > 100 || percent != percent {
		return fmt.Errorf("worker: progress percent %v is over 100", percent)
	}
	p := &HeartbeatRequest{ProgressMessage: progressMessage(msg)}
	if percent >= 0 {
		p.ProgressPercent = &percent
	}
	l.mu.Lock()
	l.pending = p
	l.mu.Unlock()
	select {
	case l.nudge <- struct{}{}:
	default:
	}
	return nil
}

// maxProgressMessage is the longest progress message the gate takes, in
// bytes of UTF-8.
const maxProgressMessage = 4096

// progressMessage is msg as the gate takes it: valid UTF-8 (each run of
// invalid bytes written U+FFFD), NUL written U+FFFD, and cut to at most
// maxProgressMessage bytes on a character boundary.
func progressMessage(msg string) string {
	return cutUTF8(noNUL(strings.ToValidUTF8(msg, "\uFFFD")), maxProgressMessage)
}

// cutUTF8 cuts the valid UTF-8 string s to at most n bytes without
// splitting a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Lease returns the offer a handler's context belongs to.
func Lease(ctx context.Context) (Offer, bool) {
	l, _ := ctx.Value(leaseKey{}).(*lease)
	if l == nil {
		return Offer{}, false
	}
	return l.o, true
}

// DependencyResult reads, in a handler, the payload of task depID, one of
// the tasks the handler's task waited on (Task.Dependencies), under the
// handler's lease (Client.DependencyResult). It returns an error when ctx
// is not a handler's context.
func DependencyResult(ctx context.Context, depID string) ([]byte, error) {
	l, _ := ctx.Value(leaseKey{}).(*lease)
	if l == nil {
		return nil, errors.New("worker: DependencyResult needs the context of a task handler")
	}
	return l.r.c.DependencyResult(ctx, l.o.LeaseID, depID)
}

// Logger returns the Runner's logger with the task's task_id, lease_id,
// task_type and attempt, or slog.Default() outside a handler.
func Logger(ctx context.Context) *slog.Logger {
	if l, _ := ctx.Value(leaseKey{}).(*lease); l != nil {
		return l.log
	}
	return slog.Default()
}

// release gives the lease back, retrying network errors a few times; a
// lease that cannot be released expires on its own.
func (r *Runner) release(ctx context.Context, log *slog.Logger, o Offer, reason string) {
	for n := 1; n <= 3; n++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := r.c.Release(cctx, o.LeaseID, o.Task.ID, reason)
		cancel()
		if err == nil {
			return
		}
		if !Temporary(err) || n == 3 {
			log.Warn("could not release the lease; it will expire on its own", "err", err)
			return
		}
		select {
		case <-r.hard:
		case <-time.After(retryWait(err, r.cfg.DeliveryBackoff.Delay(n))):
		}
	}
}

// snooze gives the lease back until se.Delay from now (at most the gate's
// bound), retrying network errors a few times; a lease that cannot be
// snoozed expires on its own (and the task is offered again after the
// type's requeue delay). It returns the gate's refusal when it answered
// 400: that snooze will never be taken.
func (r *Runner) snooze(ctx context.Context, log *slog.Logger, o Offer, se *SnoozeError) error {
	req := SnoozeRequest{TaskID: o.Task.ID, Seconds: snoozeSeconds(se.Delay), Reason: snoozeReason(se.Reason)}
	for n := 1; n <= 3; n++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := r.c.Snooze(cctx, o.LeaseID, req)
		cancel()
		if err == nil {
			return nil
		}
		if ae := (*APIError)(nil); errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
			return err
		}
		if !Temporary(err) || n == 3 {
			log.Warn("could not snooze the lease; it will expire on its own", "err", err)
			return nil
		}
		select {
		case <-r.hard:
		case <-time.After(retryWait(err, r.cfg.DeliveryBackoff.Delay(n))):
		}
	}
	return nil
}

// snoozeReason is reason as the gate takes it: NUL written U+FFFD and cut
// to 1000 characters.
func snoozeReason(reason string) string {
	reason = noNUL(strings.ToValidUTF8(reason, "\uFFFD"))
	if utf8.RuneCountInString(reason) <= 1000 {
		return reason
	}
	return string([]rune(reason)[:1000])
}

// deliverComplete reports a success with retries, falling back to a data:
// URI when allowed, to a fatal failure when the gate refuses the result for
// good, and to the spool when the gate cannot be reached.
func (r *Runner) deliverComplete(l *lease, comp Completion, took time.Duration) {
	triedFallback := false
	err := r.deliver(l, func(ctx context.Context) error {
		out := r.ob.send(ctx, OutcomeEntry{LeaseID: l.o.LeaseID, Complete: &comp})
		res, err := out.Complete, out.Err
		if err == nil {
			l.log.Info("task completed", "took", took, "receipt_id", res.ReceiptID, "result_channel", res.ResultChannel,
				"result_pointer", truncate(res.ResultPointer, 120), "duplicate", res.Duplicate)
		}
		var ae *APIError
		if err != nil && r.cfg.DataURIFallback && !triedFallback && errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
			if fb, ok := dataURIFallback(comp); ok {
				triedFallback = true
				l.log.Info("the gate refused the inline result; completing with a data: URI pointer instead", "err", err)
				comp = fb
				return errRetryNow
			}
		}
		return err
	}, "complete", comp)
	if err != nil && !Temporary(err) && !errors.Is(err, ErrLeaseLost) && !errors.Is(err, errSpooled) {
		// The gate will never take this result: fail the attempt instead so
		// the task does not sit leased until its lease runs out.
		l.log.Error("the gate refused the result; reporting a failure instead", "err", err)
		r.deliverFail(l, Fatal(fmt.Errorf("the gate refused the result: %w", err)))
	}
}

// deliverFail reports a failed attempt with retries and the spool.
func (r *Runner) deliverFail(l *lease, herr error) {
	// The gate refuses a NUL character in any string (as PostgreSQL keeps
	// none in text); an error's text may hold one, and must still reach it.
	f := Failure{TaskID: l.o.Task.ID, ErrorMessage: noNUL(herr.Error()), Retryable: IsRetryable(herr)}
	var pe *PanicError
	if errors.As(herr, &pe) {
		f.Metadata, _ = json.Marshal(map[string]any{"panic": noNUL(fmt.Sprint(pe.Value)), "stack": noNUL(truncate(pe.Stack, 8000))})
	}
	if len(f.ErrorMessage) > 8000 {
		f.ErrorMessage = f.ErrorMessage[:8000]
	}
	_ = r.deliver(l, func(ctx context.Context) error {
		out := r.ob.send(ctx, OutcomeEntry{LeaseID: l.o.LeaseID, Fail: &f})
		res, err := out.Fail, out.Err
		if err == nil {
			l.log.Warn("task failed", "err", herr, "retryable", f.Retryable, "status", res.Status, "will_retry", res.WillRetry,
				"retry_at", res.RetryScheduledAt, "duplicate", res.Duplicate)
		}
		return err
	}, "fail", f)
}

var (
	errRetryNow = errors.New("retry at once")
	errSpooled  = errors.New("spooled")
)

// deliver runs send until it succeeds, fails for good, or the attempts are
// used up, and then spools body.
func (r *Runner) deliver(l *lease, send func(context.Context) error, kind string, body any) error {
	var err error
	for n := 1; n <= r.cfg.DeliveryAttempts; n++ {
		ctx, cancel := context.WithTimeout(l.o.Task.traceInto(context.Background()), 30*time.Second)
		err = send(ctx)
		cancel()
		if errors.Is(err, errRetryNow) {
			n--
			continue
		}
		switch {
		case err == nil:
			return nil
		case TaskFinished(err) != "":
			l.log.Info("the task already ended at the gate; the outcome is not sent again", "kind", kind, "task_status", TaskFinished(err))
			return err
		case errors.Is(err, ErrLeaseLost):
			l.log.Warn("the gate refused the outcome: the lease is no longer held; the task will be leased again", "kind", kind, "err", err)
			return err
		case !Temporary(err):
			l.log.Error("the gate refused the outcome", "kind", kind, "err", err)
			return err
		}
		if st := l.endedAs(); st != "" {
			l.log.Info("the task already ended at the gate; the outcome is not sent again", "kind", kind, "task_status", st, "err", err)
			return nil
		}
		if l.isLost() {
			l.log.Warn("the lease was lost while delivering the outcome; it is dropped", "kind", kind, "err", err)
			return err
		}
		if n == r.cfg.DeliveryAttempts {
			break
		}
		d := retryWait(err, r.cfg.DeliveryBackoff.Delay(n))
		l.log.Warn("could not deliver the outcome; retrying", "kind", kind, "err", err, "retry_in", d.Round(time.Millisecond), "attempt", n)
		select {
		case <-r.hard:
			n = r.cfg.DeliveryAttempts // shutting down: spool now
		case <-time.After(d):
		}
	}
	if r.sp == nil {
		l.log.Error("could not deliver the outcome and the spool is disabled; it is lost (the lease will expire and the task be redone)", "kind", kind, "err", err)
		return err
	}
	raw, _ := json.Marshal(body)
	e := spoolEntry{Kind: kind, LeaseID: l.o.LeaseID, TaskID: l.o.Task.ID, TaskType: l.o.Task.Type, Body: raw, SpooledAt: time.Now().UTC()}
	if serr := r.sp.add(e); serr != nil {
		l.log.Error("could not deliver the outcome nor spool it", "kind", kind, "err", err, "spool_err", serr)
		return err
	}
	l.log.Warn("could not deliver the outcome; spooled it for later", "kind", kind, "err", err, "spool", r.sp.path)
	return errSpooled
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// spoolLoop retries the spool at start and then every SpoolInterval, or
// after the Retry-After of the answer that stopped the last pass when that
// is longer (at most MaxRetryAfter, plus up to 10% jitter).
func (r *Runner) spoolLoop(ctx context.Context) {
	for {
		_, _, busy, err := r.flushSpool(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("spool retry failed", "err", err)
		}
		if !sleep(ctx, retryWait(busy, r.cfg.SpoolInterval)) {
			return
		}
	}
}

// FlushSpool makes one pass over the spool, delivering the spooled outcomes
// in order. Delivered ones, and ones the gate refuses for good (a lease
// that expired meanwhile: the task was leased again), leave the spool. The
// pass stops at the first one that fails because the gate is unreachable
// or busy (a network error or timeout, a 408, 429 or 503 answer): that one
// and all after it stay spooled for the next pass, as they do when ctx
// ends before the gate answers one. One that fails with another 5xx (its
// result channel down, 502 or 504; a 500) stays spooled and the pass goes
// on. It returns how many it delivered
// and how many of the outcomes it found are still spooled.
func (r *Runner) FlushSpool(ctx context.Context) (delivered, remaining int, err error) {
	delivered, remaining, _, err = r.flushSpool(ctx)
	return delivered, remaining, err
}

// gateBusy reports whether err says the whole gate cannot take outcomes
// now: a network error or timeout, or a 408, 429 or 503 answer. Other 5xx
// answers (a result channel down or slow, 502 and 504; a 500) may concern
// one outcome only.
func gateBusy(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return Temporary(err)
	}
	return ae.Status == http.StatusRequestTimeout || ae.Status == http.StatusTooManyRequests || ae.Status == http.StatusServiceUnavailable
}

// flushSpool is FlushSpool; it also returns the temporary error that
// stopped the pass (nil when none did), whose Retry-After the next pass
// waits for.
func (r *Runner) flushSpool(ctx context.Context) (delivered, remaining int, busy, err error) {
	if r.sp == nil {
		return 0, 0, nil, nil
	}
	if !r.sp.locked() {
		if err := r.sp.lock(); err != nil {
			return 0, 0, nil, err
		}
		defer r.sp.unlock()
	}
	entries, bad, err := r.sp.load()
	if err != nil {
		return 0, 0, nil, err
	}
	if bad > 0 {
		r.log.Warn("spool: skipped lines that do not parse", "count", bad, "spool", r.sp.path)
	}
	if len(entries) == 0 {
		return 0, 0, nil, nil
	}
	done := map[string]bool{}
	for i, e := range entries {
		if ctx.Err() != nil {
			break
		}
		log := r.log.With("task_id", e.TaskID, "lease_id", e.LeaseID, "task_type", e.TaskType, "kind", e.Kind)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var derr error
		switch e.Kind {
		case "complete":
			var c Completion
			if derr = json.Unmarshal(e.Body, &c); derr == nil {
				var res *CompleteResult
				if res, derr = r.c.Complete(cctx, e.LeaseID, c); derr == nil {
					log.Info("spool: delivered a completion", "receipt_id", res.ReceiptID, "duplicate", res.Duplicate, "spooled_at", e.SpooledAt)
				}
			}
		case "fail":
			var f Failure
			if derr = json.Unmarshal(e.Body, &f); derr == nil {
				var res *FailResult
				if res, derr = r.c.Fail(cctx, e.LeaseID, f); derr == nil {
					log.Info("spool: delivered a failure", "status", res.Status, "duplicate", res.Duplicate, "spooled_at", e.SpooledAt)
				}
			}
		}
		cancel()
		if derr != nil && ctx.Err() != nil {
			// The pass was stopped (Run's shutdown) before the gate
			// answered: nothing says the outcome was delivered or refused.
			break
		}
		if gateBusy(derr) {
			// The gate is unreachable or busy: sending the rest now would
			// only add to its load.
			busy = derr
			log.Warn("spool: could not deliver a spooled outcome; it and the rest stay for the next pass",
				"err", derr, "staying", len(entries)-i)
			break
		}
		if Temporary(derr) {
			// An answer about this outcome (its result channel down or
			// slow: 502, 504; a 500): it stays, the rest go on.
			log.Warn("spool: could not deliver a spooled outcome; it stays for the next pass", "err", derr)
			continue
		}
		if derr == nil {
			delivered++
		} else {
			log.Warn("spool: the gate refused a spooled outcome; dropping it (the task is leased again or already settled)", "err", derr)
		}
		done[e.key()] = true
	}
	if len(done) > 0 {
		if err := r.sp.remove(done); err != nil {
			return delivered, len(entries), busy, err // nothing left the spool
		}
	}
	return delivered, len(entries) - len(done), busy, nil
}

// noNUL is s with every NUL character written U+FFFD, which the gate takes.
func noNUL(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }
