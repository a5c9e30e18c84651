package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// GatePrincipal is the principal the gate itself signs receipts as.
const GatePrincipal = "asyncgate"

// Roles of an Actor.
const (
	RoleAdmin  = "admin"
	RoleAgent  = "agent"
	RoleWorker = "worker"
)

// Actor is who is calling: a tenant, a principal (agent name or worker id) and a role.
type Actor struct {
	Tenant    string `json:"tenant"`
	Principal string `json:"principal"`
	Role      string `json:"role"`
}

// Plugins resolves the per-task-type plugins. Any method may return nil for
// "none configured"; the engine then uses its built-in default.
type Plugins interface {
	// Policy returns the retry policy configured for a task type.
	Policy(tt *host.TaskType) (host.RetryPolicy, error)
	// Validators returns the params validators configured for a task type.
	Validators(tt *host.TaskType) ([]host.Validator, error)
	// Channel returns a result channel by name.
	Channel(name string) (host.Channel, error)
}

// EventKind names something the engine did, for metrics.
type EventKind string

// Event kinds reported to Config.OnEvent.
const (
	EvEnqueued     EventKind = "enqueued"
	EvLeased       EventKind = "leased"
	EvAccepted     EventKind = "accepted"
	EvCompleted    EventKind = "completed"
	EvFailed       EventKind = "failed"
	EvRetried      EventKind = "retried"
	EvDeadLettered EventKind = "dead_lettered"
	EvLeaseExpired EventKind = "lease_expired"
	EvReleased     EventKind = "released"
	EvSnoozed      EventKind = "snoozed"
	EvCanceled     EventKind = "canceled"
	EvReceipt      EventKind = "receipt"
	EvPolicyFault  EventKind = "policy_fault"
)

// Event is reported after the transaction that caused it committed.
type Event struct {
	Kind     EventKind
	Tenant   string
	TaskType string
	WorkerID string
	// Duration is the time from lease to completion for EvCompleted and
	// EvFailed, and from enqueue to lease for EvLeased.
	Duration time.Duration
	Detail   string
}

// Config configures an Engine. Only Store is required.
type Config struct {
	Store  store.Store
	Clock  host.Clock   // default host.SystemClock
	Logger *slog.Logger // default slog.Default()
	// MaxLeaseSeconds caps every lease grant and heartbeat extension (default 3600).
	MaxLeaseSeconds int
	// MaxWaiters is the most tasks that may wait on one unfinished task
	// (default host.MaxWaiters): it bounds the settling one terminal
	// write does in its transaction.
	MaxWaiters int
	// MaxDependencyDepth is the deepest a chain of waiting tasks may be
	// (default host.MaxDependencyDepth): it bounds the depth of the
	// cascade one terminal write settles.
	MaxDependencyDepth int
	// SettleBudget is how many waiters one transaction settles before it
	// leaves the rest of a dependency cascade to the drainer
	// (settlements.go; default DefaultSettleBudget; negative: no bound,
	// the whole cascade in the transaction of the end that started it).
	// The drainer runs on a started engine (Start).
	SettleBudget int
	// ExpiryJitter is the most random delay added to the requeue delay after a
	// lease expires, so expiries don't storm (default 3 s; negative: none).
	ExpiryJitter time.Duration
	// SweepInterval is how often Run looks for expired leases (default 1 s).
	SweepInterval time.Duration
	// MaxWait caps a long-poll (default 30 s).
	MaxWait time.Duration
	// FallbackPoll is how long a parked long-poll or resource waiter waits
	// for a wake-up before it looks again on its own (default 1 s). The
	// wake-ups are hints (a notification may be lost with its connection,
	// a task becomes ready by time alone), so this bounds how late such
	// work is found.
	FallbackPoll time.Duration
	// DefaultPolicy decides failures of task types without a policy plugin
	// (default host.ExponentialBackoff{}).
	DefaultPolicy host.RetryPolicy
	// Plugins resolves per-task-type plugins (optional).
	Plugins Plugins
	// OnEvent, if set, is called after each committed change (keep it fast).
	OnEvent func(Event)
	// TaskTypeTTL is how long task types are cached (default 2 s). Writes through
	// this engine invalidate the cache at once; TTL bounds staleness across hosts.
	TaskTypeTTL time.Duration
	// MaxResultGets bounds result fetches that hold a whole payload in memory
	// (a channel's Get; default DefaultMaxResultGets).
	MaxResultGets int
	// MaxResultStreams bounds result fetches streamed from their channel
	// (default DefaultMaxResultStreams).
	MaxResultStreams int
	// ResultQueueWait is how long a fetch waits for a slot before it is
	// answered busy (default DefaultResultQueueWait).
	ResultQueueWait time.Duration
	// ResourceLeases tunes resource leases (KLIS-3; zero value: the defaults).
	ResourceLeases ResourceLeaseConfig
	// Delivery configures the inbox, retention and the outbox (delivery.go).
	Delivery DeliveryConfig
	// ScheduleTick is how often the firer looks for due schedules
	// (schedulefire.go; default 500 ms; negative: no firer on this
	// engine, tests call FireSchedules).
	ScheduleTick time.Duration
	// MaxSchedulesPerOwner caps the schedules one principal owns (default
	// host.MaxSchedulesPerOwner): a schedule outlives its owner's requests
	// and enqueues on its own, so an agent must not make them without
	// bound.
	MaxSchedulesPerOwner int
}

