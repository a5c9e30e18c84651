package main

import (
	"strings"
	"testing"
)

// TestE2EPolicyEscalateToIsValidated: a policy whose escalate_to is not a
// valid principal (here the real escalate plugin, configured with a
// supervisor holding a newline, in a type stored before PUT refused it; a
// NUL is refused at the door before any plugin sees it) is a policy fault: the gate falls
// back to the built-in decision, escalates to the task's recipient and says
// why in a policy_fault receipt; the bad principal never becomes a receipt's
// "to".
func TestE2EPolicyEscalateToIsValidated(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	// PUT refuses such a supervisor (invalid_task_type); a type stored
	// before it did, or written to the database by hand, still reaches the
	// plugin: write the config into the store after a PUT of a good one,
	// before anything reads the type into a cache.
	g.putType(t, "sneaky", map[string]any{
		"default_max_retries": 0,
		"policy":              map[string]any{"name": "escalate", "config": map[string]any{"supervisor": "agent.sup"}},
	}, "")
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/sneaky", g.Admin, map[string]any{
		"policy": map[string]any{"name": "escalate", "config": map[string]any{"supervisor": "agent.sup\nforged"}},
	}), 400, "invalid_task_type")
	bothStores()[0].exec(t, g.dir, nil, `UPDATE task_types SET body = json_set(body, '$.policy.config.supervisor', 'agent.sup' || char(10) || 'forged') WHERE name = 'sneaky'`)
	agent := g.newKey(t, "agent", "agent.kee", "")
	worker := g.newKey(t, "worker", "sneaky.1", "")
	id := g.enqueue(t, agent, "sneaky", map[string]any{})
	o := g.lease(t, worker, "sneaky.1", nil)
	if len(o) != 1 || o[0].Task.ID != id {
		t.Fatalf("lease: %+v", o)
	}
	fr := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", worker, map[string]any{"error_message": "boom", "retryable": true})
	want(t, fr, 200, "")
	if st := fr.JSON(t)["status"]; st != "dead_letter" {
		t.Fatalf("fail: %s", fr.Body)
	}
	rs := call(t, "GET", g.URL+"/v1/receipts?task_id="+id, g.Admin, nil)
	want(t, rs, 200, "")
	var out struct {
		Receipts []struct {
			Type string         `json:"receipt_type"`
			To   string         `json:"to"`
			Body map[string]any `json:"body"`
		} `json:"receipts"`
	}
	rs.Into(t, &out)
	var fault, escalated bool
	for _, r := range out.Receipts {
		if strings.ContainsAny(r.To, "\x00\n") || strings.Contains(r.To, "forged") {
			t.Fatalf("the policy's bad escalate_to reached the ledger: %q in %s", r.To, rs.Body)
		}
		if r.Type != "task.escalated" {
			continue
		}
		switch r.Body["escalation_reason"] {
		case "policy_fault":
			d, _ := r.Body["detail"].(string)
			if !strings.Contains(d, "escalate_to") || !strings.Contains(d, "not a valid principal") || strings.ContainsAny(d, "\x00\n") {
				t.Fatalf("policy_fault detail does not name the bad escalate_to cleanly: %q", d)
			}
			fault = true
		case "max_retries_exceeded":
			if r.To != "agent.kee" {
				t.Fatalf("fallback escalation went to %q, want the recipient agent.kee", r.To)
			}
			escalated = true
		}
	}
	if !fault || !escalated {
		t.Fatalf("want a policy_fault receipt and the built-in escalation to the recipient: %s", rs.Body)
	}
	if v := call(t, "GET", g.URL+"/v1/admin/task-types/sneaky", g.Admin, nil); v.Status != 200 {
		t.Fatalf("task type: %s", v.Body)
	}
}

