// Package client is the Go producer client of AsyncGate: programs that queue
// work use it to enqueue tasks with typed params, read their status, wait for
// them to finish, fetch their results and cancel them, and, in a later
// session, find their outcomes (SessionBootstrap, Inbox, OpenObligations,
// Receipts) and how a task went (Attempts, Timeline), over the gate's HTTP
// API (docs/http.md) with an agent (or admin) key.
//
//	c := client.New("http://127.0.0.1:8080", os.Getenv("ASYNCGATE_KEY"))
//	resize := client.NewTaskType[ResizeParams](c, "image.resize")
//	ack, err := resize.Enqueue(ctx, ResizeParams{URL: u, Width: 640}, nil)
//	t, err := c.Wait(ctx, ack.TaskID, nil)
//	out, _, err := client.ResultAs[ResizeResult](ctx, c, t.TaskID)
//
// It is a module of its own with the standard library only, like
// sdk/worker, so producers do not take on the gate's dependencies. Until
// the module path is published, one command makes a module use it from a
// checkout of the repository beside it:
//
//	go mod edit -require=github.com/asyncgate/asyncgate/sdk/client@v0.0.0-00010101000000-000000000000 -replace=github.com/asyncgate/asyncgate/sdk/client=../asyncgate/sdk/client
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client talks to one gate with one key. It is safe for concurrent use.
type Client struct {
	base string
	key  string
	hc   *http.Client
	ua   string
	// inject writes a request's trace context (WithTracePropagator).
	inject func(context.Context, http.Header)
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: one with a 60 s timeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.ua = ua } }

// WithTracePropagator sets how a request carries the caller's trace when its
// context has none from WithTrace: inject writes the headers. With
// OpenTelemetry:
//
//	WithTracePropagator(func(ctx context.Context, h http.Header) {
//		otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
//	})
func WithTracePropagator(inject func(ctx context.Context, h http.Header)) Option {
	return func(c *Client) { c.inject = inject }
}

// New returns a client of the gate at baseURL (e.g. http://127.0.0.1:8080)
// that sends key as its bearer key.
func New(baseURL, key string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), key: key, hc: &http.Client{Timeout: 60 * time.Second}, ua: "asyncgate-client-go"}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL returns the gate's URL.
func (c *Client) BaseURL() string { return c.base }

// States of a task.
const (
	StateWaiting = "waiting" // queued with after; not offered until its rule is met
	StateQueued  = "queued"
	// StateScheduled is a queued task not offered before its available_at
	// (a delayed start, a retry's backoff, a snooze).
	StateScheduled  = "scheduled"
	StateLeased     = "leased"
	StateSucceeded  = "succeeded"
	StateCanceled   = "canceled"
	StateDeadLetter = "dead_letter"
	// StateArchived is a finished task past its retention: its payload was
	// purged; it will not change any more.
	StateArchived = "archived"
)

// Terminal reports whether a task in state s will not change any more
// (an operator's redrive of a dead letter aside).
func Terminal(s string) bool {
	return s == StateSucceeded || s == StateCanceled || s == StateDeadLetter || s == StateArchived
}

// APIError is an error answer of the gate: {"error": code, "detail": text}.
type APIError struct {
	Status int
	Code   string
	Detail string
	// RetryAfter is the answer's Retry-After, delay-seconds or an HTTP-date
	// (measured against the answer's Date): how long the gate asks the caller
	// to wait before trying again. The gate sets it on every 429
	// (quota_exceeded) and 503 (busy, database_unavailable,
	// plugin_not_ready, mail_unavailable) answer. It is 0 when the header
	// is absent or unreadable, and also when it is 0 or a date already past
	// (HasRetryAfter tells these apart).
	RetryAfter time.Duration
	// HasRetryAfter reports whether the answer carried a Retry-After that
	// could be read; it is true whenever RetryAfter is positive. With
	// RetryAfter 0 it means "try again now" (Retry-After: 0, or an
	// HTTP-date already past); false means the answer did not say when to
	// try again.
	HasRetryAfter bool
}

// Error implements error.
func (e *APIError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("gate answered %d %s", e.Status, e.Code)
	}
	return fmt.Sprintf("gate answered %d %s: %s", e.Status, e.Code, e.Detail)
}

