package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestWorkflowPages: the list shows a workflow, its page draws its steps as
// a graph (a box per step in its state, an edge per after) and lists them,
// the cancel form cancels it, and another tenant's admin is told there is
// no such workflow.
func TestWorkflowPages(t *testing.T) {
	b := setup(t)
	steps := []map[string]any{
		{"name": "plan", "task_type": "echo", "params": map[string]any{}},
		{"name": "left", "task_type": "echo", "after": []string{"plan"}},
		{"name": "right", "task_type": "echo", "after": []string{"plan"}},
		{"name": "join", "task_type": "echo", "after": []string{"left", "right"}},
	}
	id := b.api(t, "POST", "/v1/workflows", b.agent, map[string]any{"name": "diamond", "steps": steps})["workflow_id"].(string)

	br := newBrowser(t, b.ts)
	csrf := br.signIn(b.admin)
	res, page := br.get("/ui/workflows")
	if res.StatusCode != 200 || !strings.Contains(page, `href="/ui/workflows/`+id+`"`) || !strings.Contains(page, "diamond") {
		t.Fatalf("workflow list: %d\n%s", res.StatusCode, page)
	}
	res, page = br.get("/ui/workflows/" + id)
	if res.StatusCode != 200 || !strings.Contains(page, `id="workflow-graph"`) {
		t.Fatalf("workflow page: %d\n%s", res.StatusCode, page)
	}
	if n := strings.Count(page, `class="wf-node `); n != 4 {
		t.Fatalf("the graph draws %d steps, want 4", n)
	}
	if n := strings.Count(page, `class="wf-edge"`); n != 4 {
		t.Fatalf("the graph draws %d edges, want 4", n)
	}
	for _, want := range []string{"node-queued", "node-waiting", "final", "1 <span class=\"state-queued\">queued</span>, 3 <span class=\"state-waiting\">waiting</span>"} {
		if !strings.Contains(page, want) {
			t.Fatalf("workflow page lacks %q:\n%s", want, page)
		}
	}
	res, _ = br.post("/ui/workflows/"+id+"/cancel", url.Values{"csrf": {csrf}, "reason": {"from the dashboard"}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel: %d", res.StatusCode)
	}
	_, page = br.get("/ui/workflows/" + id)
	if !strings.Contains(page, `class="wf-canceled">canceled`) || strings.Contains(page, `id="cancel-workflow"`) {
		t.Fatalf("after cancel:\n%s", page)
	}
	// A delayed step is scheduled until its time, and the page says when.
	later := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	timed := b.api(t, "POST", "/v1/workflows", b.agent, map[string]any{"name": "timed", "steps": []map[string]any{
		{"name": "wait", "task_type": "echo", "not_before": later.Format(time.RFC3339)}}})["workflow_id"].(string)
	_, page = br.get("/ui/workflows/" + timed)
	if !strings.Contains(page, "node-scheduled") || !strings.Contains(page, `scheduled <span class="muted">until `+later.Format("2006-01-02 15:04:05Z")) {
		t.Fatalf("a delayed step's page:\n%s", page)
	}
	// Another tenant's admin: no such workflow, and none listed.
	other := newBrowser(t, b.ts)
	other.signIn(b.acme)
	if res, _ := other.get("/ui/workflows/" + id); res.StatusCode != http.StatusNotFound {
		t.Fatalf("another tenant's admin opened the workflow: %d", res.StatusCode)
	}
	if _, page := other.get("/ui/workflows"); strings.Contains(page, id) {
		t.Fatal("another tenant's admin lists the workflow")
	}
}
