package storetest

import (
	"reflect"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// testDepsGetEdge: GetDependency reads a waiter's one edge to a dependency
// as ListDependencies lists it (rule, position, the state it finished in),
// and nil for a task the waiter does not wait on: the waiter itself, a
// dependency of another waiter, an unknown id, another tenant's waiter.
func testDepsGetEdge(t *testing.T, b *Bundle) {
	a := b.Enqueue(t, "work")
	c := b.Enqueue(t, "work")
	w := b.Enqueue(t, "other", after(host.RuleAllFinished, a.TaskID, c.TaskID))
	lone := b.Enqueue(t, "work")
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	check := func() {
		t.Helper()
		if err := b.Store.View(b.Ctx, func(r store.Reader) error {
			all, err := r.ListDependencies(b.Ctx, "acme", w.TaskID)
			if err != nil {
				return err
			}
			if len(all) != 2 {
				t.Fatalf("waiter's edges %+v, want 2", all)
			}
			for _, want := range all {
				got, err := r.GetDependency(b.Ctx, "acme", w.TaskID, want.DependsOn)
				if err != nil {
					return err
				}
				if got == nil || !reflect.DeepEqual(*got, want) {
					t.Fatalf("edge to %s: %+v, want %+v", want.DependsOn, got, want)
				}
			}
			for _, no := range []struct{ tenant, waiter, dep string }{
				{"acme", w.TaskID, w.TaskID}, {"acme", w.TaskID, lone.TaskID}, {"acme", w.TaskID, "tsk_nosuchtask"},
				{"acme", a.TaskID, c.TaskID}, {"globex", w.TaskID, a.TaskID},
			} {
				if got, err := r.GetDependency(b.Ctx, no.tenant, no.waiter, no.dep); err != nil || got != nil {
					t.Fatalf("edge (%s, %s, %s): %+v %v, want none", no.tenant, no.waiter, no.dep, got, err)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	check()
	b.Complete(t, "w.1", b.leaseType(t, "w.1", "work"))
	check()
}
