package plugin

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

func TestSafePaths(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{}, "safe-paths")
	v, err := b.reg.Validator("safe-paths", json.RawMessage(`{"keys": ["path", "files"], "roots": ["/srv/data"]}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		params string
		bad    string // substring of the error, "" for valid
	}{
		{`{"path": "docs/a.txt", "files": ["x/y", "/srv/data/z"], "note": "../is fine here"}`, ""},
		{`{"path": "../etc/passwd"}`, "/path: path has a .. segment"},
		{`{"path": "a/../../b"}`, ".. segment"},
		{`{"path": "a\\..\\b"}`, ".. segment"},
		{`{"files": ["ok", "/etc/shadow"]}`, "/files/1: absolute path outside the allowed roots"},
		{`{"path": "/srv/database"}`, "outside the allowed roots"},
		{`{"note": "nul\u0000byte"}`, "/note: contains a NUL byte"},
		{`{"deep": {"path": ".."}}`, "/deep/path"},
		{`{"path": "/srv/data"}`, ""},
	}
	for _, c := range cases {
		err := v.Validate(context.Background(), "index", json.RawMessage(c.params))
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: unexpected %v", c.params, err)
		case c.bad != "" && (!host.IsCode(err, host.CodeInvalidParams) || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%s: got %v, want invalid_params mentioning %q", c.params, err, c.bad)
		}
	}
	all, _ := b.reg.Validator("safe-paths", nil)
	if err := all.Validate(context.Background(), "x", json.RawMessage(`{"anything": "/abs"}`)); !host.IsCode(err, host.CodeInvalidParams) {
		t.Errorf("no keys and no roots: every absolute string is refused, got %v", err)
	}
}

func TestEscalatePolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{}, "escalate")
	pol, err := b.reg.Policy("escalate", json.RawMessage(`{"supervisor": "ops", "task_types": {"billing": "finance-lead"}, "base_seconds": 5}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := host.FailureInput{TaskID: "t", TaskType: "index", Kind: host.FailureError, Retryable: true, Attempts: 2, MaxRetries: 3}
	if d, err := pol.Decide(ctx, in); err != nil || d.Action != host.ActionRetry || d.DelaySeconds != 10 {
		t.Fatalf("retry: %+v %v", d, err)
	}
	in.Attempts = 4
	if d, _ := pol.Decide(ctx, in); d.Action != host.ActionEscalate || d.EscalateTo != "ops" || d.Reason != host.ReasonMaxRetriesExceeded {
		t.Fatalf("exhausted: %+v", d)
	}
	in.Attempts, in.Retryable, in.TaskType = 1, false, "billing"
	if d, _ := pol.Decide(ctx, in); d.Action != host.ActionEscalate || d.EscalateTo != "finance-lead" || d.Reason != host.ReasonFatalError {
		t.Fatalf("poison: %+v", d)
	}
	if _, err := b.reg.Policy("escalate", json.RawMessage(`{}`)); !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("config without a supervisor: %v", err)
	}
}

// TestValidatorFaultsArePluginFaults: a validator that traps, panics,
// answers what its output schema refuses or returns an error of its own
// fails closed with plugin_fault (502) naming the plugin, never
// invalid_params: the params were not judged. A loop is plugin_timeout; a
// violation is invalid_params; a validator gone from the folder under an
// existing binding is plugin_unavailable.
func TestValidatorFaultsArePluginFaults(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{}, "slowvalidator")
	v, err := b.reg.Validator("slowvalidator", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct{ taskType, code, detail string }{
		{"panic", host.CodePluginFault, "plugin slowvalidator@0.0.1 validate: panic"},
		{"exit", host.CodePluginFault, "plugin slowvalidator@0.0.1 validate: trap"},
		{"garbage", host.CodePluginFault, "plugin slowvalidator@0.0.1 validate: bad_output"},
		{"error", host.CodePluginFault, "guest_error validator_broken: cannot judge anything today"},
		{"loop", host.CodePluginTimeout, "plugin slowvalidator@0.0.1 validate: timeout"},
		{"refuse", host.CodeInvalidParams, "/n: must not be given"},
	} {
		err := v.Validate(ctx, c.taskType, json.RawMessage(`{}`))
		if !host.IsCode(err, c.code) || !strings.Contains(host.ErrorDetail(err), c.detail) {
			t.Errorf("%s: got %v, want %s with %q", c.taskType, err, c.code, c.detail)
		}
		if s := host.HTTPStatus(host.ErrorCode(err)); c.code != host.CodeInvalidParams && s < 500 {
			t.Errorf("%s: a plugin's fault answers %d", c.taskType, s)
		}
	}
	if err := v.Validate(ctx, "fine", json.RawMessage(`{}`)); err != nil {
		t.Fatalf("a healthy call after the faults: %v", err)
	}
}

// TestErrorForGuestCodes: what a guest's own error code becomes, by kind:
// not_found is a channel's missing object, never a validator's or a
// policy's (a 404 would say the route or the task does not exist);
// bad_request and too_large speak of the input for every kind.
func TestErrorForGuestCodes(t *testing.T) {
	for _, c := range []struct {
		kind, guest, want string
	}{
		{KindChannel, host.CodeNotFound, host.CodeNotFound},
		{KindValidator, host.CodeNotFound, host.CodePluginFault},
		{KindPolicy, host.CodeNotFound, host.CodePluginFault},
		{KindValidator, host.CodeBadRequest, host.CodeBadRequest},
		{KindValidator, host.CodeTooLarge, host.CodeTooLarge},
		{KindValidator, "anything_else", host.CodePluginFault},
		{KindChannel, "anything_else", host.CodeChannelError},
	} {
		err := ErrorFor(c.kind, &Fault{Plugin: "p", Op: "op", Kind: FaultGuestError, Code: c.guest, Message: "m"})
		if !host.IsCode(err, c.want) {
			t.Errorf("%s guest %s: %v, want %s", c.kind, c.guest, err, c.want)
		}
	}
	for kind, want := range map[string]string{KindValidator: host.CodePluginUnavailable, KindPolicy: host.CodePluginUnavailable, KindChannel: host.CodeChannelError} {
		if err := ErrorFor(kind, &Fault{Plugin: "p", Kind: FaultUnavailable}); !host.IsCode(err, want) {
			t.Errorf("%s unavailable: %v, want %s", kind, err, want)
		}
	}
}
