package host

import (
	"context"
	"testing"
	"time"
)

func TestExponentialBackoff(t *testing.T) {
	p := ExponentialBackoff{Base: 300 * time.Second, Max: time.Hour, Jitter: -1}
	for attempts, want := range map[int]time.Duration{1: 300 * time.Second, 2: 600 * time.Second, 3: 1200 * time.Second, 4: 2400 * time.Second, 5: time.Hour, 9: time.Hour} {
		if got := p.Delay(attempts); got != want {
			t.Errorf("Delay(%d) = %v, want %v", attempts, got, want)
		}
	}
	jit := ExponentialBackoff{Base: 100 * time.Second, Jitter: 0.1}
	for i := 0; i < 200; i++ {
		if d := jit.Delay(1); d < 90*time.Second || d > 110*time.Second {
			t.Fatalf("jittered delay %v outside ±10%%", d)
		}
	}
	ctx := context.Background()
	d, _ := p.Decide(ctx, FailureInput{Retryable: true, Attempts: 3, MaxRetries: 3})
	if d.Action != ActionRetry || d.DelaySeconds != 1200 {
		t.Errorf("third failure of three retries: %+v", d)
	}
	d, _ = p.Decide(ctx, FailureInput{Retryable: true, Attempts: 4, MaxRetries: 3})
	if d.Action != ActionDeadLetter || d.Reason != ReasonMaxRetriesExceeded {
		t.Errorf("exhausted: %+v", d)
	}
	d, _ = p.Decide(ctx, FailureInput{Retryable: false, Attempts: 1, MaxRetries: 3})
	if d.Action != ActionDeadLetter || d.Reason != ReasonFatalError {
		t.Errorf("fatal: %+v", d)
	}
}
