package main

import (
	"reflect"
	"strings"
	"testing"
)

// TestE2EPutTaskTypeReadOnlyFields: on both stores, PUT treats the fields the
// gate keeps (created_at, updated_at, retry_policy, paused) as PATCH does:
// a body may repeat them as GET shows them, so a GET answer round-trips
// through PUT and PATCH, but any other value — a made-up created_at, a
// retry_policy naming another plugin, a retry_policy that is no object, any
// of them for a type not registered yet — is 400 read_only_field, and never
// changes the type.
func TestE2EPutTaskTypeReadOnlyFields(t *testing.T) {
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			u := g.URL + "/v1/admin/task-types/ts1"
			forged := map[string]any{"created_at": "1999-01-01T00:00:00Z", "retry_policy": map[string]any{"plugin": "escalate", "effective": map[string]any{"max_retries": 0}}}
			want(t, call(t, "PUT", u, g.Admin, forged), 400, "read_only_field")
			want(t, call(t, "PUT", u, g.Admin, map[string]any{"retry_policy": "nope"}), 400, "read_only_field")
			want(t, call(t, "GET", u, g.Admin, nil), 404, "not_found")
			want(t, call(t, "PATCH", u, g.Admin, forged), 404, "not_found")

			want(t, call(t, "PUT", u, g.Admin, map[string]any{"description": "first"}), 200, "")
			got := call(t, "GET", u, g.Admin, nil)
			want(t, got, 200, "")
			orig := got.JSON(t)
			for _, tc := range []struct {
				field string
				value any
			}{
				{"created_at", "1999-01-01T00:00:00Z"},
				{"updated_at", "2999-01-01T00:00:00Z"},
				{"retry_policy", forged["retry_policy"]},
				{"retry_policy", "nope"},
				{"paused", map[string]any{"task_type": "ts1", "paused_by": "me", "paused_at": "2020-01-01T00:00:00Z"}},
			} {
				body := map[string]any{}
				for k, v := range orig {
					body[k] = v
				}
				body[tc.field] = tc.value
				for _, method := range []string{"PUT", "PATCH"} {
					r := call(t, method, u, g.Admin, body)
					want(t, r, 400, "read_only_field")
					if !strings.Contains(r.JSON(t)["detail"].(string), tc.field) {
						t.Errorf("%s with %s=%v: detail does not name the field: %s", method, tc.field, tc.value, r.Body)
					}
					r = call(t, method, u, g.Admin, map[string]any{tc.field: tc.value})
					want(t, r, 400, "read_only_field")
				}
			}
			if now := call(t, "GET", u, g.Admin, nil).JSON(t); !reflect.DeepEqual(now, orig) {
				t.Fatalf("refused writes changed the type:\n was %v\n now %v", orig, now)
			}

			// A GET answer round-trips, as PUT and as PATCH, paused too.
			want(t, call(t, "POST", u+"/pause", g.Admin, map[string]any{"reason": "r"}), 200, "")
			got = call(t, "GET", u, g.Admin, nil)
			orig = got.JSON(t)
			orig["description"] = "second"
			r := call(t, "PUT", u, g.Admin, orig)
			want(t, r, 200, "")
			if m := r.JSON(t); m["description"] != "second" || m["created_at"] != orig["created_at"] || m["paused"] == nil {
				t.Fatalf("PUT of a GET answer: %s", r.Body)
			}
			orig = r.JSON(t)
			orig["description"] = "third"
			r = call(t, "PATCH", u, g.Admin, orig)
			want(t, r, 200, "")
			if m := r.JSON(t); m["description"] != "third" || m["created_at"] != orig["created_at"] || m["paused"] == nil {
				t.Fatalf("PATCH of a GET answer: %s", r.Body)
			}
			want(t, call(t, "POST", u+"/resume", g.Admin, nil), 200, "")
			want(t, call(t, "PUT", u, g.Admin, orig), 400, "read_only_field") // paused, no longer
		})
	}
}
