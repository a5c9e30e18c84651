package postgres

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// TestWorkflowCancelRacesFinalStepWithoutDeadlock: two hosts, one
// completing a workflow's leased final step while the other cancels the
// workflow, pair after pair. Both take their locks in one order (the
// steps' task rows, then the workflow row), so no batch is rerun after a
// deadlock; before, a cancel locked the workflow and then the step while a
// completion locked the step and then the workflow, and PostgreSQL broke
// the cycle (40P01) after deadlock_timeout. Each workflow ends once,
// succeeded or canceled, as its final step did.
//
// A batch's first run waits for a lock 50 ms at most and is then run
// again, which a loaded machine (a race-enabled CI run) reaches by a slow
// lock holder alone; here the first run may wait 10 s, longer than the
// server's deadlock_timeout, so a rerun counted is a deadlock the server
// found, not a wait.
func TestWorkflowCancelRacesFinalStepWithoutDeadlock(t *testing.T) {
	const workflows = 40
	schema := newSchema(t)
	opts := Options{firstRunLockWait: 10 * time.Second}
	a, b := startHostWith(t, schema, "a", opts), startHostWith(t, schema, "b", opts)
	ctx := context.Background()
	agent := engine.Actor{Tenant: "acme", Principal: "agent.kee", Role: engine.RoleAgent}
	tt := host.NewTaskType("work")
	tt.Tenant, tt.LeaseSeconds = "acme", 600
	if _, err := a.eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		ids := make([]string, workflows)
		for i := range ids {
			res, err := a.eng.SubmitWorkflow(ctx, agent, engine.WorkflowRequest{Name: "race", Steps: []engine.WorkflowStepRequest{
				{Name: "only", TaskType: "work", Params: json.RawMessage(`{}`)}}})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = res.WorkflowID
		}
		offers, err := a.eng.Lease(ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "work.1", Types: []string{"work"}, MaxTasks: workflows})
		if err != nil || len(offers) != workflows {
			t.Fatalf("leased %d of %d: %v", len(offers), workflows, err)
		}
		errs := make(chan error, 2*workflows)
		for i := range ids {
			var wg sync.WaitGroup
			start := make(chan struct{})
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				_, err := a.eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "acme", WorkerID: "work.1", LeaseID: offers[i].LeaseID}, Result: storetest.Pointer})
				if err != nil && !host.IsCode(err, host.CodeLeaseExpired) {
					errs <- err
				}
			}()
			go func() {
				defer wg.Done()
				<-start
				if _, err := b.eng.CancelWorkflow(ctx, agent, ids[i], ""); err != nil && !host.IsCode(err, host.CodeConflict) {
					errs <- err
				}
			}()
			close(start)
			wg.Wait()
		}
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, id := range ids {
			v, err := a.eng.GetWorkflow(ctx, agent, id)
			if err != nil {
				t.Fatal(err)
			}
			if v.State != host.WorkflowSucceeded && v.State != host.WorkflowCanceled {
				t.Fatalf("workflow %s is %s after the race, want succeeded or canceled", id, v.State)
			}
		}
	}
	if n := a.st.BatchRetries() + b.st.BatchRetries(); n != 0 {
		t.Fatalf("%d batches rerun after a deadlock or serialization failure (host a %d, host b %d)", n, a.st.BatchRetries(), b.st.BatchRetries())
	}
}
