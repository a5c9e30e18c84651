package engine

import (
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

// statePlugins is a Plugins that reports one plugin state for every name.
type statePlugins struct {
	Plugins
	state, kind, detail string
}

func (s statePlugins) PluginState(string) (string, string, string) { return s.state, s.kind, s.detail }

// TestRetryPolicyViewPluginNotServing: while the policy plugin a type
// names does not serve (refused, say, because its start ran out of time),
// the built-in default decides each failure, and the view says so with the
// plugin's state and the default's parameters, not that the plugin decides.
func TestRetryPolicyViewPluginNotServing(t *testing.T) {
	tt := &host.TaskType{Name: "job", DefaultMaxRetries: 3, Policy: &host.PluginRef{Name: "slowpol"}}
	view := func(s statePlugins) RetryPolicyView {
		e := &Engine{cfg: Config{Plugins: s}, policy: host.ExponentialBackoff{}}
		return e.RetryPolicy(tt)
	}

	v := view(statePlugins{state: "refused", detail: "plugin slowpol: start instance: module closed with context deadline exceeded"})
	if v.Plugin != "slowpol" || v.PluginState != "refused" || v.Effective == nil ||
		!strings.Contains(v.Note, "not serving (refused)") || strings.Contains(v.Note, "deadline") || !strings.Contains(v.Note, "default policy decides each failure") {
		t.Fatalf("refused plugin: %+v", v)
	}
	if strings.Contains(v.Note, "policy plugin slowpol decides") {
		t.Fatalf("the view says a refused plugin decides: %q", v.Note)
	}

	v = view(statePlugins{state: "ready", kind: "policy"})
	if v.PluginState != "ready" || v.Effective != nil || !strings.Contains(v.Note, "policy plugin slowpol decides each failure") {
		t.Fatalf("serving plugin: %+v", v)
	}

	v = view(statePlugins{state: "ready", kind: "validator"})
	if v.Effective == nil || !strings.Contains(v.Note, "serves as a validator") {
		t.Fatalf("a plugin of another kind: %+v", v)
	}

	v = view(statePlugins{state: "loading"})
	if v.Effective != nil || !strings.Contains(v.Note, "waits for it") {
		t.Fatalf("loading plugin: %+v", v)
	}
}
