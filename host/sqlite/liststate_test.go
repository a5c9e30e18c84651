package sqlite

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// TestStateListsSeekTheirRanges checks the plans of the statements that
// replaced the (tenant, state, seq) and (completed_at) indexes: a list by
// state merges ranges of tasks_state_type_seq that are already in seq order
// (no sort, no scan of tasks), the types of a state are found by seeks of the
// same index, the oldest ready task by seeks of tasks_ready, and retention's
// orphaned types by seeks of tasks_finished. With a sort or a scan a page
// would cost as much as its state holds.
func TestStateListsSeekTheirRanges(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "gate.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, c := range []struct {
		name  string
		q     string
		args  int
		index string
	}{
		{"a list merging three ranges", stateListSQL(3), 13, "tasks_state_type_seq"},
		{"the types of a state", typesInSQL, 2, "tasks_state_type_seq"},
		{"the oldest ready task of the types queued", oldestReadySQL, 2, "tasks_ready_type"},
		{"the next type of finished tasks (retention's orphans)", nextFinishedTypeSQL, 2, "tasks_finished"},
		{"a type's tasks due for retention, two states", finishedSQL(2), 9, "tasks_finished"},
	} {
		args := make([]any, c.args)
		for i := range args {
			args[i] = i
		}
		rows, err := st.rdb.Query(`EXPLAIN QUERY PLAN `+c.q, args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		seeks := 0
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
			switch {
			case strings.Contains(detail, "TEMP B-TREE"), strings.HasPrefix(detail, "SCAN tasks"):
				t.Errorf("%s sorts or scans: %q", c.name, detail)
			case strings.HasPrefix(detail, "SEARCH tasks USING INDEX "+c.index+" "),
				strings.HasPrefix(detail, "SEARCH tasks USING COVERING INDEX "+c.index+" "):
				seeks++
			case strings.HasPrefix(detail, "SEARCH tasks USING INTEGER PRIMARY KEY"):
			case strings.HasPrefix(detail, "SEARCH tasks"):
				t.Errorf("%s searches another index: %q", c.name, detail)
			}
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if seeks == 0 {
			t.Errorf("%s never seeks %s; plan %q", c.name, c.index, plan)
		}
	}
}

// TestStateListsPastTheRangeBound runs the conformance case of task lists
// with the bound on merged ranges at one, so every list by several states or
// types takes the filtered walk instead of the merge, and must page alike.
func TestStateListsPastTheRangeBound(t *testing.T) {
	storetest.ListTasksFilters(t, func(t testing.TB) store.Store {
		st, err := Open(filepath.Join(t.TempDir(), "gate.db"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		st.stateRanges = 1
		return st
	})
}
