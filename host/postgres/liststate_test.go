package postgres

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// explainGeneric returns the generic plan of q (as a pooled connection
// caches it once a statement has run a few times), made on st's schema.
func explainGeneric(t *testing.T, st *Store, q string, params []string, args []string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := st.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `RESET plan_cache_mode`) //nolint:errcheck
	if _, err := conn.Exec(ctx, `PREPARE planned(`+strings.Join(params, ", ")+`) AS `+q); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `DEALLOCATE planned`) //nolint:errcheck
	return explainLines(t, conn, `EXPLAIN EXECUTE planned(`+strings.Join(args, ", ")+`)`)
}

// TestStateListsSeekTheirRanges checks the generic plans, on an empty schema
// (the plan a fresh database caches), of the statements that replaced the
// (tenant, state, seq) index (migration 0046): a list by state merges
// ranges of tasks_state_type_seq that are already in seq order (a Merge
// Append, no sort, no other index, no scan of tasks), and the types of a
// state are found by seeks of the same index; a tenant's scheduled count
// walks an index of its queued tasks. With a sort or a scan a page
// would cost as much as its state holds.
func TestStateListsSeekTheirRanges(t *testing.T) {
	st := openTest(t)
	stateIndex := []string{"tasks_state_type_seq"}
	readyIndexes := []string{"tasks_ready", "tasks_ready_type", "tasks_state_type_seq"}
	for _, c := range []struct {
		name   string
		q      string
		params []string
		args   []string
		merge  bool
		index  []string // the indexes of tasks it may walk
	}{
		{"a list of one range", stateListSQL(1), []string{"text", "bigint", "bigint", "text", "text"},
			[]string{"'acme'", "0", "101", "'queued'", "'a'"}, false, stateIndex},
		{"a list merging three ranges", stateListSQL(3), []string{"text", "bigint", "bigint", "text", "text", "text", "text", "text", "text"},
			[]string{"'acme'", "0", "101", "'queued'", "'a'", "'queued'", "'b'", "'leased'", "'a'"}, true, stateIndex},
		{"the types of a state", typesInSQL, []string{"text", "text"}, []string{"'acme'", "'queued'"}, false, stateIndex},
		{"a tenant's scheduled counts", scheduledCountsOf, []string{"bigint", "text"}, []string{"0", "'acme'"}, false, readyIndexes},
	} {
		plan := explainGeneric(t, st, c.q, c.params, c.args)
		text := strings.Join(plan, "\n")
		seeks := 0
		for _, l := range plan {
			switch {
			case strings.Contains(l, "Sort  ("):
				t.Errorf("%s sorts:\n%s", c.name, text)
			case strings.Contains(l, "Seq Scan on tasks"), strings.Contains(l, "Bitmap"):
				t.Errorf("%s scans tasks:\n%s", c.name, text)
			case slices.ContainsFunc(c.index, func(ix string) bool { return strings.Contains(l, "using "+ix+" on tasks") }):
				seeks++
			case strings.Contains(l, " on tasks"):
				t.Errorf("%s walks another index of tasks:\n%s", c.name, text)
			}
		}
		if seeks == 0 {
			t.Errorf("%s never seeks %v:\n%s", c.name, c.index, text)
		}
		if c.merge && !strings.Contains(text, "Merge Append") {
			t.Errorf("%s does not merge its ranges:\n%s", c.name, text)
		}
	}
}

// TestStateListsPastTheRangeBound runs the conformance case of task lists
// with the bound on merged ranges at one, so every list by several states or
// types takes the walk of the listing rows instead of the merge, and must
// page alike.
func TestStateListsPastTheRangeBound(t *testing.T) {
	storetest.ListTasksFilters(t, func(t testing.TB) store.Store {
		st := openTest(t)
		st.stateRanges = 1
		return st
	})
}

// TestLeaseLookupsSeekTheirIndexes: the generic plans of a lease-bound
// call's task lookup, on an empty schema: a lease id that carries its task
// goes by the unique id index, one of the older form by tasks_lease_id
// (which since 0048 holds only those); neither scans tasks.
func TestLeaseLookupsSeekTheirIndexes(t *testing.T) {
	st := openTest(t)
	for _, c := range []struct {
		name, q, index string
		params, args   []string
	}{
		{"by the task the lease id carries", leaseByTaskSQL, "tasks_id_key", []string{"text", "text"}, []string{"'T-1'", "'lease-X.T-1'"}},
		{"by a lease id of the older form", leaseByOldIDSQL, "tasks_lease_id", []string{"text"}, []string{"'lease-X'"}},
	} {
		plan := explainGeneric(t, st, c.q, c.params, c.args)
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "using "+c.index+" on tasks") {
			t.Errorf("%s does not seek %s:\n%s", c.name, c.index, text)
		}
		if strings.Contains(text, "Seq Scan") || strings.Contains(text, "Bitmap") {
			t.Errorf("%s scans tasks:\n%s", c.name, text)
		}
	}
}

// TestReadyReadsSeekTheTypedIndex: with no untyped ready index (migration
// 0049), a lease naming no type and the stats' oldest ready task walk
// tasks_ready_type, the types by seeks of it too; their generic plans, on
// an empty schema, touch no other index of tasks and scan nothing.
func TestReadyReadsSeekTheTypedIndex(t *testing.T) {
	st := openTest(t)
	for _, c := range []struct {
		name, q      string
		params, args []string
	}{
		{"a claim naming no type", claimAny, []string{"text", "bigint", "bigint"}, []string{"'acme'", "0", "50"}},
		{"the oldest ready task", oldestReady, []string{"text", "bigint", "text[]"}, []string{"'acme'", "0", "'{slow}'"}},
	} {
		plan := explainGeneric(t, st, c.q, c.params, c.args)
		text := strings.Join(plan, "\n")
		seeks := 0
		for _, l := range plan {
			switch {
			case strings.Contains(l, "Seq Scan on tasks"), strings.Contains(l, "Bitmap"):
				t.Errorf("%s scans tasks:\n%s", c.name, text)
			case strings.Contains(l, "using tasks_ready_type on tasks"):
				seeks++
			case strings.Contains(l, " on tasks"):
				t.Errorf("%s walks another index of tasks:\n%s", c.name, text)
			}
		}
		if seeks < 3 { // the first type, the next type, the range of a type
			t.Errorf("%s seeks tasks_ready_type %d times:\n%s", c.name, seeks, text)
		}
	}
}
