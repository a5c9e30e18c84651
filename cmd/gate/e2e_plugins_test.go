package main

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// pluginStates lists the running gate's plugins by name.
func (g *gateProc) pluginStates(t *testing.T) map[string]string {
	t.Helper()
	r := call(t, "GET", g.URL+"/v1/admin/plugins", g.Admin, nil)
	want(t, r, 200, "")
	var out struct {
		Plugins []struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			State string `json:"state"`
		} `json:"plugins"`
	}
	r.Into(t, &out)
	m := map[string]string{}
	for _, p := range out.Plugins {
		m[p.Name] = p.Kind + "/" + p.State
	}
	return m
}

func TestE2EPluginsWired(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	g := startGate(t, dir)

	states := g.pluginStates(t)
	for name, want := range map[string]string{"inline": "channel/ready", "file": "channel/ready",
		"backoff": "policy/ready", "escalate": "policy/ready", "safe-paths": "validator/ready"} {
		if states[name] != want {
			t.Fatalf("plugin %s is %q, want %q (all: %v)", name, states[name], want, states)
		}
	}
	// The http push channel needs an endpoint from the operator; without one
	// it is listed as not configured (neutral, not an error).
	if states["http"] != "/not_configured" {
		t.Fatalf("unconfigured http channel is %q", states["http"])
	}
	// So does the email channel without the gate's mail section.
	if states["email"] != "/not_configured" {
		t.Fatalf("unconfigured email channel is %q", states["email"])
	}
	r := call(t, "GET", g.URL+"/v1/admin/plugins", g.newKey(t, "agent", "agent.kee", ""), nil)
	want(t, r, 403, "forbidden")

	// A task type with a validator, a policy and a default channel; a bad
	// plugin reference is refused when the type is written.
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/bad", g.Admin, map[string]any{
		"policy": map[string]any{"name": "escalate", "config": map[string]any{"nonsense": 1}}}), 400, "bad_request")
	g.putType(t, "files", map[string]any{
		"default_max_retries":    0,
		"default_result_channel": "inline",
		"validators":             []any{map[string]any{"name": "safe-paths", "config": map[string]any{"keys": []string{"path"}}}},
		"policy":                 map[string]any{"name": "escalate", "config": map[string]any{"supervisor": "agent.supervisor"}},
	}, "")
	agent := g.newKey(t, "agent", "agent.kee", "")
	worker := g.newKey(t, "worker", "files.1", "")

	r = call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "files", "params": map[string]any{"path": "../../etc/passwd"}})
	want(t, r, 400, "invalid_params")

	// A small result goes inline; a large one is routed by size to the file channel.
	small := g.enqueue(t, agent, "files", map[string]any{"path": "docs/a.txt"})
	large := g.enqueue(t, agent, "files", map[string]any{"path": "docs/b.txt"})
	big := strings.Repeat("x", 200<<10)
	for _, o := range g.lease(t, worker, "files.1", map[string]any{"max_tasks": 2}) {
		body := map[string]any{"summary": "indexed", "result": map[string]any{"lines": 3}}
		if o.Task.ID == large {
			body = map[string]any{"summary": "indexed", "result_base64": base64.StdEncoding.EncodeToString([]byte(big))}
		}
		want(t, call(t, "POST", g.URL+"/v1/leases/"+o.LeaseID+"/complete", worker, body), 200, "")
	}
	res := call(t, "GET", g.URL+"/v1/tasks/"+small+"/result", agent, nil)
	want(t, res, 200, "")
	m := res.JSON(t)
	if m["channel"] != "inline" || !strings.HasPrefix(m["result_pointer"].(string), "inline:") || m["checksum_valid"] != true {
		t.Fatalf("small result: %s", res.Body)
	}
	res = call(t, "GET", g.URL+"/v1/tasks/"+large+"/result", agent, nil)
	want(t, res, 200, "")
	m = res.JSON(t)
	if m["channel"] != "file" || !strings.HasPrefix(m["result_pointer"].(string), "file:") || m["checksum_valid"] != true {
		t.Fatalf("large result: %.300s", res.Body)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "results", "*", "*"))
	if len(files) != 1 {
		t.Fatalf("file channel wrote %v", files)
	}
	want(t, call(t, "POST", g.URL+"/v1/tasks/"+large+"/archive", agent, nil), 200, "")
	if files, _ := filepath.Glob(filepath.Join(dir, "results", "*", "*")); len(files) != 0 {
		t.Fatalf("archive did not ack the file channel: %v", files)
	}

	// The escalate policy routes an exhausted task to its supervisor.
	doomed := g.enqueue(t, agent, "files", map[string]any{"path": "docs/c.txt"})
	o := g.lease(t, worker, "files.1", nil)
	if len(o) != 1 || o[0].Task.ID != doomed {
		t.Fatalf("lease: %+v", o)
	}
	fr := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", worker, map[string]any{"error_message": "disk on fire", "retryable": true})
	want(t, fr, 200, "")
	if st := fr.JSON(t)["status"]; st != "dead_letter" {
		t.Fatalf("fail: %s", fr.Body)
	}
	rs := call(t, "GET", g.URL+"/v1/receipts?task_id="+doomed, g.Admin, nil)
	want(t, rs, 200, "")
	if !strings.Contains(string(rs.Body), `"to":"agent.supervisor"`) || !strings.Contains(string(rs.Body), "task.escalated") {
		t.Fatalf("no escalation to the supervisor: %.600s", rs.Body)
	}

	// Drop-in: a plugin copied into the plugins folder loads without a restart.
	wasm, err := os.ReadFile("../../plugins/dist/backoff.wasm")
	if err != nil {
		t.Fatal(err)
	}
	man, err := os.ReadFile("../../plugins/dist/backoff.manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	pdir := filepath.Join(dir, "plugins")
	man = []byte(strings.Replace(string(man), `"name": "backoff"`, `"name": "patient"`, 1))
	if err := os.WriteFile(filepath.Join(pdir, "patient.manifest.json"), man, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "patient.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for g.pluginStates(t)["patient"] != "policy/ready" {
		if time.Now().After(deadline) {
			t.Fatalf("dropped-in plugin never loaded: %v\n%s", g.pluginStates(t), g.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	g.putType(t, "patient-work", map[string]any{"policy": map[string]any{"name": "patient"}}, "")
}

// TestE2EHTTPChannel configures the http push channel at a local endpoint:
// the payload is pushed there, the completion receipt carries the delivery
// proof, and the result is fetched back by GET and checked.
func TestE2EHTTPChannel(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	stored := map[string][]byte{}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case "POST":
			b, _ := io.ReadAll(r.Body)
			stored["/results/"+r.Header.Get("X-Asyncgate-Task-Id")] = b
			w.Header().Set("Location", "/results/"+r.Header.Get("X-Asyncgate-Task-Id"))
			w.WriteHeader(201)
		case "GET":
			b, ok := stored[r.URL.Path]
			if !ok {
				w.WriteHeader(404)
				return
			}
			w.Write(b)
		}
	}))
	defer sink.Close()
	cfg := filepath.Join(t.TempDir(), "gate.json") // beside the data folder: a new gate starts in an empty one
	if err := os.WriteFile(cfg, []byte(`{"http_channel": {"endpoint": "`+sink.URL+`/results"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGate(t, t.TempDir(), "--config", cfg)
	if st := g.pluginStates(t)["http"]; st != "channel/ready" {
		t.Fatalf("configured http channel is %q", st)
	}
	g.putType(t, "push", map[string]any{"default_result_channel": "http"}, "")
	agent := g.newKey(t, "agent", "agent.kee", "")
	worker := g.newKey(t, "worker", "push.1", "")
	id := g.enqueue(t, agent, "push", nil)
	o := g.lease(t, worker, "push.1", nil)
	want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, map[string]any{"result": map[string]any{"answer": 42}}), 200, "")
	mu.Lock()
	pushed := string(stored["/results/"+id])
	mu.Unlock()
	if pushed != `{"answer":42}` {
		t.Fatalf("endpoint got %q", pushed)
	}
	rs := call(t, "GET", g.URL+"/v1/receipts?task_id="+id, agent, nil)
	if !strings.Contains(string(rs.Body), `"delivery_proof"`) {
		t.Fatalf("completion receipt has no delivery proof: %.800s", rs.Body)
	}
	res := call(t, "GET", g.URL+"/v1/tasks/"+id+"/result", agent, nil)
	want(t, res, 200, "")
	if m := res.JSON(t); m["channel"] != "http" || m["checksum_valid"] != true {
		t.Fatalf("result: %s", res.Body)
	}
}

// TestE2EHostileHTTPInput covers bad input found in review: bodies that are
// not UTF-8, ?tenant= on routes where the key chooses the tenant, a missing
// plugin named by a task type, and hollow "locatable" results.
func TestE2EHostileHTTPInput(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	agent := g.newKey(t, "agent", "agent.h", "")
	worker := g.newKey(t, "worker", "h.1", "")
	g.putType(t, "h", map[string]any{}, "")
	want(t, call(t, "POST", g.URL+"/v1/tasks", agent, "{\"task_type\":\"h\",\"params\":{\"p\":\"a\xff\xfe\"}}"), 400, "bad_request")
	want(t, call(t, "GET", g.URL+"/v1/tasks?tenant=acme", g.Admin, nil), 400, "bad_request")
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/nope", g.Admin, map[string]any{"policy": map[string]any{"name": "missing-plugin"}}), 400, "bad_request")
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/nope", g.Admin, map[string]any{"default_result_channel": "../../x"}), 400, "bad_request")
	g.enqueue(t, agent, "h", nil)
	o := g.lease(t, worker, "h.1", nil)
	for _, body := range []string{`{"artifacts":[{"type":"s3"}]}`, `{"delivery_proof":{}}`, `{"result_pointer":" "}`} {
		want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, body), 422, "not_locatable")
	}
	// An artifact without its type is that mistake, named.
	r := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, `{"artifacts":[{}]}`)
	want(t, r, 400, "bad_request")
	if !strings.Contains(string(r.Body), "artifacts[0].type") {
		t.Fatalf("an untyped artifact's refusal does not name it: %s", r.Body)
	}
	want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, `{"result_pointer":"s3://b/k","result_checksum":"garbage"}`), 400, "bad_request")
}