// ErrNotFound matches (errors.Is) a 404 not_found answer: the task does not
// exist or the key may not see it.
var ErrNotFound = errors.New("not found")

// Is makes errors.Is(err, ErrNotFound) true for a 404.
func (e *APIError) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound
}

// Do sends a request to path (e.g. "/v1/admin/workers") with body encoded
// as JSON (nil: none) and decodes a 2xx answer into out (nil: discard). Any
// other answer is an *APIError. It returns the status. The typed methods are
// built on it; use it for the routes they do not cover (/openapi.json lists
// them all).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.ua)
	setTraceHeaders(ctx, req.Header, c.inject)
	res, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return res.StatusCode, err
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		ae := &APIError{Status: res.StatusCode}
		var eb struct {
			Error  string `json:"error"`
			Detail string `json:"detail"`
		}
		if json.Unmarshal(raw, &eb) == nil && eb.Error != "" {
			ae.Code, ae.Detail = eb.Error, eb.Detail
		} else {
			ae.Code = http.StatusText(res.StatusCode)
			ae.Detail = strings.TrimSpace(string(raw))
			if len(ae.Detail) > 200 {
				ae.Detail = ae.Detail[:200]
			}
		}
		date, _ := http.ParseTime(res.Header.Get("Date"))
		ae.RetryAfter, ae.HasRetryAfter = parseRetryAfter(res.Header.Get("Retry-After"), date)
		return res.StatusCode, ae
	}
	if out != nil && res.StatusCode != http.StatusNoContent && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, fmt.Errorf("decoding the gate's answer to %s %s: %w", method, path, err)
		}
	}
	return res.StatusCode, nil
}

// EnqueueOptions are the optional fields of an enqueue.
type EnqueueOptions struct {
	Priority       int    // 1..10, 10 first; 0: the task type's default
	Recipient      string // who receives the outcome; "": the caller
	IdempotencyKey string // yours alone: your repeat for the same recipient answers the first task (IsDuplicate)
	Summary        string // a description for people
	Delay          time.Duration
	NotBefore      time.Time
	MaxRetries     *int // failures allowed; nil: the task type's default
	// ResourceIntents are resource leases the task needs while it runs,
	// besides its type's: it starts only when the gate can grant them all,
	// and the worker holds them for it (docs/http.md "Tasks that need
	// resources"). A bad name is a 400 invalid_resource APIError.
	ResourceIntents []ResourceIntent
	// After names tasks this one waits on (dependencies): it stays in
	// status "waiting" until AfterRule is met, and its worker receives their
	// outcomes with the lease (docs/http.md "Dependencies and fan-in"). An
	// id the caller cannot read is a 400 unknown_dependency APIError; a
	// dependency already failed under all_succeeded a 409 dependency_failed.
	After []string
	// AfterRule is AllSucceeded (the default, ""), AnySucceeded or
	// AllFinished.
	AfterRule string
}

// The rules of a task with dependencies (EnqueueOptions.AfterRule).
const (
	AllSucceeded = "all_succeeded" // every dependency succeeded; canceled when one fails for good
	AnySucceeded = "any_succeeded" // one succeeded; canceled when all failed
	AllFinished  = "all_finished"  // all finished, however
)

// The predicates of a resource intent.
const (
	Reads   = "READS"   // shared with other readers
	Mutates = "MUTATES" // exclusive
)

// ResourceIntent is one resource a task needs and how: Reads or Mutates.
type ResourceIntent struct {
	Resource  string `json:"resource"`
	Predicate string `json:"predicate"`
}

// Enqueued is the gate's acknowledgement of an enqueue.
type Enqueued struct {
	TaskID                  string    `json:"task_id"`
	Status                  string    `json:"status"`
	IsDuplicate             bool      `json:"is_duplicate"`
	EstimatedRuntimeSeconds int       `json:"estimated_runtime_seconds"`
	PollSuggestionSeconds   int       `json:"poll_suggestion_seconds"`
	ReceiptID               string    `json:"receipt_id"`
	AvailableAt             time.Time `json:"available_at"`
}

