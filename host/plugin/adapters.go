package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/asyncgate/asyncgate/host"
)

// Interface guards.
var (
	_ host.RetryPolicy = (*PolicyAdapter)(nil)
	_ host.RetryPolicy = FallbackPolicy{}
	_ host.Validator   = (*ValidatorAdapter)(nil)
	_ host.Channel     = (*ChannelAdapter)(nil)
)

// binding resolves a plugin by name on every call, so a reloaded version is
// picked up at once, and re-checks the config whenever the version changes.
type binding struct {
	reg     *Registry
	name    string
	kind    string
	config  json.RawMessage
	checked atomic.Pointer[Plugin] // the version config was last validated against
}

func (b *binding) plugin(ctx context.Context) (*Plugin, error) {
	p, err := b.reg.pluginWhenReady(ctx, b.name)
	if err != nil {
		return nil, err
	}
	if p.Manifest.Kind != b.kind {
		return nil, fmt.Errorf("plugin %s is a %s, not a %s", b.name, p.Manifest.Kind, b.kind)
	}
	// A channel runs with the operator's config, checked when it loaded.
	if b.kind != KindChannel && b.checked.Load() != p {
		if err := p.Manifest.ValidateConfig(b.config); err != nil {
			return nil, &Fault{Plugin: p.Manifest.Name, Version: p.Manifest.Version, Kind: FaultConfig, Message: err.Error()}
		}
		b.checked.Store(p)
	}
	return p, nil
}

// build makes a call's input and data for the version p that will answer
// it: a channel's input carries p's operator config and must fit p's limits.
// An error ends the call before the plugin is called.
type build func(p *Plugin) (input, data []byte, err error)

// fixed is a build whose input does not depend on the version.
func fixed(input, data []byte) build {
	return func(*Plugin) ([]byte, []byte, error) { return input, data, nil }
}

// call runs op on the current version with the schema checks; see run.
func (b *binding) call(ctx context.Context, op string, in build) (Result, error) {
	return b.run(ctx, op, in, true, nil)
}

// run runs op on the current version, retrying once if that version was
// retired between lookup and call (a reload raced with the call). The input
// is built for each attempt from the version looked up for it, so one
// version's config or limits never go with a call another version answers.
func (b *binding) run(ctx context.Context, op string, in build, schemas bool, check func(json.RawMessage) error) (Result, error) {
	for try := 0; ; try++ {
		p, err := b.plugin(ctx)
		if err != nil {
			return Result{}, err
		}
		input, data, err := in(p)
		if err != nil {
			return Result{}, err
		}
		res, err := p.run(ctx, op, input, data, schemas, check)
		var f *Fault
		if try == 0 && errors.As(err, &f) && errors.Is(f.Err, errRetired) {
			continue
		}
		return res, err
	}
}

// PolicyAdapter makes a policy plugin a host.RetryPolicy with one config (a
// task type's). Errors are *host.Error (host.CodePluginFault, or ErrorFor's
// other codes) wrapping a *Fault; wrap the adapter in FallbackPolicy to
// always get a usable decision.
type PolicyAdapter struct{ b *binding }

// Decide implements host.RetryPolicy: it calls the plugin's decide export with
// in (in.Config is replaced by the adapter's config).
//
// This is the hot path, so it does not go through encoding/json and the
// generic schema validator: the input is checked by checkFailureInput and
// sent as the binary failure record, and the output is decoded strictly by
// decodeDecision; both are equivalent to the decide schemas (a golden test
// holds them to that).
func (a *PolicyAdapter) Decide(ctx context.Context, in host.FailureInput) (host.Decision, error) {
	if err := checkFailureInput(in); err != nil {
		return host.Decision{}, host.WrapError(host.CodeBadRequest, err, "policy input: "+err.Error())
	}
	// The decision is decoded before the instance goes back to the pool: an
	// instance that answers garbage is discarded, and the fault names the
	// version that answered.
	var d host.Decision
	_, err := a.b.run(ctx, "decide", fixed(encodeFailureRecord(in, a.b.config), nil), false, func(raw json.RawMessage) (err error) {
		d, err = decodeDecision(raw)
		return err
	})
	if err != nil {
		return host.Decision{}, ErrorFor(KindPolicy, err)
	}
	return d, nil
}

