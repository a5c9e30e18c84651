// Command escalate is the built-in escalation policy plugin. It retries like
// backoff while attempts remain, and routes exhausted tasks (attempts past
// max_retries, or more than max_lease_expiries expiries) and poison tasks
// (failures that are not retryable) to a supervisor principal with action
// "escalate". A task type can name its own supervisor under "task_types".
package main

import (
	"math"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

type config struct {
	Supervisor       string            `json:"supervisor"`
	TaskTypes        map[string]string `json:"task_types"` // task type → supervisor
	BaseSeconds      float64           `json:"base_seconds"`
	MaxSeconds       float64           `json:"max_seconds"`
	MaxLeaseExpiries int               `json:"max_lease_expiries"`
	RetryPoison      bool              `json:"retry_poison"` // retry non-retryable failures too (default: escalate at once)
}

func decide(in plugin.FailureInput, c *config) (plugin.Decision, error) {
	to := c.Supervisor
	if s, ok := c.TaskTypes[in.TaskType]; ok {
		to = s
	}
	if to == "" {
		return plugin.Decision{}, plugin.Errorf("invalid_config", "no supervisor configured for task type "+in.TaskType)
	}
	escalate := func(reason string) (plugin.Decision, error) {
		return plugin.Decision{Action: plugin.ActionEscalate, EscalateTo: to, Reason: reason}, nil
	}
	if in.Kind == "expiry" {
		if c.MaxLeaseExpiries > 0 && in.LeaseExpiries > c.MaxLeaseExpiries {
			return escalate(plugin.ReasonMaxLeaseExpiries)
		}
		return plugin.Decision{Action: plugin.ActionRetry, DelaySeconds: 30}, nil
	}
	if !in.Retryable && !c.RetryPoison {
		return escalate(plugin.ReasonFatalError)
	}
	if in.Attempts > in.MaxRetries {
		return escalate(plugin.ReasonMaxRetriesExceeded)
	}
	base, maxd := c.BaseSeconds, c.MaxSeconds
	if base <= 0 {
		base = 300
	}
	if maxd <= 0 {
		maxd = 3600
	}
	d := math.Min(base*math.Pow(2, float64(max(in.Attempts, 1)-1)), maxd)
	return plugin.Decision{Action: plugin.ActionRetry, DelaySeconds: d}, nil
}

func init() { plugin.Policy(decide) }

func main() {}
