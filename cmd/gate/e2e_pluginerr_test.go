package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/plugin/pluginbuild"
)

// dropIn builds a test plugin from testdata/plugins into the gate's plugins
// folder (stamped and renamed in, as the docs say) and waits for it to load.
func (g *gateProc) dropIn(t *testing.T, src, kind string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name, err := pluginbuild.Build(ctx, "../../testdata/plugins/"+src, g.dir+"/plugins", "")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for g.pluginStates(t)[name] != kind+"/ready" {
		if time.Now().After(deadline) {
			t.Fatalf("%s never loaded: %v\n%s", name, g.pluginStates(t), g.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestE2EPluginFaultsNameThePlugin: a validator that runs past its deadline
// answers 504 plugin_timeout naming the plugin (it was 503
// database_unavailable), a panicking validator 502 plugin_fault, and a
// panicking plugin's stack reaches the operator log but neither the answer
// nor the receipts agents read.
func TestE2EPluginFaultsNameThePlugin(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	g.dropIn(t, "slowvalidator", "validator")
	g.dropIn(t, "hostile", "policy")
	agent := g.newKey(t, "agent", "agent.a", "")

	g.putType(t, "loop", map[string]any{"validators": []map[string]any{{"name": "slowvalidator"}}}, "")
	r := call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "loop", "params": map[string]any{}})
	want(t, r, 504, "plugin_timeout")
	if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(d, "slowvalidator") {
		t.Fatalf("the timeout does not name the plugin: %s", r.Body)
	}

	g.putType(t, "panic", map[string]any{"validators": []map[string]any{{"name": "slowvalidator"}}}, "")
	r = call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "panic", "params": map[string]any{}})
	if r.Status != 502 || !strings.Contains(string(r.Body), `"plugin_fault"`) || strings.Contains(string(r.Body), "goroutine ") || strings.Contains(string(r.Body), `\n`) {
		t.Fatalf("a validator panic answered %d %s", r.Status, r.Body)
	}

	// A policy that panics: the engine falls back and writes an escalation
	// receipt; the receipt carries a one-line summary, the log the stack.
	g.putType(t, "panic", map[string]any{"policy": map[string]any{"name": "hostile"}, "default_max_retries": 3}, "")
	id := g.enqueue(t, agent, "panic", map[string]any{})
	worker := g.newKey(t, "worker", "panic.w1", "")
	o := g.lease(t, worker, "panic.w1", nil)
	if len(o) != 1 || o[0].Task.ID != id {
		t.Fatalf("lease: %+v", o)
	}
	want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", worker, map[string]any{"error_message": "x", "retryable": true}), 200, "")
	rs := call(t, "GET", g.URL+"/v1/receipts?task_id="+id, g.Admin, nil)
	want(t, rs, 200, "")
	body := string(rs.Body)
	if !strings.Contains(body, "policy_fault") || !strings.Contains(body, "hostile") {
		t.Fatalf("no policy_fault escalation naming the plugin: %.800s", body)
	}
	if strings.Contains(body, "goroutine ") || strings.Contains(body, ".go:") {
		t.Fatalf("a receipt carries the guest's stack: %.2000s", body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(g.Log(), "goroutine ") {
		if time.Now().After(deadline) {
			t.Fatalf("the panic's stack is not in the operator log:\n%s", g.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