// Engine is the lease engine and receipt ledger. It is safe for concurrent use.
type Engine struct {
	st store.Store
	// fireDefer holds the schedules this host's firer set aside
	// (firedefer.go).
	fireDefer fireDeferrals
	// onKeysRevoked is OnKeysRevoked's function.
	onKeysRevoked atomic.Pointer[func()]
	leases        *leaseCache // tasks leased here, by lease id
	clock         host.Clock
	log           *slog.Logger
	cfg           Config
	policy        host.RetryPolicy
	waiters       *waiters
	// unhook takes the engine's ready hook off its store (store.ReadyHooker).
	unhook func()
	types  *typeCache
	pauses *pauseCache
	// waited are the tasks this engine's enqueues marked as waited on
	// (waitedon.go).
	waited waitedOn
	// noDeps are tasks this engine enqueued without an after list: a lease
	// offering only such tasks skips the read of their dependencies'
	// outcomes (dependencyOutcomes). A hint of the same shape as waited: a
	// task missing from it (enqueued on another host, or forgotten when
	// the set started again) pays the read, which finds nothing.
	noDeps waitedOn

	getSlots    slots // result fetches held whole in memory
	streamSlots slots // result fetches streamed from their channel

	outboxWake chan struct{} // wakes the outbox dispatcher (delivery)
	emails     emailBudget   // send_email's budgets (emaillimit.go)
	settleWake chan struct{} // wakes the settlement drainer (settlements.go)
	settleHeld settleHolds   // pending settlements that failed alone, backing off (settlements.go)

	seenMu sync.Mutex
	seen   map[string]time.Time // worker key -> last recorded sighting

	rlState resourceLeases // resource leases (KLIS-3)

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// MaxLeaseSecondsLimit is the most Config.MaxLeaseSeconds may be, whatever
// the configuration allows: a year keeps every lease expiry far from the
// range of time.Duration.
const MaxLeaseSecondsLimit = 366 * 24 * 3600

// New returns an Engine over cfg.Store.
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil {
		return nil, errors.New("engine: Config.Store is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = host.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxLeaseSeconds <= 0 {
		cfg.MaxLeaseSeconds = 3600
	}
	if cfg.MaxLeaseSeconds > MaxLeaseSecondsLimit {
		// now + a lease this long would overflow time.Duration (or come
		// close): every lease would expire before it was granted.
		return nil, fmt.Errorf("engine: MaxLeaseSeconds %d is over %d (a year)", cfg.MaxLeaseSeconds, MaxLeaseSecondsLimit)
	}
	if cfg.ExpiryJitter == 0 {
		cfg.ExpiryJitter = 3 * time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Second
	}
	if cfg.FallbackPoll <= 0 {
		cfg.FallbackPoll = time.Second
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 30 * time.Second
	}
	if cfg.DefaultPolicy == nil {
		cfg.DefaultPolicy = host.ExponentialBackoff{}
	}
	if cfg.TaskTypeTTL <= 0 {
		cfg.TaskTypeTTL = 2 * time.Second
	}
	if cfg.MaxDependencyDepth <= 0 {
		cfg.MaxDependencyDepth = host.MaxDependencyDepth
	}
	if cfg.MaxWaiters <= 0 {
		cfg.MaxWaiters = host.MaxWaiters
	}
	if cfg.SettleBudget == 0 {
		cfg.SettleBudget = DefaultSettleBudget
	}
	if cfg.MaxSchedulesPerOwner <= 0 {
		cfg.MaxSchedulesPerOwner = host.MaxSchedulesPerOwner
	}
	if cfg.ScheduleTick == 0 {
		cfg.ScheduleTick = 500 * time.Millisecond
	}
	if cfg.MaxResultGets <= 0 {
		cfg.MaxResultGets = DefaultMaxResultGets
	}
	if cfg.MaxResultStreams <= 0 {
		cfg.MaxResultStreams = DefaultMaxResultStreams
	}
	if cfg.ResultQueueWait <= 0 {
		cfg.ResultQueueWait = DefaultResultQueueWait
	}
	e := &Engine{leases: newLeaseCache(),
		st: cfg.Store, clock: cfg.Clock, log: cfg.Logger, cfg: cfg,
		policy:  cfg.DefaultPolicy,
		waiters: newWaiters(),
		seen:    map[string]time.Time{},
		stop:    make(chan struct{}),

		outboxWake: make(chan struct{}, 1),
		settleWake: make(chan struct{}, 1),

		getSlots:    make(slots, cfg.MaxResultGets),
		streamSlots: make(slots, cfg.MaxResultStreams),
	}
	e.types = newTypeCache(e)
	e.pauses = newPauseCache()
	if h, ok := cfg.Store.(store.ReadyHooker); ok {
		// Waiters the store made ready at its batch's end, not in the
		// update's answer (deliveryTx.settleWaiters): wake their long-polls.
		e.unhook = h.AddReadyHook(func(tenant, taskType string) { e.waiters.wake(tenant, taskType, 1) })
	}
	return e, nil
}

// Store returns the engine's store.
func (e *Engine) Store() store.Store { return e.st }

// Clock returns the engine's clock.
func (e *Engine) Clock() host.Clock { return e.clock }

// Start runs the expiry sweeper, the settlement drainer and, when the store supports it, the cross-host
// wake-up listener, until Close.
func (e *Engine) Start() {
	e.wg.Add(1)
	go e.sweepLoop()
	e.wg.Add(1)
	go e.settleLoop()
	if e.cfg.ScheduleTick > 0 {
		e.wg.Add(1)
		go e.scheduleLoop()
	}
	e.startDelivery()
	if n, ok := e.st.(store.Notifier); ok {
		e.wg.Add(1)
		go e.listen(n)
	}
}

// listen forwards cross-host wake-ups to local long-polls, subscribing again
// with backoff whenever the subscription fails or ends.
func (e *Engine) listen(n store.Notifier) {
	defer e.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := n.Subscribe(ctx)
		if err == nil {
			backoff = 100 * time.Millisecond
			e.forward(ch)
		} else {
			e.log.Warn("cross-host wake-ups unavailable; retrying", "err", err, "in", backoff)
		}
		cancel()
		select {
		case <-e.stop:
			return
		case <-time.After(backoff):
		}
		if backoff < 10*time.Second {
			backoff *= 2
		}
	}
}

