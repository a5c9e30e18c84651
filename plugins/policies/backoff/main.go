// Command backoff is the built-in retry policy plugin: the seed's exponential
// backoff. A retryable failure is retried after
// min(base·2^(attempts-1), max) ± jitter; past max_retries, or when the
// failure is not retryable, the task is dead-lettered. Lease expiries are
// requeued after requeue_delay_seconds until max_lease_expiries (0 = no cap).
// Every setting can be overridden per task type under "task_types".
package main

import (
	"math"
	"math/rand/v2"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

type settings struct {
	BaseSeconds         *float64 `json:"base_seconds"`
	MaxSeconds          *float64 `json:"max_seconds"`
	Jitter              *float64 `json:"jitter"`
	RequeueDelaySeconds *float64 `json:"requeue_delay_seconds"`
	MaxLeaseExpiries    *int     `json:"max_lease_expiries"`
}

type config struct {
	settings
	TaskTypes map[string]settings `json:"task_types"`
}

func pick[T any](override, base *T, def T) T {
	if override != nil {
		return *override
	}
	if base != nil {
		return *base
	}
	return def
}

func decide(in plugin.FailureInput, c *config) (plugin.Decision, error) {
	o := c.TaskTypes[in.TaskType] // zero value when absent
	jitter := pick(o.Jitter, c.Jitter, 0.1)
	if in.Kind == "expiry" {
		if maxExp := pick(o.MaxLeaseExpiries, c.MaxLeaseExpiries, 0); maxExp > 0 && in.LeaseExpiries > maxExp {
			return plugin.Decision{Action: plugin.ActionDeadLetter, Reason: plugin.ReasonMaxLeaseExpiries}, nil
		}
		return plugin.Decision{Action: plugin.ActionRetry, DelaySeconds: jittered(pick(o.RequeueDelaySeconds, c.RequeueDelaySeconds, 30), jitter)}, nil
	}
	if !in.Retryable {
		return plugin.Decision{Action: plugin.ActionDeadLetter, Reason: plugin.ReasonFatalError}, nil
	}
	if in.Attempts > in.MaxRetries {
		return plugin.Decision{Action: plugin.ActionDeadLetter, Reason: plugin.ReasonMaxRetriesExceeded}, nil
	}
	base := pick(o.BaseSeconds, c.BaseSeconds, 300)
	maxd := pick(o.MaxSeconds, c.MaxSeconds, 3600)
	n := max(in.Attempts, 1)
	d := math.Min(base*math.Pow(2, float64(n-1)), maxd)
	return plugin.Decision{Action: plugin.ActionRetry, DelaySeconds: jittered(d, jitter)}, nil
}

// jittered spreads d by ±jitter·d and rounds to milliseconds.
func jittered(d, jitter float64) float64 {
	if jitter > 0 {
		d += (rand.Float64()*2 - 1) * jitter * d
	}
	return math.Max(0, math.Round(d*1000)/1000)
}

func init() { plugin.Policy(decide) }

func main() {}