// FallbackPolicy runs Policy and, when it fails for any reason (trap,
// timeout, garbage, missing plugin), answers with Fallback instead.
//
// Contract: Decide always returns a usable Decision. When err is nil the
// decision is the policy's own. When err is non-nil it is a *FallbackError:
// the decision is Fallback's (default host.ExponentialBackoff{}) with Reason
// set to host.ReasonPolicyFault, and the engine should apply it and write an
// escalation receipt with reason policy_fault carrying err's detail.
type FallbackPolicy struct {
	Policy   host.RetryPolicy
	Fallback host.RetryPolicy // nil means host.ExponentialBackoff{}
}

// FallbackError reports that a FallbackPolicy fell back. Cause is the policy's
// error; FallbackReason is the reason the fallback policy gave itself (e.g.
// max_retries_exceeded), which the decision's Reason replaces.
type FallbackError struct {
	Cause          error
	FallbackReason string
}

func (e *FallbackError) Error() string {
	return "policy fault, fell back to built-in backoff: " + e.Cause.Error()
}

// Unwrap returns the policy's error.
func (e *FallbackError) Unwrap() error { return e.Cause }

// FellBack reports whether err says a FallbackPolicy used its fallback.
func FellBack(err error) bool {
	var fe *FallbackError
	return errors.As(err, &fe)
}

// Decide implements host.RetryPolicy; see the type's contract.
func (f FallbackPolicy) Decide(ctx context.Context, in host.FailureInput) (host.Decision, error) {
	if f.Policy != nil {
		d, err := f.Policy.Decide(ctx, in)
		if err == nil {
			return d, nil
		}
		return f.fallback(ctx, in, err)
	}
	return f.fallback(ctx, in, errors.New("no policy"))
}

func (f FallbackPolicy) fallback(ctx context.Context, in host.FailureInput, cause error) (host.Decision, error) {
	fb := f.Fallback
	if fb == nil {
		fb = host.ExponentialBackoff{}
	}
	d, err := fb.Decide(context.WithoutCancel(ctx), in)
	if err != nil {
		// The fallback must not fail; dead-lettering is the safe answer if it does.
		d = host.Decision{Action: host.ActionDeadLetter}
	}
	fe := &FallbackError{Cause: cause, FallbackReason: d.Reason}
	d.Reason = host.ReasonPolicyFault
	return d, fe
}

// ValidatorAdapter makes a validator plugin a host.Validator with one config.
// Invalid params are a *host.Error with host.CodeInvalidParams listing the
// violations; a validator fault fails closed with host.CodePluginFault (a
// timeout host.CodePluginTimeout: ErrorFor), which blames the plugin, not
// the params.
type ValidatorAdapter struct{ b *binding }

// Validate implements host.Validator.
func (a *ValidatorAdapter) Validate(ctx context.Context, taskType string, params json.RawMessage) error {
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	in := map[string]any{"task_type": taskType, "params": params}
	if len(a.b.config) > 0 {
		in["config"] = a.b.config
	}
	input, err := json.Marshal(in)
	if err != nil {
		return host.WrapError(host.CodeInvalidParams, err, "params are not valid JSON")
	}
	res, err := a.b.call(ctx, "validate", fixed(input, nil))
	if err != nil {
		return ErrorFor(KindValidator, err)
	}
	var out struct {
		Valid      bool `json:"valid"`
		Violations []struct {
			Key     string `json:"key"`
			Message string `json:"message"`
		} `json:"violations"`
	}
	if err := json.Unmarshal(res.JSON, &out); err != nil {
		return ErrorFor(KindValidator, &Fault{Plugin: a.b.name, Op: "validate", Kind: FaultBadOutput, Message: err.Error()})
	}
	if out.Valid {
		return nil
	}
	parts := make([]string, len(out.Violations))
	for i, v := range out.Violations {
		parts[i] = v.Key + ": " + v.Message
	}
	return host.Errorf(host.CodeInvalidParams, "%s", strings.Join(parts, "; "))
}

