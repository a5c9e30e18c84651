package storetest

import (
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// testWorkflowCounts: workflows are counted by state for their tenant
// alone (GET /v1/admin/stats, asyncgate_workflows); "" counts every
// tenant's.
func testWorkflowCounts(t *testing.T, b *Bundle) {
	counts := func(tenant string) map[host.WorkflowState]int64 {
		t.Helper()
		c, err := b.Engine.WorkflowCounts(b.Ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	want := func(tenant string, running, succeeded, failed, canceled int64) {
		t.Helper()
		c := counts(tenant)
		w := map[host.WorkflowState]int64{host.WorkflowRunning: running, host.WorkflowSucceeded: succeeded,
			host.WorkflowFailed: failed, host.WorkflowCanceled: canceled, host.WorkflowArchived: 0}
		if len(c) != len(w) {
			t.Fatalf("tenant %q: counts %v, want %v", tenant, c, w)
		}
		for st, n := range w {
			if c[st] != n {
				t.Fatalf("tenant %q: counts %v, want %v", tenant, c, w)
			}
		}
	}
	want("acme", 0, 0, 0, 0)
	done := b.submit(t, "done", step("only", "work"))
	canceled := b.submit(t, "canceled", step("only", "work"))
	b.submit(t, "running", step("only", "work"))
	b.submit(t, "running too", step("a", "work"), step("b", "work", "a"))
	o := b.LeaseOne(t, "w.1", "work")
	if o.Task.ID != done.Steps["only"] {
		t.Fatalf("leased %s, want the first workflow's step %s", o.Task.ID, done.Steps["only"])
	}
	b.Complete(t, "w.1", o)
	if _, err := b.Engine.CancelWorkflow(b.Ctx, b.Agent, canceled.WorkflowID, ""); err != nil {
		t.Fatal(err)
	}
	other := host.NewTaskType("work")
	other.Tenant = "globex"
	b.MustPutType(t, other)
	globex := engine.Actor{Tenant: "globex", Principal: "agent.g", Role: engine.RoleAgent}
	if _, err := b.Engine.SubmitWorkflow(b.Ctx, globex, engine.WorkflowRequest{Name: "theirs", Steps: []engine.WorkflowStepRequest{step("only", "work")}}); err != nil {
		t.Fatal(err)
	}
	want("acme", 2, 1, 0, 1)
	want("globex", 1, 0, 0, 0)
	want("", 3, 1, 0, 1)
}
