package host

import (
	"encoding/json"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// TaskState is where a task is in its lifecycle.
type TaskState string

// Task states. Delayed starts, retries and snoozes are stored as StateQueued
// with a future AvailableAt; every view of a task (reads, lists, stats,
// metrics, the dashboard) shows them as StateScheduled until then.
const (
	// StateWaiting is a task enqueued with dependencies (after) whose rule
	// is not met yet: it is never offered, and becomes queued (or canceled)
	// in the transaction that settles its last needed dependency.
	StateWaiting TaskState = "waiting"
	StateQueued  TaskState = "queued"
	// StateScheduled is a queued task that is not offered before its
	// AvailableAt. It is derived when a task is read (Presented), never
	// stored: the transition to ready needs no write.
	StateScheduled  TaskState = "scheduled"
	StateLeased     TaskState = "leased"
	StateSucceeded  TaskState = "succeeded"
	StateCanceled   TaskState = "canceled"
	StateDeadLetter TaskState = "dead_letter"
	// StateArchived is a finished task past its retention: its payload was
	// purged through its channel; the task row and its receipts stay.
	StateArchived TaskState = "archived"
)

// Terminal reports whether no transition leaves s (redrive aside, which is an
// operator's explicit act on a dead letter).
func (s TaskState) Terminal() bool {
	return s == StateSucceeded || s == StateCanceled || s == StateDeadLetter || s == StateArchived
}

// CountedStates are the states queue stats count tasks in, in the order a
// task passes through them: stats and metrics show each, 0 included, so a
// state whose last task left reads 0 rather than vanishing.
var CountedStates = []TaskState{StateWaiting, StateQueued, StateScheduled, StateLeased, StateSucceeded, StateCanceled, StateDeadLetter}

// Valid reports whether s is a known state.
func (s TaskState) Valid() bool {
	switch s {
	case StateWaiting, StateQueued, StateScheduled, StateLeased, StateSucceeded, StateCanceled, StateDeadLetter, StateArchived:
		return true
	}
	return false
}

// Presented returns the state a view of t shows at now: StateScheduled for
// a queued task not yet available, its stored state otherwise.
func (t *Task) Presented(now time.Time) TaskState {
	if t.State == StateQueued && t.AvailableAt.After(now) {
		return StateScheduled
	}
	return t.State
}

// Event names a cause of a state change.
type Event string

// Events of the task state machine.
const (
	EventLease   Event = "lease"  // queued → leased
	EventAccept  Event = "accept" // leased → leased (accepted)
	EventBeat    Event = "heartbeat"
	EventSucceed Event = "complete" // leased → succeeded
	EventRetry   Event = "retry"    // leased → queued (failure, attempt used)
	EventDead    Event = "dead"     // leased → dead_letter
	EventRelease Event = "release"  // leased → queued (no attempt used)
	EventExpire  Event = "expire"   // leased → queued or dead_letter (expiry cap)
	EventCancel  Event = "cancel"   // waiting|queued → canceled; leased → leased (flagged)
	EventReady   Event = "ready"    // waiting → queued (its dependencies' rule is met)
	EventRedrive Event = "redrive"  // dead_letter → queued
	EventArchive Event = "archive"  // succeeded|canceled|dead_letter → archived (retention)
)

// transitions lists, for each event, the states it may start from and where it
// may end. It is the whole state machine; Transition consults nothing else.
var transitions = map[Event]struct{ from, to []TaskState }{
	EventLease:   {[]TaskState{StateQueued}, []TaskState{StateLeased}},
	EventAccept:  {[]TaskState{StateLeased}, []TaskState{StateLeased}},
	EventBeat:    {[]TaskState{StateLeased}, []TaskState{StateLeased}},
	EventSucceed: {[]TaskState{StateLeased}, []TaskState{StateSucceeded}},
	EventRetry:   {[]TaskState{StateLeased}, []TaskState{StateQueued}},
	EventDead:    {[]TaskState{StateLeased}, []TaskState{StateDeadLetter}},
	EventRelease: {[]TaskState{StateLeased}, []TaskState{StateQueued}},
	EventExpire:  {[]TaskState{StateLeased}, []TaskState{StateQueued, StateDeadLetter}},
	EventCancel:  {[]TaskState{StateWaiting, StateQueued, StateLeased}, []TaskState{StateCanceled, StateLeased}},
	EventReady:   {[]TaskState{StateWaiting}, []TaskState{StateQueued}},
	EventRedrive: {[]TaskState{StateDeadLetter}, []TaskState{StateQueued}},
	EventArchive: {[]TaskState{StateSucceeded, StateCanceled, StateDeadLetter}, []TaskState{StateArchived}},
}

// CanTransition reports whether event may move a task from one state to another.
func CanTransition(from TaskState, ev Event, to TaskState) bool {
	t, ok := transitions[ev]
	if !ok {
		return false
	}
	return contains(t.from, from) && contains(t.to, to)
}

// CanApply reports whether event may happen at all to a task in state from.
func CanApply(from TaskState, ev Event) bool {
	t, ok := transitions[ev]
	return ok && contains(t.from, from)
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Task is one unit of work of a registered task type.
type Task struct {
	ID             string          `json:"task_id"`
	Tenant         string          `json:"tenant"`
	Type           string          `json:"task_type"`
	CreatedBy      string          `json:"created_by"`   // the principal that queued it
	Recipient      string          `json:"recipient_ai"` // who receives the outcome (defaults to CreatedBy)
	State          TaskState       `json:"status"`
	Priority       int             `json:"priority"`
	Params         json.RawMessage `json:"params"`
	Summary        string          `json:"task_summary,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`

	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	AvailableAt time.Time `json:"available_at"`

	// Current attempt (valid while State is leased).
	LeaseID        string     `json:"lease_id,omitempty"`
	WorkerID       string     `json:"worker_id,omitempty"`
	LeasedAt       *time.Time `json:"leased_at,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	// LeaseSeconds is the TTL the current lease was granted with; a heartbeat
	// without extend_lease_seconds extends the lease by it from the server's
	// now (KLIS-3 §3.2). 0 on leases granted before it was recorded.
	LeaseSeconds int        `json:"lease_seconds,omitempty"`
	AcceptedAt   *time.Time `json:"accepted_at,omitempty"`
	// AcceptReceipt is the task.accepted receipt of the current attempt.
	AcceptReceipt   string `json:"accept_receipt_id,omitempty"`
	CancelRequested bool   `json:"cancel_requested"`
	// CancelRequestedBy and CancelReason say who asked for the task's
	// cancel and why, as the ledger recorded it when they asked (the
	// task.cancel_requested receipt of a leased task, the task.canceled
	// of one canceled at once; the gate, asyncgate, for a dependency's
	// end). Filled by a read of one task (GET /v1/tasks/{id},
	// check_task_status) while its cancel is requested or once it is
	// canceled; absent in lists, and for a cancel a gate recorded before
	// it kept them so.
	CancelRequestedBy string `json:"cancel_requested_by,omitempty"`
	CancelReason      string `json:"cancel_reason,omitempty"`

	Attempts      int `json:"attempts"`       // failures so far (each failure uses one)
	MaxRetries    int `json:"max_retries"`    // failures allowed before dead letter
	LeaseCount    int `json:"lease_count"`    // leases granted so far
	LeaseExpiries int `json:"lease_expiries"` // leases that expired

	StartedAt   *time.Time `json:"started_at,omitempty"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`

	ProgressPercent *float64 `json:"progress_percent,omitempty"`
	ProgressMessage string   `json:"progress_message,omitempty"`

	Result    *Result `json:"result,omitempty"`
	LastError string  `json:"error_message,omitempty"`
	// DeadReason says why a task is a dead letter: max_retries_exceeded,
	// fatal_error, max_lease_expiries or policy.
	DeadReason string `json:"dead_reason,omitempty"`

	// AssignReceipt is the task.assigned receipt written at enqueue.
	AssignReceipt string `json:"assign_receipt_id"`

	// ResourceIntents are the resource leases the task runs under: its
	// type's and its enqueue's, fixed at enqueue (KLIS-3 task integration).
	ResourceIntents []ResourceIntent `json:"resource_intents,omitempty"`

	// Traceparent and Tracestate are the W3C trace context the task was
	// enqueued in (the producer's, or the gate's enqueue span when it
	// records spans), fixed at enqueue: its lease, heartbeat and completion
	// spans join that trace, and its worker gets it with the lease.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`

	// After names the tasks this task was queued after, in its after
	// list's order, and AfterRule when it may run: what a waiting task
	// waits on. Filled by a read of one task (GET /v1/tasks/{id},
	// check_task_status); absent for a task queued without after, and in
	// lists and offers (an offer carries the outcomes, Offer.Dependencies).
	After     []string       `json:"after,omitempty"`
	AfterRule DependencyRule `json:"after_rule,omitempty"`

	// Version counts the writes to the task row (1 after insert). A fence on
	// it makes an update conditional on nothing having changed since a read.
	Version int64 `json:"-"`

	// HasWaiters is the store's marker that another task was enqueued
	// waiting on this one while it was unfinished (migration 0040): only
	// the terminal write of a task with it settles waiters, so a task that
	// none waits on pays nothing for dependencies. Written by
	// store.DependencyWriter.MarkWaitedOn, never by a task update.
	HasWaiters bool `json:"-"`
}

// Result is where a succeeded task's outcome lives and how to check it.
type Result struct {
	Channel       string          `json:"result_channel,omitempty"`
	Pointer       string          `json:"result_pointer,omitempty"`
	Checksum      string          `json:"result_checksum,omitempty"`
	Summary       string          `json:"summary,omitempty"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
	Artifacts     []Artifact      `json:"artifacts,omitempty"`
	DeliveryProof json.RawMessage `json:"delivery_proof,omitempty"`
	ArchivedAt    *time.Time      `json:"archived_at,omitempty"`
	// PurgedAt is when retention purged the payload: the pointer no longer
	// names anything (the checksum stays, as evidence of what was delivered).
	PurgedAt *time.Time `json:"purged_at,omitempty"`
	// FromWorker says the worker gave Pointer: it sent no payload for the
	// gate to store. The gate never reads or archives such a pointer
	// through a channel, save an inline one (its content): a channel
	// installed after the completion would read a pointer the worker made
	// up with the gate's own grants. Set by the gate at completion; a
	// result recorded before it was kept reads as the gate's.
	FromWorker bool `json:"result_pointer_from_worker,omitempty"`
}

// Artifact is one locatable piece of a result.
type Artifact struct {
	Type string          `json:"type" openapi:"required" doc:"What the artifact is (s3, file, url, record, …); a completion refuses an empty one."`
	URL  string          `json:"url,omitempty"`
	Ref  json.RawMessage `json:"ref,omitempty"`
}

// Locatable reports whether the result says where the outcome is: a pointer,
// at least one artifact, or a delivery proof.
func (r *Result) Locatable() bool {
	if r == nil {
		return false
	}
	if strings.TrimSpace(r.Pointer) != "" || ProofLocates(r.DeliveryProof) {
		return true
	}
	for _, a := range r.Artifacts {
		if a.Locates() {
			return true
		}
	}
	return false
}

// Locates reports whether an artifact says where something is: a type and a
// URL or a reference.
func (a Artifact) Locates() bool {
	ref := strings.TrimSpace(string(a.Ref))
	return strings.TrimSpace(a.Type) != "" && (strings.TrimSpace(a.URL) != "" || (ref != "" && ref != "null" && ref != "{}" && ref != `""`))
}

// ProofLocates reports whether a delivery proof is a non-empty JSON object.
func ProofLocates(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return len(raw) > 0 && json.Unmarshal(raw, &m) == nil && len(m) > 0
}

// TaskType is a registered kind of task with its defaults and limits. Field names
// follow the spec's task_types table.
type TaskType struct {
	Name                    string          `json:"task_type"`
	Tenant                  string          `json:"tenant"`
	Description             string          `json:"description,omitempty"`
	ParamsSchema            json.RawMessage `json:"params_schema,omitempty"`
	DefaultPriority         int             `json:"default_priority"`
	DefaultMaxRetries       int             `json:"default_max_retries"`
	DefaultTimeoutSeconds   int             `json:"default_timeout_seconds"`
	DefaultRetentionDays    int             `json:"default_retention_days"`
	DefaultResultChannel    string          `json:"default_result_channel,omitempty"`
	EstimatedRuntimeSeconds int             `json:"estimated_runtime_seconds"`
	PollSuggestionSeconds   int             `json:"poll_suggestion_seconds"`
	MaxPayloadBytes         int64           `json:"max_payload_bytes"`
	Enabled                 bool            `json:"enabled"`
	LeaseSeconds            int             `json:"lease_seconds"`
	RequeueDelaySeconds     int             `json:"requeue_delay_seconds"`
	MaxLeaseExpiries        int             `json:"max_lease_expiries"`
	// Policy, Validators and ChannelConfig name plugins and their configs; the
	// plugin runtime interprets them.
	Policy     *PluginRef      `json:"policy,omitempty"`
	Validators []PluginRef     `json:"validators,omitempty"`
	ChannelCfg json.RawMessage `json:"channel_config,omitempty"`
	// ResourceIntents are the resource leases a task of this type needs
	// (KLIS-3 task integration): the engine offers such a task only when all
	// of them can be granted, holds them for the task's lease and releases
	// them when the lease ends.
	ResourceIntents []ResourceIntent `json:"resource_intents,omitempty"`
	CreatedAt       time.Time        `json:"created_at"`
	UpdatedAt       time.Time        `json:"updated_at"`
}

// PluginRef names a plugin and the config it runs with for one task type.
type PluginRef struct {
	Name   string          `json:"name"`
	Config json.RawMessage `json:"config,omitempty"`
}

// Defaults from the seeds.
const (
	DefaultPriority              = 5
	DefaultMaxRetries            = 3
	DefaultLeaseSeconds          = 900
	DefaultRequeueDelaySeconds   = 30
	DefaultMaxLeaseExpiries      = 10
	DefaultTimeoutSeconds        = 3600
	DefaultRetentionDays         = 30
	DefaultEstimatedRuntime      = 300
	DefaultPollSuggestionSeconds = 60
	DefaultMaxPayloadBytes       = 10 << 20
	DefaultResultChannel         = "inline"
)

// MaxTaskTypeDescription bounds a task type's description, in characters:
// it is shown in every task type listing (HTTP, the CLI's tables, the MCP
// door's task types), not a place for documents.
const MaxTaskTypeDescription = 4000

// maxSeconds bounds every duration in a task type (a year), so no arithmetic
// on it can overflow a time.Duration.
const maxSeconds = 366 * 24 * 3600

// MaxDelaySeconds bounds an enqueue's delay_seconds (a year).
const MaxDelaySeconds = maxSeconds

var taskTypeName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.\-]{0,63}$`)

// ValidTaskTypeName reports whether name can name a task type (what a
// registered type's name must match).
func ValidTaskTypeName(name string) bool { return taskTypeName.MatchString(name) }

// TaskTypeNamePattern is the pattern a task type's name must match, for
// error messages.
func TaskTypeNamePattern() string { return taskTypeName.String() }

// Normalize fills unset fields with the seed defaults and checks the rest. It
// does not compile the params schema (the engine does).
func (tt *TaskType) Normalize() error {
	if !taskTypeName.MatchString(tt.Name) {
		return Errorf(CodeBadRequest, "task type name %q must match %s", tt.Name, taskTypeName)
	}
	def := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	def(&tt.DefaultPriority, DefaultPriority)
	def(&tt.DefaultTimeoutSeconds, DefaultTimeoutSeconds)
	def(&tt.DefaultRetentionDays, DefaultRetentionDays)
	def(&tt.EstimatedRuntimeSeconds, DefaultEstimatedRuntime)
	def(&tt.PollSuggestionSeconds, DefaultPollSuggestionSeconds)
	def(&tt.LeaseSeconds, DefaultLeaseSeconds)
	def(&tt.MaxLeaseExpiries, DefaultMaxLeaseExpiries)
	if tt.MaxPayloadBytes == 0 {
		tt.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if tt.DefaultResultChannel == "" {
		tt.DefaultResultChannel = DefaultResultChannel
	}
	switch {
	case tt.DefaultPriority < 1 || tt.DefaultPriority > 10:
		return Errorf(CodeBadRequest, "default_priority must be 1..10, got %d", tt.DefaultPriority)
	case tt.DefaultMaxRetries < 0 || tt.DefaultMaxRetries > 1000:
		return Errorf(CodeBadRequest, "default_max_retries must be 0..1000, got %d", tt.DefaultMaxRetries)
	case tt.LeaseSeconds < 1 || tt.LeaseSeconds > maxSeconds:
		return Errorf(CodeBadRequest, "lease_seconds must be 1..%d, got %d", maxSeconds, tt.LeaseSeconds)
	case tt.RequeueDelaySeconds < 0 || tt.RequeueDelaySeconds > maxSeconds:
		return Errorf(CodeBadRequest, "requeue_delay_seconds must be 0..%d, got %d", maxSeconds, tt.RequeueDelaySeconds)
	case tt.MaxLeaseExpiries < 1 || tt.MaxLeaseExpiries > 1_000_000:
		return Errorf(CodeBadRequest, "max_lease_expiries must be 1..1000000, got %d", tt.MaxLeaseExpiries)
	case tt.MaxPayloadBytes < 0:
		return Errorf(CodeBadRequest, "max_payload_bytes must not be negative")
	case tt.EstimatedRuntimeSeconds < 0 || tt.PollSuggestionSeconds < 0 || tt.DefaultTimeoutSeconds < 0 || tt.DefaultRetentionDays < 0,
		tt.EstimatedRuntimeSeconds > maxSeconds || tt.PollSuggestionSeconds > maxSeconds || tt.DefaultTimeoutSeconds > maxSeconds || tt.DefaultRetentionDays > 36600:
		return Errorf(CodeBadRequest, "durations must be 0..%d seconds (retention 0..36600 days)", maxSeconds)
	}
	if LongerThan(tt.Description, MaxTaskTypeDescription) {
		return Errorf(CodeInvalidTaskType, "description is longer than %d characters", MaxTaskTypeDescription)
	}
	if len(tt.ResourceIntents) > MaxTaskResourceIntents {
		return Errorf(CodeTooLarge, "resource_intents: at most %d (this one has %d)", MaxTaskResourceIntents, len(tt.ResourceIntents))
	}
	intents, err := NormalizeIntents("resource_intents", tt.ResourceIntents)
	if err != nil {
		return err
	}
	tt.ResourceIntents = intents
	return nil
}

// NewTaskType returns a task type with the seed defaults: priority 5, three
// retries, a 900 s lease, a 30 s requeue delay, enabled.
func NewTaskType(name string) TaskType {
	tt := TaskType{Name: name, DefaultMaxRetries: DefaultMaxRetries, RequeueDelaySeconds: DefaultRequeueDelaySeconds, Enabled: true}
	_ = tt.Normalize()
	return tt
}

// PrincipalPattern is what a principal (an API key's principal, a policy's
// escalate_to) must match: no spaces, control characters or newlines, at
// most 200 characters.
var PrincipalPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,199}$`)

// ValidPrincipal reports whether p is a well-formed principal.
func ValidPrincipal(p string) bool { return PrincipalPattern.MatchString(p) }

var workerIDPattern = regexp.MustCompile(`^[A-Za-z0-9_\-]+\.[A-Za-z0-9_.:\-]+$`)

// ValidWorkerID reports whether id has the Lease Protocol's {type}.{instance} form.
func ValidWorkerID(id string) bool { return len(id) <= 200 && workerIDPattern.MatchString(id) }

// WorkerType returns the {type} part of a worker id.
func WorkerType(id string) string {
	for i := 0; i < len(id); i++ {
		if id[i] == '.' {
			return id[:i]
		}
	}
	return id
}

// Offer is what a lease grant returns: transient, no receipt. Accepting it
// creates the worker's obligation.
type Offer struct {
	LeaseID        string    `json:"lease_id"`
	RunID          string    `json:"run_id"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	// LeaseSeconds is the granted lease length and ServerTime the gate's clock
	// at the grant, so a worker can set a conservative local expiry without
	// trusting its own clock (KLIS-3 §6.2).
	LeaseSeconds int       `json:"lease_seconds"`
	ServerTime   time.Time `json:"server_time"`
	Attempt      int       `json:"attempt"`
	Task         *Task     `json:"task"`
	// ResourceLeases are the leases granted with the task's lease on the
	// resources its intents name (none for a task without intents), each
	// with its fencing token: pass it with every change to the resource.
	ResourceLeases []*ResourceLease `json:"resource_leases,omitempty"`
	// Dependencies are the outcomes of the tasks this task waited on (its
	// after list, in that order); none for a task without dependencies.
	Dependencies []DependencyOutcome `json:"dependencies,omitempty"`
}

// LongerThan reports whether s holds more than n characters (Unicode code
// points, as the documented limits and the OpenAPI document's maxLength
// count them), not bytes: a name of 200 accented letters is 200 long.
func LongerThan(s string, n int) bool {
	return len(s) > n && utf8.RuneCountInString(s) > n
}
