package plugin

import (
	"errors"
	"fmt"

	"github.com/asyncgate/asyncgate/host"
)

// FaultKind classifies what went wrong in a plugin call.
type FaultKind string

// Fault kinds.
const (
	FaultTrap        FaultKind = "trap"        // the guest trapped (panic outside the SDK, out of memory, unreachable)
	FaultTimeout     FaultKind = "timeout"     // the call ran past its deadline (endless loop) and was stopped
	FaultBadOutput   FaultKind = "bad_output"  // the result frame or envelope was malformed or failed its schema
	FaultPanic       FaultKind = "panic"       // the guest panicked and the SDK recovered it
	FaultGuestError  FaultKind = "guest_error" // the guest returned an error result
	FaultBadInput    FaultKind = "bad_input"   // the host refused the input (schema) before calling
	FaultUnavailable FaultKind = "unavailable" // no instance could be started, or the plugin is gone
	FaultCanceled    FaultKind = "canceled"    // the caller's context ended before or during the call
	FaultConfig      FaultKind = "invalid_config"
)

// Fault is the error of a failed plugin call. Adapters wrap it in a
// *host.Error whose code depends on the plugin kind (see ErrorFor).
type Fault struct {
	Plugin  string
	Version string
	Op      string
	Kind    FaultKind
	Code    string // the guest's error code, for FaultGuestError and FaultPanic
	Message string
	Err     error
}

func (f *Fault) Error() string {
	s := fmt.Sprintf("plugin %s@%s %s: %s", f.Plugin, f.Version, f.Op, f.Kind)
	if f.Code != "" && f.Code != string(f.Kind) {
		s += " " + f.Code
	}
	if f.Message != "" {
		s += ": " + f.Message
	}
	return s
}

// Unwrap returns the cause.
func (f *Fault) Unwrap() error { return f.Err }

// discard reports whether the instance that produced this fault must not be
// reused: after a trap, a timeout, a recovered panic or garbage output the
// guest's state is suspect.
func (f *Fault) discard() bool {
	switch f.Kind {
	case FaultGuestError, FaultBadInput, FaultUnavailable, FaultConfig:
		return false
	}
	return true
}

// ErrorFor maps a plugin call error to the domain's error model. Channel
// faults are host.CodeChannelError (502, retryable) unless the guest said
// not_found, bad_request or too_large; policy and validator faults are
// host.CodeInternal. A nil err maps to nil.
func ErrorFor(kind string, err error) error {
	if err == nil {
		return nil
	}
	var he *host.Error
	if errors.As(err, &he) {
		return err
	}
	var f *Fault
	if !errors.As(err, &f) {
		return host.WrapError(host.CodeInternal, err, err.Error())
	}
	if f.Kind == FaultGuestError || f.Kind == FaultBadInput {
		switch f.Code {
		case host.CodeNotFound, host.CodeBadRequest, host.CodeTooLarge:
			return host.WrapError(f.Code, f, f.Message)
		}
		if f.Kind == FaultBadInput {
			return host.WrapError(host.CodeBadRequest, f, f.Error())
		}
	}
	if kind == KindChannel {
		return host.WrapError(host.CodeChannelError, f, f.Error())
	}
	return host.WrapError(host.CodeInternal, f, f.Error())
}
