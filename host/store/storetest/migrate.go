package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// MigrationFencingTokens checks a driver's migration 0023 (fencing tokens)
// on a database that held resource leases before it: each lease gets the
// token its grant would have had (the count of grants of its resource so
// far, in grant order), the resource's counter goes on from there, and a
// counter outlives the lease rows. open opens the same database each call;
// exec runs statements on it directly, with no store open.
func MigrationFencingTokens(t *testing.T, open func(t *testing.T) store.Store, exec func(stmts ...string)) {
	ctx := context.Background()
	grant := func(st store.Store, resource string) *host.ResourceLease {
		t.Helper()
		eng, err := engine.New(engine.Config{Store: st})
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		res, err := eng.AcquireResources(ctx, engine.AcquireRequest{Tenant: "t", Holder: "h-" + resource, Intents: []engine.ResourceIntent{{Resource: resource, Predicate: host.PredicateReads}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Leases[0]
	}
	st := open(t)
	for _, r := range []string{"R:a", "R:b", "R:a", "R:a", "R:b"} {
		grant(st, r)
	}
	st.Close()
	// Back to the schema before 0023: no counters, no token column.
	exec(`DROP TABLE resource_fences`, `ALTER TABLE resource_leases DROP COLUMN fencing_token`, `DELETE FROM schema_migrations WHERE version = 23`)
	st = open(t)
	var got []string
	err := st.View(ctx, func(r store.Reader) error {
		ls, _, err := r.ListResourceLeases(ctx, store.ResourceLeaseFilter{Tenant: "t", Limit: 100})
		for _, l := range ls {
			got = append(got, fmt.Sprintf("%s=%d", l.Resource, l.FencingToken))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "R:a=1 R:b=1 R:a=2 R:a=3 R:b=2" {
		t.Fatalf("tokens after the migration: %v", got)
	}
	if l := grant(st, "R:a"); l.FencingToken != 4 {
		t.Fatalf("first grant of R:a after the migration: token %d, want 4", l.FencingToken)
	}
	st.Close()
	exec(`DELETE FROM resource_leases`)
	st = open(t)
	defer st.Close()
	if a, b := grant(st, "R:a"), grant(st, "R:b"); a.FencingToken != 5 || b.FencingToken != 3 {
		t.Fatalf("grants after a restart with every lease row gone: R:a %d, R:b %d; want 5, 3", a.FencingToken, b.FencingToken)
	}
}

// withEngine runs fn with an engine on st, closed after it.
func withEngine(t *testing.T, st store.Store, fn func(eng *engine.Engine)) {
	t.Helper()
	eng, err := engine.New(engine.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	fn(eng)
}

// putTypes registers task types of the given names in tenant t.
func putTypes(t *testing.T, eng *engine.Engine, names ...string) {
	t.Helper()
	for _, name := range names {
		tt := host.NewTaskType(name)
		tt.Tenant = "t"
		if _, err := eng.PutTaskType(context.Background(), tt); err != nil {
			t.Fatal(err)
		}
	}
}

// MigrationDependencies checks a driver's migrations 0035 and 0036 (task
// dependencies and their depth) on a database made before them: tasks queued before the upgrade can be
// waited on after it, and the waiter is settled by their completion.
func MigrationDependencies(t *testing.T, open func(t *testing.T) store.Store, exec func(stmts ...string)) {
	ctx := context.Background()
	agent := engine.Actor{Tenant: "t", Principal: "agent.a", Role: engine.RoleAgent}
	st := open(t)
	var old string
	withEngine(t, st, func(eng *engine.Engine) {
		tt := host.NewTaskType("work")
		tt.Tenant = "t"
		if _, err := eng.PutTaskType(ctx, tt); err != nil {
			t.Fatal(err)
		}
		res, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "work"})
		if err != nil {
			t.Fatal(err)
		}
		old = res.TaskID
	})
	st.Close()
	// Back to the schema before 0035 (and 0036, which adds the edges'
	// depth).
	exec(`DROP TABLE task_dependencies`, `DELETE FROM schema_migrations WHERE version IN (35, 36)`)
	st = open(t)
	defer st.Close()
	withEngine(t, st, func(eng *engine.Engine) {
		w, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "work", After: []string{old}})
		if err != nil || w.Status != string(host.StateWaiting) {
			t.Fatalf("enqueue after a task of before the upgrade: %+v %v", w, err)
		}
		offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: "w.1"})
		if err != nil || len(offers) != 1 || offers[0].Task.ID != old {
			t.Fatalf("lease: %v %v", offers, err)
		}
		if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: "w.1", LeaseID: offers[0].LeaseID}, Result: Pointer}); err != nil {
			t.Fatal(err)
		}
		offers, err = eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: "w.1"})
		if err != nil || len(offers) != 1 || offers[0].Task.ID != w.TaskID || len(offers[0].Dependencies) != 1 {
			t.Fatalf("the waiter after its dependency completed: %v %v", offers, err)
		}
	})
}

