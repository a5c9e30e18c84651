package host

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Error codes. They are part of the public contract: HTTP answers carry them as
// {"error": code, "detail": text} and MCP tool errors carry the same code.
const (
	CodeBadRequest       = "bad_request"        // malformed input (400)
	CodeInvalidWorkerID  = "invalid_worker_id"  // worker_id does not match {type}.{instance} (400)
	CodeInvalidParams    = "invalid_params"     // task params fail the task type's schema (400)
	CodeUnknownTaskType  = "unknown_task_type"  // no such task type is registered (400)
	CodeTaskTypeDisabled = "task_type_disabled" // the task type exists but is disabled (400)
	CodeNotFound         = "not_found"          // no such task, lease, receipt or key (404)
	CodeLeaseExpired     = "lease_expired"      // the lease is no longer held (409)
	CodeConflict         = "conflict"           // the request conflicts with the current state (409)
	// CodeIdempotencyConflict: an idempotency key reused for a different task (409).
	CodeIdempotencyConflict = "idempotency_conflict"
	CodeNotLocatable        = "not_locatable"        // a success without pointer, artifacts or delivery proof (422)
	CodeInvalidReceipt      = "invalid_receipt"      // a receipt breaks a ledger invariant (422)
	CodeTooLarge            = "too_large"            // a body or array over its limit (413)
	CodeUnauthorized        = "unauthorized"         // no or bad credentials (401)
	CodeForbidden           = "forbidden"            // credentials lack the role (403)
	CodeDatabaseUnavailable = "database_unavailable" // the store cannot be used (503)
	CodeChannelError        = "channel_error"        // a result channel failed; the call may be retried (502)
	CodeForeignPointer      = "foreign_pointer"      // a result_pointer of a channel the gate manages that it did not store for this lease (422)
	CodeChecksumMismatch    = "checksum_mismatch"    // a result_checksum given with a payload is not the payload's sha256 (422)
	CodeBusy                = "busy"                 // too many large result fetches at once; retry after a moment (503)
	CodePluginTimeout       = "plugin_timeout"       // a plugin call ran past its deadline and was stopped; the detail names the plugin (504)
	CodePluginNotReady      = "plugin_not_ready"     // a plugin the call needs is still loading at start-up; retry after Retry-After (503)
	CodeInternal            = "internal_error"       // a bug; never caused by input (500)

	// CodePluginFault: a plugin the call needs failed — it trapped,
	// panicked, answered what its schema refuses, or returned an error of
	// its own instead of a verdict — so nothing was judged or written; the
	// detail names the plugin. The gate's fault, not the input's: the call
	// may be retried (the faulting instance is discarded) (502).
	CodePluginFault = "plugin_fault"
	// CodePluginUnavailable: a plugin a task type names is not loaded (it
	// left the plugins folder, was refused when it loaded, or is now a
	// plugin of another kind or refuses the type's config); the detail
	// names the type and the plugin. An operator must restore it or change
	// the type; retry after Retry-After (503).
	CodePluginUnavailable = "plugin_unavailable"

	// Resource leases (KLIS-3).
	CodeInvalidResource  = "invalid_resource"  // a resource name breaks a rule; the detail names it (400)
	CodeResourceConflict = "resource_conflict" // a conflicting lease is held; the detail names it (409)
	CodeVerifyRequired   = "verify_required"   // the holder declared DIE_RESTART and must VERIFY_ALL first (409)
	CodeLeaseRevoked     = "lease_revoked"     // an operator revoked the resource lease; it is no longer held (409)
	CodeSessionEnded     = "session_ended"     // the resource session ended or expired, with every lease in it (409)
	CodeQuotaExceeded    = "quota_exceeded"    // a per-holder lease quota would be exceeded (429)
)

