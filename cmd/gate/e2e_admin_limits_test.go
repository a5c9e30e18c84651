package main

import (
	"reflect"
	"strings"
	"testing"

	"encoding/json"
	"github.com/asyncgate/asyncgate/host"
)

// TestE2ETaskTypeLimits: on both stores, a task type is refused with 400
// invalid_task_type, by PUT and PATCH alike, when its escalate policy names
// a supervisor that is no principal (for every type or one of
// task_types), when it names a validator twice, or when its description is
// longer than host.MaxTaskTypeDescription characters.
func TestE2ETaskTypeLimits(t *testing.T) {
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			u := g.URL + "/v1/admin/task-types/lim"
			esc := func(cfg map[string]any) map[string]any {
				return map[string]any{"policy": map[string]any{"name": "escalate", "config": cfg}}
			}
			bad := []map[string]any{
				esc(map[string]any{"supervisor": "bad name"}),
				esc(map[string]any{"supervisor": "agent.lead", "task_types": map[string]any{"lim": "bad name"}}),
				esc(map[string]any{"task_types": map[string]any{"lim": strings.Repeat("a", 201)}}),
				{"validators": []any{map[string]any{"name": "safe-paths"}, map[string]any{"name": "safe-paths"}}},
				{"validators": []any{map[string]any{"name": "safe-paths"}, map[string]any{"name": "safe-paths", "config": map[string]any{"keys": []string{"p"}}}}},
				{"description": strings.Repeat("é", host.MaxTaskTypeDescription+1)},
				{"description": strings.Repeat("d", 100_000)},
			}
			for _, b := range bad {
				r := call(t, "PUT", u, g.Admin, b)
				want(t, r, 400, "invalid_task_type")
			}
			want(t, call(t, "GET", u, g.Admin, nil), 404, "not_found")
			good := call(t, "PUT", u, g.Admin, map[string]any{"description": strings.Repeat("é", host.MaxTaskTypeDescription),
				"policy":     map[string]any{"name": "escalate", "config": map[string]any{"supervisor": "agent.lead", "task_types": map[string]any{"lim": "agent.x@corp"}}},
				"validators": []any{map[string]any{"name": "safe-paths"}}})
			want(t, good, 200, "")
			for _, b := range bad {
				want(t, call(t, "PATCH", u, g.Admin, b), 400, "invalid_task_type")
			}
			if now := call(t, "GET", u, g.Admin, nil).JSON(t); !reflect.DeepEqual(withoutTimes(now), withoutTimes(good.JSON(t))) {
				b, _ := json.Marshal(now)
				t.Fatalf("refused patches changed the type: %s", b)
			}
		})
	}
}
