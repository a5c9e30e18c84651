package storetest

import (
	"slices"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
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

// testWorkflowListStates: a list of workflows keeps those in any of the
// states asked (GET /v1/workflows?status=a,b, as GET /v1/tasks takes), and
// refuses a state it does not know, in a list too, with bad_request.
func testWorkflowListStates(t *testing.T, b *Bundle) {
	done := b.submit(t, "done", step("only", "work"))
	canceled := b.submit(t, "canceled", step("only", "work"))
	running := b.submit(t, "running", step("only", "work"))
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1", "work"))
	if _, err := b.Engine.CancelWorkflow(b.Ctx, b.Agent, canceled.WorkflowID, ""); err != nil {
		t.Fatal(err)
	}
	list := func(f store.WorkflowFilter) []string {
		t.Helper()
		wfs, _, err := b.Engine.ListWorkflows(b.Ctx, b.Agent, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, w := range wfs {
			ids = append(ids, w.ID)
		}
		return ids
	}
	if got, want := list(store.WorkflowFilter{States: []host.WorkflowState{host.WorkflowRunning, host.WorkflowSucceeded}}),
		[]string{running.WorkflowID, done.WorkflowID}; !slices.Equal(got, want) {
		t.Errorf("running or succeeded: %v, want %v (newest first)", got, want)
	}
	if got := list(store.WorkflowFilter{State: host.WorkflowCanceled, States: []host.WorkflowState{host.WorkflowCanceled}}); !slices.Equal(got, []string{canceled.WorkflowID}) {
		t.Errorf("canceled (named twice): %v, want %v", got, []string{canceled.WorkflowID})
	}
	if got := list(store.WorkflowFilter{States: []host.WorkflowState{host.WorkflowFailed, host.WorkflowArchived}}); len(got) != 0 {
		t.Errorf("failed or archived: %v, want none", got)
	}
	_, _, err := b.Engine.ListWorkflows(b.Ctx, b.Agent, store.WorkflowFilter{States: []host.WorkflowState{host.WorkflowRunning, "nope"}})
	WantCode(t, err, host.CodeBadRequest)
}