func (e *Engine) forward(ch <-chan string) {
	for {
		select {
		case <-e.stop:
			return
		case tenant, ok := <-ch:
			if !ok {
				return
			}
			if tenant == store.NotifyEveryone {
				e.waiters.wakeEveryone() // notifications were missed
				e.rl().wake()
				e.keysRevoked() // a revocation among them, maybe
				continue
			}
			if tenant == store.KeysRevokedNotice {
				e.keysRevoked()
				continue
			}
			if e.forwardResourceNotice(tenant) {
				continue
			}
			if t, typ, n, ok := store.ParseReofferNotice(tenant); ok {
				e.waiters.wake(t, typ, n)
				continue
			}
			e.waiters.wakeAll(tenant)
		}
	}
}

// OnKeysRevoked has fn called when another host revoked an API key
// (store.KeysRevokedNotice), and whenever such notices may have been
// missed: the doors' key cache is dropped with it (auth.Authenticator's
// Forget). Only stores whose Notifier reaches other hosts tell.
func (e *Engine) OnKeysRevoked(fn func()) { e.onKeysRevoked.Store(&fn) }

func (e *Engine) keysRevoked() {
	if fn := e.onKeysRevoked.Load(); fn != nil {
		(*fn)()
	}
}

// Close stops the background loops and wakes every long-poll. It does not close the store.
func (e *Engine) Close() {
	e.stopOnce.Do(func() {
		close(e.stop)
		if e.unhook != nil {
			e.unhook()
		}
	})
	e.waiters.wakeEveryone()
	e.wg.Wait()
	e.rl().shutdown()
}

func (e *Engine) sweepLoop() {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			if _, err := e.Sweep(context.Background()); err != nil {
				e.log.Warn("lease sweep failed", "err", err)
			}
			if _, err := e.SweepResourceLeases(context.Background()); err != nil {
				e.log.Warn("resource lease sweep failed", "err", err)
			}
		}
	}
}

