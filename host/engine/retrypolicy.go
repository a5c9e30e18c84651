package engine

import (
	"encoding/json"
	"math"

	"github.com/asyncgate/asyncgate/host"
)

// RetryPolicyView says how a task type's failures and lease expiries are
// handled, with the parameters in effect: what an operator needs to predict
// when a failed task comes back.
type RetryPolicyView struct {
	// Plugin names the policy plugin the type configures, or "builtin" for
	// the engine's own exponential backoff.
	Plugin string `json:"plugin"`
	// Config is the plugin config the type gives (as stored).
	Config json.RawMessage `json:"config,omitempty"`
	// Effective is the policy's parameters with defaults filled in; nil when
	// the plugin is not one whose parameters the gate knows.
	Effective *EffectiveRetry `json:"effective,omitempty"`
	// Expiry is what happens when a lease expires: the engine decides that
	// from the task type alone, whatever the policy.
	Expiry ExpiryPolicy `json:"expiry"`
	// PluginState is the state of the policy plugin the type names, when
	// the gate can tell it: "ready" while it serves; otherwise ("refused",
	// "missing", "loading", …) Effective and Note say who decides meanwhile.
	PluginState string `json:"plugin_state,omitempty"`
	// Note explains what the gate cannot say about a third-party policy,
	// or who decides while the type's policy plugin does not serve.
	Note string `json:"note,omitempty"`
}

// PluginStates is what a Plugins may implement besides: the state of a
// plugin by name, as the admin API lists it ("ready" when it serves),
// its kind when known, and why it does not serve (a refusal).
type PluginStates interface {
	PluginState(name string) (state, kind, detail string)
}

// EffectiveRetry is a backoff policy's parameters after a worker-reported
// failure: the retry after failure n waits min(base·2^(n-1), max) ± jitter.
type EffectiveRetry struct {
	// MaxRetries is the type's default; a task may override it at enqueue.
	MaxRetries  int     `json:"max_retries"`
	BaseSeconds float64 `json:"base_seconds"`
	MaxSeconds  float64 `json:"max_seconds"`
	// Jitter is the fraction of each delay added or taken at random.
	Jitter float64 `json:"jitter"`
	// DelaysSeconds lists the delay before each retry up to MaxRetries (at
	// most 20 shown), before jitter.
	DelaysSeconds []float64 `json:"delays_seconds"`
	// EscalateTo is where an exhausted or poison task is escalated (the
	// escalate plugin); empty means the task's recipient.
	EscalateTo string `json:"escalate_to,omitempty"`
	// RetryNonRetryable is set when failures marked not retryable are retried too.
	RetryNonRetryable bool `json:"retry_non_retryable,omitempty"`
}

// ExpiryPolicy is how an expired lease is handled: the task is requeued
// after RequeueDelaySeconds plus up to JitterSeconds without using an
// attempt, until MaxLeaseExpiries.
type ExpiryPolicy struct {
	RequeueDelaySeconds int     `json:"requeue_delay_seconds"`
	JitterSeconds       float64 `json:"jitter_seconds"`
	MaxLeaseExpiries    int     `json:"max_lease_expiries"`
}

