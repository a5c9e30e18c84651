package ui_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

// TestTaskPageTellsTheTaskStory (issue 42): a leased task's page shows its
// live attempt (number, lease expiry, when its worker was last heard), its
// attempts and its timeline; a dead letter's failures read as words, not
// "1 failed of 0 allowed"; another tenant's admin finds no such task.
func TestTaskPageTellsTheTaskStory(t *testing.T) {
	b := setup(t)
	id := b.api(t, "POST", "/v1/tasks", b.agent, map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}})["task_id"].(string)
	ls := b.api(t, "POST", "/v1/leases", b.worker, map[string]any{"worker_id": "echo.w1", "max_tasks": 1})["leases"].([]any)
	lease := ls[0].(map[string]any)["lease_id"].(string)
	b.api(t, "POST", "/v1/leases/"+lease+"/accept", b.worker, nil)
	b.api(t, "POST", "/v1/leases/"+lease+"/heartbeat", b.worker, map[string]any{"progress_percent": 40, "progress_message": "four of ten"})

	br := newBrowser(t, b.ts)
	br.signIn(b.admin)
	res, page := br.get("/ui/tasks/" + id)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("task page: %d\n%s", res.StatusCode, page)
	}
	for _, want := range []string{`id="current-attempt"`, `id="attempt-number">1 <span class="muted">(lease 1 of the task)`, `id="lease-expiry"`,
		`id="heartbeat-age"`, `<table id="attempts">`, `class="outcome">running`, `<table id="timeline">`, "lease.granted", "task.accepted",
		"40% four of ten", "each bar is one report", "0 failures · up to 3 retries allowed · 1 lease", `rel="icon"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the leased task's page lacks %q", want)
		}
	}

	// A dead letter of a type that allows no retry.
	zero := host.NewTaskType("zero")
	zero.Tenant = "default"
	zero.DefaultMaxRetries = 0
	if _, err := b.eng.PutTaskType(context.Background(), zero); err != nil {
		t.Fatal(err)
	}
	dead := b.api(t, "POST", "/v1/tasks", b.agent, map[string]any{"task_type": "zero", "params": map[string]any{}})["task_id"].(string)
	ls = b.api(t, "POST", "/v1/leases", b.worker, map[string]any{"worker_id": "echo.w1", "max_tasks": 1, "task_types": []string{"zero"}})["leases"].([]any)
	lease = ls[0].(map[string]any)["lease_id"].(string)
	b.api(t, "POST", "/v1/leases/"+lease+"/fail", b.worker, map[string]any{"error_message": "upstream said no", "retryable": true, "metadata": map[string]any{"http_status": 502}})
	_, page = br.get("/ui/tasks/" + dead)
	for _, want := range []string{"dead letter after 1 failure; no retries were allowed", `class="outcome">dead_letter`, "upstream said no",
		"{&#34;http_status&#34;:502}", "task.failed", "task.escalated"} {
		if !strings.Contains(page, want) {
			t.Errorf("the dead letter's page lacks %q", want)
		}
	}
	if strings.Contains(page, "failed of") || strings.Contains(page, `id="current-attempt"`) {
		t.Errorf("the dead letter's page reads as before or shows a live attempt")
	}

	// Another tenant's admin: no such task.
	other := newBrowser(t, b.ts)
	other.signIn(b.acme)
	if res, _ := other.get("/ui/tasks/" + id); res.StatusCode != http.StatusNotFound {
		t.Fatalf("another tenant's admin opened the task: %d", res.StatusCode)
	}
}

// TestObligationsPageOpensOnASummary (issue 42): without a principal the
// page counts each keyed principal's open obligations, owed and owing.
func TestObligationsPageOpensOnASummary(t *testing.T) {
	b := setup(t)
	b.api(t, "POST", "/v1/tasks", b.agent, map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}})
	br := newBrowser(t, b.ts)
	br.signIn(b.admin)
	_, page := br.get("/ui/obligations")
	for _, want := range []string{`<table id="obligations-summary">`, `<a href="/ui/obligations?principal=agent.a">agent.a</a></td><td class="owes">`, `root`} {
		if !strings.Contains(page, want) {
			t.Errorf("the obligations page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "Pick a principal to list") {
		t.Error("the obligations page still opens empty")
	}
}