// MigrationWaitersMarker checks a driver's migration 0040 (the has_waiters
// marker) on a database made before it, with windBack the statements that
// return a migrated database to that shape: a task waited on before the
// upgrade is marked by it, one none waits on is not, and completing the
// first settles its waiter.
func MigrationWaitersMarker(t *testing.T, open func(t *testing.T) store.Store, exec func(stmts ...string), windBack ...string) {
	ctx := context.Background()
	agent := engine.Actor{Tenant: "t", Principal: "agent.a", Role: engine.RoleAgent}
	enqueue := func(eng *engine.Engine, typ string, after ...string) string {
		t.Helper()
		res, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: typ, After: after})
		if err != nil {
			t.Fatal(err)
		}
		return res.TaskID
	}
	st := open(t)
	var dep, plain, waiter string
	withEngine(t, st, func(eng *engine.Engine) {
		putTypes(t, eng, "work", "merge")
		dep, plain = enqueue(eng, "work"), enqueue(eng, "work")
		waiter = enqueue(eng, "merge", dep)
	})
	st.Close()
	exec(windBack...)
	st = open(t)
	defer st.Close()
	if err := st.View(ctx, func(r store.Reader) error {
		d, err := r.GetTask(ctx, "t", dep)
		if err != nil {
			return err
		}
		p, err := r.GetTask(ctx, "t", plain)
		if err != nil {
			return err
		}
		if !d.HasWaiters || p.HasWaiters {
			t.Errorf("after the migration: the task waited on is marked %v (want true), the one none waits on %v (want false)", d.HasWaiters, p.HasWaiters)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	withEngine(t, st, func(eng *engine.Engine) {
		offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: "w.1", Types: []string{"work"}, MaxTasks: 2})
		if err != nil || len(offers) != 2 {
			t.Fatalf("lease: %v %v", offers, err)
		}
		for _, o := range offers {
			if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: "w.1", LeaseID: o.LeaseID}, Result: Pointer}); err != nil {
				t.Fatal(err)
			}
		}
		offers, err = eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: "w.1", Types: []string{"merge"}})
		if err != nil || len(offers) != 1 || offers[0].Task.ID != waiter || len(offers[0].Dependencies) != 1 {
			t.Fatalf("the waiter after its dependency completed: %v %v", offers, err)
		}
	})
}

