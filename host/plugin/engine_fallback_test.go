package plugin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/sqlite"
)

// registryPlugins resolves task types' policies from a registry, as the gate
// wires it.
type registryPlugins struct{ reg *Registry }

func (p registryPlugins) Policy(tt *host.TaskType) (host.RetryPolicy, error) {
	if tt.Policy == nil {
		return nil, nil
	}
	return p.reg.Policy(tt.Policy.Name, tt.Policy.Config)
}
func (p registryPlugins) Validators(*host.TaskType) ([]host.Validator, error) { return nil, nil }

// Channel resolves nothing: this registry holds only the policy under test.
func (p registryPlugins) Channel(string) (host.Channel, error) { return nil, nil }

// TestEngineFallsBackWhenPolicyPluginFails runs the engine on a real store
// with the hostile policy plugin: when the plugin panics, loops past its
// deadline or answers garbage, a failure is still decided (by the built-in
// default: retry with backoff), the task is not lost, and the ledger records
// a task.escalated receipt (escalation_reason policy_fault) for the operator.
// A healthy answer from the same plugin is used as is, with no escalation.
func TestEngineFallsBackWhenPolicyPluginFails(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, Limits{Timeout: time.Second}, "hostile")
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng, err := engine.New(engine.Config{Store: st, Plugins: registryPlugins{b.reg}, ExpiryJitter: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	ctx := context.Background()
	agent := engine.Actor{Tenant: "acme", Principal: "agent.kee", Role: engine.RoleAgent}
	admin := engine.Actor{Tenant: "acme", Principal: "ops", Role: engine.RoleAdmin}
	for _, name := range []string{"panic", "loop", "garbage", "fine"} {
		tt := host.NewTaskType(name)
		tt.Tenant = "acme"
		tt.Policy = &host.PluginRef{Name: "hostile"}
		if _, err := eng.PutTaskType(ctx, tt); err != nil {
			t.Fatalf("PutTaskType(%s): %v", name, err)
		}
	}
	for _, name := range []string{"panic", "loop", "garbage", "fine"} {
		t.Run(name, func(t *testing.T) {
			res, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: name})
			if err != nil {
				t.Fatal(err)
			}
			worker := "w." + name
			offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: worker, Types: []string{name}})
			if err != nil || len(offers) != 1 {
				t.Fatalf("lease: %v %v", offers, err)
			}
			fr, err := eng.Fail(ctx, engine.FailRequest{WorkerCall: engine.WorkerCall{Tenant: "acme", WorkerID: worker, LeaseID: offers[0].LeaseID},
				Error: "flaky", Retryable: true})
			if err != nil {
				t.Fatalf("fail with a %s policy: %v", name, err)
			}
			if !fr.WillRetry || fr.Task.State != host.StateQueued {
				t.Fatalf("fail with a %s policy: %+v, want a retry", name, fr)
			}
			rs, _, err := eng.TaskReceipts(ctx, admin, res.TaskID, "", 50)
			if err != nil {
				t.Fatal(err)
			}
			var escalations []map[string]any
			var retryDelay float64
			for _, r := range rs {
				var body map[string]any
				_ = json.Unmarshal(r.Body, &body)
				switch r.Type {
				case host.ReceiptEscalated:
					escalations = append(escalations, body)
				case host.ReceiptRetryScheduled:
					retryDelay, _ = body["delay_seconds"].(float64)
				}
			}
			if name == "fine" {
				if len(escalations) != 0 || retryDelay != 1 {
					t.Fatalf("healthy plugin: escalations %v, delay %v; want none and the plugin's 1 s", escalations, retryDelay)
				}
				return
			}
			if len(escalations) != 1 || escalations[0]["escalation_reason"] != host.ReasonPolicyFault || escalations[0]["escalation_class"] != "system" {
				t.Fatalf("%s policy: escalations %v, want one policy_fault", name, escalations)
			}
			if retryDelay == 1 || retryDelay <= 0 {
				t.Fatalf("%s policy: retry delay %v, want the built-in default's backoff", name, retryDelay)
			}
			rep, err := eng.VerifyLedger(ctx)
			if err != nil || !rep.OK {
				t.Fatalf("ledger: %+v %v", rep, err)
			}
		})
	}
}