// Enqueue queues a task of taskType; params is encoded as JSON (the task
// type's params_schema checks it: 400 invalid_params). opts may be nil.
// For params checked at compile time, use TaskType.
func (c *Client) Enqueue(ctx context.Context, taskType string, params any, opts *EnqueueOptions) (*Enqueued, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encoding the params: %w", err)
	}
	body := enqueueBody(taskType, p, opts)
	var out Enqueued
	if _, err := c.Do(ctx, http.MethodPost, "/v1/tasks", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// enqueueBody is the body of POST /v1/tasks (and one task of
// POST /v1/tasks/batch).
func enqueueBody(taskType string, params json.RawMessage, opts *EnqueueOptions) map[string]any {
	body := map[string]any{"task_type": taskType, "params": params}
	if o := opts; o != nil {
		if o.Priority != 0 {
			body["priority"] = o.Priority
		}
		if o.Recipient != "" {
			body["recipient_ai"] = o.Recipient
		}
		if o.IdempotencyKey != "" {
			body["idempotency_key"] = o.IdempotencyKey
		}
		if o.Summary != "" {
			body["task_summary"] = o.Summary
		}
		if o.Delay > 0 {
			body["delay_seconds"] = int((o.Delay + time.Second - 1) / time.Second)
		}
		if !o.NotBefore.IsZero() {
			body["not_before"] = o.NotBefore
		}
		if o.MaxRetries != nil {
			body["max_retries"] = *o.MaxRetries
		}
		if len(o.ResourceIntents) > 0 {
			body["resource_intents"] = o.ResourceIntents
		}
		if len(o.After) > 0 {
			body["after"] = o.After
		}
		if o.AfterRule != "" {
			body["after_rule"] = o.AfterRule
		}
	}
	return body
}

// MaxEnqueueBatch is the most tasks one EnqueueBatch may carry.
const MaxEnqueueBatch = 1000

// NewTask is one task of an EnqueueBatch: its type, its params (encoded as
// JSON) and its options (may be nil; give each its own IdempotencyKey to
// make a retried batch safe).
type NewTask struct {
	Type    string
	Params  any
	Options *EnqueueOptions
}

// BatchEnqueued is one task's answer in an EnqueueBatch: the acknowledgement
// (IsDuplicate for a repeated idempotency key), or Err, the *APIError the
// single Enqueue would have returned.
type BatchEnqueued struct {
	*Enqueued
	Err error
}

// EnqueueBatch queues up to MaxEnqueueBatch tasks in one call
// (POST /v1/tasks/batch). Each task is judged and answered on its own, in
// the order given: one refused task leaves the others queued. The error is
// for the call as a whole (the gate unreachable, more than
// MaxEnqueueBatch tasks, a gate without the route: an *APIError with
// Status 404).
func (c *Client) EnqueueBatch(ctx context.Context, tasks []NewTask) ([]BatchEnqueued, error) {
	if len(tasks) == 0 || len(tasks) > MaxEnqueueBatch {
		return nil, fmt.Errorf("asyncgate: a batch holds 1 to %d tasks, not %d", MaxEnqueueBatch, len(tasks))
	}
	bodies := make([]map[string]any, len(tasks))
	for i, t := range tasks {
		p, err := json.Marshal(t.Params)
		if err != nil {
			return nil, fmt.Errorf("encoding the params of task %d: %w", i, err)
		}
		bodies[i] = enqueueBody(t.Type, p, t.Options)
	}
	var out struct {
		Results []struct {
			OK         bool      `json:"ok"`
			HTTPStatus int       `json:"http_status"`
			Error      string    `json:"error"`
			Detail     string    `json:"detail"`
			Task       *Enqueued `json:"task"`
		} `json:"results"`
	}
	if _, err := c.Do(ctx, http.MethodPost, "/v1/tasks/batch", map[string]any{"tasks": bodies}, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(tasks) {
		return nil, fmt.Errorf("asyncgate: the gate answered %d tasks with %d results", len(tasks), len(out.Results))
	}
	res := make([]BatchEnqueued, len(tasks))
	for i, r := range out.Results {
		if r.OK && r.Task != nil {
			res[i].Enqueued = r.Task
		} else {
			res[i].Err = &APIError{Status: r.HTTPStatus, Code: r.Error, Detail: r.Detail}
		}
	}
	return res, nil
}

// TaskType is a task type whose params have the Go type P: Enqueue takes a P.
type TaskType[P any] struct {
	Name string
	c    *Client
}

// NewTaskType returns the task type name of c with params of type P.
func NewTaskType[P any](c *Client, name string) TaskType[P] { return TaskType[P]{Name: name, c: c} }

// Enqueue queues a task of this type with params.
func (t TaskType[P]) Enqueue(ctx context.Context, params P, opts *EnqueueOptions) (*Enqueued, error) {
	return t.c.Enqueue(ctx, t.Name, params, opts)
}

// Artifact is one place a result can be found.
type Artifact struct {
	Type string          `json:"type"`
	URL  string          `json:"url,omitempty"`
	Ref  json.RawMessage `json:"ref,omitempty"`
}

// TaskResult is where a finished task's result is (Task.Result).
type TaskResult struct {
	Channel    string          `json:"result_channel,omitempty"`
	Pointer    string          `json:"result_pointer,omitempty"`
	Checksum   string          `json:"result_checksum,omitempty"`
	Summary    string          `json:"summary,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
	Artifacts  []Artifact      `json:"artifacts,omitempty"`
	ArchivedAt *time.Time      `json:"archived_at,omitempty"`
	// FromWorker says the worker gave Pointer: the gate does not fetch it
	// through a channel (save inline:); read it where it points.
	FromWorker bool `json:"result_pointer_from_worker,omitempty"`
}

// Task is a task as the gate shows it.
type Task struct {
	TaskID          string          `json:"task_id"`
	Tenant          string          `json:"tenant"`
	TaskType        string          `json:"task_type"`
	CreatedBy       string          `json:"created_by"`
	Recipient       string          `json:"recipient_ai"`
	Status          string          `json:"status"`
	Priority        int             `json:"priority"`
	Params          json.RawMessage `json:"params"`
	Summary         string          `json:"task_summary,omitempty"`
	IdempotencyKey  string          `json:"idempotency_key,omitempty"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	AvailableAt     time.Time       `json:"available_at"`
	WorkerID        string          `json:"worker_id,omitempty"`
	LeaseExpiresAt  *time.Time      `json:"lease_expires_at,omitempty"`
	CancelRequested bool            `json:"cancel_requested"`
	// CancelRequestedBy and CancelReason are who asked for the task's
	// cancel and why, while it is requested or once the task is canceled
	// (Status shows them; lists do not).
	CancelRequestedBy string      `json:"cancel_requested_by,omitempty"`
	CancelReason      string      `json:"cancel_reason,omitempty"`
	Attempts          int         `json:"attempts"`
	MaxRetries        int         `json:"max_retries"`
	LeaseCount        int         `json:"lease_count"`
	StartedAt         *time.Time  `json:"started_at,omitempty"`
	CompletedAt       *time.Time  `json:"completed_at,omitempty"`
	ProgressPercent   *float64    `json:"progress_percent,omitempty"`
	ProgressMessage   string      `json:"progress_message,omitempty"`
	Result            *TaskResult `json:"result,omitempty"`
	ErrorMessage      string      `json:"error_message,omitempty"`
	DeadReason        string      `json:"dead_reason,omitempty"`
	AssignReceiptID   string      `json:"assign_receipt_id"`
	// ResourceIntents are the resources the task runs under (its type's
	// and its enqueue's, normalized), fixed at enqueue.
	ResourceIntents []ResourceIntent `json:"resource_intents,omitempty"`
	// After names the tasks this task was queued after, in order, and
	// AfterRule when it may run (Status shows them; lists do not).
	After     []string `json:"after,omitempty"`
	AfterRule string   `json:"after_rule,omitempty"`
}

// Terminal reports whether the task has finished.
func (t *Task) Terminal() bool { return Terminal(t.Status) }

// Status returns a task.
func (c *Client) Status(ctx context.Context, taskID string) (*Task, error) {
	var t Task
	if _, err := c.Do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(taskID), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Cancel cancels a task: a queued one at once, a leased one is marked
// cancel_requested (its worker learns it from its next heartbeat).
func (c *Client) Cancel(ctx context.Context, taskID, reason string) (*Task, error) {
	var body any
	if reason != "" {
		body = map[string]string{"reason": reason}
	}
	var t Task
	if _, err := c.Do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(taskID)+"/cancel", body, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListOptions filter List.
type ListOptions struct {
	Status    []string // states, e.g. queued, leased
	TaskTypes []string
	Recipient string
	Cursor    string // the cursor of the previous page
	Limit     int    // 0: the gate's default
}

// List returns a page of the tasks the key may see, oldest first, and the
// cursor of the next page ("" after the last).
func (c *Client) List(ctx context.Context, o ListOptions) ([]Task, string, error) {
	q := url.Values{}
	if len(o.Status) > 0 {
		q.Set("status", strings.Join(o.Status, ","))
	}
	if len(o.TaskTypes) > 0 {
		q.Set("task_type", strings.Join(o.TaskTypes, ","))
	}
	if o.Recipient != "" {
		q.Set("recipient_ai", o.Recipient)
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	path := "/v1/tasks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		Tasks  []Task `json:"tasks"`
		Cursor string `json:"cursor"`
	}
	if _, err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, "", err
	}
	return out.Tasks, out.Cursor, nil
}

// WaitOptions configure Wait.
type WaitOptions struct {
	// Interval between polls (default 500 ms).
	Interval time.Duration
	// OnPoll, when set, sees the task after every poll (a progress bar).
	OnPoll func(*Task)
	// PollTimeout bounds each poll (0: only ctx bounds it), so a gate that
	// stops answering fails the wait instead of holding it forever.
	PollTimeout time.Duration
}

// Wait polls a task until it finishes (succeeded, canceled or dead letter)
// or ctx ends, and returns it. Put a deadline on ctx to bound the wait. A
// poll answered 408, 429 or 5xx with a readable Retry-After (the gate's 503
// while its database is away, for one) is tried again after that long (at
// most MaxRetryAfter, plus up to 10% jitter, at least the interval: a
// Retry-After of 0 or a date already past is tried again after the
// interval), unless ctx would end first; any other error, and such an
// answer without a Retry-After, ends the wait.
func (c *Client) Wait(ctx context.Context, taskID string, o *WaitOptions) (*Task, error) {
	interval := 500 * time.Millisecond
	var onPoll func(*Task)
	var pollTimeout time.Duration
	if o != nil {
		if o.Interval > 0 {
			interval = o.Interval
		}
		onPoll, pollTimeout = o.OnPoll, o.PollTimeout
	}
	poll := func() (*Task, error) {
		if pollTimeout <= 0 {
			return c.Status(ctx, taskID)
		}
		pctx, cancel := context.WithTimeout(ctx, pollTimeout)
		defer cancel()
		return c.Status(pctx, taskID)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		t, err := poll()
		if err != nil {
			d, ok := retryAfter(err)
			if !ok {
				return nil, err
			}
			d = max(d, interval)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
				return nil, err // the context would end before the gate asks to be tried again
			}
			wait := time.NewTimer(d)
			select {
			case <-ctx.Done():
				wait.Stop()
				return nil, ctx.Err()
			case <-wait.C:
			}
			tick.Reset(interval)
			continue
		}
		if onPoll != nil {
			onPoll(t)
		}
		if t.Terminal() {
			return t, nil
		}
		select {
		case <-ctx.Done():
			return t, ctx.Err()
		case <-tick.C:
		}
	}
}

// Result is a finished task's result, fetched through its result channel.
type Result struct {
	TaskID         string          `json:"task_id"`
	Channel        string          `json:"channel,omitempty"`
	ResultPointer  string          `json:"result_pointer,omitempty"`
	ResultChecksum string          `json:"result_checksum,omitempty"`
	ChecksumValid  *bool           `json:"checksum_valid,omitempty"`
	Content        json.RawMessage `json:"content,omitempty"`
	ContentBase64  []byte          `json:"content_base64,omitempty"`
	Summary        string          `json:"summary,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	Artifacts      []Artifact      `json:"artifacts,omitempty"`
	ArchivedAt     *time.Time      `json:"archived_at,omitempty"`
}

// ErrNoContent is returned by Decode when the result carries no payload (a
// worker that completed with a pointer only).
var ErrNoContent = errors.New("the result has no content")

// Decode decodes the payload (JSON content, or base64 content holding JSON)
// into v.
func (r *Result) Decode(v any) error {
	switch {
	case len(r.Content) > 0:
		return json.Unmarshal(r.Content, v)
	case len(r.ContentBase64) > 0:
		return json.Unmarshal(r.ContentBase64, v)
	}
	return ErrNoContent
}

// Result fetches a finished task's result through its channel. A 503 busy
// answer (too many large fetches) is an *APIError with RetryAfter set: try
// again after that long.
func (c *Client) Result(ctx context.Context, taskID string) (*Result, error) {
	var r Result
	if _, err := c.Do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(taskID)+"/result", nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ResultAs fetches a task's result and decodes its payload into an R.
func ResultAs[R any](ctx context.Context, c *Client, taskID string) (R, *Result, error) {
	var v R
	r, err := c.Result(ctx, taskID)
	if err != nil {
		return v, nil, err
	}
	if err := r.Decode(&v); err != nil {
		return v, r, err
	}
	return v, r, nil
}

// ProgressReport is one progress report of a worker.
type ProgressReport struct {
	Percent *float64  `json:"percent,omitempty"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
}

// Progress returns a task's progress history, newest first (limit 0: the
// gate's default).
func (c *Client) Progress(ctx context.Context, taskID string, limit int) ([]ProgressReport, error) {
	path := "/v1/tasks/" + url.PathEscape(taskID) + "/progress"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var out struct {
		Progress []ProgressReport `json:"progress"`
	}
	if _, err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out.Progress, nil
}

// Archive archives a finished task's result once it has been kept
// elsewhere; the task stays readable.
func (c *Client) Archive(ctx context.Context, taskID string) error {
	_, err := c.Do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(taskID)+"/archive", nil, nil)
	return err
}

// MaxRetryAfter caps the Retry-After Wait waits for after a refused poll;
// up to 10% jitter comes on top of the capped wait.
const MaxRetryAfter = 60 * time.Second

// retryAfterBound bounds the Retry-After parseRetryAfter reads, in both of
// its forms: a larger delay-seconds (even one past int64) or an HTTP-date
// further away reads as retryAfterBound.
const retryAfterBound = 24 * time.Hour

// parseRetryAfter reads a Retry-After header: delay-seconds, or an
// HTTP-date measured against the answer's Date (serverDate; the local clock
// when it is zero), at most retryAfterBound, and whether it could be read.
// It returns 0, false for an absent or unreadable header, and 0, true for
// delay-seconds 0 or a date already past (try again now).
func parseRetryAfter(v string, serverDate time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDelaySeconds(v) {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s > int64(retryAfterBound/time.Second) {
			return retryAfterBound, true // all digits, so err is only ever out of range
		}
		return time.Duration(s) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	now := serverDate
	if now.IsZero() {
		now = time.Now()
	}
	return min(max(at.Sub(now), 0), retryAfterBound), true
}

// isDelaySeconds reports whether v is a Retry-After's delay-seconds: one or
// more ASCII digits, no sign (RFC 9110 §10.2.3).
func isDelaySeconds(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

// retryAfter returns how long a temporary answer (408, 429, 5xx) asks to
// wait before the next attempt: its Retry-After, at most MaxRetryAfter, plus
// up to 10% jitter (the cap comes first, so a Retry-After at or past it is
// jittered too), and true; 0 and true for a Retry-After of 0 (try again
// now). It is 0 and false for other errors and answers without a readable
// Retry-After.
func retryAfter(err error) (time.Duration, bool) {
	var ae *APIError
	if !errors.As(err, &ae) || !(ae.HasRetryAfter || ae.RetryAfter > 0) ||
		!(ae.Status >= 500 || ae.Status == http.StatusTooManyRequests || ae.Status == http.StatusRequestTimeout) {
		return 0, false
	}
	d := min(max(ae.RetryAfter, 0), MaxRetryAfter)
	return d + time.Duration(rand.Float64()*0.1*float64(d)), true
}
