package plugin

import (
	"errors"
	"fmt"
	"strings"

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
	FaultNotReady    FaultKind = "not_ready" // the plugin is still being compiled at start-up
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
	// Trace is what the operator needs and an agent must not see: a guest
	// panic's stack, the guest's stderr, the wasm stack of a trap. It goes to
	// the operator log, never into Error() (which reaches answers and receipts).
	Trace string
	Err   error
}

// summaryMax bounds the message part of Error(): it ends up in receipts.
const summaryMax = 200

// Error returns a one-line summary naming the plugin, the operation, the
// kind of fault, the guest's code and the first line of its message.
func (f *Fault) Error() string {
	var s string
	if f.Version != "" {
		s = fmt.Sprintf("plugin %s@%s", f.Plugin, f.Version)
	} else {
		s = "plugin " + f.Plugin
	}
	if f.Op != "" {
		s += " " + f.Op
	}
	s += ": " + string(f.Kind)
	if f.Code != "" && f.Code != string(f.Kind) {
		s += " " + f.Code
	}
	if f.Message != "" {
		s += ": " + summary(f.Message)
	}
	return s
}

// summary is the first line of msg, at most summaryMax bytes.
func summary(msg string) string {
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return truncate(msg, summaryMax)
}

// splitTrace splits a guest message into its first line and the rest.
func splitTrace(msg string) (first, rest string) {
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		return msg[:i], strings.TrimLeft(msg[i+1:], "\n")
	}
	return msg, ""
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

// ErrorFor maps a plugin call error to the domain's error model. A plugin
// still compiling at start-up is host.CodePluginNotReady (503, retry soon); a
// call past its deadline is host.CodePluginTimeout (504). Other channel
// faults are host.CodeChannelError (502, retryable) unless the guest said
// not_found, bad_request or too_large. A policy or validator that is gone
// (no instance could be started) is host.CodePluginUnavailable (503); its
// other faults are host.CodePluginFault (502, retryable) unless the guest
// said bad_request or too_large: a trap, a panic, garbage or an error of its
// own is the gate's plugin failing, never a verdict on the input (a
// validator refuses params with violations: host.CodeInvalidParams). The
// detail names the plugin. A nil err maps to nil.
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
	switch f.Kind {
	case FaultNotReady:
		return host.WrapError(host.CodePluginNotReady, f, f.Error())
	case FaultTimeout:
		return host.WrapError(host.CodePluginTimeout, f, f.Error())
	}
	if f.Kind == FaultGuestError || f.Kind == FaultBadInput {
		switch f.Code {
		case host.CodeNotFound:
			// A channel's object that does not exist; a validator or
			// policy has nothing of the caller's to find.
			if kind == KindChannel {
				return host.WrapError(f.Code, f, f.Message)
			}
		case host.CodeBadRequest, host.CodeTooLarge:
			return host.WrapError(f.Code, f, f.Message)
		}
		if f.Kind == FaultBadInput {
			return host.WrapError(host.CodeBadRequest, f, f.Error())
		}
	}
	switch {
	case kind == KindChannel:
		return host.WrapError(host.CodeChannelError, f, f.Error())
	case f.Kind == FaultUnavailable:
		return host.WrapError(host.CodePluginUnavailable, f, f.Error())
	}
	return host.WrapError(host.CodePluginFault, f, f.Error())
}
