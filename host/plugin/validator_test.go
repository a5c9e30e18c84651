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
