package host

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"time"
)

// FailureKind says what happened to an attempt.
type FailureKind string

// Failure kinds a RetryPolicy is asked about.
const (
	FailureError  FailureKind = "failure" // the worker reported a failure
	FailureExpiry FailureKind = "expiry"  // the lease expired
)

// FailureInput is what a RetryPolicy decides on. It is also the JSON input of a
// policy plugin's decide export.
type FailureInput struct {
	TaskID        string          `json:"task_id"`
	TaskType      string          `json:"task_type"`
	Kind          FailureKind     `json:"kind"`
	Retryable     bool            `json:"retryable"`
	Attempts      int             `json:"attempts"`    // failures so far, this one included
	MaxRetries    int             `json:"max_retries"` // failures allowed before dead letter
	LeaseExpiries int             `json:"lease_expiries"`
	Error         string          `json:"error,omitempty"`
	Config        json.RawMessage `json:"config,omitempty"`
}

// Action is what a policy decided.
type Action string

// Policy actions.
const (
	ActionRetry      Action = "retry"
	ActionDeadLetter Action = "dead_letter"
	ActionEscalate   Action = "escalate" // dead letter, and escalate to EscalateTo
)

// Decision is a RetryPolicy's answer; it is also the JSON output of a policy
// plugin's decide export.
type Decision struct {
	Action       Action  `json:"action"`
	DelaySeconds float64 `json:"delay_seconds,omitempty"`
	Reason       string  `json:"reason,omitempty"`
	EscalateTo   string  `json:"escalate_to,omitempty"`
}

// RetryPolicy decides what happens after a failed attempt.
type RetryPolicy interface {
	Decide(ctx context.Context, in FailureInput) (Decision, error)
}

// ExponentialBackoff is the seed's retry policy: retry a retryable failure after
// min(Base·2^(attempts-1), Max) with ±Jitter, until attempts exceed MaxRetries.
type ExponentialBackoff struct {
	Base   time.Duration // default 300 s (the spec's retry_delay)
	Max    time.Duration // default 3600 s
	Jitter float64       // fraction of the delay, default 0.1
}

var _ RetryPolicy = ExponentialBackoff{}

// Decide implements RetryPolicy.
func (p ExponentialBackoff) Decide(_ context.Context, in FailureInput) (Decision, error) {
	if !in.Retryable {
		return Decision{Action: ActionDeadLetter, Reason: ReasonFatalError}, nil
	}
	if in.Attempts > in.MaxRetries {
		return Decision{Action: ActionDeadLetter, Reason: ReasonMaxRetriesExceeded}, nil
	}
	return Decision{Action: ActionRetry, DelaySeconds: p.Delay(in.Attempts).Seconds()}, nil
}

// Delay returns the backoff before the retry that follows failure number attempts.
func (p ExponentialBackoff) Delay(attempts int) time.Duration {
	base, maxd, jit := p.Base, p.Max, p.Jitter
	if base <= 0 {
		base = 300 * time.Second
	}
	if maxd <= 0 {
		maxd = time.Hour
	}
	if jit == 0 {
		jit = 0.1
	}
	d := base
	for i := 1; i < attempts && d < maxd; i++ {
		d *= 2
	}
	if d > maxd {
		d = maxd
	}
	if jit > 0 {
		d += time.Duration((rand.Float64()*2 - 1) * jit * float64(d))
	}
	if d < 0 {
		d = 0
	}
	return d
}

// Validator checks a task's params for a task type beyond its JSON Schema (for
// example, refusing directory traversal). A nil error means valid; an *Error with
// CodeInvalidParams says why not.
type Validator interface {
	Validate(ctx context.Context, taskType string, params json.RawMessage) error
}

// ChannelCapabilities describes a result channel, as the spec's capabilities().
type ChannelCapabilities struct {
	MaxSizeBytes        int64 `json:"max_size_bytes"`
	SupportsAttachments bool  `json:"supports_attachments"`
	SupportsStreaming   bool  `json:"supports_streaming"`
	RetentionDays       int   `json:"retention_days"`
	HumanReadable       bool  `json:"human_readable"`
}

// Channel stores result payloads and hands back opaque pointers "channel:data".
type Channel interface {
	Put(ctx context.Context, taskID string, payload []byte) (pointer string, err error)
	Get(ctx context.Context, pointer string) ([]byte, error)
	Ack(ctx context.Context, pointer string) error
	Capabilities(ctx context.Context) (ChannelCapabilities, error)
}
