package plugin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
)

// validatorPlugins resolves a task type's validators through a registry,
// as cmd/gate's pluginSet does.
type validatorPlugins struct{ reg *Registry }

func (p validatorPlugins) Policy(*host.TaskType) (host.RetryPolicy, error) { return nil, nil }
func (p validatorPlugins) Channel(string) (host.Channel, error)            { return nil, nil }
func (p validatorPlugins) Validators(tt *host.TaskType) ([]host.Validator, error) {
	var out []host.Validator
	for _, ref := range tt.Validators {
		v, err := p.reg.Validator(ref.Name, ref.Config)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// TestEnqueueValidatorFaults runs the engine on a real store with the
// slowvalidator test plugin: a fault at enqueue is plugin_fault (502), a
// loop plugin_timeout (504), a violation invalid_params (400), and nothing
// is queued by any of them. A validator the task type names that leaves
// the folder, or is replaced by a plugin of another kind under its name,
// is plugin_unavailable (503) naming the type and the plugin, not the 404
// or 400 the registry's lookup gives; naming it when the type is written
// stays the admin's bad_request.
func TestEnqueueValidatorFaults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyPlugin(t, "slowvalidator", "slowvalidator", dir)
	rt := newTestRuntime(t, Limits{})
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, RemoveAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng, err := engine.New(engine.Config{Store: st, Plugins: validatorPlugins{reg}, ExpiryJitter: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	ctx := context.Background()
	agent := engine.Actor{Tenant: "acme", Principal: "agent.kee", Role: engine.RoleAgent}
	cases := []struct{ typ, code, detail string }{
		{"panic", host.CodePluginFault, "plugin slowvalidator@0.0.1 validate: panic"},
		{"garbage", host.CodePluginFault, "bad_output"},
		{"error", host.CodePluginFault, "cannot judge anything today"},
		{"loop", host.CodePluginTimeout, "timeout"},
		{"refuse", host.CodeInvalidParams, "/n: must not be given"},
		{"fine", "", ""},
	}
	for _, c := range cases {
		tt := host.NewTaskType(c.typ)
		tt.Tenant = "acme"
		tt.Validators = []host.PluginRef{{Name: "slowvalidator"}}
		if _, err := eng.PutTaskType(ctx, tt); err != nil {
			t.Fatalf("PutTaskType(%s): %v", c.typ, err)
		}
	}
	for _, c := range cases {
		_, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: c.typ, Params: json.RawMessage(`{}`)})
		if host.ErrorCode(err) != c.code || !strings.Contains(host.ErrorDetail(err), c.detail) {
			t.Errorf("%s: %v, want %q with %q", c.typ, err, c.code, c.detail)
		}
	}
	if ts, _, err := eng.ListTasks(ctx, agent, store.TaskFilter{Limit: 100}); err != nil || len(ts) != 1 || ts[0].Type != "fine" {
		t.Fatalf("refused enqueues queued tasks: %d %v", len(ts), err)
	}

	// Gone from the folder: the type's enqueue says its validator is not loaded.
	os.Remove(filepath.Join(dir, "slowvalidator.wasm"))
	os.Remove(filepath.Join(dir, "slowvalidator.manifest.json"))
	waitFor(t, func() bool { reg.Scan(ctx); _, err := reg.Plugin("slowvalidator"); return err != nil })
	_, err = eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "fine", Params: json.RawMessage(`{}`)})
	if !host.IsCode(err, host.CodePluginUnavailable) || !strings.Contains(host.ErrorDetail(err), `task type "fine"`) ||
		!strings.Contains(host.ErrorDetail(err), "not loaded") || !strings.Contains(host.ErrorDetail(err), "slowvalidator") {
		t.Fatalf("enqueue with its validator gone: %v", err)
	}
	if s := host.HTTPStatus(host.ErrorCode(err)); s != 503 {
		t.Fatalf("plugin_unavailable answers %d", s)
	}
	// Writing a type that names it is the admin's mistake: bad_request.
	tt := host.NewTaskType("new")
	tt.Tenant = "acme"
	tt.Validators = []host.PluginRef{{Name: "slowvalidator"}}
	if _, err := eng.PutTaskType(ctx, tt); !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("PutTaskType naming a missing validator: %v", err)
	}

	// A policy under the validator's name: still not a validator it can run.
	copyPlugin(t, "backoff", "slowvalidator", dir)
	waitFor(t, func() bool { reg.Scan(ctx); _, err := reg.Plugin("slowvalidator"); return err == nil })
	_, err = eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "fine", Params: json.RawMessage(`{}`)})
	if !host.IsCode(err, host.CodePluginUnavailable) || !strings.Contains(host.ErrorDetail(err), "is a policy, not a validator") {
		t.Fatalf("enqueue with a policy under its validator's name: %v", err)
	}
}
