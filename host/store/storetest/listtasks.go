package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// testListTasksFilters: every filter of ListTasks, alone and combined, pages
// through exactly the tasks a plain scan of all tasks selects, oldest first,
// across two tenants, after the tasks have moved through updates (a driver
// may keep listing columns apart from the row that updates rewrite).
// ListTasksFilters runs the conformance case of that name alone, for a driver
// test that opens its store in a way of its own (a lower bound, a setting).
func ListTasksFilters(t *testing.T, open Opener) { testListTasksFilters(t, Setup(t, open)) }

func testListTasksFilters(t *testing.T, b *Bundle) {
	ctx := b.Ctx
	principals := []string{"agent.a", "agent.b", "agent.c"}
	types := []string{"work", "index", "review"}
	states := []host.TaskState{host.StateQueued, host.StateLeased, host.StateSucceeded, host.StateDeadLetter}
	var all []*host.Task
	err := b.Store.Update(ctx, func(tx store.Tx) error {
		for i := range 60 {
			tk := &host.Task{ID: fmt.Sprintf("T-LF%02d", i), Tenant: []string{"acme", "other"}[i%5/4], Type: types[i%3],
				CreatedBy: principals[i%3], Recipient: principals[(i/3)%3], State: host.StateQueued, Priority: 5,
				Params: json.RawMessage(`{}`), CreatedAt: Epoch, UpdatedAt: Epoch, AvailableAt: Epoch, MaxRetries: 3}
			if err := tx.InsertTask(ctx, tk); err != nil {
				return err
			}
			all = append(all, tk)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Move them through updates, each to a state of its own.
	err = b.Store.Update(ctx, func(tx store.Tx) error {
		for i, tk := range all {
			next := states[(i/2)%len(states)]
			if next == host.StateQueued {
				continue
			}
			from := tk.State
			tk.State = next
			if next == host.StateLeased {
				tk.LeaseID, tk.WorkerID = "L-"+tk.ID, "w.1"
				tk.LeaseExpiresAt = timePtr(Epoch.Add(time.Hour))
			} else {
				tk.CompletedAt = timePtr(Epoch)
			}
			if err := tx.UpdateTask(ctx, tk, store.Fence{State: from}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := func(f store.TaskFilter) []string {
		var ids []string
		for _, tk := range all {
			ok := tk.Tenant == f.Tenant &&
				(f.Recipient == "" || tk.Recipient == f.Recipient) &&
				(f.CreatedBy == "" || tk.CreatedBy == f.CreatedBy) &&
				(f.Principal == "" || tk.CreatedBy == f.Principal || tk.Recipient == f.Principal)
			if ok && len(f.Types) > 0 {
				ok = false
				for _, ty := range f.Types {
					ok = ok || ty == tk.Type
				}
			}
			if ok && len(f.States) > 0 {
				ok = false
				for _, s := range f.States {
					ok = ok || s == tk.State
				}
			}
			if ok {
				ids = append(ids, tk.ID)
			}
		}
		return ids
	}
	list := func(f store.TaskFilter) []string {
		var ids []string
		for page := 0; ; page++ {
			var ts []*host.Task
			var next string
			err := b.Store.View(ctx, func(r store.Reader) error {
				var err error
				ts, next, err = r.ListTasks(ctx, f)
				return err
			})
			if err != nil {
				t.Fatalf("%+v: %v", f, err)
			}
			for _, tk := range ts {
				ids = append(ids, tk.ID)
			}
			if next == "" || page > 100 {
				return ids
			}
			f.Cursor = next
		}
	}
	var filters []store.TaskFilter
	for _, tenant := range []string{"acme", "other"} {
		base := store.TaskFilter{Tenant: tenant, Limit: 4}
		filters = append(filters, base)
		for _, p := range principals {
			for _, mod := range []func(*store.TaskFilter){
				func(f *store.TaskFilter) { f.Recipient = p },
				func(f *store.TaskFilter) { f.CreatedBy = p },
				func(f *store.TaskFilter) { f.Principal = p },
				func(f *store.TaskFilter) {
					f.Principal, f.States = p, []host.TaskState{host.StateLeased, host.StateQueued}
				},
				func(f *store.TaskFilter) { f.CreatedBy, f.Types = p, []string{"index"} },
				func(f *store.TaskFilter) {
					f.Recipient, f.Types, f.States = p, []string{"work", "review"}, []host.TaskState{host.StateSucceeded}
				},
			} {
				f := base
				mod(&f)
				filters = append(filters, f)
			}
		}
		for _, ty := range types {
			f := base
			f.Types = []string{ty}
			filters = append(filters, f)
		}
		for _, s := range states {
			f := base
			f.States = []host.TaskState{s}
			filters = append(filters, f)
			f.Types = []string{"review"}
			filters = append(filters, f)
		}
		// Several states, with and without types, and repeats.
		for _, f := range []store.TaskFilter{
			{States: []host.TaskState{host.StateQueued, host.StateSucceeded}},
			{States: []host.TaskState{host.StateLeased, host.StateDeadLetter, host.StateQueued}, Types: []string{"work", "index"}},
			{States: []host.TaskState{host.StateSucceeded, host.StateSucceeded}, Types: []string{"review", "review", "work"}},
			{States: []host.TaskState{host.StateCanceled}},
			{States: []host.TaskState{host.StateQueued}, Types: []string{"no-such-type"}},
		} {
			f.Tenant, f.Limit = tenant, base.Limit
			filters = append(filters, f)
		}
	}
	for _, f := range filters {
		got, exp := list(f), want(f)
		if len(got) == 0 && len(exp) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, exp) {
			t.Errorf("ListTasks %+v:\n got %v\nwant %v", f, got, exp)
		}
	}
}

func timePtr(v time.Time) *time.Time { return &v }
