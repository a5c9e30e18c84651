package plugin

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

func TestBackoffPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{}, "backoff")
	cfg := json.RawMessage(`{"base_seconds": 10, "max_seconds": 60, "jitter": 0, "task_types": {"slow": {"base_seconds": 100, "max_seconds": 1000}}}`)
	pol, err := b.reg.Policy("backoff", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := host.FailureInput{TaskID: "t1", TaskType: "fast", Kind: host.FailureError, Retryable: true, MaxRetries: 5}
	for attempts, want := range map[int]float64{1: 10, 2: 20, 3: 40, 4: 60, 5: 60} {
		in.Attempts = attempts
		d, err := pol.Decide(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if d.Action != host.ActionRetry || d.DelaySeconds != want {
			t.Errorf("attempt %d: got %+v, want retry after %v", attempts, d, want)
		}
	}
	in.TaskType, in.Attempts = "slow", 2
	if d, _ := pol.Decide(ctx, in); d.DelaySeconds != 200 {
		t.Errorf("per-type override: got %+v, want 200 s", d)
	}
	in.Attempts = 6
	if d, _ := pol.Decide(ctx, in); d.Action != host.ActionDeadLetter || d.Reason != host.ReasonMaxRetriesExceeded {
		t.Errorf("past max retries: got %+v", d)
	}
	in.Attempts, in.Retryable = 1, false
	if d, _ := pol.Decide(ctx, in); d.Action != host.ActionDeadLetter || d.Reason != host.ReasonFatalError {
		t.Errorf("not retryable: got %+v", d)
	}
}

func TestBackoffJitterAndDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{}, "backoff")
	pol, err := b.reg.Policy("backoff", nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[float64]bool{}
	for range 20 {
		d, err := pol.Decide(context.Background(), host.FailureInput{TaskID: "t", TaskType: "x", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3})
		if err != nil {
			t.Fatal(err)
		}
		if d.DelaySeconds < 270 || d.DelaySeconds > 330 {
			t.Fatalf("default base 300 s ±10%%: got %v", d.DelaySeconds)
		}
		seen[d.DelaySeconds] = true
	}
	if len(seen) < 5 {
		t.Errorf("jitter looks constant: %v", seen)
	}
}

func TestPolicyConfigValidated(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{}, "backoff")
	_, err := b.reg.Policy("backoff", json.RawMessage(`{"base_seconds": "ten"}`))
	if !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("got %v, want bad_request", err)
	}
	_, err = b.reg.Policy("backoff", json.RawMessage(`{"unknown": 1}`))
	if !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("unknown key: got %v, want bad_request", err)
	}
	if _, err := b.reg.Policy("nope", nil); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("got %v, want not_found", err)
	}
}