// TestE2ERetryPolicyShown: GET task type shows the retry policy in effect
// with its parameters, and the delays it shows are the delays failures get,
// for the built-in policy and for the real backoff plugin.
func TestE2ERetryPolicyShown(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	g.putType(t, "plain", map[string]any{}, "")
	g.putType(t, "quick", map[string]any{"default_max_retries": 4,
		"policy": map[string]any{"name": "backoff", "config": map[string]any{"base_seconds": 60, "jitter": 0.5,
			"task_types": map[string]any{"quick": map[string]any{"base_seconds": 7, "max_seconds": 20, "jitter": 0}}}}}, "")
	g.putType(t, "esc", map[string]any{"policy": map[string]any{"name": "escalate", "config": map[string]any{"supervisor": "agent.boss"}}}, "")

	type view struct {
		RequeueDelay int `json:"requeue_delay_seconds"`
		RetryPolicy  struct {
			Plugin    string `json:"plugin"`
			Effective *struct {
				MaxRetries int       `json:"max_retries"`
				Base       float64   `json:"base_seconds"`
				Max        float64   `json:"max_seconds"`
				Jitter     float64   `json:"jitter"`
				Delays     []float64 `json:"delays_seconds"`
				EscalateTo string    `json:"escalate_to"`
			} `json:"effective"`
			Expiry struct {
				RequeueDelay     int `json:"requeue_delay_seconds"`
				MaxLeaseExpiries int `json:"max_lease_expiries"`
			} `json:"expiry"`
		} `json:"retry_policy"`
	}
	get := func(name string) (view, resp) {
		r := call(t, "GET", g.URL+"/v1/admin/task-types/"+name, g.Admin, nil)
		want(t, r, 200, "")
		var v view
		r.Into(t, &v)
		if v.RetryPolicy.Effective == nil {
			t.Fatalf("%s: no effective retry policy: %s", name, r.Body)
		}
		return v, r
	}
	plain, raw := get("plain")
	if e := plain.RetryPolicy.Effective; plain.RetryPolicy.Plugin != "builtin" || e.Base != 300 || e.Max != 3600 || e.Jitter != 0.1 ||
		e.MaxRetries != 3 || len(e.Delays) != 3 || e.Delays[0] != 300 || e.Delays[1] != 600 || e.Delays[2] != 1200 ||
		plain.RetryPolicy.Expiry.RequeueDelay != 30 || plain.RetryPolicy.Expiry.MaxLeaseExpiries != 10 {
		t.Fatalf("built-in policy view: %s", raw.Body)
	}
	// A GET answer can be PUT back unchanged.
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/plain", g.Admin, raw.Body), 200, "")
	quick, raw := get("quick")
	if e := quick.RetryPolicy.Effective; quick.RetryPolicy.Plugin != "backoff" || e.Base != 7 || e.Max != 20 || e.Jitter != 0 ||
		len(e.Delays) != 4 || e.Delays[0] != 7 || e.Delays[1] != 14 || e.Delays[2] != 20 || e.Delays[3] != 20 {
		t.Fatalf("backoff plugin view: %s", raw.Body)
	}
	esc, raw := get("esc")
	if e := esc.RetryPolicy.Effective; esc.RetryPolicy.Plugin != "escalate" || e.EscalateTo != "agent.boss" || e.Base != 300 || e.Jitter != 0 {
		t.Fatalf("escalate plugin view: %s", raw.Body)
	}

	// The delays shown are the delays given: fail one task of each type.
	agent := g.newKey(t, "agent", "agent.kee", "")
	for _, c := range []struct {
		typ      string
		min, max float64
	}{{"quick", 7, 7}, {"plain", 270, 330}} {
		worker := g.newKey(t, "worker", c.typ+".1", "")
		g.enqueue(t, agent, c.typ, map[string]any{})
		o := g.lease(t, worker, c.typ+".1", map[string]any{"task_types": []string{c.typ}})
		if len(o) != 1 {
			t.Fatalf("lease %s: %+v", c.typ, o)
		}
		fr := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", worker, map[string]any{"error_message": "x", "retryable": true})
		want(t, fr, 200, "")
		rs := call(t, "GET", g.URL+"/v1/receipts?task_id="+o[0].Task.ID, g.Admin, nil)
		var out struct {
			Receipts []struct {
				Type string `json:"receipt_type"`
				Body struct {
					Delay float64 `json:"delay_seconds"`
				} `json:"body"`
			} `json:"receipts"`
		}
		rs.Into(t, &out)
		found := false
		for _, r := range out.Receipts {
			if r.Type == "task.retry_scheduled" {
				found = true
				if r.Body.Delay < c.min || r.Body.Delay > c.max {
					t.Fatalf("%s: first retry after %v s, the view promised %v..%v s", c.typ, r.Body.Delay, c.min, c.max)
				}
			}
		}
		if !found {
			t.Fatalf("%s: no retry_scheduled receipt: %s", c.typ, rs.Body)
		}
	}
}

