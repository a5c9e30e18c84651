package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

// patchableValues holds, for every field of a task type a PATCH may set, a
// value other than its seed default. A field of host.TaskType missing here
// fails TestE2EPatchNullRestoresDefaults, so a new field cannot miss the test.
var patchableValues = map[string]any{
	"description":               "a description",
	"params_schema":             map[string]any{"type": "object"},
	"default_priority":          9,
	"default_max_retries":       7,
	"default_timeout_seconds":   120,
	"default_retention_days":    5,
	"default_result_channel":    "file",
	"estimated_runtime_seconds": 77,
	"poll_suggestion_seconds":   11,
	"max_payload_bytes":         4096,
	"enabled":                   false,
	"lease_seconds":             61,
	"requeue_delay_seconds":     5,
	"max_lease_expiries":        4,
	"policy":                    map[string]any{"name": "backoff", "config": map[string]any{"base_seconds": 30}},
	"validators":                []any{map[string]any{"name": "safe-paths"}},
	"channel_config":            map[string]any{"note": "x"},
	"resource_intents":          []any{map[string]any{"resource": "db/main", "predicate": "READS"}},
}

// notPatchable are host.TaskType's fields a PATCH cannot change.
var notPatchable = map[string]bool{"task_type": true, "tenant": true, "created_at": true, "updated_at": true}

// taskTypeFields lists host.TaskType's JSON field names.
func taskTypeFields() []string {
	var out []string
	typ := reflect.TypeOf(host.TaskType{})
	for i := 0; i < typ.NumField(); i++ {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// withoutTimes is a task type answer without its timestamps.
func withoutTimes(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if k != "created_at" && k != "updated_at" {
			out[k] = v
		}
	}
	return out
}

// TestE2EPatchNullRestoresDefaults: through the real binary, on SQLite and
// PostgreSQL, a PATCH that sets a field to null gives it the value PUT {}
// gives it, for every patchable field of a task type (enabled true,
// default_max_retries 3 and requeue_delay_seconds 30 were false, 0 and 0,
// which disabled the type). One field at a time, then all at once.
func TestE2EPatchNullRestoresDefaults(t *testing.T) {
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			u := g.URL + "/v1/admin/task-types/p1"
			put := call(t, "PUT", u, g.Admin, map[string]any{})
			want(t, put, 200, "")
			def := put.JSON(t)

			var fields []string
			for _, f := range taskTypeFields() {
				if notPatchable[f] {
					continue
				}
				if _, ok := patchableValues[f]; !ok {
					t.Fatalf("task type field %s has no value in patchableValues: add one (not its default) so PATCH null is tested on it", f)
				}
				fields = append(fields, f)
			}
			for _, f := range fields {
				set := call(t, "PATCH", u, g.Admin, map[string]any{f: patchableValues[f]})
				want(t, set, 200, "")
				if reflect.DeepEqual(set.JSON(t)[f], def[f]) {
					t.Fatalf("PATCH %s=%v left it at its default %v: the test value must differ", f, patchableValues[f], def[f])
				}
				reset := call(t, "PATCH", u, g.Admin, map[string]any{f: nil})
				want(t, reset, 200, "")
				if got := reset.JSON(t)[f]; !reflect.DeepEqual(got, def[f]) {
					t.Errorf("PATCH {%q: null} gave %v; PUT {} gives %v", f, got, def[f])
				}
			}

			all, nulls := map[string]any{}, map[string]any{}
			for _, f := range fields {
				all[f], nulls[f] = patchableValues[f], nil
			}
			want(t, call(t, "PATCH", u, g.Admin, all), 200, "")
			reset := call(t, "PATCH", u, g.Admin, nulls)
			want(t, reset, 200, "")
			if got, wantV := withoutTimes(reset.JSON(t)), withoutTimes(def); !reflect.DeepEqual(got, wantV) {
				t.Errorf("after PATCH of every field to null:\n got %v\nwant %v (PUT {})", got, wantV)
			}
			agent := g.newKey(t, "agent", "agent.p", "")
			want(t, call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "p1"}), 201, "")
		})
	}
}