// RetryPolicy describes the retry policy in effect for a task type.
func (e *Engine) RetryPolicy(tt *host.TaskType) RetryPolicyView {
	v := RetryPolicyView{Plugin: "builtin", Expiry: ExpiryPolicy{
		RequeueDelaySeconds: tt.RequeueDelaySeconds,
		JitterSeconds:       max(e.cfg.ExpiryJitter, 0).Seconds(),
		MaxLeaseExpiries:    tt.MaxLeaseExpiries,
	}}
	if tt.Policy == nil || e.cfg.Plugins == nil {
		v.Note = e.defaultPolicyView(&v, tt)
		return v
	}
	v.Plugin, v.Config = tt.Policy.Name, tt.Policy.Config
	if ps, ok := e.cfg.Plugins.(PluginStates); ok {
		state, kind, _ := ps.PluginState(tt.Policy.Name)
		v.PluginState = state
		switch {
		case state == "loading":
			v.Note = "policy plugin " + tt.Policy.Name + " is still in its first load: a failure waits for it (or answers 503 plugin_not_ready); no other policy decides for it"
			return v
		case state == "ready" && kind != "" && kind != "policy":
			v.Note = joinNote("plugin "+tt.Policy.Name+" serves as a "+kind+", not a policy: the gate's default policy decides each failure (each one writes a policy_fault escalation receipt)", e.defaultPolicyView(&v, tt))
			return v
		case state != "ready":
			// The state only: why it was refused (file names, its stderr) is
			// the gate operator's (GET /v1/admin/plugins), and this view is
			// read by every tenant's admins and by agents (MCP).
			v.Note = joinNote("policy plugin "+tt.Policy.Name+" is not serving ("+state+"): the gate's default policy decides each failure until it serves (each one writes a policy_fault escalation receipt)", e.defaultPolicyView(&v, tt))
			return v
		}
	}
	switch tt.Policy.Name {
	case "backoff":
		// Mirrors plugins/policies/backoff: top-level settings, overridden
		// per task type under "task_types".
		type settings struct {
			BaseSeconds *float64 `json:"base_seconds"`
			MaxSeconds  *float64 `json:"max_seconds"`
			Jitter      *float64 `json:"jitter"`
		}
		var c struct {
			settings
			TaskTypes map[string]settings `json:"task_types"`
		}
		_ = json.Unmarshal(tt.Policy.Config, &c)
		o := c.TaskTypes[tt.Name]
		v.Effective = backoffView(tt, pick(o.BaseSeconds, c.BaseSeconds, 300), pick(o.MaxSeconds, c.MaxSeconds, 3600), pick(o.Jitter, c.Jitter, 0.1))
	case "escalate":
		// Mirrors plugins/policies/escalate: no jitter, a supervisor per type.
		c := escalateConfig(tt)
		v.Effective = backoffView(tt, c.BaseSeconds, c.MaxSeconds, 0)
		v.Effective.EscalateTo = configuredEscalateTo(tt)
		v.Effective.RetryNonRetryable = c.RetryPoison
	default:
		v.Note = "policy plugin " + tt.Policy.Name + " decides each failure; the gate does not know its parameters"
	}
	return v
}

// defaultPolicyView sets v's Effective to the engine's default policy's
// parameters when it is the built-in backoff, else returns a note saying
// the gate does not know them.
func (e *Engine) defaultPolicyView(v *RetryPolicyView, tt *host.TaskType) (note string) {
	if p, ok := e.policy.(host.ExponentialBackoff); ok {
		jit := p.Jitter
		if jit == 0 {
			jit = 0.1 // as host.ExponentialBackoff.Delay
		}
		v.Effective = backoffView(tt, p.Base.Seconds(), p.Max.Seconds(), jit)
		return ""
	}
	return "the gate's default policy is not the built-in backoff; its parameters are its own"
}

func joinNote(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

// escalatePolicy is the config of plugins/policies/escalate.
type escalatePolicy struct {
	Supervisor  string            `json:"supervisor"`
	TaskTypes   map[string]string `json:"task_types"`
	BaseSeconds float64           `json:"base_seconds"`
	MaxSeconds  float64           `json:"max_seconds"`
	RetryPoison bool              `json:"retry_poison"`
}

// escalateConfig reads a task type's escalate policy config (zero when the
// type configures another policy or none).
func escalateConfig(tt *host.TaskType) escalatePolicy {
	var c escalatePolicy
	if tt != nil && tt.Policy != nil && tt.Policy.Name == "escalate" {
		_ = json.Unmarshal(tt.Policy.Config, &c)
	}
	return c
}

// configuredEscalateTo is the principal a task type sends its escalations
// to besides the task's parties: the supervisor its escalate policy names
// (for the type, else for all types), or "" when it names none.
func configuredEscalateTo(tt *host.TaskType) string {
	c := escalateConfig(tt)
	if s, ok := c.TaskTypes[tt.Name]; ok {
		return s
	}
	return c.Supervisor
}

func pick(override, base *float64, def float64) float64 {
	if override != nil {
		return *override
	}
	if base != nil {
		return *base
	}
	return def
}

// backoffView fills an EffectiveRetry: base and max default to 300 s and
// 1 h when not positive; a negative jitter is none.
func backoffView(tt *host.TaskType, base, maxd, jitter float64) *EffectiveRetry {
	if base <= 0 {
		base = 300
	}
	if maxd <= 0 {
		maxd = 3600
	}
	jitter = max(jitter, 0)
	r := &EffectiveRetry{MaxRetries: tt.DefaultMaxRetries, BaseSeconds: base, MaxSeconds: maxd, Jitter: jitter, DelaysSeconds: []float64{}}
	for n := 1; n <= min(tt.DefaultMaxRetries, 20); n++ {
		r.DelaysSeconds = append(r.DelaysSeconds, math.Min(base*math.Pow(2, float64(n-1)), maxd))
	}
	return r
}