// TestE2ETenantAdminSeesOnlyItsTenant: an admin of tenant acme reads
// /metrics and /v1/admin/plugins without learning anything of the default
// tenant (its task types, workers, counts, call statistics, file paths);
// the operator still sees everything.
func TestE2ETenantAdminSeesOnlyItsTenant(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	// The operators' own tenant: a type, a worker and a task through a policy.
	g.putType(t, "secret-type", map[string]any{"policy": map[string]any{"name": "backoff"}}, "")
	agent := g.newKey(t, "agent", "agent.kee", "")
	worker := g.newKey(t, "worker", "secretw.1", "")
	g.enqueue(t, agent, "secret-type", map[string]any{})
	o := g.lease(t, worker, "secretw.1", nil)
	if len(o) != 1 {
		t.Fatalf("lease: %+v", o)
	}
	want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/fail", worker, map[string]any{"error_message": "x", "retryable": true}), 200, "")
	// Tenant acme: its own admin, type, worker and task.
	acmeAdmin := g.newKey(t, "admin", "ops.acme", "acme")
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/acme-type", acmeAdmin, map[string]any{}), 200, "")
	acmeAgent := g.newKey(t, "agent", "agent.acme", "acme")
	acmeWorker := g.newKey(t, "worker", "acmew.1", "acme")
	g.enqueue(t, acmeAgent, "acme-type", map[string]any{})
	if o := g.lease(t, acmeWorker, "acmew.1", nil); len(o) != 1 {
		t.Fatalf("acme lease: %+v", o)
	}

	m := call(t, "GET", g.URL+"/metrics", acmeAdmin, nil)
	want(t, m, 200, "")
	body := string(m.Body)
	for _, leak := range []string{"secret-type", "secretw.1", `tenant="default"`, "go_goroutines", "process_", "asyncgate_receipts_total", "asyncgate_http_request_duration_seconds"} {
		if strings.Contains(body, leak) {
			t.Errorf("a tenant admin's /metrics shows %q:\n%s", leak, body)
		}
	}
	for _, own := range []string{`asyncgate_tasks_queued_total{task_type="acme-type",tenant="acme"} 1`, `asyncgate_leases_granted_total{task_type="acme-type",tenant="acme"} 1`,
		`asyncgate_tasks_by_type{task_type="acme-type"} 1`, `asyncgate_worker_heartbeat_age_seconds{tenant="acme",worker_id="acmew.1"}`, `asyncgate_tasks_by_state{state="leased"} 1`} {
		if !strings.Contains(body, own) {
			t.Errorf("a tenant admin's /metrics lacks %q:\n%s", own, body)
		}
	}
	op := call(t, "GET", g.URL+"/metrics", g.Admin, nil)
	want(t, op, 200, "")
	for _, all := range []string{`task_type="secret-type",tenant="default"`, `task_type="acme-type",tenant="acme"`, "secretw.1", "go_goroutines", "asyncgate_receipts_total"} {
		if !strings.Contains(string(op.Body), all) {
			t.Errorf("the operator's /metrics lacks %q", all)
		}
	}

	pl := call(t, "GET", g.URL+"/v1/admin/plugins", acmeAdmin, nil)
	want(t, pl, 200, "")
	var list struct {
		Plugins []map[string]any `json:"plugins"`
	}
	pl.Into(t, &list)
	if len(list.Plugins) == 0 {
		t.Fatalf("no plugins listed: %s", pl.Body)
	}
	for _, p := range list.Plugins {
		for _, k := range []string{"calls", "failures", "last_error", "source", "refused", "instances", "latency_p50_us"} {
			if _, ok := p[k]; ok {
				t.Fatalf("a tenant admin's plugin listing shows gate-wide %q: %v", k, p)
			}
		}
		if p["name"] == "" || p["state"] == "" {
			t.Fatalf("plugin entry lacks name or state: %v", p)
		}
	}
	opl := call(t, "GET", g.URL+"/v1/admin/plugins", g.Admin, nil)
	want(t, opl, 200, "")
	if !strings.Contains(string(opl.Body), `"calls"`) {
		t.Fatalf("the operator's plugin listing lost its statistics: %.300s", opl.Body)
	}
}