// Error is the one error type of the domain: a machine code and a human detail.
// Wrap a cause with Err so errors.Is and errors.As see through it.
type Error struct {
	Code   string
	Detail string
	Err    error
	// ServerTime, when set, is the server clock at which the refusal was
	// decided; the doors answer it as server_time (resource lease refusals
	// carry it, so a holder judges its leases by the gate's clock).
	ServerTime time.Time
	// TaskStatus, when set, is the state of the task a lease_expired
	// refusal's lease belonged to, told only to the worker that held it
	// (so it knows its task already ended); the doors answer it as
	// task_status.
	TaskStatus string
	// RetryAfter, when set, is how long until the refusal's cause is known
	// to pass (a budget's next token, a quota window's end); the doors
	// answer it as Retry-After and retry_after_seconds instead of the
	// code's usual wait.
	RetryAfter time.Duration
}

// Error implements the error interface.
func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Code
	}
	return e.Code + ": " + e.Detail
}

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// At sets the server time the refusal was decided at and returns e.
func (e *Error) At(now time.Time) *Error {
	e.ServerTime = now
	return e
}

// Wait sets how long until the refusal's cause passes and returns e.
func (e *Error) Wait(d time.Duration) *Error {
	e.RetryAfter = d
	return e
}

// ErrorRetryAfter returns the wait an *Error in err's chain names
// (Error.RetryAfter), or 0.
func ErrorRetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// RetryAfterSeconds is d in whole seconds, rounded up, at least 1: a
// Retry-After that never asks a client to come back before the wait is
// over.
func RetryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// ErrorTaskStatus returns the task status an *Error in err's chain
// carries (Error.TaskStatus), or "".
func ErrorTaskStatus(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.TaskStatus
	}
	return ""
}

// ErrorServerTime returns the server time an *Error in err's chain was
// decided at, or the zero time.
func ErrorServerTime(err error) time.Time {
	var e *Error
	if errors.As(err, &e) {
		return e.ServerTime
	}
	return time.Time{}
}

// Errorf returns an *Error with the given code and a formatted detail.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Detail: clipDetail(fmt.Sprintf(format, args...))}
}

// MaxErrorDetail bounds an error's detail in bytes. Details quote what the
// caller sent (an id, a type name) so the caller can see what was
// refused; a 900 KB id is quoted by its start, not echoed whole into an
// agent's context.
const MaxErrorDetail = 2048

// clipDetail cuts d to MaxErrorDetail bytes at a character boundary,
// saying so.
func clipDetail(d string) string {
	if len(d) <= MaxErrorDetail {
		return d
	}
	n := MaxErrorDetail - 64
	for n > 0 && !utf8.RuneStart(d[n]) {
		n--
	}
	return d[:n] + fmt.Sprintf("… (%d bytes more not shown)", len(d)-n)
}

// WrapError returns an *Error with the given code and detail that wraps err.
func WrapError(code string, err error, detail string) *Error {
	return &Error{Code: code, Detail: detail, Err: err}
}

