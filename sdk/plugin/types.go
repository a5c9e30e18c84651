package plugin

// ABIVersion is the version of the host–guest ABI this SDK speaks. The host
// refuses a module whose asyncgate_abi_version export returns another number.
const ABIVersion = 1

// Policy actions.
const (
	ActionRetry      = "retry"
	ActionDeadLetter = "dead_letter"
	ActionEscalate   = "escalate"
)

// Reasons a policy commonly gives; they match the host's receipt reasons.
const (
	ReasonMaxRetriesExceeded = "max_retries_exceeded"
	ReasonMaxLeaseExpiries   = "max_lease_expiries"
	ReasonFatalError         = "fatal_error"
	ReasonPolicy             = "policy"
)

// FailureInput is the input of a policy's decide: what happened to an attempt.
type FailureInput struct {
	TaskID        string
	TaskType      string
	Kind          string // "failure" (the worker failed it) or "expiry" (the lease ran out)
	Retryable     bool
	Attempts      int // failures so far, this one included
	MaxRetries    int // failures allowed before dead letter
	LeaseExpiries int
	Error         string
	Config        []byte // the policy's config for this task type, raw JSON (may be empty)
}

// Decision is the output of a policy's decide.
type Decision struct {
	Action       string  // ActionRetry, ActionDeadLetter or ActionEscalate
	DelaySeconds float64 // for ActionRetry
	Reason       string
	EscalateTo   string // for ActionEscalate: the principal to hand the task to
}

// ValidateInput is the input of a validator: a task's params for its type.
type ValidateInput struct {
	TaskType string
	Params   Value
	Config   []byte
}

// Violation is one reason a validator refuses params.
type Violation struct {
	Key     string // a JSON pointer-like path into params, e.g. "/files/0"
	Message string
}

// Capabilities describes a channel, as the spec's capabilities().
type Capabilities struct {
	MaxSizeBytes        int64
	SupportsAttachments bool
	SupportsStreaming   bool
	RetentionDays       int
	HumanReadable       bool
}

// PutResult is what a channel's put returns.
type PutResult struct {
	Pointer string // "channel:data"
	// Proof is an optional raw JSON object proving delivery (push channels).
	Proof []byte
}

// Error is an error with a machine code that crosses the ABI unchanged. Codes
// the host understands: "bad_request", "not_found", "too_large",
// "invalid_config"; anything else is reported as a plugin failure.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf returns an *Error with a code and a message.
func Errorf(code, message string) *Error { return &Error{Code: code, Message: message} }