func (e *Engine) emit(ev Event) {
	if e.cfg.OnEvent != nil {
		e.cfg.OnEvent(ev)
	}
}

func (e *Engine) now() time.Time { return e.clock.Now().UTC().Truncate(time.Microsecond) }

// storeErr turns driver errors that are not domain errors into
// database_unavailable, so callers see a 503 and retry.
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	var he *host.Error
	if errors.As(err, &he) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return host.WrapError(host.CodeDatabaseUnavailable, err, "the store failed: "+err.Error())
}

// update runs fn in one store transaction on a deliveryTx (delivery.go), so
// the receipts fn appends bring their inbox items and outbox entries with
// them, and maps driver failures to database_unavailable.
func (e *Engine) update(ctx context.Context, fn func(store.Tx) error) error {
	var out deliveryOut
	err := e.st.Update(ctx, e.withDelivery(fn, &out))
	if err == nil {
		e.afterCommit(&out)
	}
	return storeErr(err)
}

func (e *Engine) view(ctx context.Context, fn func(store.Reader) error) error {
	return storeErr(e.st.View(ctx, fn))
}

func ptr[T any](v T) *T { return &v }

// appendReceipt validates r, appends it, opens its obligation if its type
// creates one, and terminates each parent it can terminate. parentTypes gives
// the types of the parents the caller means it to terminate; a parent not in
// it is only cited, never looked up or terminated.
func appendReceipt(ctx context.Context, tx store.Tx, r *host.Receipt, parentTypes map[string]host.ReceiptType) error {
	if r.ID == "" {
		r.ID = host.NewID(host.PrefixReceipt)
	}
	if err := r.Validate(); err != nil {
		return err
	}
	return appendValid(ctx, tx, r, parentTypes)
}

// appendValid is appendReceipt for a receipt already validated outside the
// store's writer (Validate parses the body; the single writer should not).
func appendValid(ctx context.Context, tx store.Tx, r *host.Receipt, parentTypes map[string]host.ReceiptType) error {
	if err := tx.AppendReceipt(ctx, r); err != nil {
		return err
	}
	if r.Type.CreatesObligation() {
		if err := tx.OpenObligation(ctx, host.Obligation{
			ReceiptID: r.ID, Tenant: r.Tenant, Type: r.Type, Obligor: r.From, Obligee: r.To,
			TaskID: r.TaskID, CreatedAt: r.CreatedAt, Seq: r.Seq,
		}); err != nil {
			return err
		}
	}
	for _, p := range r.Parents {
		pt, ok := parentTypes[p]
		if !ok {
			continue
		}
		if r.Type.Terminates(pt) {
			if err := tx.Terminate(ctx, r.Tenant, p, r.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// taskParents returns the receipts a terminal receipt of a task answers: its
// assignment and, when accepted, the current attempt's acceptance.
func taskParents(t *host.Task) ([]string, map[string]host.ReceiptType) {
	ps := []string{}
	types := map[string]host.ReceiptType{}
	if t.AssignReceipt != "" {
		ps = append(ps, t.AssignReceipt)
		types[t.AssignReceipt] = host.ReceiptAssigned
	}
	if t.AcceptReceipt != "" {
		ps = append(ps, t.AcceptReceipt)
		types[t.AcceptReceipt] = host.ReceiptAccepted
	}
	return ps, types
}

// acceptParents returns only the current attempt's acceptance (or, when the
// offer was never accepted, the assignment, which the receipt then merely cites).
func acceptParents(t *host.Task) ([]string, map[string]host.ReceiptType) {
	if t.AcceptReceipt != "" {
		return []string{t.AcceptReceipt}, map[string]host.ReceiptType{t.AcceptReceipt: host.ReceiptAccepted}
	}
	return []string{t.AssignReceipt}, map[string]host.ReceiptType{t.AssignReceipt: host.ReceiptAssigned}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with marshalable values
	}
	return b
}

func (e *Engine) jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(max)))
}

// clearLease resets the current attempt's fields when a task leaves leased.
func clearLease(t *host.Task) {
	// Progress is the running lease's: a later lease's worker must not be
	// shown as the writer of an earlier one's words (the task's progress
	// list keeps every report with its lease).
	t.ProgressPercent = nil
	t.ProgressMessage = ""
	t.WorkerID = ""
	t.LeasedAt = nil
	t.LeaseExpiresAt = nil
	t.LeaseSeconds = 0
	t.AcceptedAt = nil
	t.AcceptReceipt = ""
	t.CancelRequested = false
}