// ErrorCode returns the code of the first *Error in err's chain, or
// CodeInternal for any other non-nil error, or "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorDetail returns the detail of the first *Error in err's chain, or err's
// text for any other error.
func ErrorDetail(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Detail
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// IsCode reports whether err carries the given code.
func IsCode(err error, code string) bool { return err != nil && ErrorCode(err) == code }

// HTTPStatus maps an error code to its HTTP status. It is the one place where
// codes meet status numbers.
func HTTPStatus(code string) int {
	switch code {
	case CodeBadRequest, CodeInvalidWorkerID, CodeInvalidParams, CodeUnknownTaskType, CodeTaskTypeDisabled:
		return 400
	case CodeUnauthorized:
		return 401
	case CodeForbidden:
		return 403
	case CodeNotFound:
		return 404
	case CodeLeaseExpired, CodeConflict, CodeIdempotencyConflict:
		return 409
	case CodeTooLarge:
		return 413
	case CodeUnsupportedMediaType:
		return 415
	case CodeNotLocatable, CodeInvalidReceipt, CodeForeignPointer, CodeChecksumMismatch:
		return 422
	case CodeChannelError, CodePluginFault:
		return 502
	case CodeDatabaseUnavailable, CodeBusy, CodePluginNotReady, CodePluginUnavailable:
		return 503
	case CodePluginTimeout:
		return 504
	case CodeInvalidResource, CodeUnknownDependency:
		return 400
	case CodeInvalidWorkflow, CodeUnknownStep, CodeDuplicateStep, CodeWorkflowCycle, CodeTooManySteps:
		return 400
	case CodeDependencyFailed, CodeTooManyWaiters, CodeDependencyTooDeep, CodeOwnerRevoked:
		return 409
	case CodeResourceConflict, CodeVerifyRequired, CodeLeaseRevoked, CodeSessionEnded:
		return 409
	case CodeQuotaExceeded:
		return 429
	case CodeInvalidEmailAddress, CodeEmailRecipientNotAllowed:
		return 400
	case CodeNotEmailChannel:
		return 409
	case CodeMailUnavailable, CodeIssuerUnavailable:
		return 503
	case CodeTokenNotMapped, CodeInsufficientScope:
		return 403
	case CodeInvalidCron, CodeInvalidTimezone, CodeInvalidInterval, CodeInvalidMissedPolicy:
		return 400
	case CodeTenantMismatch, CodeReadOnlyField, CodeInvalidTaskType:
		return 400
	default:
		return 500
	}
}

// Task dependencies (issue 39).
const (
	// CodeUnknownDependency: an after id names no task the caller may read
	// (unknown, another tenant's, or outside the caller's visibility) (400).
	CodeUnknownDependency = "unknown_dependency"
	// CodeDependencyFailed: a dependency has already finished in a way that
	// can never meet the rule (dead letter or canceled under all_succeeded)
	// (409).
	CodeDependencyFailed = "dependency_failed"
	// CodeTooManyWaiters: a dependency already has as many tasks waiting
	// on it as one task may have (409).
	CodeTooManyWaiters = "too_many_waiters"
	// CodeDependencyTooDeep: a dependency is itself waiting at the deepest
	// a chain of waiting tasks may be (409).
	CodeDependencyTooDeep = "dependency_too_deep"
)

// Email (issue 13).
const (
	CodeInvalidEmailAddress      = "invalid_email_address"       // not one bare address, or a header with CR/LF (400)
	CodeEmailRecipientNotAllowed = "email_recipient_not_allowed" // the address is outside the operator's allowlist (400)
	CodeNotEmailChannel          = "not_email_channel"           // the task's result did not go through the email channel (409)
	CodeMailUnavailable          = "mail_unavailable"            // no mail server configured, or it cannot be reached now (503)
)

// OAuth access tokens (issue 44).
const (
	CodeTokenNotMapped    = "token_not_mapped"   // a valid access token whose claims no configured mapping names (403)
	CodeInsufficientScope = "insufficient_scope" // a valid access token without a scope the gate requires (403)
	// CodeIssuerUnavailable: an access token's issuer cannot be reached to
	// read its discovery document or signing keys, so the token cannot be
	// judged; retry after Retry-After (503).
	CodeIssuerUnavailable = "issuer_unavailable"
)

// Admin routes (task types, keys).
const (
	// CodeTenantMismatch: a body names a tenant other than the one the
	// call acts on (?tenant=, else the key's own) (400).
	CodeTenantMismatch = "tenant_mismatch"
	// CodeReadOnlyField: a task type body sets a field the gate keeps
	// (created_at, updated_at, retry_policy, paused) to a value other than
	// the stored one (400).
	CodeReadOnlyField = "read_only_field"
	// CodeInvalidTaskType: a task type breaks a rule of its own: a
	// description over MaxTaskTypeDescription characters, a validator
	// named twice, an escalate policy whose supervisor is no principal;
	// the detail names the field (400).
	CodeInvalidTaskType = "invalid_task_type"
)

// CodeUnsupportedMediaType: a request body sent with a Content-Encoding
// other than identity; the gate never inflates a body (415).
const CodeUnsupportedMediaType = "unsupported_media_type"
