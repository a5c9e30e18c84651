package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/tracing"
)

// MaxParamsBytes caps a task's params.
const MaxParamsBytes = 256 << 10

// EnqueueRequest is the spec's queue_task.
type EnqueueRequest struct {
	TaskType string          `json:"task_type"`
	Params   json.RawMessage `json:"params"`
	// Priority 1..10 (10 first); 0 means the task type's default.
	Priority int `json:"priority,omitempty"`
	// Recipient receives the outcome; "" means the caller.
	Recipient      string `json:"recipient_ai,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Summary        string `json:"task_summary,omitempty"`
	// DelaySeconds or NotBefore delay the first lease.
	DelaySeconds int        `json:"delay_seconds,omitempty"`
	NotBefore    *time.Time `json:"not_before,omitempty"`
	// MaxRetries overrides the task type's default when set.
	MaxRetries *int `json:"max_retries,omitempty"`
	// ResourceIntents are resource leases this task needs besides its
	// type's (KLIS-3 task integration): it is offered only when all of them
	// can be granted, and holds them for its lease.
	ResourceIntents []host.ResourceIntent `json:"resource_intents,omitempty"`
	// After names tasks this one waits on (dependencies.go): it is not
	// offered before AfterRule is met, and its worker receives their
	// outcomes with the offer. Each must be a task of the caller's tenant
	// that the caller may read.
	After []string `json:"after,omitempty"`
	// AfterRule is all_succeeded (the default), any_succeeded or
	// all_finished.
	AfterRule host.DependencyRule `json:"after_rule,omitempty"`
}

// EnqueueResult is the spec's rich acknowledgement of queue_task.
type EnqueueResult struct {
	Task                    *host.Task `json:"-"`
	TaskID                  string     `json:"task_id"`
	Status                  string     `json:"status"`
	IsDuplicate             bool       `json:"is_duplicate"`
	EstimatedRuntimeSeconds int        `json:"estimated_runtime_seconds"`
	PollSuggestionSeconds   int        `json:"poll_suggestion_seconds"`
	InboxOnComplete         bool       `json:"inbox_on_complete"`
	// Inbox says where the outcome will appear.
	Inbox       string    `json:"inbox"`
	ReceiptID   string    `json:"receipt_id"`
	AvailableAt time.Time `json:"available_at"`
}

// Enqueue queues a task for actor and writes its task.assigned receipt in the
// same transaction. An idempotency key belongs to the principal that
// produces the task (actor.Principal, the task's created_by) and is unique
// per tenant, producer and recipient (store.IdempotencyKey): a repeat by the
// same producer returns the existing task with IsDuplicate set and writes
// nothing when the request is the same task (see sameEnqueue), and a
// different task under the same key is refused with idempotency_conflict.
// The repeat is so answered even when the gate's state would now refuse the
// task (replay): its type disabled or its recipient left with worker keys.
// Another principal's use of the same key, for any recipient, is a key of
// its own: it neither finds nor blocks this producer's task.
func (e *Engine) Enqueue(ctx context.Context, actor Actor, req EnqueueRequest) (*EnqueueResult, error) {
	ctx, span := startEnqueueSpan(ctx, actor, req.TaskType)
	defer span.End()
	res, err := e.enqueue(ctx, actor, req)
	tracing.RecordError(span, err)
	return res, err
}

func (e *Engine) enqueue(ctx context.Context, actor Actor, req EnqueueRequest) (*EnqueueResult, error) {
	if actor.Tenant == "" || actor.Principal == "" {
		return nil, host.Errorf(host.CodeBadRequest, "the caller has no tenant or principal")
	}
	fields := taskFields{TaskType: req.TaskType, Params: req.Params, Priority: req.Priority,
		Summary: req.Summary, MaxRetries: req.MaxRetries, Recipient: req.Recipient}
	if err := checkTaskFields("", &fields); err != nil {
		return nil, err
	}
	if host.LongerThan(req.IdempotencyKey, 200) {
		return nil, host.Errorf(host.CodeBadRequest, "idempotency_key is longer than 200 characters")
	}
	if fields.Recipient == "" {
		// The caller's own name, checked as a given recipient is: a local
		// session's --principal is not held to PrincipalPattern, and one
		// named like a workflow must address no task to it.
		fields.Recipient = actor.Principal
		if host.LongerThan(fields.Recipient, 200) || !printable(fields.Recipient) {
			return nil, host.Errorf(host.CodeBadRequest, "recipient_ai must be at most 200 printable characters")
		}
		if host.IsWorkflowRecipient(fields.Recipient) {
			return nil, host.Errorf(host.CodeBadRequest, "recipient_ai must name a principal, not a workflow")
		}
		if strings.EqualFold(fields.Recipient, GatePrincipal) {
			return nil, host.Errorf(host.CodeBadRequest, "recipient_ai must name a principal other than the gate (%s); name one in recipient_ai", GatePrincipal)
		}
	}
	start := taskStart{DelaySeconds: req.DelaySeconds, NotBefore: req.NotBefore, ResourceIntents: req.ResourceIntents}
	if err := start.check(e.now()); err != nil {
		return nil, err
	}
	rule, err := checkAfter(&req)
	if err != nil {
		return nil, err
	}
	// The checks against the gate's state (the type, its schema and
	// validators, the recipient's keys). Their refusal of a request whose
	// key already holds a task answers from that task (replay): a retry is
	// not refused for what changed since its original was accepted.
	tt, err := e.checkTaskType(ctx, actor.Tenant, "", &fields)
	if err == nil && fields.Recipient != actor.Principal {
		err = e.checkRecipientRole(ctx, actor.Tenant, "", fields.Recipient)
	}
	if err != nil {
		if req.IdempotencyKey != "" {
			return e.replay(ctx, actor, req, fields, start, rule, err)
		}
		return nil, err
	}

	now := e.now()
	t := fields.task(tt, actor.Tenant, actor.Principal)
	t.ID, t.IdempotencyKey = host.NewID(host.PrefixTask), req.IdempotencyKey
	t.CreatedAt, t.UpdatedAt = now, now
	t.AvailableAt = start.availableAt(now)
	keepTrace(ctx, t)
	start.addIntents(t, tt)
	res := &EnqueueResult{
		EstimatedRuntimeSeconds: tt.EstimatedRuntimeSeconds,
		PollSuggestionSeconds:   tt.PollSuggestionSeconds,
		InboxOnComplete:         true,
	}
	// The task.assigned receipt is built and validated before the writer runs
	// the update (which may run it again: it must stay the same receipt).
	body := assignedBody{
		After: req.After, AfterRule: rule, AvailableAt: t.AvailableAt, Priority: t.Priority,
		QueuedBy: t.CreatedBy, TaskSummary: t.Summary, TaskType: t.Type,
	}
	assigned := &host.Receipt{
		ID: host.NewID(host.PrefixReceipt), Tenant: t.Tenant, Type: host.ReceiptAssigned,
		From: GatePrincipal, To: t.Recipient, TaskID: t.ID, Parents: []string{},
		Body:      mustJSON(body),
		CreatedAt: now,
	}
	if err := assigned.Validate(); err != nil {
		return nil, err
	}
	// duplicateOf answers an enqueue whose key old already holds: the same
	// task is a duplicate, a different one a conflict.
	duplicateOf := func(r store.Reader, old *host.Task) error {
		if err := e.sameTask(ctx, r, old, t, req, rule); err != nil {
			return err
		}
		res.Task, res.IsDuplicate = old, true
		return nil
	}
	// A new task is bulk work: the writer serves completions and lease
	// calls ahead of it when it must choose (store.BulkUpdate).
	err = e.update(store.BulkUpdate(ctx, actor.Tenant, t.Type), func(tx store.Tx) error {
		res.IsDuplicate = false
		if t.IdempotencyKey != "" {
			old, err := tx.FindTaskByIdempotency(ctx, store.IdempotencyKeyOf(t))
			if err != nil {
				return err
			}
			if old != nil {
				return duplicateOf(tx, old)
			}
		}
		var deps []host.Dependency
		if len(req.After) > 0 {
			var err error
			if deps, err = e.placeAfter(ctx, tx, actor, t, req.After, rule); err != nil {
				return err
			}
		}
		t.AssignReceipt = assigned.ID
		if err := tx.InsertTask(ctx, t); err != nil {
			return err
		}
		if err := tx.InsertDependencies(ctx, deps); err != nil {
			return err
		}
		if err := appendValid(ctx, tx, assigned, nil); err != nil {
			return err
		}
		res.Task = t
		return nil
	})
	if err != nil && t.IdempotencyKey != "" && host.IsCode(err, host.CodeConflict) {
		// A concurrent enqueue with the same key committed between our lookup
		// and our insert (another writer or host): answer as if it had
		// committed first, by the same rule.
		var derr error
		if verr := e.view(ctx, func(r store.Reader) error {
			old, err := r.FindTaskByIdempotency(ctx, store.IdempotencyKeyOf(t))
			if err != nil || old == nil {
				return err
			}
			derr = duplicateOf(r, old)
			return nil
		}); verr == nil && (derr != nil || res.IsDuplicate) {
			err = derr
		}
	}
	if err != nil {
		return nil, err
	}
	res.fill(now)
	if !res.IsDuplicate {
		if len(req.After) == 0 {
			// Its edges could only have been written with its insert.
			e.noDeps.add(t.Tenant, []string{t.ID})
		}
		e.emit(Event{Kind: EvEnqueued, Tenant: t.Tenant, TaskType: t.Type})
		if t.State == host.StateQueued && !t.AvailableAt.After(now) {
			e.waiters.wake(t.Tenant, t.Type, 1)
		}
	}
	return res, nil
}

// sameTask answers an enqueue of t (made of req) whose idempotency key old
// already holds: nil when old is the same task (sameEnqueue, sameAfter),
// else idempotency_conflict naming the first field that differs.
func (e *Engine) sameTask(ctx context.Context, r store.Reader, old, t *host.Task, req EnqueueRequest, rule host.DependencyRule) error {
	diff := sameEnqueue(old, t, req)
	if diff == "" {
		var err error
		// A task this engine queued without after has no edges.
		noEdges := e.noDeps.has(old.Tenant, old.ID)
		if diff, err = sameAfter(ctx, r, old, req.After, rule, noEdges); err != nil {
			return err
		}
	}
	if diff != "" {
		return host.Errorf(host.CodeIdempotencyConflict,
			"idempotency_key %q was used for task %s with a different %s; use a new key for a different task", t.IdempotencyKey, old.ID, diff)
	}
	return nil
}

// replay answers a keyed enqueue that the checks against the gate's state
// refused (refusal): when its key already holds a task, by the same rule
// as when the checks pass (the same task is its duplicate, a different one
// idempotency_conflict), whatever changed since that task was accepted (its
// type disabled, deleted or given another schema, its recipient left with
// worker keys only), as a replayed key is answered from what it stored.
// When the key holds no task, the refusal stands. Only refused requests pay
// for this lookup: an accepted one finds its key in the enqueue's own
// transaction.
func (e *Engine) replay(ctx context.Context, actor Actor, req EnqueueRequest, fields taskFields, start taskStart, rule host.DependencyRule, refusal error) (*EnqueueResult, error) {
	// The task the request would make, for the comparison: of the type as
	// it is now (its defaults and resource intents), or of a type of that
	// name with none when it is no longer registered.
	tt := &host.TaskType{Name: fields.TaskType}
	if ct, err := e.types.get(ctx, actor.Tenant, fields.TaskType); err == nil {
		tt = ct.tt
	}
	t := fields.task(tt, actor.Tenant, actor.Principal)
	t.IdempotencyKey = req.IdempotencyKey
	start.addIntents(t, tt)
	var old *host.Task
	var derr error
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		if old, err = r.FindTaskByIdempotency(ctx, store.IdempotencyKeyOf(t)); err != nil || old == nil {
			return err
		}
		derr = e.sameTask(ctx, r, old, t, req, rule)
		return nil
	}); err != nil || old == nil {
		return nil, refusal
	}
	if derr != nil {
		return nil, derr
	}
	res := &EnqueueResult{Task: old, IsDuplicate: true, EstimatedRuntimeSeconds: tt.EstimatedRuntimeSeconds,
		PollSuggestionSeconds: tt.PollSuggestionSeconds, InboxOnComplete: true}
	res.fill(e.now())
	return res, nil
}

// fill sets the fields of res that its task gives, at now.
func (res *EnqueueResult) fill(now time.Time) {
	res.TaskID = res.Task.ID
	res.Status = string(res.Task.Presented(now)) // a delayed task is scheduled
	res.ReceiptID = res.Task.AssignReceipt
	res.AvailableAt = res.Task.AvailableAt
	res.Inbox = inboxNote(res.Task.Recipient)
}

// assignedBody is a task.assigned receipt's body, its fields in the order of
// their names and the dependencies omitted when there are none: it encodes
// byte for byte as the map of the same keys did (completedBody).
type assignedBody struct {
	After       []string            `json:"after,omitempty"`
	AfterRule   host.DependencyRule `json:"after_rule,omitempty"`
	AvailableAt time.Time           `json:"available_at"`
	Priority    int                 `json:"priority"`
	QueuedBy    string              `json:"queued_by"`
	TaskSummary string              `json:"task_summary"`
	TaskType    string              `json:"task_type"`
}

// taskStart are the fields that say when, and holding what, a new task
// may start, besides its dependencies: an enqueue (EnqueueRequest) and a
// workflow step (WorkflowStepRequest) take them alike, checked and applied
// by the same code.
//
// The start is counted from the enqueue (the workflow's submission for a
// step): available_at is now + delay_seconds, or not_before when later.
// A task with after is not offered before that time nor before its rule is
// met, whichever is later: its dependencies' end makes it queued with
// available_at kept when still ahead (settleWaiters: the later of the two),
// so it is scheduled until then. The delay is not counted from the
// dependencies' end.
type taskStart struct {
	DelaySeconds    int
	NotBefore       *time.Time
	ResourceIntents []host.ResourceIntent
}

// check checks the start's fields at now. Field names in the errors are
// the request's (a workflow step's are prefixed by stepErr).
func (s taskStart) check(now time.Time) error {
	if s.DelaySeconds < 0 || s.DelaySeconds > host.MaxDelaySeconds {
		return host.Errorf(host.CodeBadRequest, "delay_seconds must be 0..%d", host.MaxDelaySeconds)
	}
	if s.NotBefore != nil && s.NotBefore.After(now.Add(366*24*time.Hour)) {
		return host.Errorf(host.CodeBadRequest, "not_before is more than a year away")
	}
	if len(s.ResourceIntents) > host.MaxTaskResourceIntents {
		return host.Errorf(host.CodeTooLarge, "resource_intents: at most %d (this request has %d)", host.MaxTaskResourceIntents, len(s.ResourceIntents))
	}
	if _, err := host.NormalizeIntents("resource_intents", s.ResourceIntents); err != nil {
		return err
	}
	return nil
}

// availableAt is when a task with this start, queued at now, may first be
// offered: now + delay_seconds, or not_before when that is later.
func (s taskStart) availableAt(now time.Time) time.Time {
	at := now
	if s.DelaySeconds > 0 {
		at = now.Add(time.Duration(s.DelaySeconds) * time.Second)
	}
	if s.NotBefore != nil && s.NotBefore.After(at) {
		at = s.NotBefore.UTC().Truncate(time.Microsecond)
	}
	return at
}

// addIntents fixes t's resource intents when the request names some: the
// type's and the request's, merged (MUTATES wins). The request's were
// checked (check); the type's were valid when stored and keep working
// under today's rules (issue 37).
func (s taskStart) addIntents(t *host.Task, tt *host.TaskType) {
	if len(s.ResourceIntents) > 0 {
		t.ResourceIntents = host.NormalizeStoredIntents(append(append([]host.ResourceIntent{}, tt.ResourceIntents...), s.ResourceIntents...))
	}
}

// taskFields are the fields every way of queuing a task shares, checked by
// one validator: an enqueue (EnqueueRequest), a workflow step
// (WorkflowStepRequest) and a schedule's template (host.ScheduleTemplate).
// Recipient is "" for a workflow step (the gate addresses it) and for a
// template that leaves it to the owner.
type taskFields struct {
	TaskType   string
	Params     json.RawMessage
	Priority   int
	Summary    string
	MaxRetries *int
	Recipient  string
}

// checkTaskFields checks f's fields by themselves, naming each as prefix
// (the path of the fields in the request: "" or "template.") + its name. It
// makes null or missing params {} and trims the recipient.
func checkTaskFields(prefix string, f *taskFields) error {
	if f.TaskType == "" {
		return host.Errorf(host.CodeBadRequest, "%stask_type is required", prefix)
	}
	if len(f.Params) > MaxParamsBytes {
		return host.Errorf(host.CodeTooLarge, "%sparams are %d bytes, the limit is %d", prefix, len(f.Params), MaxParamsBytes)
	}
	if len(f.Params) == 0 || string(f.Params) == "null" {
		f.Params = json.RawMessage(`{}`)
	}
	if f.Priority != 0 && (f.Priority < 1 || f.Priority > 10) {
		return host.Errorf(host.CodeBadRequest, "%spriority must be 1..10, got %d", prefix, f.Priority)
	}
	if host.LongerThan(f.Summary, 1000) {
		return host.Errorf(host.CodeBadRequest, "%stask_summary is longer than 1000 characters", prefix)
	}
	if !utf8.ValidString(f.Summary) || strings.ContainsRune(f.Summary, 0) {
		// Checked here, not left to the store: PostgreSQL refuses a NUL in
		// text, and a schedule's fire it refuses would fail the firer's
		// whole pass, every pass.
		return host.Errorf(host.CodeBadRequest, "%stask_summary must be UTF-8 text without NUL characters", prefix)
	}
	if f.MaxRetries != nil && (*f.MaxRetries < 0 || *f.MaxRetries > 1000) {
		return host.Errorf(host.CodeBadRequest, "%smax_retries must be 0..1000", prefix)
	}
	f.Recipient = strings.TrimSpace(f.Recipient)
	if host.LongerThan(f.Recipient, 200) || !printable(f.Recipient) {
		return host.Errorf(host.CodeBadRequest, "%srecipient_ai must be at most 200 printable characters", prefix)
	}
	if host.IsWorkflowRecipient(strings.ToLower(f.Recipient)) {
		// Workflow steps are addressed to their workflow by the gate alone.
		return host.Errorf(host.CodeBadRequest, "%srecipient_ai must name a principal, not a workflow", prefix)
	}
	if f.Recipient != "" && !host.ValidPrincipal(f.Recipient) {
		// Every principal that may read a task (a key's, a local
		// session's) has this form: an outcome owed to another name would
		// be owed to no one.
		return host.Errorf(host.CodeBadRequest, "%srecipient_ai %q is not a principal name (must match %s)", prefix, f.Recipient, host.PrincipalPattern)
	}
	if strings.EqualFold(f.Recipient, GatePrincipal) {
		// The gate's own name is its receipts' issuer, which no key may
		// hold: an outcome owed to it would be owed to no one.
		return host.Errorf(host.CodeBadRequest, "%srecipient_ai must name a principal other than the gate (%s)", prefix, GatePrincipal)
	}
	return nil
}

// checkTaskType checks f against its task type in tenant (enabled, params
// schema, validator plugins), compacts f's params and returns the type.
func (e *Engine) checkTaskType(ctx context.Context, tenant, prefix string, f *taskFields) (*host.TaskType, error) {
	ct, err := e.types.get(ctx, tenant, f.TaskType)
	if err != nil {
		return nil, err
	}
	if !ct.tt.Enabled {
		return nil, host.Errorf(host.CodeTaskTypeDisabled, "task type %q is disabled", ct.tt.Name)
	}
	if err := validateParams(ct.schema, f.Params); err != nil {
		return nil, err
	}
	if err := e.runValidators(ctx, ct.tt, f.Params); err != nil {
		return nil, err
	}
	params, err := compactJSON(f.Params)
	if err != nil {
		return nil, host.Errorf(host.CodeInvalidParams, "%sparams are not valid JSON: %v", prefix, err)
	}
	f.Params = params
	return ct.tt, nil
}

// checkRecipientRole refuses a recipient_ai naming a principal of tenant
// whose live keys are all worker keys: the task's obligation and inbox item
// would sit on a principal that reads neither tasks nor an inbox. A
// principal with an agent or admin key, or none yet, may be owed a task.
func (e *Engine) checkRecipientRole(ctx context.Context, tenant, prefix, recipient string) error {
	var keys []store.Key
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		keys, err = r.PrincipalKeys(ctx, tenant, recipient)
		return err
	}); err != nil {
		return err
	}
	worker := false
	for _, k := range keys {
		if k.RevokedAt != nil {
			continue
		}
		if k.Role == RoleAgent || k.Role == RoleAdmin {
			return nil
		}
		worker = worker || k.Role == RoleWorker
	}
	if worker {
		return host.Errorf(host.CodeBadRequest, "%srecipient_ai %q is a worker (its keys are worker keys): a task's outcome is owed to an agent", prefix, recipient)
	}
	return nil
}

// checkTaskRequest is checkTaskFields then checkTaskType.
func (e *Engine) checkTaskRequest(ctx context.Context, tenant, prefix string, f *taskFields) (*host.TaskType, error) {
	if err := checkTaskFields(prefix, f); err != nil {
		return nil, err
	}
	return e.checkTaskType(ctx, tenant, prefix, f)
}

// task is the queued task f makes of type tt in tenant, created by by: the
// type's defaults where f gives none, and the type's resource intents. No
// id, times or idempotency key.
func (f *taskFields) task(tt *host.TaskType, tenant, by string) *host.Task {
	t := &host.Task{Tenant: tenant, Type: tt.Name, CreatedBy: by, Recipient: f.Recipient, State: host.StateQueued,
		Priority: tt.DefaultPriority, Params: f.Params, Summary: f.Summary, MaxRetries: tt.DefaultMaxRetries}
	if f.Priority != 0 {
		t.Priority = f.Priority
	}
	if f.MaxRetries != nil {
		t.MaxRetries = *f.MaxRetries
	}
	if len(tt.ResourceIntents) > 0 {
		t.ResourceIntents = host.NormalizeStoredIntents(append([]host.ResourceIntent{}, tt.ResourceIntents...))
	}
	return t
}

// sameEnqueue compares a new task with the one already queued under its
// idempotency key and names the first field that differs, or returns "" when
// they are the same task. The same task means: the same task type, params
// equal as canonical JSON (object keys sorted, insignificant whitespace
// dropped; numbers compare by their text, so 1 and 1.0 differ), and the same
// priority and max_retries when the repeat gives them (a repeat that leaves
// one out does not contradict the first), and the resources it names held as
// it names them (holdsIntents). task_summary is a description, not
// the work, so it is not compared; nor are delay_seconds and not_before: a
// retransmitted request computes its start from a later now.
func sameEnqueue(old, t *host.Task, req EnqueueRequest) string {
	switch {
	case old.Type != t.Type:
		return "task_type"
	case !sameJSON(old.Params, t.Params):
		return "params"
	case req.Priority != 0 && old.Priority != t.Priority:
		return "priority"
	case req.MaxRetries != nil && old.MaxRetries != t.MaxRetries:
		return "max_retries"
	case !holdsIntents(old.ResourceIntents, req.ResourceIntents):
		return "resource_intents"
	}
	return ""
}

// holdsIntents reports whether a task stored with intents stored could have
// been made by a request naming asked: every resource asked for is among
// them with its predicate, or MUTATES, which the task type's own intent on
// that resource may have set (the merge keeps the stronger). The type's
// intents are not compared: they are the type's as it was when the task was
// accepted, and a type changed or deleted since must not turn a repeat into
// a conflict. A request that names none does not contradict any.
func holdsIntents(stored, asked []host.ResourceIntent) bool {
	if len(asked) == 0 {
		return true
	}
	have := make(map[string]host.LeasePredicate, len(stored))
	for _, it := range stored {
		have[it.Resource] = it.Predicate
	}
	for _, it := range host.NormalizeStoredIntents(asked) {
		p, ok := have[it.Resource]
		if !ok || (p != it.Predicate && p != host.PredicateMutates) {
			return false
		}
	}
	return true
}

// sameJSON reports whether two JSON texts are equal as canonical JSON.
func sameJSON(a, b json.RawMessage) bool {
	ca, errA := canonicalJSON(a)
	cb, errB := canonicalJSON(b)
	return errA == nil && errB == nil && bytes.Equal(ca, cb)
}

// canonicalJSON re-encodes a JSON text with object keys sorted, numbers kept
// as written and no insignificant whitespace.
func canonicalJSON(raw json.RawMessage) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// printable reports whether s is valid UTF-8 without control characters
// and without the bidirectional embeddings, overrides and isolates
// (U+202A–U+202E, U+2066–U+2069), which make a name read in another order
// than it is written ("\u202egnp" shows as "png").
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069) {
			return false
		}
	}
	return true
}

// runValidators runs tt's validator plugins on params. A refusal is the
// validator's verdict (host.CodeInvalidParams, or the bad_request and
// too_large a validator may answer); anything else is the gate's: a
// validator that faults is host.CodePluginFault (502, retryable; a
// timeout host.CodePluginTimeout, 504), and one tt names that is not
// loaded — gone from the plugins folder, refused when it loaded, now a
// plugin of another kind or refusing tt's config — is
// host.CodePluginUnavailable (503), never the 404 or 400 that would say
// the route, the task or the caller's input is wrong. A validator still
// in its first load is host.CodePluginNotReady, as before.
func (e *Engine) runValidators(ctx context.Context, tt *host.TaskType, params json.RawMessage) error {
	if e.cfg.Plugins == nil || len(tt.Validators) == 0 {
		return nil
	}
	vs, err := e.cfg.Plugins.Validators(tt)
	switch host.ErrorCode(err) {
	case "":
	case host.CodeNotFound:
		return host.WrapError(host.CodePluginUnavailable, err, fmt.Sprintf(
			"task type %q cannot check params: a validator it names is not loaded (%s); an operator must put the plugin back in the plugins folder or change the task type",
			tt.Name, host.ErrorDetail(err)))
	case host.CodeBadRequest:
		return host.WrapError(host.CodePluginUnavailable, err, fmt.Sprintf(
			"task type %q cannot check params: a validator it names cannot run for it (%s); an operator must restore the plugin or change the task type",
			tt.Name, host.ErrorDetail(err)))
	default:
		return err
	}
	for _, v := range vs {
		if err := v.Validate(ctx, tt.Name, params); err != nil {
			if host.ErrorCode(err) == host.CodeInternal {
				return host.WrapError(host.CodePluginFault, err, "params validator failed: "+host.ErrorDetail(err))
			}
			return err
		}
	}
	return nil
}
