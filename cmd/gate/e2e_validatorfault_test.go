package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2EValidatorFaultsAreTheGates: at enqueue, a validator plugin that
// faults — traps, panics, answers garbage, returns an error of its own —
// answers 502 plugin_fault naming the plugin (it was 400 invalid_params,
// which blamed the caller); one past its deadline 504 plugin_timeout; a
// genuine refusal (a violation) stays 400 invalid_params. Nothing is
// queued, and the next enqueue is judged afresh (the fault is retryable).
// A validator removed from the plugins folder while a task type names it
// answers 503 plugin_unavailable naming the type and the plugin (it was 404
// not_found, which says the route or the task does not exist), on the
// batch call too; back in the folder, the type queues again.
func TestE2EValidatorFaultsAreTheGates(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	g.dropIn(t, "slowvalidator", "validator")
	agent := g.newKey(t, "agent", "agent.a", "")
	for _, c := range []struct {
		typ    string
		status int
		code   string
		detail string
	}{
		{"panic", 502, "plugin_fault", "plugin slowvalidator@0.0.1 validate: panic"},
		{"exit", 502, "plugin_fault", "plugin slowvalidator@0.0.1 validate: trap"},
		{"garbage", 502, "plugin_fault", "plugin slowvalidator@0.0.1 validate: bad_output"},
		{"error", 502, "plugin_fault", "cannot judge anything today"},
		{"loop", 504, "plugin_timeout", "plugin slowvalidator@0.0.1 validate: timeout"},
		{"refuse", 400, "invalid_params", "/n: must not be given"},
	} {
		g.putType(t, c.typ, map[string]any{"validators": []map[string]any{{"name": "slowvalidator"}}}, "")
		r := call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": c.typ, "params": map[string]any{}})
		want(t, r, c.status, c.code)
		if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(d, c.detail) || strings.Contains(d, "goroutine ") || strings.Contains(d, "\n") {
			t.Fatalf("%s: detail %q, want one line with %q", c.typ, d, c.detail)
		}
		if c.status >= 500 && r.Header.Get("Retry-After") != "" && c.status != 503 {
			t.Fatalf("%s: a %d with Retry-After %q", c.typ, c.status, r.Header.Get("Retry-After"))
		}
	}
	g.putType(t, "fine", map[string]any{"validators": []map[string]any{{"name": "slowvalidator"}}}, "")
	g.enqueue(t, agent, "fine", map[string]any{})
	r := call(t, "GET", g.URL+"/v1/tasks?status=queued", agent, nil)
	want(t, r, 200, "")
	var ts struct {
		Tasks []struct {
			Type string `json:"task_type"`
		} `json:"tasks"`
	}
	r.Into(t, &ts)
	if len(ts.Tasks) != 1 || ts.Tasks[0].Type != "fine" {
		t.Fatalf("a refused enqueue queued a task: %s", r.Body)
	}

	// The validator leaves the folder: the type's enqueues say so (503,
	// not 404), naming the type and the plugin, one by one and in a batch.
	for _, f := range []string{"slowvalidator.wasm", "slowvalidator.manifest.json"} {
		if err := os.Remove(filepath.Join(g.dir, "plugins", f)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for g.pluginStates(t)["slowvalidator"] == "validator/ready" {
		if time.Now().After(deadline) {
			t.Fatalf("slowvalidator still serving: %v", g.pluginStates(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	r = call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "fine", "params": map[string]any{}})
	want(t, r, 503, "plugin_unavailable")
	if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(d, `"fine"`) || !strings.Contains(d, "slowvalidator") || !strings.Contains(d, "not loaded") {
		t.Fatalf("the missing validator's detail: %s", r.Body)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Fatalf("a 503 without Retry-After: %v", r.Header)
	}
	r = call(t, "POST", g.URL+"/v1/tasks/batch", agent, map[string]any{"tasks": []map[string]any{{"task_type": "fine", "params": map[string]any{}}}})
	want(t, r, 200, "")
	if !strings.Contains(string(r.Body), `"error":"plugin_unavailable"`) {
		t.Fatalf("the batch entry: %s", r.Body)
	}
	// Back in the folder, the type queues again.
	g.dropIn(t, "slowvalidator", "validator")
	g.enqueue(t, agent, "fine", map[string]any{})
}