// ChannelAdapter makes a channel plugin a host.Channel. Pointers must start
// with the plugin's name and a colon ("file:…"): the adapter refuses to pass
// another channel's pointer in and refuses a plugin that hands out one.
type ChannelAdapter struct{ b *binding }

func (a *ChannelAdapter) checkPointer(pointer string) error {
	if !strings.HasPrefix(pointer, a.b.name+":") {
		return host.Errorf(host.CodeBadRequest, "pointer is not a %s: pointer", a.b.name)
	}
	return nil
}

// Put implements host.Channel.
func (a *ChannelAdapter) Put(ctx context.Context, taskID string, payload []byte) (string, error) {
	ptr, _, err := a.PutWithProof(ctx, taskID, payload)
	return ptr, err
}

// PutWithProof stores payload and returns the pointer and, for push channels,
// the plugin's delivery proof (a JSON object, or nil).
func (a *ChannelAdapter) PutWithProof(ctx context.Context, taskID string, payload []byte) (string, json.RawMessage, error) {
	res, err := a.b.call(ctx, "put", func(p *Plugin) ([]byte, []byte, error) {
		var caps host.ChannelCapabilities
		if json.Unmarshal(p.caps, &caps) == nil && caps.MaxSizeBytes > 0 && int64(len(payload)) > caps.MaxSizeBytes {
			return nil, nil, host.Errorf(host.CodeTooLarge, "payload of %d bytes exceeds channel %s's limit of %d", len(payload), a.b.name, caps.MaxSizeBytes)
		}
		return p.withConfig(map[string]any{"task_id": taskID, "size": len(payload)}, p.grant.Config), payload, nil
	})
	if err != nil {
		return "", nil, ErrorFor(KindChannel, err)
	}
	var out struct {
		Pointer string          `json:"pointer"`
		Proof   json.RawMessage `json:"delivery_proof"`
	}
	if err := json.Unmarshal(res.JSON, &out); err != nil || a.checkPointer(out.Pointer) != nil {
		return "", nil, ErrorFor(KindChannel, &Fault{Plugin: a.b.name, Op: "put", Kind: FaultBadOutput, Message: "plugin returned a pointer of another channel"})
	}
	return out.Pointer, out.Proof, nil
}

// Get implements host.Channel.
func (a *ChannelAdapter) Get(ctx context.Context, pointer string) ([]byte, error) {
	if err := a.checkPointer(pointer); err != nil {
		return nil, err
	}
	res, err := a.b.call(ctx, "get", withPointer(pointer))
	if err != nil {
		return nil, ErrorFor(KindChannel, err)
	}
	return res.Data, nil
}

// Ack implements host.Channel.
func (a *ChannelAdapter) Ack(ctx context.Context, pointer string) error {
	if err := a.checkPointer(pointer); err != nil {
		return err
	}
	_, err := a.b.call(ctx, "ack", withPointer(pointer))
	return ErrorFor(KindChannel, err)
}

// withPointer builds get's and ack's input: the pointer and the config of
// the version that answers.
func withPointer(pointer string) build {
	return func(p *Plugin) ([]byte, []byte, error) {
		return p.withConfig(map[string]any{"pointer": pointer}, p.grant.Config), nil, nil
	}
}

// Capabilities implements host.Channel. It returns what the plugin reported
// when it was loaded; the answer does not change for a version.
func (a *ChannelAdapter) Capabilities(ctx context.Context) (host.ChannelCapabilities, error) {
	p, err := a.b.plugin(ctx)
	if err != nil {
		return host.ChannelCapabilities{}, ErrorFor(KindChannel, err)
	}
	var c host.ChannelCapabilities
	if err := json.Unmarshal(p.caps, &c); err != nil {
		return c, ErrorFor(KindChannel, err)
	}
	return c, nil
}