// MigrationWorkflowRetention checks a driver's migration of workflows under
// retention (PostgreSQL 0051, SQLite 0048) on a database whose retention
// archived workflows' final steps before it (the task alone): each such
// workflow is archived, its outcome kept and its result taken from the
// archived step (pointer purged); an ended workflow whose final step is not
// archived keeps its state and gets its outcome; a running one is left
// alone. windBack takes the database back to before the migration.
func MigrationWorkflowRetention(t *testing.T, open func(t *testing.T) store.Store, exec func(stmts ...string), windBack ...string) {
	ctx := context.Background()
	agent := engine.Actor{Tenant: "t", Principal: "agent.a", Role: engine.RoleAgent}
	st := open(t)
	eng, err := engine.New(engine.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	tt := host.NewTaskType("work")
	tt.Tenant = "t"
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	submit := func(name string) *engine.WorkflowResult {
		t.Helper()
		res, err := eng.SubmitWorkflow(ctx, agent, engine.WorkflowRequest{Name: name, Steps: []engine.WorkflowStepRequest{{Name: "only", TaskType: "work"}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	complete := func(want string) {
		t.Helper()
		offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: "w.1", Types: []string{"work"}, MaxTasks: 1})
		if err != nil || len(offers) != 1 || offers[0].Task.ID != want {
			t.Fatalf("lease: %v %v, want %s", offers, err, want)
		}
		if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: "w.1", LeaseID: offers[0].LeaseID}, Result: Pointer}); err != nil {
			t.Fatal(err)
		}
	}
	done := submit("archived before")
	complete(done.Steps["only"])
	canceled := submit("canceled, archived before")
	if _, err := eng.CancelWorkflow(ctx, agent, canceled.WorkflowID, ""); err != nil {
		t.Fatal(err)
	}
	kept := submit("not archived yet")
	complete(kept.Steps["only"])
	running := submit("running")
	eng.Close()
	// Retention before the migration: the final steps alone archived.
	archivedAt := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if err := st.Update(ctx, func(tx store.Tx) error {
		for _, id := range []string{done.Steps["only"], canceled.Steps["only"]} {
			tk, err := tx.GetTask(ctx, "t", id)
			if err != nil {
				return err
			}
			from := tk.State
			if tk.Result != nil {
				r := *tk.Result
				r.Pointer, r.PurgedAt, r.ArchivedAt = "", &archivedAt, &archivedAt
				tk.Result = &r
			}
			tk.State, tk.UpdatedAt = host.StateArchived, archivedAt
			if err := tx.UpdateTask(ctx, tk, store.Fence{State: from}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	exec(windBack...)
	st = open(t)
	defer st.Close()
	get := func(id string) *host.Workflow {
		t.Helper()
		var wf *host.Workflow
		if err := st.View(ctx, func(r store.Reader) error {
			var err error
			wf, err = r.GetWorkflow(ctx, "t", id)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return wf
	}
	if wf := get(done.WorkflowID); wf.State != host.WorkflowArchived || wf.Outcome != host.WorkflowSucceeded || wf.ArchivedAt == nil || !wf.ArchivedAt.Equal(archivedAt) ||
		wf.Result == nil || wf.Result.Pointer != "" || wf.Result.PurgedAt == nil || wf.Result.Summary != Pointer.Summary {
		t.Errorf("a succeeded workflow whose final step was archived, after the migration: %+v result %+v", wf, wf.Result)
	}
	if wf := get(canceled.WorkflowID); wf.State != host.WorkflowArchived || wf.Outcome != host.WorkflowCanceled || wf.ArchivedAt == nil || wf.Result != nil {
		t.Errorf("a canceled workflow whose final step was archived, after the migration: %+v", wf)
	}
	if wf := get(kept.WorkflowID); wf.State != host.WorkflowSucceeded || wf.Outcome != host.WorkflowSucceeded || wf.ArchivedAt != nil || wf.Result == nil || wf.Result.Pointer != Pointer.Pointer {
		t.Errorf("a succeeded workflow whose final step is not archived, after the migration: %+v result %+v", wf, wf.Result)
	}
	if wf := get(running.WorkflowID); wf.State != host.WorkflowRunning || wf.Outcome != "" || wf.ArchivedAt != nil {
		t.Errorf("a running workflow after the migration: %+v", wf)
	}
}

// MigrationDeadLetterEdges checks the migration that indexes the edges
// settled as dead letters (task_dependencies_dead) on a data folder or
// schema made before it (windBack undoes it): an edge a dead letter
// settled before the migration is found by the redrive after it, so the
// task still waiting on it is not canceled when its other dependency dies
// too, and runs when the redriven task succeeds.
func MigrationDeadLetterEdges(t *testing.T, open func(t *testing.T) store.Store, exec func(stmts ...string), windBack ...string) {
	ctx := context.Background()
	agent := engine.Actor{Tenant: "t", Principal: "agent.a", Role: engine.RoleAgent}
	admin := engine.Actor{Tenant: "t", Principal: "ops", Role: engine.RoleAdmin}
	lease := func(eng *engine.Engine, typ, want string) host.Offer {
		t.Helper()
		offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "t", WorkerID: "w.1", Types: []string{typ}, MaxTasks: 1})
		if err != nil || len(offers) != 1 || offers[0].Task.ID != want {
			t.Fatalf("lease of %s: %v %v, want %s", typ, offers, err, want)
		}
		return offers[0]
	}
	kill := func(eng *engine.Engine, o host.Offer) {
		t.Helper()
		res, err := eng.Fail(ctx, engine.FailRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: "w.1", LeaseID: o.LeaseID}, Error: "broken"})
		if err != nil || res.Status != "dead_letter" {
			t.Fatalf("fatal failure: %+v %v", res, err)
		}
	}
	st := open(t)
	var a, c, w string
	withEngine(t, st, func(eng *engine.Engine) {
		putTypes(t, eng, "work", "merge")
		for _, id := range []*string{&a, &c} {
			res, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "work"})
			if err != nil {
				t.Fatal(err)
			}
			*id = res.TaskID
		}
		res, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "merge", After: []string{a, c}, AfterRule: host.RuleAnySucceeded})
		if err != nil {
			t.Fatal(err)
		}
		w = res.TaskID
		kill(eng, lease(eng, "work", a))
	})
	st.Close()
	exec(windBack...)
	st = open(t)
	defer st.Close()
	withEngine(t, st, func(eng *engine.Engine) {
		if _, err := eng.Redrive(ctx, admin, a); err != nil {
			t.Fatal(err)
		}
		oa := lease(eng, "work", a)
		kill(eng, lease(eng, "work", c))
		if tk, err := eng.GetTask(ctx, agent, w); err != nil || tk.State != host.StateWaiting {
			t.Fatalf("the waiter of a dead letter settled before the migration, redriven after it: %+v %v, want waiting", tk, err)
		}
		if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "t", WorkerID: "w.1", LeaseID: oa.LeaseID},
			Result: host.Result{Channel: "inline", Pointer: "inline:b2s="}}); err != nil {
			t.Fatal(err)
		}
		lease(eng, "merge", w)
	})
}
