package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to the gate's canonical worker API (POST /v1/leases and
// /v1/leases/{lease_id}/…) over HTTP. It is safe for concurrent use. Most
// workers use it through a Runner; it is exported for workers that want to
// drive the protocol themselves.
type Client struct {
	base string
	key  string
	hc   *http.Client
	ua   string
	// inject writes a request's trace context (WithTracePropagator).
	inject func(context.Context, http.Header)
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient sets the HTTP client (default: one with a 90 s timeout, above
// the gate's longest long-poll).
func WithHTTPClient(hc *http.Client) ClientOption { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) ClientOption { return func(c *Client) { c.ua = ua } }

// WithTracePropagator sets how a request carries the caller's trace when its
// context has none from WithTrace: inject writes the headers. With
// OpenTelemetry:
//
//	WithTracePropagator(func(ctx context.Context, h http.Header) {
//		otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
//	})
func WithTracePropagator(inject func(ctx context.Context, h http.Header)) ClientOption {
	return func(c *Client) { c.inject = inject }
}

// NewClient returns a Client for the gate at baseURL (for example
// "http://127.0.0.1:8080") that authenticates with the bearer key.
func NewClient(baseURL, key string, opts ...ClientOption) *Client {
	c := &Client{
		base: strings.TrimRight(baseURL, "/"),
		key:  key,
		hc:   &http.Client{Timeout: 90 * time.Second},
		ua:   "asyncgate-worker-go/1",
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL returns the gate's base URL.
func (c *Client) BaseURL() string { return c.base }

// Task is the work specification inside an offer. Fields the SDK does not
// know are ignored, so a newer gate does not break an older worker.
type Task struct {
	ID              string          `json:"task_id"`
	Type            string          `json:"task_type"`
	Params          json.RawMessage `json:"params"`
	Priority        int             `json:"priority"`
	Summary         string          `json:"task_summary,omitempty"`
	CreatedBy       string          `json:"created_by,omitempty"`
	Recipient       string          `json:"recipient_ai,omitempty"`
	Attempts        int             `json:"attempts"`
	MaxRetries      int             `json:"max_retries"`
	CancelRequested bool            `json:"cancel_requested"`
	CreatedAt       time.Time       `json:"created_at"`
	// Traceparent and Tracestate are the W3C trace context the gate hands
	// out with the lease: the producer's trace, continued by the gate.
	// Calls about the lease carry them; a handler that records spans of
	// its own starts them with this parent (Trace(ctx) returns it too).
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
	// ResourceLeases are the resource leases granted with this run of the
	// task (its resource intents), as the offer listed them; set by
	// Client.Lease, so a Runner's handler sees them too.
	ResourceLeases []ResourceLease `json:"-"`
	// Dependencies are the outcomes of the tasks this one waited on (it was
	// enqueued with after), in that order; set by Client.Lease.
	Dependencies []Dependency `json:"-"`
}

// Dependency is how a task this one waited on finished: its status and,
// when it succeeded, where its result is.
type Dependency struct {
	TaskID      string          `json:"task_id"`
	TaskType    string          `json:"task_type"`
	Status      string          `json:"status"`
	CompletedAt *time.Time      `json:"completed_at,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       string          `json:"error_message,omitempty"`
	DeadReason  string          `json:"dead_reason,omitempty"`
	// Truncated is set when the offer's outcomes passed their size bound
	// (1 MB of results and errors) before this one: Result, Error and
	// DeadReason are then left out, not empty; read the task (the client
	// SDK's Get, or GET /v1/tasks/{id}) for them.
	Truncated bool `json:"truncated,omitempty"`
}

// FencingToken returns the fencing token of this run's lease on resource
// (its name as the gate normalized it), or 0 when the run holds none on it.
// Pass it with every change the task makes to the resource, so that the
// system holding it refuses a change from a run whose lease already ended.
func (t *Task) FencingToken(resource string) int64 {
	for _, l := range t.ResourceLeases {
		if l.Resource == resource {
			return l.FencingToken
		}
	}
	return 0
}

// Bind decodes the task's params into v.
func (t *Task) Bind(v any) error {
	if len(t.Params) == 0 {
		return nil
	}
	if err := json.Unmarshal(t.Params, v); err != nil {
		return fmt.Errorf("task %s params: %w", t.ID, err)
	}
	return nil
}

// Offer is a lease grant: transient until the worker accepts it.
type Offer struct {
	LeaseID        string    `json:"lease_id"`
	RunID          string    `json:"run_id"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	Attempt        int       `json:"attempt"`
	Task           Task      `json:"task"`
	// ServerTime is the gate's clock when it granted the lease (zero from a
	// gate that does not send it).
	ServerTime time.Time `json:"server_time"`
	// ResourceLeases are the leases the gate granted with the task on the
	// resources its intents name, each with its FencingToken: pass the
	// token with every change the task makes to that resource.
	ResourceLeases []ResourceLease `json:"resource_leases,omitempty"`
	// Dependencies are the outcomes of the tasks the task waited on.
	Dependencies []Dependency `json:"dependencies,omitempty"`

	// ttl is the lease's length as the gate granted it, and deadline the
	// conservative local expiry (see leaseClock). Set by Client.Lease.
	ttl      time.Duration
	deadline time.Time
}

// TTL returns the lease length the gate granted, measured against the gate's
// clock (zero for an offer not returned by Client.Lease).
func (o *Offer) TTL() time.Duration { return o.ttl }

// LocalDeadline returns the conservative local expiry of the lease: after
// it, the worker must assume the lease is lost (KLIS-3 §6.2).
func (o *Offer) LocalDeadline() time.Time { return o.deadline }

// LeaseRequest is the body of POST /v1/leases.
type LeaseRequest struct {
	// WorkerID is "{type}.{instance}"; empty means the key's own worker id.
	WorkerID string `json:"worker_id,omitempty"`
	// TaskTypes restricts offers to these task types (empty: any).
	TaskTypes []string `json:"task_types,omitempty"`
	// MaxTasks is the batch size (1..100, default 1).
	MaxTasks int `json:"max_tasks,omitempty"`
	// LeaseSeconds overrides the task type's lease length (0: the type's).
	LeaseSeconds int `json:"lease_seconds,omitempty"`
	// WaitSeconds long-polls up to this long (the gate caps it at 30).
	WaitSeconds float64 `json:"wait_seconds,omitempty"`
}

// HeartbeatRequest extends a lease and optionally reports progress.
type HeartbeatRequest struct {
	TaskID          string   `json:"task_id,omitempty"`
	ProgressPercent *float64 `json:"progress_percent,omitempty"`
	ProgressMessage string   `json:"progress_message,omitempty"`
	// ExtendLeaseSeconds is the new lease length from now (0: the lease's own).
	ExtendLeaseSeconds int `json:"extend_lease_seconds,omitempty"`
}

// HeartbeatResult is the gate's answer to a heartbeat.
type HeartbeatResult struct {
	Status          string    `json:"status"`
	LeaseExpiresAt  time.Time `json:"lease_expires_at"`
	CancelRequested bool      `json:"cancel_requested"`
	// ServerTime is the gate's clock when it extended the lease (zero from
	// a gate that does not send it).
	ServerTime time.Time `json:"server_time"`

	ttl      time.Duration
	deadline time.Time
}

// Artifact is one located output of a task (a URL or an opaque reference).
type Artifact struct {
	Type string          `json:"type"`
	URL  string          `json:"url,omitempty"`
	Ref  json.RawMessage `json:"ref,omitempty"`
}

// Completion is the body of POST /v1/leases/{lease_id}/complete. A success
// must be locatable: give Pointer, Artifacts or DeliveryProof, or an inline
// payload in Result (JSON) or ResultBase64 that the gate stores through a
// result channel.
type Completion struct {
	TaskID         string          `json:"task_id,omitempty"`
	Summary        string          `json:"summary,omitempty"`
	ResultChannel  string          `json:"result_channel,omitempty"`
	ResultPointer  string          `json:"result_pointer,omitempty"`
	ResultChecksum string          `json:"result_checksum,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	Artifacts      []Artifact      `json:"artifacts,omitempty"`
	DeliveryProof  json.RawMessage `json:"delivery_proof,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	ResultBase64   *string         `json:"result_base64,omitempty"`
}

// CompleteResult is the gate's answer to a completion.
type CompleteResult struct {
	Status         string `json:"status"`
	TaskID         string `json:"task_id"`
	ReceiptID      string `json:"receipt_id"`
	Duplicate      bool   `json:"duplicate"`
	ResultChannel  string `json:"result_channel,omitempty"`
	ResultPointer  string `json:"result_pointer,omitempty"`
	ResultChecksum string `json:"result_checksum,omitempty"`
}

// Failure is the body of POST /v1/leases/{lease_id}/fail.
type Failure struct {
	TaskID       string          `json:"task_id,omitempty"`
	ErrorMessage string          `json:"error_message"`
	Retryable    bool            `json:"retryable"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
}

// FailResult is the gate's answer to a failure report.
type FailResult struct {
	Status           string     `json:"status"` // "failed" (will retry), "dead_letter" or "canceled"
	TaskID           string     `json:"task_id"`
	WillRetry        bool       `json:"will_retry"`
	RetryScheduledAt *time.Time `json:"retry_scheduled_at,omitempty"`
	ReceiptID        string     `json:"receipt_id"`
	Duplicate        bool       `json:"duplicate"`
}

// APIError is an error answer of the gate: {"error": code, "detail": text}.
type APIError struct {
	Status int
	Code   string
	Detail string
	// RetryAfter is the answer's Retry-After (0 when absent, unreadable or
	// already past): how long the gate asks the caller to wait before trying
	// again. The gate sets it on every 429 and 503 answer; the Runner waits
	// at least that long (at most MaxRetryAfter, plus up to 10% jitter)
	// before its next attempt.
	RetryAfter time.Duration
	// ServerTime is the gate's clock when it decided the refusal, on the
	// refusals that judge a lease by it (resource leases: lease_expired,
	// verify_required, quota_exceeded); zero otherwise.
	ServerTime time.Time
	// TaskStatus is the state of the task on a 409 lease_expired answer to
	// the worker that held the lease ("succeeded": the task already ended,
	// its completion taken); empty otherwise (see TaskFinished).
	TaskStatus string
}

// TaskFinished reports the state of the task when err is a lease_expired
// answer saying the task already ended ("succeeded", "canceled",
// "dead_letter", "archived"), which the gate tells only the worker that held
// the lease; "" for any other error, a lost lease included.
func TaskFinished(err error) string {
	var ae *APIError
	if !errors.As(err, &ae) || !errors.Is(ae, ErrLeaseLost) {
		return ""
	}
	switch ae.TaskStatus {
	case "succeeded", "canceled", "dead_letter", "archived":
		return ae.TaskStatus
	}
	return ""
}

// Error implements error.
func (e *APIError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("gate answered %d %s", e.Status, e.Code)
	}
	return fmt.Sprintf("gate answered %d %s: %s", e.Status, e.Code, e.Detail)
}

// Is makes errors.Is(err, ErrLeaseLost) true for a 409 lease_expired.
func (e *APIError) Is(target error) bool {
	return target == ErrLeaseLost && e.Status == http.StatusConflict && e.Code == "lease_expired"
}

// Temporary reports whether err is worth retrying later: a network error, a
// timeout, or a 408, 429, 502, 503, 504 or other 5xx answer. 4xx answers are
// permanent: the same request would be refused again.
func Temporary(err error) bool {
	if err == nil {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusTooManyRequests || ae.Status == http.StatusRequestTimeout
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, context.DeadlineExceeded)
}

// do sends a JSON request and decodes a 2xx answer into out. It returns the
// answer's status, its Date header (zero when absent) and an *APIError for
// any other status.
func (c *Client) do(ctx context.Context, method, path string, body, out any) (int, time.Time, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, time.Time{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, time.Time{}, err
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
		return 0, time.Time{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 32<<20))
	if err != nil {
		return res.StatusCode, time.Time{}, err
	}
	date, _ := http.ParseTime(res.Header.Get("Date"))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		ae := &APIError{Status: res.StatusCode}
		var eb struct {
			Error      string    `json:"error"`
			Detail     string    `json:"detail"`
			ServerTime time.Time `json:"server_time"`
			TaskStatus string    `json:"task_status"`
		}
		if json.Unmarshal(raw, &eb) == nil && eb.Error != "" {
			ae.Code, ae.Detail, ae.ServerTime, ae.TaskStatus = eb.Error, eb.Detail, eb.ServerTime, eb.TaskStatus
		} else {
			ae.Code = http.StatusText(res.StatusCode)
			ae.Detail = strings.TrimSpace(string(raw))
			if len(ae.Detail) > 200 {
				ae.Detail = ae.Detail[:200]
			}
		}
		ae.RetryAfter = parseRetryAfter(res.Header.Get("Retry-After"), date)
		return res.StatusCode, date, ae
	}
	if out != nil && res.StatusCode != http.StatusNoContent && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, date, fmt.Errorf("decoding the gate's answer to %s %s: %w", method, path, err)
		}
	}
	return res.StatusCode, date, nil
}

// leaseClock turns the gate's lease_expires_at into a lease length and a
// conservative local deadline (KLIS-3 §6.2). The gate's clock is the truth:
// the remaining time is measured against the answer's server_time (the
// gate's clock when it granted or extended the lease, to the microsecond)
// or, from a gate that does not send it, against the Date header (whole
// seconds, so one second is taken off). Either was read at some local
// instant between sending the request and receiving the answer; the deadline
// counts from the later of the send and the arrival less one more second, so
// network latency only makes it earlier, and a long-poll that waited W
// seconds does not lose W seconds of the lease. Without either the local
// clock is used.
func leaseClock(sent, received, serverTime, serverDate, expires time.Time) (ttl time.Duration, deadline time.Time) {
	switch {
	case !serverTime.IsZero():
		ttl = expires.Sub(serverTime)
	case !serverDate.IsZero():
		ttl = expires.Sub(serverDate) - time.Second
	default:
		ttl = time.Until(expires)
	}
	if ttl < 0 {
		ttl = 0
	}
	from := sent
	if r := received.Add(-time.Second); r.After(from) {
		from = r
	}
	return ttl, from.Add(ttl)
}

// Lease asks for up to req.MaxTasks offers. No work (204) returns an empty
// slice and no error.
func (c *Client) Lease(ctx context.Context, req LeaseRequest) ([]Offer, error) {
	var out struct {
		Leases []Offer `json:"leases"`
	}
	sent := time.Now()
	status, date, err := c.do(ctx, http.MethodPost, "/v1/leases", req, &out)
	if err != nil {
		return nil, err
	}
	received := time.Now()
	if status == http.StatusNoContent {
		return nil, nil
	}
	for i := range out.Leases {
		o := &out.Leases[i]
		o.ttl, o.deadline = leaseClock(sent, received, o.ServerTime, date, o.LeaseExpiresAt)
		o.Task.ResourceLeases = o.ResourceLeases
		o.Task.Dependencies = o.Dependencies
	}
	return out.Leases, nil
}

// Accept turns an offer into the worker's obligation (receipt task.accepted).
// Accepting twice is idempotent.
func (c *Client) Accept(ctx context.Context, leaseID, taskID string) error {
	_, _, err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(leaseID)+"/accept", map[string]string{"task_id": taskID}, nil)
	return err
}

// Heartbeat extends the lease and reports progress. A lost lease answers
// an error for which errors.Is(err, ErrLeaseLost) holds.
func (c *Client) Heartbeat(ctx context.Context, leaseID string, req HeartbeatRequest) (*HeartbeatResult, error) {
	var out HeartbeatResult
	sent := time.Now()
	_, date, err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(leaseID)+"/heartbeat", req, &out)
	if err != nil {
		return nil, err
	}
	out.ttl, out.deadline = leaseClock(sent, time.Now(), out.ServerTime, date, out.LeaseExpiresAt)
	return &out, nil
}

// Complete reports success. Completing the same lease again returns the
// first outcome with Duplicate set.
func (c *Client) Complete(ctx context.Context, leaseID string, comp Completion) (*CompleteResult, error) {
	var out CompleteResult
	if _, _, err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(leaseID)+"/complete", comp, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DependencyResult reads the payload of task depID, one that the task of
// the live lease leaseID waits (or waited) on, under that lease: a fan-in
// reads its inputs whatever channel the gate stored them in (GET
// /v1/tasks/{id}/result?lease_id=). A JSON payload comes as its JSON text,
// any other as its bytes. A result with no payload (located by artifacts
// or a delivery proof only) is nil; a payload whose checksum does not
// match is an error.
func (c *Client) DependencyResult(ctx context.Context, leaseID, depID string) ([]byte, error) {
	var out struct {
		Content       json.RawMessage `json:"content"`
		ContentBase64 string          `json:"content_base64"`
		ChecksumValid *bool           `json:"checksum_valid"`
	}
	path := "/v1/tasks/" + url.PathEscape(depID) + "/result?lease_id=" + url.QueryEscape(leaseID)
	if _, _, err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	if out.ChecksumValid != nil && !*out.ChecksumValid {
		return nil, fmt.Errorf("worker: the result of %s does not match its checksum", depID)
	}
	if out.ContentBase64 != "" {
		return base64.StdEncoding.DecodeString(out.ContentBase64)
	}
	if len(out.Content) == 0 {
		return nil, nil
	}
	return out.Content, nil
}

// Fail reports a failed attempt; the gate's retry policy decides whether the
// task is retried or dead-lettered.
func (c *Client) Fail(ctx context.Context, leaseID string, f Failure) (*FailResult, error) {
	var out FailResult
	if _, _, err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(leaseID)+"/fail", f, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SnoozeRequest is the body of a snooze.
type SnoozeRequest struct {
	TaskID string `json:"task_id,omitempty"`
	// Seconds is how long the task waits before it is offered again (1 s
	// to a year).
	Seconds int64  `json:"snooze_seconds"`
	Reason  string `json:"reason,omitempty"`
}

// SnoozeResult is the gate's answer to a snooze.
type SnoozeResult struct {
	Status     string `json:"status"`
	LeaseID    string `json:"lease_id"`
	TaskID     string `json:"task_id,omitempty"`
	TaskStatus string `json:"task_status,omitempty"`
	// AvailableAt is when the task is offered again (nil when the lease
	// was already gone, or the task was canceled instead).
	AvailableAt *time.Time `json:"available_at,omitempty"`
}

// Snooze gives the task back until req.Seconds from now without using an
// attempt (a task whose cancel was requested is canceled instead).
// Snoozing the worker's own lease that is gone is a no-op; a lease id
// that is not its own is a not_found error, as an unknown one.
func (c *Client) Snooze(ctx context.Context, leaseID string, req SnoozeRequest) (*SnoozeResult, error) {
	var out SnoozeResult
	if _, _, err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(leaseID)+"/snooze", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Release gives the task back to the queue at once without using an attempt
// (a task whose cancel was requested is canceled instead). Releasing the
// worker's own lease that is gone is a no-op; a lease id that is not its
// own is a not_found error, as an unknown one.
func (c *Client) Release(ctx context.Context, leaseID, taskID, reason string) error {
	_, _, err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(leaseID)+"/release",
		map[string]string{"task_id": taskID, "reason": reason}, nil)
	return err
}
