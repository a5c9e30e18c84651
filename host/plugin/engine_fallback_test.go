package plugin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
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