// TestEngineWaitsForLoadingPolicy: after a restart, a failure of a task
// whose type's policy plugin is still in its first load is never decided by
// another policy (issue 38 item 3). The fail answers plugin_not_ready (503,
// retry) once the registry's bounded wait ends, nothing is written and the
// lease stays live; once the plugin loads, the same fail is decided by the
// task type's policy (its 1 s backoff), with no policy_fault escalation.
func TestEngineWaitsForLoadingPolicy(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	// The task type was registered before the restart.
	before, err := engine.New(engine.Config{Store: st, ExpiryJitter: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	tt := host.NewTaskType("flaky")
	tt.Tenant = "acme"
	tt.Policy = &host.PluginRef{Name: "backoff", Config: json.RawMessage(`{"base_seconds": 1, "max_seconds": 1, "jitter": 0}`)}
	if _, err := before.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	before.Close()

	// The restart: the policy's module cannot be read until released.
	builtins := t.TempDir()
	copyPlugin(t, "backoff", "backoff", builtins)
	held := heldFS{FS: os.DirFS(builtins), release: make(chan struct{})}
	released := false
	release := func() {
		if !released {
			released = true
			close(held.release)
		}
	}
	rt := newTestRuntime(t, Limits{})
	reg, err := NewRegistry(ctx, rt, RegistryOptions{Builtins: held, Background: true, ReadyWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { release(); reg.Close() })
	eng, err := engine.New(engine.Config{Store: st, Plugins: registryPlugins{reg}, ExpiryJitter: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	agent := engine.Actor{Tenant: "acme", Principal: "agent.kee", Role: engine.RoleAgent}
	admin := engine.Actor{Tenant: "acme", Principal: "ops", Role: engine.RoleAdmin}
	res, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "flaky"})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "flaky.w1", Types: []string{"flaky"}})
	if err != nil || len(offers) != 1 {
		t.Fatalf("lease: %v %v", offers, err)
	}
	fail := engine.FailRequest{WorkerCall: engine.WorkerCall{Tenant: "acme", WorkerID: "flaky.w1", LeaseID: offers[0].LeaseID}, Error: "flaky", Retryable: true}
	fr, err := eng.Fail(ctx, fail)
	if !host.IsCode(err, host.CodePluginNotReady) || host.HTTPStatus(host.ErrorCode(err)) != 503 {
		t.Fatalf("fail while the policy loads: %+v, %v; want plugin_not_ready (503)", fr, err)
	}
	rs, _, err := eng.TaskReceipts(ctx, admin, res.TaskID, "", 50)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Type == host.ReceiptEscalated || r.Type == host.ReceiptRetryScheduled {
			t.Fatalf("a fail answered plugin_not_ready wrote %s: %s", r.Type, r.Body)
		}
	}
	if task, err := eng.GetTask(ctx, admin, res.TaskID); err != nil || task.State != host.StateLeased {
		t.Fatalf("task after plugin_not_ready: %+v %v; want still leased", task, err)
	}

	release()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := reg.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	failedAt := time.Now()
	fr, err = eng.Fail(ctx, fail)
	if err != nil || !fr.WillRetry || fr.RetryScheduledAt == nil {
		t.Fatalf("fail once loaded: %+v, %v; want a retry", fr, err)
	}
	if d := fr.RetryScheduledAt.Sub(failedAt); d < 900*time.Millisecond || d > time.Since(failedAt)+1100*time.Millisecond {
		t.Fatalf("retry in %v; want the task type's 1 s backoff", d)
	}
	rs, _, err = eng.TaskReceipts(ctx, admin, res.TaskID, "", 50)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Type == host.ReceiptEscalated {
			t.Fatalf("an escalation was written: %s", r.Body)
		}
	}
}
